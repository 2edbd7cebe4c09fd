package localrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// EventHandler is a Lambda handler for EventBridge events: the shape of the
// consumers and of the scheduled reconciler. A returned error is a failed
// delivery (retried by the bus, or logged by the scheduler).
type EventHandler func(ctx context.Context, ev events.EventBridgeEvent) error

// PutEventsAPI is the EventBridge method the relay and reconciler call, with
// the exact signature of (*eventbridge.Client).PutEvents. Bus implements it.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// PutEvents limits and entry error codes
// (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html,
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html).
const (
	// MaxPutEventsEntries is the number of entries one PutEvents accepts.
	MaxPutEventsEntries = 10
	// DefaultMaxEntryBytes is the default entry size limit, 262,144 bytes.
	DefaultMaxEntryBytes = config.DefaultMaxEntryBytes
	// MaxDetailTypeLength is the DetailType limit in characters.
	MaxDetailTypeLength = 128
	// MaxTraceHeaderLength is the TraceHeader limit in characters (length
	// constraints 1..500, API_PutEventsRequestEntry); out of bounds, the
	// whole request fails with ValidationException.
	MaxTraceHeaderLength = 500
	// ErrorCodeInvalidArgument: missing Source/DetailType/Detail or too long
	// DetailType. Not retryable.
	ErrorCodeInvalidArgument = "InvalidArgument"
	// ErrorCodeMalformedDetail: Detail is not a JSON object. Not retryable.
	ErrorCodeMalformedDetail = "MalformedDetail"
	// ErrorCodeNotAuthorizedForSource: Source starts with "aws.".
	ErrorCodeNotAuthorizedForSource = "NotAuthorizedForSourceException"
	// DefaultBusName is the bus an entry without EventBusName goes to.
	DefaultBusName = "default"
	// DefaultTargetMaxAttempts bounds delivery attempts per target (AWS
	// rule target retry policy: up to 185 attempts over 24 h; locally 4).
	DefaultTargetMaxAttempts = 4
	// DefaultTargetRetryBaseDelay and DefaultTargetRetryMaxDelay bound the
	// exponential backoff (with jitter) between delivery attempts.
	DefaultTargetRetryBaseDelay = 50 * time.Millisecond
	DefaultTargetRetryMaxDelay  = 2 * time.Second
)

// BusConfig configures a Bus. Zero values take the defaults stated per field.
type BusConfig struct {
	// Name is the event bus name; entries must name it (or its ARN) in
	// EventBusName, or leave it empty when Name is "default". Default
	// "default".
	Name string
	// Region and Account fill the event envelope and ARNs (defaults
	// us-east-1 and 000000000000).
	Region  string
	Account string
	// Rules are the bus's rules, each with its event pattern and the
	// target (Subscribe, SubscribeQueue) it delivers to. A bus without
	// rules accepts events and delivers none (Unmatched counts them).
	Rules []Rule
	// MaxEntryBytes is the request size limit in bytes (default 262,144):
	// the sum of the entries' sizes.
	MaxEntryBytes int
	// TargetMaxAttempts is the number of delivery attempts per event and
	// target before dead-lettering (default 4, at least 1).
	TargetMaxAttempts int
	// TargetRetryBaseDelay and TargetRetryMaxDelay bound the backoff
	// between attempts (defaults 50 ms and 2 s).
	TargetRetryBaseDelay time.Duration
	TargetRetryMaxDelay  time.Duration
	// HandlerTimeout bounds one delivery (default 30 s); a timeout is a
	// failed attempt.
	HandlerTimeout time.Duration
	// Interceptor, when set, wraps every delivery attempt (fault injection).
	Interceptor Interceptor
	// OnDeadLetter, when set, is called (synchronously, from the delivery
	// goroutine) for every dead-lettered event, in addition to the
	// in-memory list.
	OnDeadLetter func(DeadLetter)
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// Logger receives the bus's logs (default slog.Default()).
	Logger *slog.Logger
	// Store, when set, keeps what EventBridge would still hold after the
	// local stack stops: each accepted entry's delivery to each matching
	// target is written before PutEvents answers (an entry that cannot be
	// kept fails with the retryable InternalFailure) and forgotten once the
	// target took it; dead letters are kept too. NewBus restores the dead
	// letters, Resume the deliveries, and Close leaves deliveries it
	// interrupts kept for the next start instead of dead-lettering them.
	// nil: in memory only.
	Store StateStore
	// Archives are the bus's archives (AWS::Events::Archive): every
	// accepted event an archive's pattern matches is kept there (in the
	// Store too when set) and can be replayed (StartReplay). More can be
	// created at run time with CreateArchive.
	Archives []ArchiveConfig
	// ArchiveDelay bounds the delay between accepting an event and its
	// reaching the archives: each event's delay is drawn uniformly from
	// [0, ArchiveDelay] (EventBridge documents an unbounded delay and
	// advises waiting 10 minutes before a replay). Default
	// DefaultArchiveDelay (30 s); negative is refused.
	ArchiveDelay time.Duration
}

func (c *BusConfig) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultBusName
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Account == "" {
		c.Account = DefaultAccount
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.TargetMaxAttempts == 0 {
		c.TargetMaxAttempts = DefaultTargetMaxAttempts
	}
	if c.TargetRetryBaseDelay == 0 {
		c.TargetRetryBaseDelay = DefaultTargetRetryBaseDelay
	}
	if c.TargetRetryMaxDelay == 0 {
		c.TargetRetryMaxDelay = DefaultTargetRetryMaxDelay
	}
	if c.HandlerTimeout == 0 {
		c.HandlerTimeout = DefaultFunctionTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ArchiveDelay == 0 {
		c.ArchiveDelay = DefaultArchiveDelay
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid setting (after defaults are applied).
func (c *BusConfig) Validate() error {
	switch {
	case c.MaxEntryBytes < 1:
		return errors.New("localrt: MaxEntryBytes must be positive")
	case c.TargetMaxAttempts < 1:
		return errors.New("localrt: TargetMaxAttempts must be at least 1")
	case c.TargetRetryBaseDelay < 0 || c.TargetRetryMaxDelay < c.TargetRetryBaseDelay:
		return errors.New("localrt: need 0 <= TargetRetryBaseDelay <= TargetRetryMaxDelay")
	case c.ArchiveDelay < 0:
		return errors.New("localrt: ArchiveDelay must not be negative (EventBridge archives with a delay)")
	}
	names := map[string]bool{}
	for _, r := range c.Rules {
		if r.Name == "" || r.Target == "" || r.Pattern == nil {
			return fmt.Errorf("localrt: rule %q needs a name, a target and a pattern", r.Name)
		}
		if names[r.Name] {
			return fmt.Errorf("localrt: duplicate rule name %q", r.Name)
		}
		if r.RetryPolicy != nil {
			if err := r.RetryPolicy.Validate(); err != nil {
				return fmt.Errorf("rule %s: %w", r.Name, err)
			}
		}
		names[r.Name] = true
	}
	return nil
}

// Rule is a rule of the local bus, as an EventBridge rule: the events its
// Pattern matches are delivered to the target subscribed under Target
// (Subscribe, SubscribeQueue).
type Rule struct {
	// Name is the rule's name, unique on the bus (its ARN: RuleARN).
	Name string
	// Target names the subscription the rule delivers to.
	Target string
	// Pattern is the rule's EventBridge event pattern: JSON text or a
	// JSON-ready value (map[string]any), compiled by CompilePattern.
	Pattern any
	// RetryPolicy is the rule target's retry policy (the target's
	// RetryPolicy on AWS); nil: the bus's TargetMaxAttempts, with no age
	// limit.
	RetryPolicy *RetryPolicy
}

// RetryPolicy is a rule target's retry policy (EventBridge user guide,
// eb-rule-retry-policy; API RetryPolicy): after a failed delivery the
// target is retried with exponential backoff (the bus's
// TargetRetryBaseDelay to TargetRetryMaxDelay) until MaximumRetryAttempts
// retries were made or the event is older than MaximumEventAge, whichever
// comes first; then the event goes to the rule's DLQ (SetDeadLetterQueue).
// DefaultRetryPolicy is AWS's default.
type RetryPolicy struct {
	// MaximumRetryAttempts is the number of retries after the first
	// attempt: 0..MaxRuleRetryAttempts (0: the first attempt only).
	MaximumRetryAttempts int
	// MaximumEventAge is the age, from the bus's acceptance of the event,
	// after which it is not retried again: (0, MaxRuleEventAge]. AWS's
	// minimum is 60 s (MaximumEventAgeInSeconds); the local bus accepts
	// shorter ages so that tests can exhaust it.
	MaximumEventAge time.Duration
}

// Rule target retry policy bounds and AWS's defaults (eb-rule-retry-policy:
// "By default, EventBridge retries sending the event for 24 hours and up to
// 185 times").
const (
	MaxRuleRetryAttempts = 185
	MaxRuleEventAge      = 24 * time.Hour
)

// DefaultRetryPolicy returns EventBridge's default retry policy: 185
// retries over at most 24 hours.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaximumRetryAttempts: MaxRuleRetryAttempts, MaximumEventAge: MaxRuleEventAge}
}

// Validate returns an error for a policy EventBridge would refuse (bar the
// 60 s minimum age, which the local bus does not enforce).
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaximumRetryAttempts < 0 || p.MaximumRetryAttempts > MaxRuleRetryAttempts:
		return fmt.Errorf("localrt: MaximumRetryAttempts %d outside 0..%d", p.MaximumRetryAttempts, MaxRuleRetryAttempts)
	case p.MaximumEventAge <= 0 || p.MaximumEventAge > MaxRuleEventAge:
		return fmt.Errorf("localrt: MaximumEventAge %s outside (0, %s]", p.MaximumEventAge, MaxRuleEventAge)
	}
	return nil
}

// Interceptor wraps one delivery attempt of event ev to consumer (attempt is
// 1-based). It may call next zero times (to fail or drop), once, or several
// times (to duplicate), and may return an error to fail the attempt. It is
// called concurrently.
type Interceptor func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next EventHandler) error

// DeadLetter is an event the bus gave up delivering to one target, as its
// rule's DLQ receives it (the event JSON, and what the message attributes
// say: eb-rule-dlq).
type DeadLetter struct {
	Consumer string
	Rule     string
	// RuleARN and TargetARN are the RULE_ARN and TARGET_ARN attributes.
	RuleARN   string
	TargetARN string
	EventJSON []byte
	Event     events.EventBridgeEvent
	// Attempts is the number of delivery attempts (RETRY_ATTEMPTS is one
	// less).
	Attempts int
	// ErrorCode is the ERROR_CODE attribute (sqsconsumer.RuleError*).
	ErrorCode string
	// Error is the last attempt's error (ERROR_MESSAGE).
	Error string
	At    time.Time
	// DLQMessageID is the message id on the rule's DLQ ("" without a DLQ,
	// or when the DLQ refused it).
	DLQMessageID string
}

// BusStats counts what a Bus did.
type BusStats struct {
	// Accepted counts entries accepted (given an EventId).
	Accepted int64
	// FailedEntries counts rejected entries by ErrorCode.
	FailedEntries map[string]int64
	// RejectedRequests counts whole PutEvents requests refused.
	RejectedRequests int64
	// Unmatched counts accepted events that matched no rule.
	Unmatched int64
	// Unsubscribed counts rule matches whose consumer has no handler.
	Unsubscribed int64
	// Deliveries counts successful deliveries per consumer.
	Deliveries map[string]int64
	// Attempts counts delivery attempts per consumer.
	Attempts map[string]int64
	// Retries counts re-attempts after a failed delivery, per consumer.
	Retries map[string]int64
	// DeadLettered counts events given up per consumer.
	DeadLettered map[string]int64
	// SentToDLQ counts, per consumer, the events given up that its rule's
	// DLQ took (CloudWatch InvocationsSentToDLQ); FailedToDLQ those the DLQ
	// refused (InvocationsFailedToBeSentToDlq: on AWS they are dropped).
	SentToDLQ   map[string]int64
	FailedToDLQ map[string]int64
	// Replayed counts events a replay put on the bus again (StartReplay).
	Replayed int64
	// Forwarded counts accepted events another bus's rule delivered
	// (SubscribeBus on that bus). NotForwardedAgain counts the matches of
	// such events by rules whose target is an event bus: they are not
	// delivered (one hop, see SubscribeBus).
	Forwarded         int64
	NotForwardedAgain int64
}
