package stack

import (
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// AuthMode is the HTTP API's route authorization.
type AuthMode string

// Authorization modes.
const (
	// AuthIAM requires SigV4-signed requests whose caller has
	// execute-api:Invoke on the route (the default).
	AuthIAM AuthMode = "IAM"
	// AuthNone leaves every route open to the internet. For short-lived
	// demos only; it must be chosen explicitly.
	AuthNone AuthMode = "NONE"
)

// Defaults applied by OrdersStackProps.SetDefaults to zero fields.
const (
	// DefaultConsumerMaxEventAge is how long EventBridge keeps retrying to
	// deliver an event to a consumer's SQS queue (the rule target) before
	// sending it to the rule's DLQ. It bounds delivery to the queue only:
	// once the queue accepted the event, the queue's redrive policy governs
	// retries of the consumer (config.DefaultConsumerMaxReceiveCount).
	DefaultConsumerMaxEventAge = 6 * time.Hour
	// DefaultConsumerRetryAttempts bounds EventBridge's retries of a failed
	// delivery to a consumer's SQS queue (throttling, a missing queue or
	// permission), not the consumer's own failures.
	DefaultConsumerRetryAttempts = 20
	// DefaultThrottleRate is the HTTP API stage's steady-state request rate
	// limit (requests per second).
	DefaultThrottleRate = 100
	// DefaultThrottleBurst is the HTTP API stage's burst limit (requests).
	DefaultThrottleBurst = 200
)

// EventBridge target retry policy limits (RetryPolicy API: maximum event
// age 60..86,400 s, retry attempts 0..185; this stack requires at least one
// retry).
const (
	MinConsumerMaxEventAge   = 60 * time.Second
	MaxConsumerMaxEventAge   = 86400 * time.Second
	MaxConsumerRetryAttempts = 185
	minConsumerRetryAttempts = 1
)

// ErrInvalidProps is wrapped by every error OrdersStackProps.Validate returns.
var ErrInvalidProps = errors.New("stack: invalid props")

// OrdersStackProps configures the orders application stack. Zero fields
// take the defaults.
type OrdersStackProps struct {
	// StackProps are passed to awscdk.NewStack. Leave Env unset to keep the
	// stack environment-agnostic (synth needs no credentials or lookups).
	StackProps awscdk.StackProps
	// AssetRoot is the directory holding <function>/bootstrap for api,
	// relay, reconciler, ledger and notifier (the repository's dist/).
	// Required.
	AssetRoot string
	// AuthMode is the HTTP API authorization. Default AuthIAM.
	AuthMode AuthMode
	// EventSource is the EventBridge Source of published order events.
	// Default config.DefaultEventSource.
	EventSource string
	// Outbox tunes the outbox construct. Its EventBus, AssetRoot,
	// EventSource, RemovalPolicy and LogRetention are set by the stack.
	Outbox outboxcdk.Props
	// ConsumerMaxEventAge is the rule targets' maximum event age: how long
	// EventBridge retries delivering an event to a consumer's SQS queue
	// before sending it to the rule's DLQ. Whole seconds, 60 s..24 h.
	// Default DefaultConsumerMaxEventAge. It does not bound the consumer's
	// retries (see Consumer).
	ConsumerMaxEventAge time.Duration
	// ConsumerRetryAttempts is the rule targets' retry attempts for failed
	// deliveries to a consumer's SQS queue, 1..185. Default
	// DefaultConsumerRetryAttempts.
	ConsumerRetryAttempts int
	// ThrottleRate and ThrottleBurst are the API stage's default route
	// throttling (requests per second, requests). Defaults
	// DefaultThrottleRate and DefaultThrottleBurst.
	ThrottleRate  int
	ThrottleBurst int
	// Destroy makes `cdk destroy` delete tables, queues and log groups
	// (RemovalPolicy DESTROY). Default false: they are retained.
	Destroy bool
	// LogRetention is the retention of every log group. Default one month.
	LogRetention awslogs.RetentionDays
}

// SetDefaults replaces zero fields with their defaults.
func (p *OrdersStackProps) SetDefaults() {
	if p.AuthMode == "" {
		p.AuthMode = AuthIAM
	}
	if p.ConsumerMaxEventAge == 0 {
		p.ConsumerMaxEventAge = DefaultConsumerMaxEventAge
	}
	if p.ConsumerRetryAttempts == 0 {
		p.ConsumerRetryAttempts = DefaultConsumerRetryAttempts
	}
	if p.ThrottleRate == 0 {
		p.ThrottleRate = DefaultThrottleRate
	}
	if p.ThrottleBurst == 0 {
		p.ThrottleBurst = DefaultThrottleBurst
	}
	if p.LogRetention == "" {
		p.LogRetention = awslogs.RetentionDays_ONE_MONTH
	}
}

// removalPolicy is the policy for stateful resources.
func (p *OrdersStackProps) removalPolicy() awscdk.RemovalPolicy {
	if p.Destroy {
		return awscdk.RemovalPolicy_DESTROY
	}
	return awscdk.RemovalPolicy_RETAIN
}

// Validate applies the defaults to a copy of p and checks it (the Outbox
// props are checked by outboxcdk.New). It returns nil or an error wrapping
// ErrInvalidProps that lists every problem. It calls nothing in the CDK.
func (p OrdersStackProps) Validate() error {
	p.SetDefaults()
	var errs []error
	if p.AssetRoot == "" {
		errs = append(errs, errors.New("AssetRoot is required"))
	}
	if p.AuthMode != AuthIAM && p.AuthMode != AuthNone {
		errs = append(errs, fmt.Errorf("AuthMode %q is not %q or %q", p.AuthMode, AuthIAM, AuthNone))
	}
	if p.ConsumerMaxEventAge < MinConsumerMaxEventAge || p.ConsumerMaxEventAge > MaxConsumerMaxEventAge || p.ConsumerMaxEventAge%time.Second != 0 {
		errs = append(errs, fmt.Errorf("ConsumerMaxEventAge %s must be whole seconds in %s..%s", p.ConsumerMaxEventAge, MinConsumerMaxEventAge, MaxConsumerMaxEventAge))
	}
	if p.ConsumerRetryAttempts < minConsumerRetryAttempts || p.ConsumerRetryAttempts > MaxConsumerRetryAttempts {
		errs = append(errs, fmt.Errorf("ConsumerRetryAttempts %d is outside %d..%d", p.ConsumerRetryAttempts, minConsumerRetryAttempts, MaxConsumerRetryAttempts))
	}
	if p.ThrottleRate < 1 || p.ThrottleBurst < 1 {
		errs = append(errs, fmt.Errorf("ThrottleRate %d and ThrottleBurst %d must be positive", p.ThrottleRate, p.ThrottleBurst))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidProps, errors.Join(errs...))
}
