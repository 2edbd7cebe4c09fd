package config_test

import (
	"math"
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
