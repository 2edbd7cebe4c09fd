package outboxcdk

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// ConsumerProps configures a Consumer. Zero fields take the defaults;
// NewConsumer validates them (Validate).
type ConsumerProps struct {
	// Outbox is the outbox whose events the consumer receives. Its bus,
	// event source, alarm topic, encryption key, dead-letter operators and
	// removal policy are the defaults of the fields below. Either Outbox
	// or EventBus, EventSource and AlarmTopic are required.
	Outbox *Outbox
	// EventBus is the bus the consumer's rule is on. Default Outbox's
	// Props.EventBus.
	EventBus awsevents.IEventBus
	// EventSource is the events' EventBridge source, matched by the rule
	// and set as the function's config.EnvEventSource (events of any
	// other source are refused as forged). Default Outbox's
	// Props.EventSource.
	EventSource string
	// AlarmTopic is the SNS topic every alarm of the consumer notifies on
	// ALARM and OK. Default Outbox.AlarmTopic.
	AlarmTopic awssns.ITopic
	// EncryptionKey, when set, encrypts the queue, the DLQ and the table
	// the construct creates, and KeyUseActions on it are granted to the
	// function. Default Outbox's Props.EncryptionKey. The rule's DLQ and
	// the sweep's DLQ stay SSE-SQS: a DLQ must not fail the way its target
	// can (a key policy that refuses EventBridge for the queue would refuse
	// it for the DLQ too).
	EncryptionKey awskms.IKey
	// DeadLetterOperatorArns are the IAM role ARNs that may delete from or
	// purge the consumer's DLQs and send to its queue (a redrive); every
	// other principal is refused by explicit Denies. Default Outbox's
	// Props.DeadLetterOperatorArns.
	DeadLetterOperatorArns []string
	// RemovalPolicy of the queues and the table the construct creates.
	// Default Outbox's Props.RemovalPolicy, else RETAIN.
	RemovalPolicy awscdk.RemovalPolicy

	// Name is the consumer's name: its dedup.Config.Consumer (the prefix
	// of its state's keys) and the config.MetricDimensionConsumer of its
	// sweep's metrics, which the buffered-age alarm reads. Required; no
	// '#'.
	Name string
	// Function is the consumer's Lambda function. Required, with its
	// execution role (an imported function must be imported with its
	// role). When it is an awslambda.Function, NewConsumer sets its
	// environment: config.EnvConsumerTable, config.EnvEventSource,
	// config.EnvConsumerDLQURL, config.EnvExpectedEventAccount (the
	// stack's account) and, when DedupRetention is set,
	// config.EnvDedupRetentionSeconds.
	Function awslambda.IFunction
	// Ordering is dedup.Ordered (the consumer applies each aggregate's
	// events in sequence order, promise I4) or dedup.Unordered. Required.
	Ordering dedup.Ordering
	// AggregateType is the aggregate type (outbox.Envelope.AggregateType)
	// whose events the consumer receives: by default the rule matches the
	// events of EventSource whose detail has this aggregate_type. Required.
	AggregateType string
	// AggregateEventTypes, for an ordered consumer, lists every event type
	// of the aggregate: the rule then matches them by detail-type instead
	// of by aggregate_type (e.g. to keep an existing rule's pattern). It
	// must be the complete list: an ordered consumer waits for each
	// sequence of an aggregate, and an event type its rule lets through
	// only in part stalls that aggregate's gate for ever. Matching by
	// aggregate_type (the default) cannot miss a type added later.
	AggregateEventTypes []string
	// EventTypes, for an unordered consumer only, narrows the rule to
	// these detail-types. NewConsumer refuses it for an ordered consumer.
	EventTypes []string

	// Table is the consumer's state table when it exists already (the
	// table of the consumer's own effects: one transaction writes both).
	// It must have partition key "pk" (S), TTL on dedup.TTLAttribute and,
	// for an ordered consumer, the buffer index (AddStateIndex). Default: a
	// table NewConsumerTable creates. Either way ConsumerStateActions (and
	// for an ordered consumer ConsumerBufferQueryActions on its buffer
	// index) are granted on it and config.EnvConsumerTable names it.
	Table awsdynamodb.ITable
	// DedupRetention, when set, is the dedup markers' retention
	// (config.EnvDedupRetentionSeconds), whole seconds, at least
	// MinDedupRetention. Default: the runtime's
	// (config.DefaultDedupRetention).
	DedupRetention time.Duration

	// FunctionTimeout is the function's timeout: the queue's visibility
	// timeout is config.ConsumerVisibilityTimeoutFactor times it (Lambda
	// developer guide, services-sqs-configure). Default: Function's own
	// timeout when it is an awslambda.Function with one, else
	// config.DefaultConsumerTimeout. Whole seconds, 1 s..15 min, and not
	// below the function's own timeout when it has one (Lambda refuses a
	// mapping whose queue's visibility timeout is below the function's
	// timeout: services-sqs-configure).
	FunctionTimeout time.Duration
	// BatchSize is the SQS event source mapping's batch size, 1..10
	// messages. Default config.DefaultConsumerBatchSize.
	BatchSize int
	// Scaling is the mapping's maximum concurrency or provisioned mode.
	// Default: MaximumConcurrency config.DefaultConsumerMaxConcurrency.
	// The function's reserved concurrency, if any, must be at least
	// Scaling.PeakConcurrency().
	Scaling SQSScaling
	// MaxEventAge and RetryAttempts are the rule target's retry policy:
	// how long and how often EventBridge retries delivering an event to
	// the queue before it goes to the rule's DLQ. Defaults
	// DefaultConsumerMaxEventAge (whole seconds, 60 s..24 h) and
	// DefaultConsumerRetryAttempts (1..185).
	MaxEventAge   time.Duration
	RetryAttempts int
	// OldestMessageThreshold is the queue's ApproximateAgeOfOldestMessage
	// alarm threshold, whole seconds, above FunctionTimeout ×
	// config.ConsumerVisibilityTimeoutFactor. Default
	// DefaultConsumerOldestMessageThreshold.
	OldestMessageThreshold time.Duration
	// BufferedAgeThreshold is the ordered consumer's OldestBufferedAgeSeconds
	// alarm threshold, whole seconds, > 0. Default
	// config.DefaultBufferedAgeAlarm.
	BufferedAgeThreshold time.Duration
}

// withDefaults returns p with the Outbox's values and the defaults filled
// in.
func (p ConsumerProps) withDefaults() ConsumerProps {
	if o := p.Outbox; o != nil {
		if p.EventBus == nil {
			p.EventBus = o.props.EventBus
		}
		if p.EventSource == "" {
			p.EventSource = o.props.EventSource
		}
		if p.AlarmTopic == nil {
			p.AlarmTopic = o.AlarmTopic
		}
		if p.EncryptionKey == nil {
			p.EncryptionKey = o.props.EncryptionKey
		}
		if p.DeadLetterOperatorArns == nil {
			p.DeadLetterOperatorArns = o.props.DeadLetterOperatorArns
		}
		if p.RemovalPolicy == "" {
			p.RemovalPolicy = o.props.RemovalPolicy
		}
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	if p.FunctionTimeout == 0 {
		p.FunctionTimeout = config.DefaultConsumerTimeout
		if own := functionTimeout(p.Function); own > 0 {
			p.FunctionTimeout = own
		}
	}
	if p.BatchSize == 0 {
		p.BatchSize = config.DefaultConsumerBatchSize
	}
	if p.MaxEventAge == 0 {
		p.MaxEventAge = DefaultConsumerMaxEventAge
	}
	if p.RetryAttempts == 0 {
		p.RetryAttempts = DefaultConsumerRetryAttempts
	}
	if p.OldestMessageThreshold == 0 {
		p.OldestMessageThreshold = DefaultConsumerOldestMessageThreshold
	}
	if p.BufferedAgeThreshold == 0 {
		p.BufferedAgeThreshold = config.DefaultBufferedAgeAlarm
	}
	return p
}

// functionTimeout is fn's own timeout when fn is an awslambda.Function
// with one, else 0.
func functionTimeout(fn awslambda.IFunction) time.Duration {
	if f, ok := fn.(awslambda.Function); ok && f.Timeout() != nil {
		if s := f.Timeout().ToSeconds(nil); s != nil {
			return time.Duration(*s * float64(time.Second))
		}
	}
	return 0
}

// Validate applies the defaults to a copy of p and checks every field. It
// returns nil or an error wrapping ErrInvalidProps that lists every
// problem, among them an ordered consumer whose rule would be narrowed to
// some event types (EventTypes).
func (p ConsumerProps) Validate() error {
	p = p.withDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.Name == "" {
		bad("Name is required: the consumer's name (its dedup.Config.Consumer and the Consumer dimension of its metrics)")
	} else if strings.Contains(p.Name, "#") {
		bad("Name %q contains '#', which separates the parts of the consumer's state keys", p.Name)
	}
	if p.Function == nil {
		bad("Function is required")
	}
	if p.EventBus == nil {
		bad("EventBus is required (or Outbox)")
	}
	if p.EventSource == "" {
		bad("EventSource is required (or Outbox): the EventBridge source of the outbox's events")
	} else if strings.HasPrefix(p.EventSource, "aws.") {
		bad("EventSource %q starts with \"aws.\", which EventBridge refuses for PutEvents: no event of the outbox can carry it", p.EventSource)
	}
	if p.AlarmTopic == nil {
		bad("AlarmTopic is required (or Outbox): every alarm of the consumer notifies it")
	}
	if p.AggregateType == "" {
		bad("AggregateType is required: the aggregate type whose events the consumer receives")
	}
	switch p.Ordering {
	case dedup.Ordered:
		if len(p.EventTypes) > 0 {
			bad("EventTypes %v would narrow ordered consumer %s's rule to some event types of aggregate %s: an ordered consumer "+
				"must receive every event type of its aggregate, because it applies each aggregate's events in sequence and waits "+
				"for the next one; a sequence whose type its rule drops never arrives and stalls that aggregate's gate for ever "+
				"(docs/ORDERING.md). Leave EventTypes empty (the rule matches %s %q) and ignore the types you do not act on in "+
				"the consumer, or list every type of the aggregate in AggregateEventTypes",
				p.EventTypes, p.Name, p.AggregateType, detailAggregateType, p.AggregateType)
		}
	case dedup.Unordered:
		if len(p.AggregateEventTypes) > 0 {
			bad("AggregateEventTypes is for ordered consumers; an unordered consumer narrows its rule with EventTypes")
		}
	default:
		bad("Ordering %q is neither %q nor %q", p.Ordering, dedup.Ordered, dedup.Unordered)
	}
	for _, types := range [][]string{p.EventTypes, p.AggregateEventTypes} {
		for _, t := range types {
			if t == "" {
				bad("an event type is empty")
			}
		}
	}
	whole := func(name string, d time.Duration) {
		if d%time.Second != 0 {
			bad("%s %s is not a whole number of seconds", name, d)
		}
	}
	if p.DedupRetention != 0 && p.DedupRetention < MinDedupRetention {
		bad("DedupRetention %s is below %s (dedup.Config)", p.DedupRetention, MinDedupRetention)
	}
	whole("DedupRetention", p.DedupRetention)
	if p.FunctionTimeout < time.Second || p.FunctionTimeout > MaxConsumerFunctionTimeout {
		bad("FunctionTimeout %s is outside 1s..%s", p.FunctionTimeout, MaxConsumerFunctionTimeout)
	}
	whole("FunctionTimeout", p.FunctionTimeout)
	if own := functionTimeout(p.Function); own > p.FunctionTimeout {
		// The queue's visibility timeout is derived from FunctionTimeout;
		// Lambda refuses to create the mapping when the function's
		// timeout exceeds it, and below the advised six times a batch
		// still running comes back to another invocation
		// (services-sqs-configure).
		bad("FunctionTimeout %s is below the function's own timeout %s: the queue's visibility timeout (%d × FunctionTimeout) is "+
			"derived from it; leave FunctionTimeout unset to take the function's", p.FunctionTimeout, own, config.ConsumerVisibilityTimeoutFactor)
	}
	if p.BatchSize < 1 || p.BatchSize > MaxConsumerBatchSize {
		bad("BatchSize %d is outside 1..%d", p.BatchSize, MaxConsumerBatchSize)
	}
	if err := p.Scaling.Validate(); err != nil {
		bad("Scaling: %w", err)
	}
	if p.MaxEventAge < MinConsumerMaxEventAge || p.MaxEventAge > MaxConsumerMaxEventAge {
		bad("MaxEventAge %s is outside %s..%s", p.MaxEventAge, MinConsumerMaxEventAge, MaxConsumerMaxEventAge)
	}
	whole("MaxEventAge", p.MaxEventAge)
	if p.RetryAttempts < 1 || p.RetryAttempts > MaxConsumerRetryAttempts {
		bad("RetryAttempts %d is outside 1..%d", p.RetryAttempts, MaxConsumerRetryAttempts)
	}
	if v := config.ConsumerVisibilityTimeoutFactor * p.FunctionTimeout; p.OldestMessageThreshold <= v {
		bad("OldestMessageThreshold %s must exceed the queue's visibility timeout %s (a message being retried is not a backlog)", p.OldestMessageThreshold, v)
	}
	whole("OldestMessageThreshold", p.OldestMessageThreshold)
	if p.BufferedAgeThreshold <= 0 {
		bad("BufferedAgeThreshold %s must be positive", p.BufferedAgeThreshold)
	}
	whole("BufferedAgeThreshold", p.BufferedAgeThreshold)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: consumer %q: %w", ErrInvalidProps, p.Name, errors.Join(errs...))
}
