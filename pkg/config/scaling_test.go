package config_test

import (
	"io"
	"math"
	"os"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestDefaultConsumerMaxConcurrencyFollowsThePlan checks the integer
// arithmetic of config.DefaultConsumerMaxConcurrency against the documented
// calculation: ceil(target × per-message time ÷ utilisation), inside the
// SQS event source mapping's MaximumConcurrency range 2..1000, and that the
// result does carry the target at that utilisation.
func TestDefaultConsumerMaxConcurrencyFollowsThePlan(t *testing.T) {
	want := int(math.Ceil(float64(config.ConsumerTargetEventsPerSecond) * config.ConsumerPlannedMessageTime.Seconds() /
		(float64(config.ConsumerPlanningUtilisationPercent) / 100)))
	if config.DefaultConsumerMaxConcurrency != want {
		t.Errorf("DefaultConsumerMaxConcurrency = %d, want ceil(%d × %s ÷ %d %%) = %d", config.DefaultConsumerMaxConcurrency,
			config.ConsumerTargetEventsPerSecond, config.ConsumerPlannedMessageTime, config.ConsumerPlanningUtilisationPercent, want)
	}
	if c := config.DefaultConsumerMaxConcurrency; c < 2 || c > 1000 {
		t.Errorf("DefaultConsumerMaxConcurrency = %d is outside the AWS range 2..1000", c)
	}
	// one message at a time, the default sustains the target within the utilisation
	perSecond := float64(config.DefaultConsumerMaxConcurrency) / config.ConsumerPlannedMessageTime.Seconds()
	if perSecond*float64(config.ConsumerPlanningUtilisationPercent)/100 < float64(config.ConsumerTargetEventsPerSecond) {
		t.Errorf("%d × (1 / %s) × %d %% = %.0f messages/s, below the target %d/s", config.DefaultConsumerMaxConcurrency,
			config.ConsumerPlannedMessageTime, config.ConsumerPlanningUtilisationPercent, perSecond*float64(config.ConsumerPlanningUtilisationPercent)/100,
			config.ConsumerTargetEventsPerSecond)
	}
}

// TestMetricsWriter: metric lines go to stdout in Lambda and nowhere
// elsewhere, unless OUTBOX_METRICS says on or off.
func TestMetricsWriter(t *testing.T) {
	for _, tc := range []struct {
		lambda, metrics string
		stdout          bool
	}{
		{"", "", false}, {"fn", "", true}, {"", "on", true}, {"fn", "off", false}, {"", "off", false}, {"fn", "on", true},
	} {
		t.Setenv(config.EnvLambdaFunctionName, tc.lambda)
		t.Setenv(config.EnvMetrics, tc.metrics)
		if got := config.MetricsWriter() == io.Writer(os.Stdout); got != tc.stdout {
			t.Errorf("AWS_LAMBDA_FUNCTION_NAME=%q OUTBOX_METRICS=%q: stdout %v, want %v", tc.lambda, tc.metrics, got, tc.stdout)
		}
	}
}
