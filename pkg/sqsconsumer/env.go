package sqsconsumer

import (
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// ConfigFromEnv reads a consumer's SQS adapter configuration from the
// environment variables the CDK module's consumer construct sets on the
// consumer function:
//
//   - config.EnvConsumerDLQURL (CONSUMER_DLQ_URL), required: DLQURL, the
//     consumer's own dead-letter queue
//   - config.EnvLambdaFunctionName (AWS_LAMBDA_FUNCTION_NAME, set by
//     Lambda), when set: Name
//
// and sets RetryDelay to RetryDelays(config.DefaultConsumerRetryBase,
// config.ConsumerVisibilityTimeoutFactor × config.DefaultConsumerTimeout),
// the construct's queue settings. The caller sets the clients — DLQ and
// Queue (an *sqs.Client is both) — and may override Name. The error names
// a missing variable.
func ConfigFromEnv() (Config, error) {
	url, err := config.Required(config.EnvConsumerDLQURL)
	return Config{
		Name:       config.String(config.EnvLambdaFunctionName, ""),
		DLQURL:     url,
		RetryDelay: RetryDelays(config.DefaultConsumerRetryBase, config.ConsumerVisibilityTimeoutFactor*config.DefaultConsumerTimeout),
	}, err
}
