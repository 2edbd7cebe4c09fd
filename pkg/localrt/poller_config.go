package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// StreamHandler is a Lambda handler for DynamoDB Streams batches, the shape
// of the relay: it returns a partial batch response
// ({"batchItemFailures":[{"itemIdentifier":"<dynamodb.SequenceNumber>"}]})
// and an error only to fail the whole batch.
type StreamHandler func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)

// StreamsAPI is the part of the DynamoDB Streams client the poller calls,
// with the exact method signatures of *dynamodbstreams.Client.
// Implementations must be safe for concurrent use.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, params *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, params *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, params *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// TableDescriber is the DynamoDB method used to find a table's latest stream
// ARN, with the exact signature of (*dynamodb.Client).DescribeTable.
type TableDescriber interface {
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// StartingPosition is where an event source mapping starts reading a stream.
type StartingPosition string

// Starting positions (StartingPosition of CreateEventSourceMapping).
const (
	// StartingPositionTrimHorizon reads every record still in the stream.
	StartingPositionTrimHorizon StartingPosition = "TRIM_HORIZON"
	// StartingPositionLatest reads only records written after the poller
	// opened each shard listed by its first DescribeStream (without a
	// checkpoint); shards found later are read from their start, like
	// Lambda does.
	StartingPositionLatest StartingPosition = "LATEST"
)

// Event source mapping defaults and limits. AWS values from
// https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html
// unless stated.
const (
	// DefaultBatchSize is the default maximum records per invocation (AWS: 100).
	DefaultBatchSize = 100
	// MaxBatchSize is the largest BatchSize accepted (AWS: 10,000).
	MaxBatchSize = 10000
	// MaxBatchingWindowLimit is the largest MaxBatchingWindow (AWS: 300 s).
	MaxBatchingWindowLimit = 300 * time.Second
	// DefaultPollInterval is how long a shard worker waits after an empty
	// GetRecords before polling again. Local choice (AWS polls each shard
	// about 4 times a second); short so tests and the dev stack are snappy.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultMaximumRetryAttempts is the local default retry bound. AWS's
	// default is -1 (infinite), which can stall a shard for a day; locally a
	// poison batch is parked after 10 retries instead.
	DefaultMaximumRetryAttempts = 10
	// RetryForever (-1) retries a failing batch until it leaves the stream
	// or exceeds MaximumRecordAge, like AWS's default.
	RetryForever = -1
	// NoRetries disables retries (AWS MaximumRetryAttempts 0): the first
	// failure sends the batch to the on-failure destination.
	NoRetries = -2
	// MaxRetryAttemptsLimit is the largest MaximumRetryAttempts (AWS: 10,000).
	MaxRetryAttemptsLimit = 10000
	// MaxRecordAgeLimit is the largest MaximumRecordAge (AWS: 604,800 s).
	MaxRecordAgeLimit = 604800 * time.Second
	// MaxInvokePayloadBytes caps one batch's JSON payload: the 6 MB
	// (6,291,456 bytes) synchronous invocation limit.
	MaxInvokePayloadBytes = 6 * 1024 * 1024
	// MaxFilters is the number of filter patterns accepted (AWS: 5, 10 with
	// a quota increase); filters are ORed.
	MaxFilters = 10
	// DefaultRetryBaseDelay and DefaultRetryMaxDelay bound the exponential
	// backoff (with jitter) between retries of a failed batch.
	DefaultRetryBaseDelay = 100 * time.Millisecond
	DefaultRetryMaxDelay  = 5 * time.Second
	// DefaultFunctionTimeout bounds one handler invocation (the Lambda
	// function timeout); a timeout is a function error.
	DefaultFunctionTimeout = 30 * time.Second
	// DefaultShardDiscoveryInterval is how often DescribeStream is called to
	// find new shards (AWS allows 10 DescribeStream calls per second).
	DefaultShardDiscoveryInterval = time.Second
	// DefaultRegion and DefaultAccount build local ARNs.
	DefaultRegion  = "us-east-1"
	DefaultAccount = "000000000000"
	// DefaultFunctionName names the stream handler in the on-failure record.
	DefaultFunctionName = "relay"
	// getRecordsLimit is the GetRecords maximum (1,000 records per call).
	getRecordsLimit = 1000
)

// On-failure record conditions.
const (
	// ConditionRetryAttemptsExhausted: MaximumRetryAttempts was reached.
	ConditionRetryAttemptsExhausted = "RetryAttemptsExhausted"
	// ConditionRecordAgeExceeded: the oldest record exceeded MaximumRecordAge.
	// Not confirmed in the AWS docs (the error-handling page names only RetryAttemptsExhausted); used locally.
	ConditionRecordAgeExceeded = "RecordAgeExceeded"
)

// StreamPollerConfig configures a StreamPoller, mirroring the parameters of
// a Lambda event source mapping for DynamoDB Streams. Zero values take the
// defaults stated per field.
type StreamPollerConfig struct {
	// Streams is the DynamoDB Streams client. Required.
	Streams StreamsAPI
	// StreamARN is the stream to read. When empty, TableName and Tables are
	// used to look up DescribeTable's LatestStreamArn.
	StreamARN string
	// TableName and Tables resolve the stream ARN when StreamARN is empty.
	TableName string
	Tables    TableDescriber

	// BatchSize is the maximum number of delivered (filter-matching)
	// records per invocation: default 100, 1..10,000. A batch is also capped
	// at MaxInvokePayloadBytes of JSON.
	BatchSize int
	// MaxBatchingWindow is how long to gather records before invoking
	// (MaximumBatchingWindowInSeconds): default 0 (invoke as soon as a poll
	// returns records), at most 300 s. Invocation happens earlier when the
	// batch is full, the payload limit is reached or the shard ends.
	MaxBatchingWindow time.Duration
	// PollInterval is the wait after an empty GetRecords (default 100 ms).
	PollInterval time.Duration
	// StartingPosition is TRIM_HORIZON (default) or LATEST.
	StartingPosition StartingPosition
	// MaximumRetryAttempts bounds retries of a failed batch (every failed
	// attempt counts, partial ones included; bisect splits do not).
	// 0 means the default (10); RetryForever (-1) retries until record age;
	// NoRetries (-2) means no retry; otherwise 1..10,000.
	MaximumRetryAttempts int
	// MaximumRecordAge discards (to the on-failure destination) a batch whose
	// oldest record is older than this, by ApproximateCreationDateTime.
	// 0 means unlimited (AWS -1); at most 604,800 s.
	MaximumRecordAge time.Duration
	// BisectBatchOnFunctionError splits a batch in two halves when the
	// handler returns an error, recursively down to single records; splits
	// do not consume retry attempts (default false, like AWS).
	BisectBatchOnFunctionError bool
	// ReportBatchItemFailures enables partial batch responses
	// (FunctionResponseTypes ["ReportBatchItemFailures"]). nil means true.
	// When false, any non-error return is full success.
	ReportBatchItemFailures *bool

	// FilterPatterns are the event filter patterns (ORed), anything
	// CompilePattern accepts. nil means [outbox.StreamFilterPattern()].
	// Records that match none are never delivered and count as processed.
	FilterPatterns []any
	// DisableFilter delivers every record (ignores FilterPatterns).
	DisableFilter bool

	// OnFailure receives, for every batch given up, the metadata-only
	// record AWS sends to an SQS on-failure destination (OnFailureRecord
	// JSON as MessageBody, QueueUrl OnFailureQueueURL). When nil the batch
	// is logged at ERROR and counted in Stats.RecordsDiscarded.
	OnFailure         MessageSender
	OnFailureQueueURL string

	// Checkpoints resumes a previous poller: shard id → last processed
	// sequence number (as returned by Checkpoint). Those shards are read
	// AFTER_SEQUENCE_NUMBER; others use StartingPosition.
	Checkpoints map[string]string

	// Region, Account and FunctionName build ARNs and the on-failure record
	// (defaults us-east-1, 000000000000, "relay").
	Region       string
	Account      string
	FunctionName string

	// RetryBaseDelay and RetryMaxDelay bound the backoff between retries
	// (defaults 100 ms and 5 s; exponential with jitter).
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// FunctionTimeout bounds one handler invocation (default 30 s).
	FunctionTimeout time.Duration
	// ShardDiscoveryInterval is the DescribeStream period (default 1 s).
	ShardDiscoveryInterval time.Duration
	// Logger receives the poller's logs (default slog.Default()).
	Logger *slog.Logger

	// DeliverAt, when set, is a delivery delay the emulator does not have
	// and AWS does (make bench's cloud-latency level injects AWS's
	// measured stream → Lambda latency here): a record read from the shard
	// is held until DeliverAt(record) (a zero time: no hold), where record
	// is the record as Lambda delivers it (JSON). The shard keeps being
	// polled while records are held, and a batch is only ever a prefix of
	// the records already due, so shard order is kept (a held record holds
	// the ones behind it, as a slow record would on AWS). nil: no hold.
	DeliverAt func(record json.RawMessage) time.Time
}

func (c *StreamPollerConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.StartingPosition == "" {
		c.StartingPosition = StartingPositionTrimHorizon
	}
	if c.MaximumRetryAttempts == 0 {
		c.MaximumRetryAttempts = DefaultMaximumRetryAttempts
	}
	if c.ReportBatchItemFailures == nil {
		c.ReportBatchItemFailures = aws.Bool(true)
	}
	if c.FilterPatterns == nil && !c.DisableFilter {
		c.FilterPatterns = []any{outbox.StreamFilterPattern()}
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Account == "" {
		c.Account = DefaultAccount
	}
	if c.FunctionName == "" {
		c.FunctionName = DefaultFunctionName
	}
	if c.RetryBaseDelay == 0 {
		c.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if c.RetryMaxDelay == 0 {
		c.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if c.FunctionTimeout == 0 {
		c.FunctionTimeout = DefaultFunctionTimeout
	}
	if c.ShardDiscoveryInterval == 0 {
		c.ShardDiscoveryInterval = DefaultShardDiscoveryInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid setting (after defaults are applied).
func (c *StreamPollerConfig) Validate() error {
	switch {
	case c.Streams == nil:
		return errors.New("localrt: StreamPollerConfig.Streams is required")
	case c.StreamARN == "" && (c.TableName == "" || c.Tables == nil):
		return errors.New("localrt: StreamPollerConfig needs StreamARN, or TableName and Tables")
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("localrt: BatchSize %d outside 1..%d", c.BatchSize, MaxBatchSize)
	case c.MaxBatchingWindow < 0 || c.MaxBatchingWindow > MaxBatchingWindowLimit:
		return fmt.Errorf("localrt: MaxBatchingWindow %s outside 0..%s", c.MaxBatchingWindow, MaxBatchingWindowLimit)
	case c.PollInterval < 0:
		return errors.New("localrt: PollInterval must not be negative")
	case c.StartingPosition != StartingPositionTrimHorizon && c.StartingPosition != StartingPositionLatest:
		return fmt.Errorf("localrt: StartingPosition %q is not TRIM_HORIZON or LATEST", c.StartingPosition)
	case c.MaximumRetryAttempts < NoRetries || c.MaximumRetryAttempts > MaxRetryAttemptsLimit:
		return fmt.Errorf("localrt: MaximumRetryAttempts %d outside -2..%d", c.MaximumRetryAttempts, MaxRetryAttemptsLimit)
	case c.MaximumRecordAge < 0 || c.MaximumRecordAge > MaxRecordAgeLimit:
		return fmt.Errorf("localrt: MaximumRecordAge %s outside 0..%s", c.MaximumRecordAge, MaxRecordAgeLimit)
	case len(c.FilterPatterns) > MaxFilters:
		return fmt.Errorf("localrt: %d filter patterns, limit %d", len(c.FilterPatterns), MaxFilters)
	case c.OnFailure != nil && c.OnFailureQueueURL == "":
		return errors.New("localrt: OnFailureQueueURL is required with OnFailure")
	case c.RetryBaseDelay < 0 || c.RetryMaxDelay < c.RetryBaseDelay:
		return errors.New("localrt: need 0 <= RetryBaseDelay <= RetryMaxDelay")
	case c.FunctionTimeout < 0:
		return errors.New("localrt: FunctionTimeout must not be negative")
	}
	for sh, seq := range c.Checkpoints {
		if !validSequenceNumber(seq) {
			return fmt.Errorf("localrt: checkpoint of shard %s is not a sequence number: %q", sh, seq)
		}
	}
	return nil
}

// StreamPollerStats counts what a StreamPoller did. Record counts are
// records, batch counts are invocations or batches as named.
type StreamPollerStats struct {
	// Invocations is the number of handler invocations, retries included.
	Invocations int64
	// Batches is the number of batches finished: fully succeeded, or given
	// up and sent to the on-failure destination.
	Batches int64
	// RecordsDelivered counts records handed to the handler, each
	// redelivery counted again.
	RecordsDelivered int64
	// RecordsFiltered counts records dropped by the filter patterns (never
	// delivered, checkpointed as processed).
	RecordsFiltered int64
	// Retries counts re-invocations after a failed attempt.
	Retries int64
	// PartialFailures counts responses reporting valid batchItemFailures.
	PartialFailures int64
	// InvalidResponses counts responses with an empty, null or unknown
	// itemIdentifier (whole batch failed).
	InvalidResponses int64
	// FunctionErrors counts invocations that returned an error, panicked
	// or timed out.
	FunctionErrors int64
	// Bisections counts batch splits (BisectBatchOnFunctionError).
	Bisections int64
	// FailuresSentToDestination counts batches whose metadata was sent to
	// the on-failure destination.
	FailuresSentToDestination int64
	// RecordsDiscarded counts records of batches given up (sent to the
	// destination or, without one, dropped after an ERROR log).
	RecordsDiscarded int64
	// DestinationErrors counts failed sends to the on-failure destination.
	DestinationErrors int64
	// ExpiredIterators and TrimmedDataErrors count those Streams errors.
	ExpiredIterators  int64
	TrimmedDataErrors int64
	// ShardsFinished counts closed shards read to their end.
	ShardsFinished int64
	// Checkpoints is shard id → last processed sequence number.
	Checkpoints map[string]string
}

// OnFailureRecord is the metadata-only message Lambda sends to an SQS or SNS
// on-failure destination for a DynamoDB Streams batch
// (https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html).
// It carries no record data: the consumer must re-read the stream (within
// 24 h) — for the outbox, the record stays pending for the reconciler.
//
// A batch given up for record age (condition RecordAgeExceeded) carries no
// responseContext and an approximateInvokeCount of at least 1, as AWS sends
// it (AWS-recorded on-failure records, LocalStack snapshot tests validated
// 2024-2025).
type OnFailureRecord struct {
	RequestContext     OnFailureRequestContext   `json:"requestContext"`
	ResponseContext    *OnFailureResponseContext `json:"responseContext,omitempty"`
	Version            string                    `json:"version"`   // "1.0"
	Timestamp          string                    `json:"timestamp"` // RFC 3339, milliseconds, UTC
	DDBStreamBatchInfo DDBStreamBatchInfo        `json:"DDBStreamBatchInfo"`
}

// OnFailureRequestContext identifies the failed invocation.
type OnFailureRequestContext struct {
	RequestID              string `json:"requestId"`
	FunctionArn            string `json:"functionArn"`
	Condition              string `json:"condition"` // ConditionRetryAttemptsExhausted or ConditionRecordAgeExceeded
	ApproximateInvokeCount int    `json:"approximateInvokeCount"`
}

// OnFailureResponseContext describes the last invocation's result.
// FunctionError is "Unhandled" when the handler returned an error, and JSON
// null (present, not omitted) after an invalid or partial batch response, as
// AWS sends it: {"statusCode":200,"executedVersion":"$LATEST","functionError":null}.
type OnFailureResponseContext struct {
	StatusCode      int     `json:"statusCode"`
	ExecutedVersion string  `json:"executedVersion"`
	FunctionError   *string `json:"functionError"`
}

// DDBStreamBatchInfo locates the given-up batch in the stream. Arrival
// times are RFC 3339 UTC whole seconds (from ApproximateCreationDateTime).
type DDBStreamBatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamArn                       string `json:"streamArn"`
}
