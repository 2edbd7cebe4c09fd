// Package config holds the names of the environment variables every ddb-outbox
// function reads, and small helpers to read them with defaults and validation.
//
// The names are exported constants so that the runtime code (functions/, pkg/)
// and the CDK app (infra/) use one spelling: a Grant* method on the CDK construct
// sets exactly the variable the handler reads. This package imports nothing from
// the CDK and nothing from the AWS SDK.
//
// Endpoints are not configured here: the AWS SDK for Go v2 already reads the
// standard AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> variables
// (for example AWS_ENDPOINT_URL_DYNAMODB), which is how the local stack and the
// tests point every client at a DynamoDB-compatible server.
package config

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variable names read by the functions. Table and queue values are
// physical names or URLs created by the stack; the CDK construct sets them.
const (
	// EnvOutboxTable is the outbox table name (read by api, relay, reconciler).
	EnvOutboxTable = "OUTBOX_TABLE_NAME"
	// EnvDedupTable names a table holding a consumer's dedup state apart
	// from its effects: the shared dedup table of versions before each
	// consumer kept its state in its own table (read by outboxctl
	// consumer-state-copy as its -from-table default). The example's
	// consumers no longer read it.
	EnvDedupTable = "DEDUP_TABLE_NAME"
	// EnvEventBusName is the EventBridge bus name or ARN the relay publishes to.
	EnvEventBusName = "EVENT_BUS_NAME"
	// EnvEventSource is the EventBridge Source of published events.
	EnvEventSource = "EVENT_SOURCE"
	// EnvParkedQueueURL is the SQS queue URL that receives parked (unpublishable)
	// outbox records with their full envelope (read by relay and reconciler).
	EnvParkedQueueURL = "PARKED_QUEUE_URL"
	// EnvPendingShards is the number of shards of the sparse pending index
	// partition key (integer, 1..256). Writers and the reconciler must agree.
	EnvPendingShards = "PENDING_SHARDS"
	// EnvReconcileAfterSeconds is the age, in seconds, after which the
	// reconciler re-publishes a pending outbox record (default 300).
	EnvReconcileAfterSeconds = "RECONCILE_AFTER_SECONDS"
	// EnvReconcileBudgetSeconds bounds one reconciler run, in seconds.
	EnvReconcileBudgetSeconds = "RECONCILE_BUDGET_SECONDS"
	// EnvPublishedRetentionSeconds is how long, in seconds, a published outbox
	// record is kept before its TTL expires it (default 7 days).
	EnvPublishedRetentionSeconds = "PUBLISHED_RETENTION_SECONDS"
	// EnvDedupRetentionSeconds is the dedup marker TTL in seconds; it must
	// outlive the redelivery window (default 7 days).
	EnvDedupRetentionSeconds = "DEDUP_RETENTION_SECONDS"
	// EnvMaxEntryBytes is the EventBridge entry size limit in bytes (default
	// 262144, 256 KB; AWS has announced larger payloads for event buses).
	EnvMaxEntryBytes = "MAX_ENTRY_BYTES"
	// EnvConsumerDLQURL is the SQS URL of a consumer's own dead-letter queue
	// (read by consumers): events that retrying cannot fix (malformed,
	// forged, unsupported version) are sent there at once with a reason,
	// instead of burning the queue's receive count.
	EnvConsumerDLQURL = "CONSUMER_DLQ_URL"
	// EnvExpectedEventAccount is the 12-digit AWS account id every event a
	// consumer applies must carry in its EventBridge "account" field (read
	// by consumers; dedup.ConsumerConfig.ExpectedAccount). The CDK stack
	// sets it to the stack's account; empty (locally, where the bus uses
	// 000000000000) checks no account.
	EnvExpectedEventAccount = "EXPECTED_EVENT_ACCOUNT"
	// EnvConsumerTable is the name of a consumer's own DynamoDB table:
	// its dedup markers, ordering gates and resequencer buffer (and, if
	// the consumer wishes, its effects), keyed pk/sk with the buffer index
	// (dedup.WithStateIndex). The CDK module's consumer construct sets it;
	// dedup.ConsumerConfigFromEnv reads it.
	EnvConsumerTable = "CONSUMER_TABLE_NAME"
	// EnvConsumerName is a consumer's name: the prefix of its dedup
	// markers, gates and buffer keys and the Consumer dimension of its
	// metrics, which the consumer construct's buffered-age alarm watches
	// (outboxcdk.ConsumerProps.Name). The construct sets it;
	// dedup.NewConsumerFromEnv reads it, so the code and the alarm cannot
	// disagree on the name.
	EnvConsumerName = "CONSUMER_NAME"
	// EnvTracing turns OpenTelemetry tracing on in a function: TracingOn
	// ("otlp") exports spans over OTLP/HTTP to the endpoint the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT names (on AWS: the ADOT collector layer's
	// local receiver); TracingOff ("off", the default) installs nothing, so
	// spans are no-ops. The CDK stack sets it with the collector layer.
	EnvTracing = "OUTBOX_TRACING"
)

// Values of EnvTracing.
const (
	TracingOff = "off"
	TracingOn  = "otlp"
)

// Consumer delivery: EventBridge rule → one SQS queue per consumer → Lambda
// SQS event source mapping with partial batch responses → the consumer; the
// queue's redrive policy moves a message that failed MaxReceiveCount times to
// the consumer's DLQ. The CDK stack and the local runtime read these, so
// both deliver alike.
const (
	// DefaultConsumerTimeout is every consumer function's timeout.
	DefaultConsumerTimeout = 30 * time.Second
	// ConsumerVisibilityTimeoutFactor: the consumer queue's visibility
	// timeout is this many times the function timeout, as the Lambda
	// developer guide advises ("set the source queue's visibility timeout to
	// at least six times the configuration timeout on your function",
	// services-sqs-configure).
	ConsumerVisibilityTimeoutFactor = 6
	// DefaultConsumerRetryBase is the first delay before a failed consumer
	// message is received again (doubling per receive, capped at the
	// queue's visibility timeout: sqsconsumer.RetryDelays), instead of the
	// whole visibility timeout.
	DefaultConsumerRetryBase = 10 * time.Second
	// DefaultConsumerMaxReceiveCount is the consumer queue's redrive policy
	// maxReceiveCount: deliveries before a message moves to the DLQ.
	DefaultConsumerMaxReceiveCount = 5
	// DefaultConsumerGapMaxReceives bounds how long an ordered consumer
	// holds an event whose predecessors have not been applied (a sequence
	// gap, promise I4): on this receive (ApproximateReceiveCount) the event
	// is dead-lettered with reason sequence_gap instead of being left for
	// redelivery. It equals DefaultConsumerMaxReceiveCount, the last receive
	// the queue's redrive policy allows, and the held event's waits are
	// longer than the missing event's whole retry window on the queue
	// (app.retryDelay: 1 + 7 + 42 + 271 = 321 s against 310 s), so a gap
	// is dead-lettered, with a reason, only once the missing event was
	// dead-lettered, parked or stuck upstream. Set it to the queue's
	// maxReceiveCount when that differs (dedup.ConsumerConfig.GapMaxReceives;
	// docs/ORDERING.md).
	DefaultConsumerGapMaxReceives = DefaultConsumerMaxReceiveCount
	// DefaultConsumerBatchSize is the SQS event source mapping's BatchSize
	// (AWS default 10).
	DefaultConsumerBatchSize = 10
	// DefaultConsumerMaxConcurrency is each consumer's SQS event source
	// mapping MaximumConcurrency (AWS range 2..1000; Lambda developer guide,
	// services-sqs-scaling), sized so that the default configuration
	// sustains ConsumerTargetEventsPerSecond even if a consumer handled
	// the messages of a batch one at a time:
	//
	//	ceil(ConsumerTargetEventsPerSecond × ConsumerPlannedMessageTime ÷ ConsumerPlanningUtilisationPercent %)
	//	= ceil(1,000/s × 0.017 s ÷ 0.80) = ceil(21.25) = 22
	//
	// 22 concurrent invocations of 17 ms per message carry 1,294 messages/s
	// per consumer, and a consumer that receives every event of its
	// aggregates (an ordered consumer) takes one delivery per event. A consumer that processes a batch's messages
	// concurrently, grouped by aggregate, does a batch of
	// DefaultConsumerBatchSize in about the time of its slowest aggregate's
	// chain, so the same setting carries several times more. The infra
	// stack reserves this much concurrency for each consumer by default
	// (Lambda throttles a mapping whose MaximumConcurrency exceeds the
	// function's reserved concurrency, and a throttled SQS message counts
	// toward maxReceiveCount).
	DefaultConsumerMaxConcurrency = (ConsumerTargetEventsPerSecond*int(ConsumerPlannedMessageTime/time.Millisecond)*100 +
		ConsumerPlanningUtilisationPercent*1000 - 1) / (ConsumerPlanningUtilisationPercent * 1000)
	// ConsumerTargetEventsPerSecond is the event rate (events per second)
	// the default consumer configuration is sized for.
	ConsumerTargetEventsPerSecond = 1000
	// ConsumerPlannedMessageTime is the Lambda time one message costs a
	// consumer handled alone, at AWS latency: 17 ms (`make bench` section
	// g, one transaction of side effect + dedup marker at the DynamoDB
	// latencies it injects; whole milliseconds).
	ConsumerPlannedMessageTime = 17 * time.Millisecond
	// ConsumerPlanningUtilisationPercent is the share of a limit a sizing
	// allows itself (percent): 80, as the capacity plans in internal/bench.
	ConsumerPlanningUtilisationPercent = 80
	// SQSProvisionedInvokesPerPoller is the most concurrent invocations one
	// event poller of an SQS event source mapping in provisioned mode
	// drives (Lambda developer guide, services-sqs-scaling: each poller
	// handles up to 1 MB/s, 10 concurrent invokes or 10 SQS polls per
	// second). A provisioned mapping can reach MaximumPollers × 10
	// concurrent invocations.
	SQSProvisionedInvokesPerPoller = 10
	// DefaultRelayTimeout is the relay function's timeout.
	DefaultRelayTimeout = 60 * time.Second
)

// Metric names and namespace the reconciler and relay emit (CloudWatch
// embedded metric format). The CDK alarms read the same constants.
const (
	MetricNamespace            = "DdbOutbox"
	MetricOldestPendingAge     = "OldestPendingAgeSeconds"
	MetricPendingCount         = "PendingCount"
	MetricReconcilerResent     = "ReconcilerResent"
	MetricParked               = "ParkedRecords"
	MetricDimensionOutboxTable = "OutboxTable"
)

// Metrics of an ordered consumer's resequencer (dedup.Resequencer), emitted
// by its sweep once per ResequencerSweepInterval with the dimension
// MetricDimensionConsumer (the consumer's name). The CDK alarm on
// MetricOldestBufferedAge reads the same constants.
const (
	// MetricBufferedEvents: events waiting in the consumer's buffer for a
	// predecessor (Count).
	MetricBufferedEvents = "BufferedEvents"
	// MetricOldestBufferedAge: the age of the oldest of them (Seconds; 0
	// when none waits). It grows only while a gap stays open.
	MetricOldestBufferedAge = "OldestBufferedAgeSeconds"
	// MetricResequencerDrained: buffered events the sweep applied (Count):
	// what a crash between applying an event and draining its successors
	// left behind.
	MetricResequencerDrained = "ResequencerDrained"
	MetricDimensionConsumer  = "Consumer"
)

// Resequencer sweep schedule and alarm.
const (
	// ResequencerSweepInterval is how often each ordered consumer's sweep
	// runs (an EventBridge schedule invoking the consumer function on AWS,
	// a timer in the local stack).
	ResequencerSweepInterval = time.Minute
	// DefaultBufferedAgeAlarm is the OldestBufferedAgeSeconds threshold of
	// the alarm: an event has waited this long for its predecessor. A
	// predecessor that is only slow (retried, re-sent by the reconciler
	// after DefaultReconcileAfter) arrives well within it; past it the
	// missing event is parked, dead-lettered or lost upstream and an
	// operator redrives it (docs/ORDERING.md).
	DefaultBufferedAgeAlarm = 15 * time.Minute
)

// Defaults for the settings above.
const (
	DefaultPendingShards      = 16
	DefaultReconcileAfter     = 5 * time.Minute
	DefaultReconcileBudget    = 45 * time.Second
	DefaultPublishedRetention = 7 * 24 * time.Hour
	// DefaultArchiveRetentionDays is how long the outbox's EventBridge
	// archive keeps every published event, in days (the CDK construct's
	// ArchiveRetention default; 0 there keeps events forever). A year of
	// history to backfill a new or rebuilt consumer from; EventBridge
	// charges for the bytes archived and their storage per GB-month
	// (docs/ARCHIVE.md).
	DefaultArchiveRetentionDays = 365
	DefaultDedupRetention       = 7 * 24 * time.Hour
	DefaultMaxEntryBytes        = 256 * 1024
	MaxPendingShards            = 256
)

// MinReconcileAfter is the shortest stale age (ReconcileAfter,
// EnvReconcileAfterSeconds) the reconciler accepts outside tests: 2 min.
// Below the event source mapping's retry window the reconciler races the
// relay on records the relay is still delivering, publishing them twice and
// breaking the relay's per-aggregate hold-back. The shortest window the CDK
// construct (infra/outboxcdk) allows is its minimum MaximumRecordAge (60 s)
// plus one relay invocation (at least relay.MinFunctionTimeout, 32 s) =
// 92 s, rounded up to whole minutes; the construct also checks
// ReconcileAfter >= MaxRecordAge + RelayTimeout for the values it deploys.
// A deployment with a longer retry window must set a longer ReconcileAfter.
const MinReconcileAfter = 2 * time.Minute

// Required returns the value of the environment variable name, or an error
// naming the variable when it is unset or empty, or when it begins or ends
// with white space: the values it reads (table names, queue URLs, event
// sources, ARNs) never do, and a stray space would fail later and far away
// (an event source that no event matches, a table name DynamoDB refuses on
// the first call).
func Required(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("config: environment variable %s is required", name)
	}
	if strings.TrimSpace(v) != v {
		return "", fmt.Errorf("config: %s=%q begins or ends with white space", name, v)
	}
	return v, nil
}

// String returns the variable's value, or def when it is unset or empty.
func String(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Int returns the variable parsed as a base-10 integer, or def when unset.
// It returns an error when the value is not an integer.
func Int(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("config: %s=%q is not an integer", name, v)
	}
	return n, nil
}

// Seconds returns the variable, a whole number of seconds, as a duration, or
// def when unset. It returns an error when the value is not a non-negative
// integer, or is more seconds than a time.Duration holds (about 292 years).
func Seconds(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("config: %s=%q is not a whole number of seconds", name, v)
	}
	if n > math.MaxInt64/int64(time.Second) {
		return 0, fmt.Errorf("config: %s=%q is more seconds than a duration holds (%d)", name, v, math.MaxInt64/int64(time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// EnvMetrics turns the library's CloudWatch embedded-metric-format lines
// (relay, reconciler, resequencer sweep) on ("on") or off ("off") wherever
// the process runs; unset, they are on in AWS Lambda and off elsewhere
// (MetricsWriter).
const EnvMetrics = "OUTBOX_METRICS"

// EnvLambdaFunctionName is set by AWS Lambda in every function's
// environment (Lambda developer guide, "Defined runtime environment
// variables"): its presence tells that the process runs in Lambda.
const EnvLambdaFunctionName = "AWS_LAMBDA_FUNCTION_NAME"

// MetricsWriter is the default destination of the library's embedded
// metric format lines: os.Stdout — Lambda's log stream, which CloudWatch
// turns into metrics — when EnvMetrics is "on", or unset while the process
// runs in AWS Lambda (EnvLambdaFunctionName set); io.Discard otherwise (a
// team's tests and local runs print no metric JSON). Set a component's
// Metrics field to override it.
func MetricsWriter() io.Writer {
	switch os.Getenv(EnvMetrics) {
	case "on":
		return os.Stdout
	case "off":
		return io.Discard
	}
	if os.Getenv(EnvLambdaFunctionName) != "" {
		return os.Stdout
	}
	return io.Discard
}
