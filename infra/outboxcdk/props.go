package outboxcdk

import (
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Defaults applied by Props.SetDefaults to zero fields.
const (
	// DefaultBatchSize is the event source mapping batch size (records).
	DefaultBatchSize = 100
	// DefaultRetryAttempts bounds how often the event source mapping retries
	// a failing batch before sending its metadata to the on-failure queue.
	DefaultRetryAttempts = 10
	// DefaultMaxRecordAge is the oldest stream record the mapping still
	// delivers (stream retention is 24 h anyway).
	DefaultMaxRecordAge = 6 * time.Hour
	// DefaultParallelizationFactor is the number of concurrent batches per
	// stream shard.
	DefaultParallelizationFactor = 1
	// DefaultReconcileRate is the reconciler's schedule.
	DefaultReconcileRate = 5 * time.Minute
	// DefaultIteratorAgeThreshold is the relay IteratorAge alarm threshold.
	DefaultIteratorAgeThreshold = 5 * time.Minute
	// DefaultOldestPendingThreshold is the oldest-pending-record age alarm
	// threshold; it must exceed ReconcileAfter + ReconcileRate.
	DefaultOldestPendingThreshold = 15 * time.Minute
	// DefaultRelayTimeout is the relay function timeout.
	DefaultRelayTimeout = 60 * time.Second
)

// Limits enforced by Validate. They are the AWS API limits unless noted.
const (
	MinBatchSize             = 1
	MaxBatchSize             = 10000
	MaxBatchingWindow        = 300 * time.Second
	MinRetryAttempts         = 1 // bounded and at least one retry (AWS allows -1..10000)
	MaxRetryAttempts         = 10000
	MinRecordAge             = 60 * time.Second
	MaxRecordAge             = 604800 * time.Second
	MinParallelizationFactor = 1
	MaxParallelizationFactor = 10
	MinPendingShards         = 1
	MaxEntryBytesLimit       = 1024 * 1024 // EventBridge event bus payload ceiling announced by AWS
	MinReconcileRate         = time.Minute // EventBridge rate expressions are whole minutes
)

// ErrInvalidProps is wrapped by every error Validate returns.
var ErrInvalidProps = errors.New("outboxcdk: invalid props")

// Props configures an Outbox. Zero fields take the defaults; Validate (called
// by New) checks the values after defaults are applied. Durations are Go
// durations; the construct converts them to whole seconds or minutes.
type Props struct {
	// EventBus is the EventBridge bus the relay and the reconciler publish
	// to (events:PutEvents). Required.
	EventBus awsevents.IEventBus
	// AssetRoot is the directory holding relay/bootstrap and
	// reconciler/bootstrap (the repository's dist/ after `make build`).
	// Required.
	AssetRoot string
	// EventSource is the EventBridge Source of published events. Default
	// config.DefaultEventSource.
	EventSource string
	// PendingShards is the number of pending index partitions, 1..256.
	// Default config.DefaultPendingShards.
	PendingShards int
	// MaxEntryBytes is the EventBridge entry size limit in bytes, 1..1 MiB.
	// Default config.DefaultMaxEntryBytes (256 KB).
	MaxEntryBytes int

	// BatchSize is the event source mapping batch size, 1..10000 records.
	// Default DefaultBatchSize.
	BatchSize int
	// MaxBatchingWindow is how long the mapping gathers records before
	// invoking, whole seconds, 0..300 s. Default 0.
	MaxBatchingWindow time.Duration
	// RetryAttempts bounds the mapping's retries of a failing batch,
	// 1..10000. Default DefaultRetryAttempts.
	RetryAttempts int
	// MaxRecordAge is the oldest record the mapping delivers, whole seconds,
	// 60 s..604800 s (7 days). Default DefaultMaxRecordAge.
	MaxRecordAge time.Duration
	// ParallelizationFactor is the number of concurrent batches per shard,
	// 1..10. Default DefaultParallelizationFactor.
	ParallelizationFactor int
	// RelayTimeout is the relay's Lambda timeout, whole seconds, up to
	// 15 min and at least MinRelayTimeout() (the publisher's retry budget
	// plus the marking reserve plus a margin, relay.MinFunctionTimeout; 32 s
	// with the relay's defaults): a shorter timeout would cut the retry
	// budget, and the relay keeps the reserve before the deadline to mark
	// and answer. Default DefaultRelayTimeout.
	RelayTimeout time.Duration

	// ReconcileRate is how often the reconciler runs, whole minutes, >= 1
	// min. Default DefaultReconcileRate.
	ReconcileRate time.Duration
	// ReconcileAfter is the age after which the reconciler re-publishes a
	// pending record, whole seconds, > 0. Default config.DefaultReconcileAfter.
	ReconcileAfter time.Duration
	// ReconcileBudget bounds one reconciler run, whole seconds, 1 s..14 min;
	// the function timeout is the budget plus 15 s. Default
	// config.DefaultReconcileBudget.
	ReconcileBudget time.Duration
	// PublishedRetention is how long a published record is kept before its
	// TTL expires it, whole seconds, > 0. Default
	// config.DefaultPublishedRetention.
	PublishedRetention time.Duration

	// IteratorAgeThreshold is the relay IteratorAge alarm threshold, > 0.
	// Default DefaultIteratorAgeThreshold.
	IteratorAgeThreshold time.Duration
	// OldestPendingThreshold is the threshold of the alarm on the
	// reconciler's oldest-pending-record age metric, whole seconds, > 0.
	// Default DefaultOldestPendingThreshold.
	OldestPendingThreshold time.Duration
	// AlarmTopic, when set, receives every alarm's ALARM and OK transitions.
	AlarmTopic awssns.ITopic

	// EncryptionKey, when set, encrypts the outbox table with this customer
	// managed KMS key; otherwise the AWS managed key (aws/dynamodb) is used.
	EncryptionKey awskms.IKey
	// RemovalPolicy applies to the table, queues and log groups. Default
	// RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// LogRetention is the retention of the functions' log groups. Default
	// one month.
	LogRetention awslogs.RetentionDays
}

// MinRelayTimeout is the shortest relay function timeout Validate accepts:
// relay.MinFunctionTimeout of the relay configuration the relay function
// builds (pkg/app.NewRelay: the publisher's and marker's defaults; the entry
// size limit does not affect it) = RetryBudget 20 s + Reserve (2 × 5 s
// CallTimeout + 0.5 s) + 1 s, rounded up to whole seconds: 32 s.
func MinRelayTimeout() time.Duration {
	return relay.MinFunctionTimeout(relay.Config{})
}

// SetDefaults replaces zero fields with their defaults.
func (p *Props) SetDefaults() {
	if p.EventSource == "" {
		p.EventSource = config.DefaultEventSource
	}
	if p.PendingShards == 0 {
		p.PendingShards = config.DefaultPendingShards
	}
	if p.MaxEntryBytes == 0 {
		p.MaxEntryBytes = config.DefaultMaxEntryBytes
	}
	if p.BatchSize == 0 {
		p.BatchSize = DefaultBatchSize
	}
	if p.RetryAttempts == 0 {
		p.RetryAttempts = DefaultRetryAttempts
	}
	if p.MaxRecordAge == 0 {
		p.MaxRecordAge = DefaultMaxRecordAge
	}
	if p.ParallelizationFactor == 0 {
		p.ParallelizationFactor = DefaultParallelizationFactor
	}
	if p.RelayTimeout == 0 {
		p.RelayTimeout = DefaultRelayTimeout
	}
	if p.ReconcileRate == 0 {
		p.ReconcileRate = DefaultReconcileRate
	}
	if p.ReconcileAfter == 0 {
		p.ReconcileAfter = config.DefaultReconcileAfter
	}
	if p.ReconcileBudget == 0 {
		p.ReconcileBudget = config.DefaultReconcileBudget
	}
	if p.PublishedRetention == 0 {
		p.PublishedRetention = config.DefaultPublishedRetention
	}
	if p.IteratorAgeThreshold == 0 {
		p.IteratorAgeThreshold = DefaultIteratorAgeThreshold
	}
	if p.OldestPendingThreshold == 0 {
		p.OldestPendingThreshold = DefaultOldestPendingThreshold
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	if p.LogRetention == "" {
		p.LogRetention = awslogs.RetentionDays_ONE_MONTH
	}
}

// Validate applies the defaults to a copy of p and checks every field. It
// returns nil or an error wrapping ErrInvalidProps that lists every problem.
// It calls nothing in the CDK, so it is cheap to use in unit tests.
func (p Props) Validate() error {
	p.SetDefaults()
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format, a...))
	}
	whole := func(name string, d time.Duration) {
		if d%time.Second != 0 {
			bad("%s %s is not a whole number of seconds", name, d)
		}
	}
	if p.EventBus == nil {
		bad("EventBus is required")
	}
	if p.AssetRoot == "" {
		bad("AssetRoot is required")
	}
	if p.PendingShards < MinPendingShards || p.PendingShards > config.MaxPendingShards {
		bad("PendingShards %d is outside %d..%d", p.PendingShards, MinPendingShards, config.MaxPendingShards)
	}
	if p.MaxEntryBytes < 1 || p.MaxEntryBytes > MaxEntryBytesLimit {
		bad("MaxEntryBytes %d is outside 1..%d", p.MaxEntryBytes, MaxEntryBytesLimit)
	}
	if p.BatchSize < MinBatchSize || p.BatchSize > MaxBatchSize {
		bad("BatchSize %d is outside %d..%d", p.BatchSize, MinBatchSize, MaxBatchSize)
	}
	if p.MaxBatchingWindow < 0 || p.MaxBatchingWindow > MaxBatchingWindow {
		bad("MaxBatchingWindow %s is outside 0s..%s", p.MaxBatchingWindow, MaxBatchingWindow)
	}
	whole("MaxBatchingWindow", p.MaxBatchingWindow)
	if p.RetryAttempts < MinRetryAttempts || p.RetryAttempts > MaxRetryAttempts {
		bad("RetryAttempts %d is outside %d..%d", p.RetryAttempts, MinRetryAttempts, MaxRetryAttempts)
	}
	if p.MaxRecordAge < MinRecordAge || p.MaxRecordAge > MaxRecordAge {
		bad("MaxRecordAge %s is outside %s..%s", p.MaxRecordAge, MinRecordAge, MaxRecordAge)
	}
	whole("MaxRecordAge", p.MaxRecordAge)
	if p.ParallelizationFactor < MinParallelizationFactor || p.ParallelizationFactor > MaxParallelizationFactor {
		bad("ParallelizationFactor %d is outside %d..%d", p.ParallelizationFactor, MinParallelizationFactor, MaxParallelizationFactor)
	}
	if minTimeout := MinRelayTimeout(); p.RelayTimeout < minTimeout || p.RelayTimeout > 15*time.Minute {
		bad("RelayTimeout %s is outside %s..15m: the relay needs its publish retry budget plus the marking reserve plus a margin (relay.MinFunctionTimeout) before the invocation deadline", p.RelayTimeout, minTimeout)
	}
	whole("RelayTimeout", p.RelayTimeout)
	if p.ReconcileRate < MinReconcileRate || p.ReconcileRate%time.Minute != 0 {
		bad("ReconcileRate %s must be a whole number of minutes >= 1m", p.ReconcileRate)
	}
	if p.ReconcileAfter <= 0 {
		bad("ReconcileAfter %s must be positive", p.ReconcileAfter)
	}
	whole("ReconcileAfter", p.ReconcileAfter)
	if p.ReconcileBudget < time.Second || p.ReconcileBudget > 14*time.Minute {
		bad("ReconcileBudget %s is outside 1s..14m", p.ReconcileBudget)
	}
	whole("ReconcileBudget", p.ReconcileBudget)
	if p.PublishedRetention <= 0 {
		bad("PublishedRetention %s must be positive", p.PublishedRetention)
	}
	whole("PublishedRetention", p.PublishedRetention)
	if p.IteratorAgeThreshold <= 0 {
		bad("IteratorAgeThreshold %s must be positive", p.IteratorAgeThreshold)
	}
	if p.OldestPendingThreshold <= 0 {
		bad("OldestPendingThreshold %s must be positive", p.OldestPendingThreshold)
	}
	whole("OldestPendingThreshold", p.OldestPendingThreshold)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidProps, errors.Join(errs...))
}
