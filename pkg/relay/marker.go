package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// UpdateItemAPI is the one DynamoDB method the Marker calls, with the SDK's
// exact signature (*dynamodb.Client satisfies it).
type UpdateItemAPI interface {
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// BatchStatementAPI is the optional DynamoDB method the Marker uses to mark
// published records in batches (PartiQL BatchExecuteStatement), with the
// SDK's exact signature. *dynamodb.Client satisfies it. NewMarker detects it
// with a type assertion on the UpdateItemAPI it is given, so clients and
// fakes that only have UpdateItem keep working (marking then costs one
// UpdateItem per record).
type BatchStatementAPI interface {
	BatchExecuteStatement(ctx context.Context, params *dynamodb.BatchExecuteStatementInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchExecuteStatementOutput, error)
}

// QueueSender is the one SQS method the Marker calls to send a parked record
// to the parked-records DLQ, with the SDK's exact signature (*sqs.Client
// satisfies it).
type QueueSender interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// DefaultMaxMessageBytes is the parked-records queue's MaximumMessageSize
// this package assumes by default, in bytes: 262,144 (256 KiB), the SQS
// default (sqsmsg.DefaultMaxBytes). Source: Amazon SQS Developer Guide,
// "Amazon SQS message quotas".
const DefaultMaxMessageBytes = sqsmsg.DefaultMaxBytes

// MarkerConfig configures a Marker. Zero values take the defaults.
type MarkerConfig struct {
	// Table is the outbox table name. Required.
	Table string
	// ParkedQueueURL is the SQS queue URL of the parked-records DLQ. Required.
	ParkedQueueURL string
	// PublishedRetention is how long a published record lives before its TTL
	// (AttrExpiresAt, epoch seconds) expires it. Default
	// config.DefaultPublishedRetention (7 days).
	PublishedRetention time.Duration
	// Concurrency bounds the UpdateItem/SendMessage calls in flight in
	// MarkAll. Default 8.
	Concurrency int
	// CallTimeout bounds each network call. Default 5 s.
	CallTimeout time.Duration
	// Reserve is the time kept back from the invocation deadline
	// (ctx.Deadline() of Relay.Handle, the Lambda function timeout) for
	// marking, parking and answering: the Relay stops publishing Reserve
	// before the deadline and stops marking AnswerMargin before it; records
	// not done by then are reported in the partial batch response, never
	// acknowledged. Default DefaultReserve(CallTimeout) = 2 × CallTimeout +
	// AnswerMargin (10.5 s with the 5 s default): one BatchExecuteStatement
	// call and its UpdateItem fallback in a row, or one park's SendMessage
	// and UpdateItem in a row. Must exceed AnswerMargin.
	Reserve time.Duration
	// MaxMessageBytes is the parked-records queue's MaximumMessageSize, in
	// bytes, sqsmsg.MinMaxBytes (1,024) to sqsmsg.MaxMaxBytes (1,048,576):
	// a parked message's body plus its message attributes stay within it.
	// A message that would be larger is sent with the key, the reason and
	// what fits, marked "truncated": true (the full record stays in the
	// table, PARKED). Set it to the queue's MaximumMessageSize. Default
	// DefaultMaxMessageBytes (256 KiB).
	MaxMessageBytes int
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives one CloudWatch EMF line per parked record (metric
	// config.MetricParked). Default config.MetricsWriter() (Lambda's log
	// stream in Lambda, nothing elsewhere; config.EnvMetrics overrides);
	// io.Discard turns it off.
	Metrics io.Writer
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

func (c *MarkerConfig) setDefaults() {
	if c.PublishedRetention == 0 {
		c.PublishedRetention = config.DefaultPublishedRetention
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Reserve == 0 {
		c.Reserve = DefaultReserve(c.CallTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = config.MetricsWriter()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error.
func (c MarkerConfig) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("relay: MarkerConfig.Table is required")
	case c.ParkedQueueURL == "":
		return errors.New("relay: MarkerConfig.ParkedQueueURL is required")
	case c.PublishedRetention < time.Second:
		return fmt.Errorf("relay: PublishedRetention %s is below one second", c.PublishedRetention)
	case c.Concurrency < 1:
		return fmt.Errorf("relay: Concurrency %d must be >= 1", c.Concurrency)
	case c.CallTimeout < 0:
		return errors.New("relay: CallTimeout must not be negative")
	case c.Reserve <= AnswerMargin:
		return fmt.Errorf("relay: Reserve %s must exceed AnswerMargin %s (marking needs time before the deadline)", c.Reserve, AnswerMargin)
	case c.MaxMessageBytes < sqsmsg.MinMaxBytes || c.MaxMessageBytes > sqsmsg.MaxMaxBytes:
		return fmt.Errorf("relay: MaxMessageBytes %d is outside SQS's MaximumMessageSize range %d..%d", c.MaxMessageBytes, sqsmsg.MinMaxBytes, sqsmsg.MaxMaxBytes)
	}
	return nil
}

// Marker records the outcome of publishing on outbox records: published
// records leave the pending index and get a TTL; permanently failed records
// are sent to the parked-records DLQ and marked PARKED. It is safe for
// concurrent use.
type Marker struct {
	ddb    UpdateItemAPI
	batch  BatchStatementAPI // nil when ddb has no BatchExecuteStatement
	stmt   string            // the PartiQL UPDATE of a published mark
	queue  QueueSender
	cfg    MarkerConfig
	parked atomic.Int64
	emf    *EMF
	// noBatch is set once BatchExecuteStatement proved unusable (PartiQL
	// unsupported by the server, or not allowed by IAM).
	noBatch atomic.Bool
}

// NewMarker returns a Marker, or an error if cfg does not validate or a
// client is nil. If ddb also implements BatchStatementAPI (as
// *dynamodb.Client does), MarkAll marks published records in batches.
func NewMarker(ddb UpdateItemAPI, queue QueueSender, cfg MarkerConfig) (*Marker, error) {
	if ddb == nil || queue == nil {
		return nil, errors.New("relay: NewMarker: nil DynamoDB or SQS client")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Marker{ddb: ddb, queue: queue, cfg: cfg, emf: NewEMF(cfg.Metrics, cfg.Table), stmt: publishedStatement(cfg.Table)}
	if b, ok := ddb.(BatchStatementAPI); ok {
		m.batch = b
	}
	return m, nil
}

// BatchStatements reports whether MarkAll currently marks published records
// with BatchExecuteStatement: the client supports it and no call has shown
// PartiQL to be unsupported or denied.
func (m *Marker) BatchStatements() bool { return m.batch != nil && !m.noBatch.Load() }

// Config returns the marker's effective configuration.
func (m *Marker) Config() MarkerConfig { return m.cfg }

// Reserve returns MarkerConfig.Reserve: how long before the invocation
// deadline publishing must stop so that marking and the answer fit.
func (m *Marker) Reserve() time.Duration { return m.cfg.Reserve }

// Parked returns how many records this Marker has parked since it was built
// (the process-local counter behind the config.MetricParked metric).
func (m *Marker) Parked() int64 { return m.parked.Load() }

// Mark is one publishing outcome to record on an outbox record.
type Mark struct {
	// Key is the outbox record's primary key.
	Key outbox.Key
	// Envelope is the decoded envelope; zero for a poison record.
	Envelope outbox.Envelope
	// Image is the raw item image (DynamoDB JSON) sent to the DLQ when the
	// record could not be decoded; optional otherwise.
	Image json.RawMessage
	// Result decides the action: Published → MarkPublished, PermanentFailure
	// → Park, RetryableFailure → nothing (the record stays pending).
	Result Result
}

// MarkAll applies every mark with at most Concurrency calls in flight and
// returns one error per mark, in order (nil when done or nothing to do).
// It respects ctx's deadline: no call starts once ctx is done and calls in
// flight are cut; the marks left get an error wrapping ctx.Err(), so the
// caller reports them for retry (Relay.Handle passes the invocation
// deadline less AnswerMargin).
//
// Permanent failures are parked one by one (Park). Published marks are
// written with PartiQL BatchExecuteStatement when the client supports it
// (see BatchStatementAPI), in calls of at most MaxStatementsPerBatch
// statements, each statement
//
//	UPDATE "<table>" SET "status"=?, "published_at"=?, "expires_at"=?, "bus_event_id"=?
//	REMOVE "pending_shard" WHERE "pk"=? AND "sk"=? AND "status"<>?
//
// with the same values as MarkPublished. A chunk of one mark uses
// MarkPublished (UpdateItem): the same single call. Trade-offs:
//
//   - Not atomic: the call returns HTTP 200 with one result per statement,
//     in request order. A statement with Error.Code ConditionalCheckFailed
//     targeted a record that no longer exists (PartiQL UPDATE requires the
//     item to exist) or is already PUBLISHED (the status predicate): it is
//     logged and counts as done, as with UpdateItem.
//     Retryable codes (ThrottlingError, ProvisionedThroughputExceeded,
//     TransactionConflict, InternalServerError, RequestLimitExceeded) are
//     retried with MarkPublished (UpdateItem, with the SDK's retries);
//     AccessDenied too, and it turns batching off. Any other code is a
//     *StatementError for that mark.
//   - If the whole call fails, the chunk is marked with MarkPublished. If
//     the error says PartiQL is unsupported or not allowed
//     (ValidationException, UnknownOperationException,
//     AccessDeniedException: the role needs dynamodb:PartiQLUpdate on the
//     table), batching is turned off for the Marker's lifetime with one log
//     line, so later batches do not pay a failing call first.
//   - Cost: each statement is a write billed like the UpdateItem it
//     replaces (write capacity by item size, plus the pending index); what
//     batching saves is requests: 4 calls instead of 100 for a stream batch
//     of 100 records, so less Lambda time and fewer throttled requests.
//     AWS does not state PartiQL pricing separately (the BatchExecuteStatement API reference gives no price).
//   - The WHERE clause pins the key and refuses a PUBLISHED record, like
//     the UpdateItem path's condition: a record is marked published once,
//     and a later publish of the same event (at-least-once) never
//     overwrites its bus_event_id, published_at or TTL.
//
// With tracing on, each published or parked mark gets a span ("outbox mark
// published", "outbox park") under its publish span (Result.Trace) with
// the outcome (published, parked, failed).
//
// Source: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchExecuteStatement.html
func (m *Marker) MarkAll(ctx context.Context, marks []Mark) []error {
	errs := make([]error, len(marks))
	defer traceMarks(ctx, time.Now(), marks, errs)
	sem := make(chan struct{}, m.cfg.Concurrency)
	var wg sync.WaitGroup
	run := func(fn func()) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn()
		}()
	}
	var published []int
	for i, mk := range marks {
		switch mk.Result.Status {
		case Published:
			published = append(published, i)
		case PermanentFailure:
			run(func() { errs[i] = m.Park(ctx, mk) })
		}
	}
	if m.BatchStatements() && len(published) > 1 {
		var mu sync.Mutex
		var fallback []int
		for start := 0; start < len(published); start += MaxStatementsPerBatch {
			chunk := published[start:min(start+MaxStatementsPerBatch, len(published))]
			if len(chunk) == 1 {
				mu.Lock()
				fallback = append(fallback, chunk...)
				mu.Unlock()
				continue
			}
			run(func() {
				fb := m.markBatch(ctx, marks, chunk, errs)
				mu.Lock()
				fallback = append(fallback, fb...)
				mu.Unlock()
			})
		}
		wg.Wait()
		published = fallback
	}
	for _, i := range published {
		mk := marks[i]
		run(func() { errs[i] = m.MarkPublished(ctx, mk.Key, mk.Envelope, mk.Result.EventID) })
	}
	wg.Wait()
	return errs
}

// MarkPublished records that EventBridge accepted the record's event:
// UpdateItem on key with condition attribute_exists(pk) AND status <>
// PUBLISHED, SET status =
// PUBLISHED, published_at (RFC 3339), expires_at (now + PublishedRetention,
// epoch seconds: the TTL) and bus_event_id, REMOVE pending_shard (the record
// leaves the sparse pending index). A record already PUBLISHED (another
// publish of the same event, e.g. the relay and the reconciler, or the
// reconciler working from a stale pending-index copy) keeps the details of
// the publish that marked it first; that, and a record that no longer
// exists, fail the condition (ConditionalCheckFailedException), are logged
// and count as done (nil). Other errors are returned wrapped.
func (m *Marker) MarkPublished(ctx context.Context, key outbox.Key, env outbox.Envelope, busEventID string) error {
	if err := m.markPublished(ctx, key, env, busEventID); err != nil {
		if isConditionFailed(err) {
			m.log(ctx, slog.LevelWarn, "relay: record to mark published is already published or no longer exists; left as is", env, key, "bus_event_id", busEventID)
			return nil
		}
		return fmt.Errorf("mark published %s: %w", env.EventID, err)
	}
	m.log(ctx, slog.LevelInfo, "relay: published", env, key, "bus_event_id", busEventID)
	return nil
}

// MarkPublishedAtGeneration is MarkPublished for a record published by
// another Region (a takeover survivor's PUBLISHED mark, adopted by the
// record's origin): the same update, also conditioned on the record's
// outbox.AttrRedriveGeneration still being generation (GenerationCondition),
// so a mark never covers a record the origin redrove or requeued since it
// was read (a stale pending index copy). It returns nil when the record
// was marked or was already PUBLISHED, an error wrapping
// ErrRedriveConflict when it exists, is not PUBLISHED, and its generation
// is no longer generation (nothing is written: publish it), or the store's
// error.
func (m *Marker) MarkPublishedAtGeneration(ctx context.Context, key outbox.Key, env outbox.Envelope, busEventID string, generation int64) error {
	err := m.markPublished(ctx, key, env, busEventID, GenerationCondition(generation))
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) == 0 || attrS(ccf.Item, outbox.AttrStatus) == outbox.StatusPublished {
			m.log(ctx, slog.LevelWarn, "relay: record to mark published is already published or no longer exists; left as is", env, key, "bus_event_id", busEventID)
			return nil
		}
		return fmt.Errorf("mark published %s at generation %d: %w", env.EventID, generation, ErrRedriveConflict)
	}
	if err != nil {
		return fmt.Errorf("mark published %s: %w", env.EventID, err)
	}
	m.log(ctx, slog.LevelInfo, "relay: published", env, key, "bus_event_id", busEventID)
	return nil
}

// markPublished sends MarkPublished's update, with its condition and any
// extra ones; a failed condition returns the stored item (ALL_OLD) in the
// ConditionalCheckFailedException.
func (m *Marker) markPublished(ctx context.Context, key outbox.Key, env outbox.Envelope, busEventID string, extra ...expression.ConditionBuilder) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("no time left: %w", err)
	}
	now := m.cfg.Now().UTC()
	upd := expression.
		Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusPublished)).
		Set(expression.Name(outbox.AttrPublishedAt), expression.Value(now.Format(time.RFC3339Nano))).
		Set(expression.Name(outbox.AttrExpiresAt), expression.Value(now.Add(m.cfg.PublishedRetention).Unix())).
		Set(expression.Name(outbox.AttrBusEventID), expression.Value(busEventID)).
		Remove(expression.Name(outbox.AttrPendingShard))
	notPublished := expression.Name(outbox.AttrStatus).NotEqual(expression.Value(outbox.StatusPublished))
	return m.update(ctx, key, upd, append([]expression.ConditionBuilder{notPublished}, extra...)...)
}

func (m *Marker) update(ctx context.Context, key outbox.Key, upd expression.UpdateBuilder, extra ...expression.ConditionBuilder) error {
	cond := expression.AttributeExists(expression.Name(outbox.AttrPK))
	for _, c := range extra {
		cond = cond.And(c)
	}
	expr, err := expression.NewBuilder().
		WithUpdate(upd).
		WithCondition(cond).
		Build()
	if err != nil {
		return fmt.Errorf("build expression: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	_, err = m.ddb.UpdateItem(callCtx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(m.cfg.Table),
		Key:                                 key.AttributeValues(),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: ddbtypes.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return err
}

func (m *Marker) log(ctx context.Context, level slog.Level, msg string, env outbox.Envelope, key outbox.Key, args ...any) {
	attrs := append([]any{
		"event_id", env.EventID,
		"aggregate_id", env.AggregateID,
		"sequence", env.Sequence,
		"pk", key.PK,
		"sk", key.SK,
	}, args...)
	m.cfg.Logger.Log(ctx, level, msg, attrs...)
}

func isConditionFailed(err error) bool {
	var ccf *ddbtypes.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func nonEmpty(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
