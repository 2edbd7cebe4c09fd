package localrt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

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

// StreamPoller is a local stand-in for a Lambda event source mapping on a
// DynamoDB stream (https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html).
// It discovers shards with DescribeStream, reads a parent shard to its end
// before its children, reads each shard's records strictly in order with one
// batch in flight per shard (ParallelizationFactor 1), filters, batches,
// builds the exact JSON Lambda sends, decodes it into events.DynamoDBEvent,
// invokes the handler, interprets partial batch responses, retries, bisects,
// sends metadata of given-up batches to the on-failure destination and
// checkpoints only after success. Delivery is at-least-once.
type StreamPoller struct {
	cfg     StreamPollerConfig
	handler StreamHandler
	filters []*Pattern
	log     *slog.Logger

	running atomic.Bool

	mu          sync.Mutex
	streamARN   string
	initialized bool
	shards      map[string]*shardState
	stats       StreamPollerStats
}

type shardState struct {
	id, parent   string
	started      bool
	done         bool
	initial      StartingPosition
	checkpoint   string
	pollsStarted int64
	lastEmpty    int64
}

// item is one stream record waiting in a shard's buffer.
type item struct {
	seq     string
	raw     json.RawMessage
	matched bool
	arrival time.Time
	due     time.Time // StreamPollerConfig.DeliverAt; zero: deliverable now
}

// NewStreamPoller validates cfg (after defaults) and returns a poller that
// invokes h. It returns an error for an invalid configuration or filter
// pattern. Start it with Run.
func NewStreamPoller(cfg StreamPollerConfig, h StreamHandler) (*StreamPoller, error) {
	if h == nil {
		return nil, errors.New("localrt: stream handler is nil")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &StreamPoller{cfg: cfg, handler: h, log: cfg.Logger.With("component", "stream-poller"), shards: map[string]*shardState{}}
	if !cfg.DisableFilter {
		for i, f := range cfg.FilterPatterns {
			c, err := CompilePatternFor(f, LambdaFilter)
			if err != nil {
				return nil, fmt.Errorf("filter %d: %w", i, err)
			}
			p.filters = append(p.filters, c)
		}
	}
	for sh, seq := range cfg.Checkpoints {
		p.shards[sh] = &shardState{id: sh, checkpoint: seq}
	}
	return p, nil
}

// StreamARN returns the stream being read, empty until Run resolved it.
func (p *StreamPoller) StreamARN() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streamARN
}

// FunctionARN returns the local ARN of the handler, as put in on-failure
// records: arn:aws:lambda:<region>:<account>:function:<FunctionName>.
func (p *StreamPoller) FunctionARN() string {
	return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", p.cfg.Region, p.cfg.Account, p.cfg.FunctionName)
}

// Checkpoint returns shard id → last processed sequence number (delivered
// successfully, given up, or filtered out). Pass it as
// StreamPollerConfig.Checkpoints to resume after a restart.
func (p *StreamPoller) Checkpoint() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkpointsLocked()
}

func (p *StreamPoller) checkpointsLocked() map[string]string {
	m := map[string]string{}
	for id, s := range p.shards {
		if s.checkpoint != "" {
			m[id] = s.checkpoint
		}
	}
	return m
}

// Stats returns a snapshot of the counters and checkpoints.
func (p *StreamPoller) Stats() StreamPollerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Checkpoints = p.checkpointsLocked()
	return s
}

// CaughtUp reports whether, right now, every known shard is finished or its
// latest GetRecords returned nothing with no record buffered or in flight.
// See WaitCaughtUp for a race-free wait after writing.
func (p *StreamPoller) CaughtUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized {
		return false
	}
	for _, s := range p.shards {
		if s.done {
			continue
		}
		if !s.started || s.pollsStarted == 0 || s.lastEmpty != s.pollsStarted {
			return false
		}
	}
	return true
}

// WaitCaughtUp blocks until every shard is finished or has completed a
// GetRecords call that started after WaitCaughtUp was called, returned no
// records and left nothing buffered or in flight: everything written before
// the call has been delivered, filtered or given up. It returns ctx.Err() if
// ctx ends first. Run must be running (or about to be).
func (p *StreamPoller) WaitCaughtUp(ctx context.Context) error {
	var snap map[string]int64
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		p.mu.Lock()
		if p.initialized {
			if snap == nil {
				snap = map[string]int64{}
				for id, s := range p.shards {
					snap[id] = s.pollsStarted
				}
			}
			ok := true
			for id, s := range p.shards {
				if s.done {
					continue
				}
				if !s.started || s.lastEmpty <= snap[id] || s.lastEmpty != s.pollsStarted {
					ok = false
					break
				}
			}
			if ok {
				p.mu.Unlock()
				return nil
			}
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Run polls the stream and invokes the handler until ctx ends, then waits for
// in-flight invocations to finish and returns nil. It returns an error when
// the stream ARN cannot be resolved or Run is already running. Transient
// Streams errors are logged and retried.
func (p *StreamPoller) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("localrt: stream poller already running")
	}
	defer p.running.Store(false)
	arn, err := p.resolveARN(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.streamARN = arn
	p.mu.Unlock()
	p.log.Info("stream poller started", "stream_arn", arn, "batch_size", p.cfg.BatchSize,
		"starting_position", p.cfg.StartingPosition, "max_retry_attempts", p.cfg.MaximumRetryAttempts)

	var wg sync.WaitGroup
	wake := make(chan struct{}, 1)
	first := true
	failures := 0
	for {
		shards, err := p.describe(ctx, arn)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			p.log.Warn("describe stream failed", "stream_arn", arn, "error", err)
		} else {
			failures = 0
			p.startShards(ctx, shards, first, &wg, wake)
			first = false
		}
		wait := p.cfg.ShardDiscoveryInterval
		if failures > 0 {
			wait = p.backoff(failures)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			wg.Wait()
			p.log.Info("stream poller stopped", "stream_arn", arn)
			return nil
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
	wg.Wait()
	return nil
}

func (p *StreamPoller) resolveARN(ctx context.Context) (string, error) {
	if p.cfg.StreamARN != "" {
		return p.cfg.StreamARN, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := p.cfg.Tables.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: aws.String(p.cfg.TableName)})
	if err != nil {
		return "", fmt.Errorf("localrt: describe table %s: %w", p.cfg.TableName, err)
	}
	if out.Table == nil || aws.ToString(out.Table.LatestStreamArn) == "" {
		return "", fmt.Errorf("localrt: table %s has no stream", p.cfg.TableName)
	}
	return aws.ToString(out.Table.LatestStreamArn), nil
}

// describe lists every shard of the stream, following LastEvaluatedShardId.
func (p *StreamPoller) describe(ctx context.Context, arn string) ([]streamtypes.Shard, error) {
	var shards []streamtypes.Shard
	var start *string
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := p.cfg.Streams.DescribeStream(cctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn), ExclusiveStartShardId: start})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("describe stream %s: %w", arn, err)
		}
		if out.StreamDescription == nil {
			return shards, nil
		}
		shards = append(shards, out.StreamDescription.Shards...)
		start = out.StreamDescription.LastEvaluatedShardId
		if aws.ToString(start) == "" {
			return shards, nil
		}
	}
}

// startShards records newly seen shards and starts a worker for every shard
// whose parent is finished (or no longer listed).
func (p *StreamPoller) startShards(ctx context.Context, shards []streamtypes.Shard, first bool, wg *sync.WaitGroup, wake chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	listed := map[string]bool{}
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		listed[id] = true
		s, ok := p.shards[id]
		if !ok {
			s = &shardState{id: id}
			p.shards[id] = s
		}
		s.parent = aws.ToString(sh.ParentShardId)
	}
	ids := make([]string, 0, len(p.shards))
	for id := range p.shards {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := p.shards[id]
		if s.started || s.done || !listed[id] {
			continue
		}
		if par, ok := p.shards[s.parent]; ok && s.parent != "" && listed[s.parent] && !par.done {
			continue
		}
		s.initial = StartingPositionTrimHorizon
		// EndingSequenceNumber is not trusted to mean "closed" (Dynoxide
		// reports it on its open shard); a closed shard read at LATEST just
		// ends at once, and its children are then read from TRIM_HORIZON.
		if first && p.cfg.StartingPosition == StartingPositionLatest && s.checkpoint == "" {
			s.initial = StartingPositionLatest
		}
		s.started = true
		wg.Add(1)
		go func(s *shardState) {
			defer wg.Done()
			p.runShard(ctx, s)
			select {
			case wake <- struct{}{}:
			default:
			}
		}(s)
	}
	p.initialized = true
}

// runShard reads one shard to its end (or until ctx ends).
func (p *StreamPoller) runShard(ctx context.Context, s *shardState) {
	log := p.log.With("shard_id", s.id)
	var (
		iter        string
		needIter    = true
		forceTrim   = false
		ended       = false
		buf         []*item
		windowStart time.Time
		errCount    = 0
	)
	for ctx.Err() == nil {
		if needIter {
			it, err := p.acquireIterator(ctx, s, forceTrim)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var trimmed *streamtypes.TrimmedDataAccessException
				if errors.As(err, &trimmed) {
					p.count(func(st *StreamPollerStats) { st.TrimmedDataErrors++ })
					log.Warn("checkpoint is before the trim horizon; records were lost, restarting at TRIM_HORIZON", "checkpoint", p.checkpointOf(s))
					forceTrim = true
					continue
				}
				errCount++
				log.Warn("get shard iterator failed", "error", err)
				if !sleepCtx(ctx, p.backoff(errCount)) {
					return
				}
				continue
			}
			iter, needIter, forceTrim, errCount = it, false, false, 0
			ended = iter == ""
		}

		polledEmpty, polled := false, false
		if !ended && matchedCount(buf) < p.cfg.BatchSize && payloadSize(buf) < MaxInvokePayloadBytes {
			polled = true
			pollNo := p.startPoll(s)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := p.cfg.Streams.GetRecords(cctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(getRecordsLimit)})
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var expired *streamtypes.ExpiredIteratorException
				var trimmed *streamtypes.TrimmedDataAccessException
				switch {
				case errors.As(err, &expired):
					p.count(func(st *StreamPollerStats) { st.ExpiredIterators++ })
					log.Info("shard iterator expired; re-acquiring after the checkpoint", "checkpoint", p.checkpointOf(s))
				case errors.As(err, &trimmed):
					p.count(func(st *StreamPollerStats) { st.TrimmedDataErrors++ })
					log.Warn("reading before the trim horizon; records were lost, restarting at TRIM_HORIZON", "checkpoint", p.checkpointOf(s))
					forceTrim = true
				default:
					errCount++
					log.Warn("get records failed", "error", err)
					if !sleepCtx(ctx, p.backoff(errCount)) {
						return
					}
					continue // the iterator is still valid
				}
				// Re-read from the checkpoint: drop what was buffered.
				buf, windowStart, needIter = nil, time.Time{}, true
				continue
			}
			errCount = 0
			for _, r := range out.Records {
				it, err := p.newItem(r)
				if err != nil {
					log.Error("cannot build the Lambda record; it is treated as filtered out", "error", err)
				}
				buf = append(buf, it)
			}
			if out.NextShardIterator == nil {
				ended = true
			} else {
				iter = *out.NextShardIterator
			}
			polledEmpty = len(out.Records) == 0
			if len(out.Records) > 0 && windowStart.IsZero() {
				windowStart = time.Now()
			}
			if polledEmpty && len(buf) == 0 {
				p.markEmpty(s, pollNo)
			}
		}

		ready := buf[:duePrefix(buf, time.Now())]
		if len(ready) > 0 && (ended || p.cfg.MaxBatchingWindow <= 0 ||
			matchedCount(ready) >= p.cfg.BatchSize || payloadSize(ready) >= MaxInvokePayloadBytes ||
			time.Since(windowStart) >= p.cfg.MaxBatchingWindow) {
			n := p.takeBatch(ready)
			if err := p.deliver(ctx, s, buf[:n]); err != nil {
				return
			}
			buf = buf[n:]
			windowStart = time.Time{}
			if len(buf) > 0 {
				windowStart = time.Now()
			}
			continue
		}
		if ended && len(buf) == 0 {
			p.mu.Lock()
			s.done = true
			p.stats.ShardsFinished++
			p.mu.Unlock()
			log.Info("shard finished")
			return
		}
		held := len(ready) < len(buf)
		if polledEmpty || (held && !polled) {
			wait := p.cfg.PollInterval
			if len(buf) > 0 {
				// (a window already run out while records are held: wait
				// for the first due record below, not a negative time)
				if rem := p.cfg.MaxBatchingWindow - time.Since(windowStart); rem < wait && (rem > 0 || !held) {
					wait = rem
				}
			}
			if held {
				if rem := time.Until(buf[len(ready)].due); rem < wait {
					wait = rem
				}
			}
			if !sleepCtx(ctx, wait) {
				return
			}
		}
	}
}

func (p *StreamPoller) acquireIterator(ctx context.Context, s *shardState, forceTrim bool) (string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(p.StreamARN()), ShardId: aws.String(s.id)}
	p.mu.Lock()
	cp, initial := s.checkpoint, s.initial
	p.mu.Unlock()
	switch {
	case forceTrim:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeTrimHorizon
	case cp != "":
		in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(cp)
	case initial == StartingPositionLatest:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeLatest
	default:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeTrimHorizon
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := p.cfg.Streams.GetShardIterator(cctx, in)
	if err != nil {
		return "", fmt.Errorf("get shard iterator %s %s: %w", s.id, in.ShardIteratorType, err)
	}
	return aws.ToString(out.ShardIterator), nil
}

func (p *StreamPoller) newItem(r streamtypes.Record) (*item, error) {
	it := &item{}
	if r.Dynamodb != nil {
		it.seq = aws.ToString(r.Dynamodb.SequenceNumber)
		if t := r.Dynamodb.ApproximateCreationDateTime; t != nil {
			it.arrival = t.UTC().Truncate(time.Second)
		}
	}
	raw, err := StreamRecordJSON(r, p.StreamARN(), p.cfg.Region)
	if err != nil {
		return it, fmt.Errorf("record %s: %w", it.seq, err)
	}
	it.raw = raw
	if p.cfg.DeliverAt != nil {
		it.due = p.cfg.DeliverAt(raw)
	}
	if len(p.filters) == 0 {
		it.matched = true
		return it, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return it, err
	}
	m, _ := v.(map[string]any)
	it.matched = MatchAny(p.filters, m)
	return it, nil
}

func (p *StreamPoller) startPoll(s *shardState) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.pollsStarted++
	return s.pollsStarted
}

func (p *StreamPoller) markEmpty(s *shardState, pollNo int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pollNo > s.lastEmpty {
		s.lastEmpty = pollNo
	}
}

func (p *StreamPoller) checkpointOf(s *shardState) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.checkpoint
}

func (p *StreamPoller) count(f func(*StreamPollerStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// duePrefix is the length of buf's prefix whose records are due at now
// (StreamPollerConfig.DeliverAt): all of buf without a hold.
func duePrefix(buf []*item, now time.Time) int {
	for i, it := range buf {
		if !it.due.IsZero() && it.due.After(now) {
			return i
		}
	}
	return len(buf)
}

func matchedCount(buf []*item) int {
	n := 0
	for _, it := range buf {
		if it.matched {
			n++
		}
	}
	return n
}

func payloadSize(buf []*item) int {
	n := len(`{"Records":[]}`)
	for _, it := range buf {
		if it.matched {
			n += len(it.raw) + 1
		}
	}
	return n
}

// takeBatch returns the length of the buffer prefix forming the next batch:
// at most BatchSize matched records and MaxInvokePayloadBytes of JSON, plus
// the filtered-out records among them. It is at least 1.
func (p *StreamPoller) takeBatch(buf []*item) int {
	matched, size := 0, len(`{"Records":[]}`)
	for i, it := range buf {
		if it.matched {
			if matched == p.cfg.BatchSize || (matched > 0 && size+len(it.raw)+1 > MaxInvokePayloadBytes) {
				return i
			}
			matched++
			size += len(it.raw) + 1
		}
	}
	return len(buf)
}

// commit checkpoints the last item of done and counts filtered ones.
func (p *StreamPoller) commit(s *shardState, done []*item) {
	if len(done) == 0 {
		return
	}
	filtered := 0
	for _, it := range done {
		if !it.matched {
			filtered++
		}
	}
	last := done[len(done)-1].seq
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.RecordsFiltered += int64(filtered)
	if last != "" && (s.checkpoint == "" || CompareSequenceNumbers(last, s.checkpoint) > 0) {
		s.checkpoint = last
	}
}

func matchedItems(items []*item) []*item {
	var out []*item
	for _, it := range items {
		if it.matched {
			out = append(out, it)
		}
	}
	return out
}

// outcome of one invocation.
type outcomeKind int

const (
	outcomeSuccess outcomeKind = iota
	outcomePartial
	outcomeInvalid
	outcomeFunctionError
)

type outcome struct {
	kind   outcomeKind
	lowest string // outcomePartial: lowest reported sequence number
	err    error
}

// deliver processes a buffer prefix until every item is committed; it
// returns a non-nil error only when ctx ended (nothing more is committed).
func (p *StreamPoller) deliver(ctx context.Context, s *shardState, items []*item) error {
	return p.deliverRange(ctx, s, items, 0)
}

func (p *StreamPoller) deliverRange(ctx context.Context, s *shardState, items []*item, invokeCount int) error {
	log := p.log.With("shard_id", s.id)
	retries := 0
	var last outcome
	for {
		batch := matchedItems(items)
		if len(batch) == 0 {
			p.commit(s, items)
			return nil
		}
		if n := p.expiredPrefix(items); n > 0 {
			// Only the records past MaximumRecordAge are given up; the
			// fresh ones after them are still delivered (AWS: one expired
			// record then 5 fresh ones → an on-failure record of batchSize 1
			// and the 5 reach the function).
			p.giveUp(ctx, s, matchedItems(items[:n]), invokeCount, ConditionRecordAgeExceeded, last)
			p.commit(s, items[:n])
			items = items[n:]
			continue
		}
		invokeCount++
		last = p.invoke(ctx, batch)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch last.kind {
		case outcomeSuccess:
			p.commit(s, items)
			p.count(func(st *StreamPollerStats) { st.Batches++ })
			return nil
		case outcomePartial:
			j := 0
			for j < len(items) && (items[j].seq == "" || CompareSequenceNumbers(items[j].seq, last.lowest) < 0) {
				j++
			}
			p.commit(s, items[:j])
			items = items[j:]
			p.count(func(st *StreamPollerStats) { st.PartialFailures++ })
			log.Info("partial batch failure; resuming at the lowest reported sequence number", "sequence_number", last.lowest, "records_left", len(matchedItems(items)))
		case outcomeInvalid:
			p.count(func(st *StreamPollerStats) { st.InvalidResponses++ })
			log.Warn("whole batch failed: invalid batchItemFailures", "error", last.err, "first_sequence_number", batch[0].seq)
		case outcomeFunctionError:
			p.count(func(st *StreamPollerStats) { st.FunctionErrors++ })
			log.Warn("function error; whole batch failed", "error", last.err, "first_sequence_number", batch[0].seq, "batch_size", len(batch))
			if p.cfg.BisectBatchOnFunctionError && len(batch) > 1 {
				mid := 0
				for mid < len(items) && items[mid] != batch[len(batch)/2] {
					mid++
				}
				p.count(func(st *StreamPollerStats) { st.Bisections++ })
				if err := p.deliverRange(ctx, s, items[:mid], invokeCount); err != nil {
					return err
				}
				return p.deliverRange(ctx, s, items[mid:], invokeCount)
			}
		}
		if p.cfg.MaximumRetryAttempts == NoRetries || (p.cfg.MaximumRetryAttempts != RetryForever && retries >= p.cfg.MaximumRetryAttempts) {
			p.giveUp(ctx, s, matchedItems(items), invokeCount, ConditionRetryAttemptsExhausted, last)
			p.commit(s, items)
			p.count(func(st *StreamPollerStats) { st.Batches++ })
			return nil
		}
		retries++
		p.count(func(st *StreamPollerStats) { st.Retries++ })
		if !sleepCtx(ctx, p.backoff(retries)) {
			return ctx.Err()
		}
	}
}

// expiredPrefix returns how many leading items are older than
// MaximumRecordAge (stream records are in order, so the expired ones are a
// prefix); 0 when the age is unlimited.
func (p *StreamPoller) expiredPrefix(items []*item) int {
	if p.cfg.MaximumRecordAge <= 0 {
		return 0
	}
	n := 0
	for n < len(items) && !items[n].arrival.IsZero() && time.Since(items[n].arrival) > p.cfg.MaximumRecordAge {
		n++
	}
	return n
}

// invoke builds the Lambda payload for batch, decodes it into
// events.DynamoDBEvent, calls the handler and interprets its response.
func (p *StreamPoller) invoke(ctx context.Context, batch []*item) outcome {
	var payload bytes.Buffer
	payload.WriteString(`{"Records":[`)
	for i, it := range batch {
		if i > 0 {
			payload.WriteByte(',')
		}
		payload.Write(it.raw)
	}
	payload.WriteString(`]}`)
	p.count(func(st *StreamPollerStats) {
		st.Invocations++
		st.RecordsDelivered += int64(len(batch))
	})
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(payload.Bytes(), &ev); err != nil {
		return outcome{kind: outcomeFunctionError, err: fmt.Errorf("decode DynamoDB event: %w", err)}
	}
	ictx, cancel := context.WithTimeout(ctx, p.cfg.FunctionTimeout)
	defer cancel()
	resp, err := p.call(ictx, ev)
	if err == nil && errors.Is(ictx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("Task timed out after %.2f seconds", p.cfg.FunctionTimeout.Seconds()) //nolint:staticcheck // ST1005: Lambda's own message, word for word
	}
	if err != nil {
		return outcome{kind: outcomeFunctionError, err: err}
	}
	if !*p.cfg.ReportBatchItemFailures {
		return outcome{kind: outcomeSuccess}
	}
	// Lambda sees the serialized response.
	b, err := json.Marshal(resp)
	if err != nil {
		return outcome{kind: outcomeFunctionError, err: fmt.Errorf("encode response: %w", err)}
	}
	var r struct {
		BatchItemFailures []struct {
			ItemIdentifier *string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return outcome{kind: outcomeInvalid, err: err}
	}
	if len(r.BatchItemFailures) == 0 {
		return outcome{kind: outcomeSuccess}
	}
	inBatch := make(map[string]bool, len(batch))
	for _, it := range batch {
		inBatch[it.seq] = true
	}
	lowest := ""
	for _, f := range r.BatchItemFailures {
		id := aws.ToString(f.ItemIdentifier)
		if id == "" {
			return outcome{kind: outcomeInvalid, err: errors.New("empty or null itemIdentifier")}
		}
		if !inBatch[id] {
			return outcome{kind: outcomeInvalid, err: fmt.Errorf("itemIdentifier %q is not a sequence number of this batch", id)}
		}
		if lowest == "" || CompareSequenceNumbers(id, lowest) < 0 {
			lowest = id
		}
	}
	return outcome{kind: outcomePartial, lowest: lowest}
}

// call invokes the handler, turning a panic into a function error.
func (p *StreamPoller) call(ctx context.Context, ev events.DynamoDBEvent) (resp events.DynamoDBEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return p.handler(ctx, ev)
}

// giveUp sends the metadata of batch to the on-failure destination.
func (p *StreamPoller) giveUp(ctx context.Context, s *shardState, batch []*item, invokeCount int, condition string, last outcome) {
	if len(batch) == 0 {
		return
	}
	rec := OnFailureRecord{
		RequestContext: OnFailureRequestContext{
			RequestID:              uuid.NewString(),
			FunctionArn:            p.FunctionARN(),
			Condition:              condition,
			ApproximateInvokeCount: invokeCount,
		},
		Version:   "1.0",
		Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		DDBStreamBatchInfo: DDBStreamBatchInfo{
			ShardID:                         s.id,
			StartSequenceNumber:             batch[0].seq,
			EndSequenceNumber:               batch[len(batch)-1].seq,
			ApproximateArrivalOfFirstRecord: formatArrival(batch[0].arrival),
			ApproximateArrivalOfLastRecord:  formatArrival(batch[len(batch)-1].arrival),
			BatchSize:                       len(batch),
			StreamArn:                       p.StreamARN(),
		},
	}
	switch {
	case condition == ConditionRecordAgeExceeded:
		rec.RequestContext.ApproximateInvokeCount = max(invokeCount, 1)
	case last.kind == outcomeFunctionError:
		rec.ResponseContext = &OnFailureResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST", FunctionError: aws.String("Unhandled")}
	default:
		rec.ResponseContext = &OnFailureResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST"}
	}
	body, _ := json.Marshal(rec)
	p.count(func(st *StreamPollerStats) { st.RecordsDiscarded += int64(len(batch)) })
	log := p.log.With("shard_id", s.id, "start_sequence_number", rec.DDBStreamBatchInfo.StartSequenceNumber,
		"end_sequence_number", rec.DDBStreamBatchInfo.EndSequenceNumber, "batch_size", len(batch), "condition", condition)
	if p.cfg.OnFailure == nil {
		log.Error("batch given up and no on-failure destination is configured", "on_failure_record", string(body))
		return
	}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := p.cfg.OnFailure.SendMessage(cctx, &sqs.SendMessageInput{QueueUrl: aws.String(p.cfg.OnFailureQueueURL), MessageBody: aws.String(string(body))})
		cancel()
		if err == nil {
			p.count(func(st *StreamPollerStats) { st.FailuresSentToDestination++ })
			log.Warn("batch given up; metadata sent to the on-failure destination")
			return
		}
		p.count(func(st *StreamPollerStats) { st.DestinationErrors++ })
		if attempt == 3 || ctx.Err() != nil {
			log.Error("batch given up and the on-failure destination refused it", "error", err, "on_failure_record", string(body))
			return
		}
		if !sleepCtx(ctx, p.backoff(attempt)) {
			return
		}
	}
}

func formatArrival(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// backoff returns the wait before retry n (1-based): exponential from
// RetryBaseDelay, capped at RetryMaxDelay, with equal jitter.
func (p *StreamPoller) backoff(n int) time.Duration {
	return expBackoff(p.cfg.RetryBaseDelay, p.cfg.RetryMaxDelay, n)
}

func expBackoff(base, maxDelay time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	if d > maxDelay {
		d = maxDelay
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
