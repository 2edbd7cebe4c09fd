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

// TestConfigFromEnvRefusesWhatIsNotAQueueURL: a queue name, an ARN or a URL
// with a stray space is refused at init, naming the variable, not when the
// first event is dead-lettered.
func TestConfigFromEnvRefusesWhatIsNotAQueueURL(t *testing.T) {
	for _, v := range []string{"wallet-dlq", "arn:aws:sqs:eu-west-1:123456789012:wallet-dlq",
		"https://sqs.eu-west-1.amazonaws.com/123456789012/wallet-dlq ", "https://sqs.eu-west-1.amazonaws.com/", "sqs.eu-west-1.amazonaws.com/1/q"} {
		t.Setenv(config.EnvConsumerDLQURL, v)
		if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), config.EnvConsumerDLQURL) {
			t.Errorf("%q: %v", v, err)
		}
	}
	t.Setenv(config.EnvConsumerDLQURL, "http://localhost:4566/000000000000/wallet-dlq")
	if _, err := ConfigFromEnv(); err != nil {
		t.Errorf("local queue URL: %v", err)
	}
}
