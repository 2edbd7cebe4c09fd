package sqsconsumer

import (
	"fmt"
	neturl "net/url"

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
// a missing variable, or a CONSUMER_DLQ_URL that is not an http(s) queue
// URL (a queue name or ARN) or begins or ends with white space.
func ConfigFromEnv() (Config, error) {
	url, err := config.Required(config.EnvConsumerDLQURL)
	if err == nil {
		if u, perr := neturl.Parse(url); perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(u.Path) < 2 {
			// e.g. a queue name or ARN: SendMessage would refuse it only
			// when the first event is dead-lettered.
			err = fmt.Errorf("config: %s=%q is not a queue URL (https://sqs.<region>.amazonaws.com/<account>/<queue>)", config.EnvConsumerDLQURL, url)
		}
	}
	return Config{
		Name:       config.String(config.EnvLambdaFunctionName, ""),
		DLQURL:     url,
		RetryDelay: RetryDelays(config.DefaultConsumerRetryBase, config.ConsumerVisibilityTimeoutFactor*config.DefaultConsumerTimeout),
	}, err
}
