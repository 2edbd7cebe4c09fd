package outboxcdk

import (
	"errors"
	"fmt"
	"strings"
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
	// delivers: 4 min, so that with the default relay timeout (60 s) the
	// mapping's retry window (MaxRecordAge + RelayTimeout = 5 min) ends by
	// the default ReconcileAfter (5 min). A record the relay keeps failing
	// on is given up (on-failure queue, later records flow) within 5 min;
	// it stays pending and the reconciler takes it over.
	DefaultMaxRecordAge = 4 * time.Minute
	// DefaultParallelizationFactor is the number of concurrent batches per
	// stream shard.
	DefaultParallelizationFactor = 1
	// DefaultReconcileRate is the reconciler's schedule.
	DefaultReconcileRate = 5 * time.Minute
	// DefaultIteratorAgeThreshold is the relay IteratorAge alarm threshold:
	// 2 min, below DefaultMaxRecordAge (the mapping skips records older than
	// MaxRecordAge, so the iterator age never grows much past it and a
	// higher threshold could never fire).
	DefaultIteratorAgeThreshold = 2 * time.Minute
	// DefaultOldestPendingThreshold is the oldest-pending-record age alarm
	// threshold; it must exceed ReconcileAfter + ReconcileRate.
	DefaultOldestPendingThreshold = 15 * time.Minute
	// DefaultRelayTimeout is the relay function timeout.
	DefaultRelayTimeout = 60 * time.Second
)

// Limits enforced by Validate. Each keeps the promise "a poison record is
// given up within minutes while later records flow": the event source
// mapping stops retrying a batch when MaxRecordAge is reached or the
// retries run out, whichever comes first; bisecting a batch
// (BisectBatchOnFunctionError) does not count as a retry, so the record age
// is the hard bound. A record the relay keeps failing on therefore leaves
// the stream path at most MaxRecordAge + RelayTimeout after it was written
// (an invocation started just before expiry runs to its timeout; see
// Props.StreamGiveUpTime): 5 min with the defaults, 20 min at the bounds
// (15 min + 5 min). Its metadata goes to the on-failure queue, the record
// stays pending and the reconciler re-publishes it (ReconcileAfter, then
// within ReconcileRate) or parks it. A record that fails permanently is
// parked by the relay at once. The AWS API limits are wider (noted).
const (
	MinBatchSize = 1
	// MaxBatchSize: 1,000 records (the CDK and SAM docs give 1,000 for
	// DynamoDB streams; the newer API text 10,000). A larger batch takes
	// longer than one relay invocation to publish in per-aggregate waves.
	MaxBatchSize = 1000
	// MaxBatchingWindow: 300 s (AWS limit), and at most MaxRecordAge −
	// RelayTimeout so that a record can be delivered before it expires.
	MaxBatchingWindow = 300 * time.Second
	// MinRetryAttempts: bounded and at least one retry (AWS allows -1, infinite).
	MinRetryAttempts = 1
	// MaxRetryAttempts: 10 (AWS allows 10,000). With RelayTimeout at its
	// bound, 11 invocations of 5 min are 55 min, so MaxRecordAge gives up
	// first; the bound keeps the retries alone within the hour.
	MaxRetryAttempts = 10
	// MinRecordAge: 60 s (AWS limit), and at least MaxBatchingWindow +
	// RelayTimeout (one full delivery attempt).
	MinRecordAge = 60 * time.Second
	// MaxRecordAge: 15 min (AWS allows 7 days, and the stream keeps 24 h):
	// the worst-case time to give up a poison record is MaxRecordAge +
	// RelayTimeout.
	MaxRecordAge = 15 * time.Minute
	// MinParallelizationFactor and MaxParallelizationFactor: exactly 1 (AWS
	// allows 1..10). With more than one concurrent batch per shard Lambda
	// keeps order per item (partition and sort key) only, and an
	// aggregate's outbox records are different items: its later event
	// could be published by one batch while an earlier one fails in
	// another, which the relay's per-aggregate hold-back (I4) cannot see.
	MinParallelizationFactor = 1
	MaxParallelizationFactor = 1
	MinPendingShards         = 1
	// MinEntryBytes is the smallest entry size limit the relay accepts
	// (relay.PublisherConfig.Validate); a smaller value would fail every
	// relay start.
	MinEntryBytes      = 1024
	MaxEntryBytesLimit = 1024 * 1024 // EventBridge event bus payload ceiling announced by AWS
	// MaxRelayTimeout: 5 min (Lambda allows 15 min); it adds to the
	// worst-case time to give up a poison record.
	MaxRelayTimeout  = 5 * time.Minute
	MinReconcileRate = time.Minute // EventBridge rate expressions are whole minutes
	// MaxReconcileRate: 15 min; a record the stream path gave up waits up
	// to ReconcileAfter + ReconcileRate for the reconciler.
	MaxReconcileRate = 15 * time.Minute
	// MaxReconcileAfter: 1 h; see MaxReconcileRate.
	MaxReconcileAfter = time.Hour
	// ReconcilerTimeoutMargin is what the reconciler's function timeout adds
	// to ReconcileBudget (outbox.go): 15 s. A run must end before the next
	// scheduled one starts: ReconcileBudget + ReconcilerTimeoutMargin <=
	// ReconcileRate.
	ReconcilerTimeoutMargin = 15 * time.Second
)

// ErrInvalidProps is wrapped by every error Validate returns.
var ErrInvalidProps = errors.New("outboxcdk: invalid props")

// Props configures an Outbox. Zero fields take the defaults; Validate (called
// by New) checks the values after defaults are applied. Durations are Go
// durations; the construct converts them to whole seconds or minutes.
type Props struct {
	// TelemetryLayerArn, when set, is the OTLP collector layer added to the
	// relay and the reconciler, turning their OpenTelemetry spans on (see
	// gofunc.Props.TelemetryLayerArn). X-Ray active tracing is on either way.
	TelemetryLayerArn string
	// EventBus is the EventBridge bus the relay and the reconciler publish
	// to (events:PutEvents). Required.
	EventBus awsevents.IEventBus
	// AssetRoot is the directory holding relay/bootstrap and
	// reconciler/bootstrap (the repository's dist/ after `make build`).
	// Required.
	AssetRoot string
	// EventSource is the EventBridge Source of published events: the
	// team's own reverse-DNS name (e.g. "com.example.wallet"), which its
	// writers (outbox.WriterConfig.Source) and consumers
	// (dedup.ConsumerConfig.ExpectedSource) use too. Required (Validate);
	// the construct sets config.EnvEventSource from it.
	EventSource string
	// PendingShards is the number of pending index partitions, 1..256.
	// Default config.DefaultPendingShards.
	PendingShards int
	// MaxEntryBytes is the EventBridge entry size limit in bytes, 1 KiB..1 MiB.
	// Default config.DefaultMaxEntryBytes (256 KB).
	MaxEntryBytes int

	// BatchSize is the event source mapping batch size, 1..1000 records.
	// Default DefaultBatchSize.
	BatchSize int
	// MaxBatchingWindow is how long the mapping gathers records before
	// invoking, whole seconds, 0..300 s and at most MaxRecordAge −
	// RelayTimeout. Default 0.
	MaxBatchingWindow time.Duration
	// RetryAttempts bounds the mapping's retries of a failing batch, 1..10.
	// Default DefaultRetryAttempts.
	RetryAttempts int
	// MaxRecordAge is the oldest record the mapping delivers, whole seconds,
	// 60 s..15 min, and at least MaxBatchingWindow + RelayTimeout. It bounds
	// the time a record the relay keeps failing on holds the shard:
	// worst case MaxRecordAge + RelayTimeout (StreamGiveUpTime): 5 min by
	// default, 20 min at the bounds. Default DefaultMaxRecordAge (4 min).
	MaxRecordAge time.Duration
	// ParallelizationFactor is the number of concurrent batches per shard:
	// 1 (see MaxParallelizationFactor). Default DefaultParallelizationFactor.
	ParallelizationFactor int
	// RelayTimeout is the relay's Lambda timeout, whole seconds, up to
	// 5 min (MaxRelayTimeout) and at least MinRelayTimeout() (the publisher's retry budget
	// plus the marking reserve plus a margin, relay.MinFunctionTimeout; 32 s
	// with the relay's defaults): a shorter timeout would cut the retry
	// budget, and the relay keeps the reserve before the deadline to mark
	// and answer. Default DefaultRelayTimeout.
	RelayTimeout time.Duration

	// ReconcileRate is how often the reconciler runs, whole minutes,
	// 1..15 min, and at least ReconcileBudget + 15 s (the reconciler's
	// function timeout), so a run ends before the next one starts. The
	// reconciler also runs one at a time (reserved concurrency 1) and
	// claims each record it re-publishes. Default DefaultReconcileRate.
	ReconcileRate time.Duration
	// ReconcileAfter is the age after which the reconciler re-publishes a
	// pending record, whole seconds, at most 1 h and at least the event
	// source mapping's retry window, MaxRecordAge + RelayTimeout
	// (StreamGiveUpTime), and config.MinReconcileAfter (2 min): below it the
	// reconciler races the relay on records the mapping still delivers.
	// There is no test-only way around this bound here (the reconciler's
	// AllowShortReconcileAfter is for tests and the local stack). Default
	// config.DefaultReconcileAfter (5 min).
	ReconcileAfter time.Duration
	// ReconcileBudget bounds one reconciler run, whole seconds, 1 s..14 min;
	// the function timeout is the budget plus 15 s. Default
	// config.DefaultReconcileBudget.
	ReconcileBudget time.Duration
	// PublishedRetention is how long a published record is kept before its
	// TTL expires it, whole seconds, > 0. Default
	// config.DefaultPublishedRetention.
	PublishedRetention time.Duration
	// ArchiveRetentionDays is how long the outbox's EventBridge archive
	// (Outbox.Archive) keeps every published event, in days, or
	// KeepArchiveForever, or NoArchive (no archive). Default
	// config.DefaultArchiveRetentionDays (365). Cost (us-east-1,
	// docs/ARCHIVE.md): events archived are billed per GB ingested and
	// stored per GB-month; about 1 KB per event.
	ArchiveRetentionDays int

	// IteratorAgeThreshold is the relay IteratorAge alarm threshold, > 0 and
	// below MaxRecordAge (records older than that are skipped, so the
	// iterator age would never reach the threshold). Default
	// DefaultIteratorAgeThreshold.
	IteratorAgeThreshold time.Duration
	// OldestPendingThreshold is the threshold of the alarm on the
	// reconciler's oldest-pending-record age metric, whole seconds, above
	// ReconcileAfter + ReconcileRate (a record the reconciler is about to
	// take over is not an alarm). Default DefaultOldestPendingThreshold.
	OldestPendingThreshold time.Duration
	// AlarmTopic is the SNS topic every alarm of the construct notifies on
	// ALARM and OK (a standard topic; an encrypted one needs a key policy
	// that lets cloudwatch.amazonaws.com use its key). Default: the
	// construct creates one (Outbox.AlarmTopic, NewAlarmTopic), encrypted
	// with EncryptionKey when set. Subscribe to it, e.g. aws sns subscribe
	// --protocol email.
	AlarmTopic awssns.ITopic
	// ReconcilerReservedConcurrency is the reconciler's reserved
	// concurrency: ReconcilerReservedConcurrency (1, one sweep at a time;
	// the default) or NoReservedConcurrency (none: for an account whose
	// Lambda concurrency quota leaves nothing to reserve; overlapping runs
	// are safe, the reconciler claims each record before re-sending it).
	ReconcilerReservedConcurrency int

	// EncryptionKey, when set, encrypts the outbox table and the
	// parked-records queue with this customer managed KMS key (the two
	// on-failure queues stay SSE-SQS: they hold metadata only) and grants
	// KeyUseActions on it to the relay, the reconciler and every
	// GrantWriteEvents writer; otherwise the AWS managed key (aws/dynamodb)
	// and SSE-SQS are used.
	EncryptionKey awskms.IKey
	// DeadLetterOperatorArns are the IAM role ARNs that may delete messages
	// from, or purge, the construct's dead-letter queues (the parked-records
	// queue, the two on-failure queues, the schedule's DLQ): every other
	// principal is refused by an explicit Deny in their queue policies
	// (deadletter.Queue.KeepMessagesFromAllBut), so a dead letter cannot be
	// erased silently. Empty: no principal may (the messages leave by
	// expiry, 14 days, or once an operator is named and deployed). Exact
	// ARNs.
	DeadLetterOperatorArns []string
	// RemovalPolicy applies to the table, queues and log groups. Default
	// RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// LogRetention is the retention of the functions' log groups. Default
	// one month.
	LogRetention awslogs.RetentionDays
	// MultiRegion, when set, makes this Outbox one Region's part of a
	// multi-Region outbox on a DynamoDB global table (MultiRegionProps,
	// docs/MULTI-REGION.md); nil (the default) is single-Region mode,
	// which it leaves exactly as it was.
	MultiRegion *MultiRegionProps
}

// MinRelayTimeout is the shortest relay function timeout Validate accepts:
// relay.MinFunctionTimeout of the relay configuration the relay function
// builds (lambdamain.NewRelay, relay.ConfigFromEnv: the publisher's and marker's defaults; the entry
// size limit does not affect it) = RetryBudget 20 s + Reserve (2 × 5 s
// CallTimeout + 0.5 s) + 1 s, rounded up to whole seconds: 32 s.
func MinRelayTimeout() time.Duration {
	return relay.MinFunctionTimeout(relay.Config{})
}

// StreamGiveUpTime is the worst-case time, after a record is written, until
// the event source mapping gives up a record the relay keeps failing on (its
// batch metadata goes to the on-failure queue and later records flow):
// MaxRecordAge + RelayTimeout, the record age being the hard stop whatever
// the retries and bisections (an invocation started just before expiry runs
// to its timeout). 5 min with the defaults; 20 min at the bounds. Zero
// fields take their defaults.
func (p Props) StreamGiveUpTime() time.Duration {
	p.SetDefaults()
	return p.MaxRecordAge + p.RelayTimeout
}

// SetDefaults replaces zero fields with their defaults.
func (p *Props) SetDefaults() {
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
	if p.ArchiveRetentionDays == 0 {
		p.ArchiveRetentionDays = config.DefaultArchiveRetentionDays
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
	if p.ReconcilerReservedConcurrency == 0 {
		p.ReconcilerReservedConcurrency = ReconcilerReservedConcurrency
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
	if p.EventSource == "" {
		bad("EventSource is required: the EventBridge source of your outbox's events, e.g. com.example.wallet (writers and consumers use the same)")
	} else if strings.HasPrefix(p.EventSource, "aws.") {
		bad("EventSource %q starts with \"aws.\", which EventBridge refuses for PutEvents", p.EventSource)
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
	if p.MaxEntryBytes < MinEntryBytes || p.MaxEntryBytes > MaxEntryBytesLimit {
		bad("MaxEntryBytes %d is outside %d..%d", p.MaxEntryBytes, MinEntryBytes, MaxEntryBytesLimit)
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
	if minTimeout := MinRelayTimeout(); p.RelayTimeout < minTimeout || p.RelayTimeout > MaxRelayTimeout {
		bad("RelayTimeout %s is outside %s..%s: the relay needs its publish retry budget plus the marking reserve plus a margin (relay.MinFunctionTimeout) before the invocation deadline, and the timeout adds to the time a poison record holds the stream", p.RelayTimeout, minTimeout, MaxRelayTimeout)
	}
	whole("RelayTimeout", p.RelayTimeout)
	if p.MaxRecordAge < p.MaxBatchingWindow+p.RelayTimeout {
		bad("MaxRecordAge %s is below MaxBatchingWindow %s + RelayTimeout %s: records would expire before one delivery attempt ends", p.MaxRecordAge, p.MaxBatchingWindow, p.RelayTimeout)
	}
	if p.ReconcileRate < MinReconcileRate || p.ReconcileRate > MaxReconcileRate || p.ReconcileRate%time.Minute != 0 {
		bad("ReconcileRate %s must be a whole number of minutes in %s..%s", p.ReconcileRate, MinReconcileRate, MaxReconcileRate)
	}
	if window := p.StreamGiveUpTime(); p.ReconcileAfter < max(window, config.MinReconcileAfter) || p.ReconcileAfter > MaxReconcileAfter {
		bad("ReconcileAfter %s is outside %s..%s: it must cover the event source mapping's retry window (MaxRecordAge + RelayTimeout = %s) and config.MinReconcileAfter (%s), or the reconciler races the relay on records still being delivered", p.ReconcileAfter, max(window, config.MinReconcileAfter), MaxReconcileAfter, window, config.MinReconcileAfter)
	}
	whole("ReconcileAfter", p.ReconcileAfter)
	if p.ReconcileBudget < time.Second || p.ReconcileBudget > 14*time.Minute {
		bad("ReconcileBudget %s is outside 1s..14m", p.ReconcileBudget)
	}
	whole("ReconcileBudget", p.ReconcileBudget)
	if p.ReconcileBudget+ReconcilerTimeoutMargin > p.ReconcileRate {
		bad("ReconcileBudget %s + %s (the reconciler's function timeout) exceeds ReconcileRate %s: a run would still be going when the next one starts", p.ReconcileBudget, ReconcilerTimeoutMargin, p.ReconcileRate)
	}
	if p.ArchiveRetentionDays < NoArchive {
		bad("ArchiveRetentionDays %d: days (> 0), KeepArchiveForever or NoArchive", p.ArchiveRetentionDays)
	}
	if p.PublishedRetention <= 0 {
		bad("PublishedRetention %s must be positive", p.PublishedRetention)
	}
	whole("PublishedRetention", p.PublishedRetention)
	if p.IteratorAgeThreshold <= 0 || p.IteratorAgeThreshold >= p.MaxRecordAge {
		bad("IteratorAgeThreshold %s must be positive and below MaxRecordAge %s (older records are skipped, so the alarm could never fire)", p.IteratorAgeThreshold, p.MaxRecordAge)
	}
	if p.OldestPendingThreshold <= p.ReconcileAfter+p.ReconcileRate {
		bad("OldestPendingThreshold %s must exceed ReconcileAfter + ReconcileRate (%s)", p.OldestPendingThreshold, p.ReconcileAfter+p.ReconcileRate)
	}
	whole("OldestPendingThreshold", p.OldestPendingThreshold)
	if n := p.ReconcilerReservedConcurrency; n != ReconcilerReservedConcurrency && n != NoReservedConcurrency {
		bad("ReconcilerReservedConcurrency %d is neither %d (one run at a time) nor %d (none)", n, ReconcilerReservedConcurrency, NoReservedConcurrency)
	}
	if p.MultiRegion != nil {
		errs = append(errs, p.MultiRegion.validate(p.EncryptionKey != nil)...)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidProps, errors.Join(errs...))
}
