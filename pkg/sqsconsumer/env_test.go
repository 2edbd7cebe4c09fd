package sqsconsumer

import (
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestConfigFromEnv reads the DLQ URL the consumer construct sets and the
// function name Lambda sets, and names a missing CONSUMER_DLQ_URL.
func TestConfigFromEnv(t *testing.T) {
	t.Setenv(config.EnvConsumerDLQURL, "https://sqs.eu-west-1.amazonaws.com/123456789012/wallet-dlq")
	t.Setenv(config.EnvLambdaFunctionName, "wallet-consumer")
	c, err := ConfigFromEnv()
	if err != nil || c.DLQURL != "https://sqs.eu-west-1.amazonaws.com/123456789012/wallet-dlq" || c.Name != "wallet-consumer" ||
		c.RetryDelay == nil || c.RetryDelay(1, nil) != config.DefaultConsumerRetryBase || c.RetryDelay(20, nil) != 3*time.Minute {
		t.Fatalf("%+v %v", c, err)
	}
	t.Setenv(config.EnvConsumerDLQURL, "")
	if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), config.EnvConsumerDLQURL) {
		t.Fatalf("missing DLQ URL: %v", err)
	}
}
