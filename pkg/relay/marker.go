package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

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
	// config.MetricParked). Default os.Stdout; io.Discard turns it off.
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
		c.Metrics = os.Stdout
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

// MaxStatementsPerBatch is the BatchExecuteStatement limit on statements
// per call. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchExecuteStatement.html
const MaxStatementsPerBatch = 25

// StatementError is the error MarkAll returns for a published mark whose
// BatchExecuteStatement statement failed with a code that is neither
// ConditionalCheckFailed nor retryable (e.g. ValidationError,
// ItemCollectionSizeLimitExceeded, ResourceNotFound). The record stays
// pending.
type StatementError struct {
	// Code and Message are the statement's BatchStatementError.
	Code    string
	Message string
}

// Error returns "BatchExecuteStatement statement failed: <code>: <message>".
func (e *StatementError) Error() string {
	return fmt.Sprintf("BatchExecuteStatement statement failed: %s: %s", e.Code, e.Message)
}

// retryableStatementCodes are the BatchStatementError codes retried with
// UpdateItem. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchStatementError.html
var retryableStatementCodes = map[ddbtypes.BatchStatementErrorCodeEnum]bool{
	ddbtypes.BatchStatementErrorCodeEnumThrottlingError:               true,
	ddbtypes.BatchStatementErrorCodeEnumProvisionedThroughputExceeded: true,
	ddbtypes.BatchStatementErrorCodeEnumTransactionConflict:           true,
	ddbtypes.BatchStatementErrorCodeEnumInternalServerError:           true,
	ddbtypes.BatchStatementErrorCodeEnumRequestLimitExceeded:          true,
}

// publishedStatement returns the PartiQL UPDATE of a published mark.
// Parameters, in order: status, published_at, expires_at, bus_event_id, pk,
// sk, and the status it must not have (PUBLISHED). The status predicate in
// the WHERE clause acts as a condition: a record already PUBLISHED fails the
// statement with ConditionalCheckFailed and keeps its details.
func publishedStatement(table string) string {
	return fmt.Sprintf("UPDATE %s SET %s=?, %s=?, %s=?, %s=? REMOVE %s WHERE %s=? AND %s=? AND %s<>?",
		quoteIdent(table), quoteIdent(outbox.AttrStatus), quoteIdent(outbox.AttrPublishedAt),
		quoteIdent(outbox.AttrExpiresAt), quoteIdent(outbox.AttrBusEventID), quoteIdent(outbox.AttrPendingShard),
		quoteIdent(outbox.AttrPK), quoteIdent(outbox.AttrSK), quoteIdent(outbox.AttrStatus))
}

// quoteIdent quotes a PartiQL identifier (double quotes, inner quotes doubled).
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// markBatch marks the published marks at idx with one BatchExecuteStatement
// call, sets errs for marks that failed for good, and returns the indexes
// to retry with UpdateItem. Only this goroutine writes errs[idx...].
func (m *Marker) markBatch(ctx context.Context, marks []Mark, idx []int, errs []error) (fallback []int) {
	if ctx.Err() != nil {
		return idx // MarkPublished reports the context error per mark
	}
	now := m.cfg.Now().UTC()
	publishedAt := &ddbtypes.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)}
	expiresAt := &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(m.cfg.PublishedRetention).Unix(), 10)}
	status := &ddbtypes.AttributeValueMemberS{Value: outbox.StatusPublished}
	in := &dynamodb.BatchExecuteStatementInput{Statements: make([]ddbtypes.BatchStatementRequest, len(idx))}
	for j, i := range idx {
		mk := marks[i]
		in.Statements[j] = ddbtypes.BatchStatementRequest{
			Statement: aws.String(m.stmt),
			Parameters: []ddbtypes.AttributeValue{
				status, publishedAt, expiresAt,
				&ddbtypes.AttributeValueMemberS{Value: mk.Result.EventID},
				&ddbtypes.AttributeValueMemberS{Value: mk.Key.PK},
				&ddbtypes.AttributeValueMemberS{Value: mk.Key.SK},
				status,
			},
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	out, err := m.batch.BatchExecuteStatement(callCtx, in)
	cancel()
	if err != nil {
		if code, ok := batchUnsupported(err); ok {
			if m.noBatch.CompareAndSwap(false, true) {
				m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement unusable, marking with UpdateItem from now on",
					"error_code", code, "error", err)
			}
		} else {
			m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement failed, marking this chunk with UpdateItem",
				"statements", len(idx), "error", err)
		}
		return idx
	}
	if out == nil || len(out.Responses) != len(idx) {
		n := 0
		if out != nil {
			n = len(out.Responses)
		}
		m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement returned a result count that does not match, marking this chunk with UpdateItem",
			"statements", len(idx), "responses", n)
		return idx
	}
	for j, i := range idx {
		mk := marks[i]
		se := out.Responses[j].Error
		switch {
		case se == nil:
			m.log(ctx, slog.LevelInfo, "relay: published", mk.Envelope, mk.Key, "bus_event_id", mk.Result.EventID)
		case se.Code == ddbtypes.BatchStatementErrorCodeEnumConditionalCheckFailed:
			m.log(ctx, slog.LevelWarn, "relay: record to mark published is already published or no longer exists; left as is", mk.Envelope, mk.Key, "bus_event_id", mk.Result.EventID)
		case retryableStatementCodes[se.Code]:
			fallback = append(fallback, i)
		case se.Code == ddbtypes.BatchStatementErrorCodeEnumAccessDenied:
			if m.noBatch.CompareAndSwap(false, true) {
				m.cfg.Logger.WarnContext(ctx, "relay: BatchExecuteStatement statement denied (dynamodb:PartiQLUpdate missing?), marking with UpdateItem from now on",
					"error_code", string(se.Code), "error", aws.ToString(se.Message))
			}
			fallback = append(fallback, i)
		default:
			errs[i] = fmt.Errorf("mark published %s: %w", mk.Envelope.EventID, &StatementError{Code: string(se.Code), Message: aws.ToString(se.Message)})
		}
	}
	return fallback
}

// batchUnsupported reports whether a failed BatchExecuteStatement call
// means PartiQL cannot be used with this server or role, and the error code.
func batchUnsupported(err error) (string, bool) {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return "", false
	}
	switch code := apiErr.ErrorCode(); code {
	case "ValidationException", "UnknownOperationException", "AccessDeniedException":
		return code, true
	default:
		return code, false
	}
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
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mark published %s: no time left: %w", env.EventID, err)
	}
	now := m.cfg.Now().UTC()
	upd := expression.
		Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusPublished)).
		Set(expression.Name(outbox.AttrPublishedAt), expression.Value(now.Format(time.RFC3339Nano))).
		Set(expression.Name(outbox.AttrExpiresAt), expression.Value(now.Add(m.cfg.PublishedRetention).Unix())).
		Set(expression.Name(outbox.AttrBusEventID), expression.Value(busEventID)).
		Remove(expression.Name(outbox.AttrPendingShard))
	notPublished := expression.Name(outbox.AttrStatus).NotEqual(expression.Value(outbox.StatusPublished))
	if err := m.update(ctx, key, upd, notPublished); err != nil {
		if isConditionFailed(err) {
			m.log(ctx, slog.LevelWarn, "relay: record to mark published is already published or no longer exists; left as is", env, key, "bus_event_id", busEventID)
			return nil
		}
		return fmt.Errorf("mark published %s: %w", env.EventID, err)
	}
	m.log(ctx, slog.LevelInfo, "relay: published", env, key, "bus_event_id", busEventID)
	return nil
}

// ParkedMessage is the body of a parked-records DLQ message (JSON). The body
// is always legal for SQS: characters SQS refuses are written as JSON
// \uXXXX escapes (decoding gives the stored value back; invalid UTF-8 bytes
// become U+FFFD), and it fits the queue's MaximumMessageSize
// (MarkerConfig.MaxMessageBytes) with its message attributes, error_code and
// event_id. When the whole record does not fit, Truncated is set and the
// message keeps the key, the error code, the reason and what fits; the
// record in the table keeps everything.
type ParkedMessage struct {
	Table     string    `json:"table"`
	PK        string    `json:"pk"`
	SK        string    `json:"sk"`
	ErrorCode string    `json:"error_code"`
	Reason    string    `json:"reason"`
	ParkedAt  time.Time `json:"parked_at"`
	EventID   string    `json:"event_id,omitempty"`
	// Envelope is the full envelope; nil for a poison record.
	Envelope *outbox.Envelope `json:"envelope,omitempty"`
	// Image is the raw item image (DynamoDB JSON) of a poison record.
	Image json.RawMessage `json:"image,omitempty"`
	// Truncated is true when the payload or image was left out to fit the
	// SQS message size limit; the full record stays in the table.
	Truncated bool `json:"truncated,omitempty"`
}

// Park sends the record to the parked-records DLQ first (full envelope and
// reason, escaped and bounded so that SQS accepts it whatever text the
// record holds; see ParkedMessage), then marks it: UpdateItem with condition
// attribute_exists(pk), SET status = PARKED, parked_reason, parked_at,
// REMOVE pending_shard and expires_at (a parked record never expires). It
// increments the Parked counter, emits an EMF ParkedRecords metric and logs
// with event_id, aggregate_id and sequence. If SendMessage fails the record is
// left untouched (still pending) and the error is returned; so is a done
// ctx, before anything is sent. If ctx ends between the SendMessage and the
// UpdateItem, the error is returned and the record stays pending: a later
// park sends a second DLQ message. A record that no
// longer exists counts as parked (nil).
func (m *Marker) Park(ctx context.Context, mk Mark) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("park %s/%s: no time left: %w", mk.Key.PK, mk.Key.SK, err)
	}
	now := m.cfg.Now().UTC()
	reason := mk.Result.ErrorCode
	if mk.Result.ErrorMessage != "" {
		reason += ": " + mk.Result.ErrorMessage
	}
	attrs := parkedAttributes(mk)
	body, err := m.parkedBody(mk, now, m.cfg.MaxMessageBytes-messageAttributeBytes(attrs))
	if err != nil {
		return err
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(m.cfg.ParkedQueueURL),
		MessageBody:       aws.String(body),
		MessageAttributes: attrs,
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	_, err = m.queue.SendMessage(callCtx, in)
	cancel()
	if err != nil {
		return fmt.Errorf("park %s/%s: send to DLQ: %w", mk.Key.PK, mk.Key.SK, err)
	}
	upd := expression.
		Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusParked)).
		Set(expression.Name(outbox.AttrParkedReason), expression.Value(nonEmpty(reason))).
		Set(expression.Name(outbox.AttrParkedAt), expression.Value(now.Format(time.RFC3339Nano))).
		Remove(expression.Name(outbox.AttrPendingShard)).
		Remove(expression.Name(outbox.AttrExpiresAt))
	// A record another delivery already published (an at-least-once
	// re-send that failed where the first send succeeded) stays PUBLISHED:
	// its event reached the bus. A record already PARKED (the reconciler read
	// it from the eventually consistent index just before) is not parked and
	// counted twice. In both cases the DLQ message sent above is a duplicate
	// that needs no redrive (Redrive refuses a record that is not PARKED).
	status := expression.Name(outbox.AttrStatus)
	notDone := status.NotEqual(expression.Value(outbox.StatusPublished)).
		And(status.NotEqual(expression.Value(outbox.StatusParked)))
	if err := m.update(ctx, mk.Key, upd, notDone); err != nil {
		if !isConditionFailed(err) {
			return fmt.Errorf("park %s/%s: mark parked: %w", mk.Key.PK, mk.Key.SK, err)
		}
		m.log(ctx, slog.LevelWarn, "relay: record to park was already published, parked or is gone; left as is", mk.Envelope, mk.Key, "error_code", mk.Result.ErrorCode)
		return nil
	}
	m.parked.Add(1)
	m.emf.Emit(map[string]Metric{config.MetricParked: {Value: 1, Unit: UnitCount}})
	m.log(ctx, slog.LevelError, "relay: outbox record parked", mk.Envelope, mk.Key, "error_code", mk.Result.ErrorCode, "reason", reason)
	return nil
}

// Bounds applied to free text when a parked message must shrink to fit, in
// bytes before JSON escaping.
const (
	parkedReasonBytes = 1024 // Reason once the payload is dropped
	parkedShortBytes  = 256  // Reason once the envelope is dropped
	parkedKeyBytes    = 64   // Table, PK, SK and EventID as a last resort
	parkedAttrBytes   = 128  // each message attribute value
)

// parkedBody renders the DLQ message body so that SQS accepts it whatever
// text the record holds, within maxBytes (the queue's MaximumMessageSize
// less the message attributes):
//
//   - Legal characters: the JSON is passed through sqsmsg.EscapeJSON, so a
//     character SQS refuses (U+FFFE, U+FFFF, controls, invalid UTF-8) is
//     written as a \uXXXX escape with the same decoded value; JSON escapes
//     already in the stored text (a lone "\ud800" included) are ASCII and
//     kept as they are.
//   - Size: when the full message does not fit it is shrunk in steps, each
//     setting Truncated: (1) drop the payload or image and cut Reason to
//     1 KiB; (2) drop the envelope (EventID stays) and cut Reason to 256
//     bytes; (3) cut Table, PK, SK and EventID to 64 bytes each. The record
//     itself keeps everything in the table (PARKED).
//
// It returns an error only when even step 3 does not fit (maxBytes far below
// any real queue's 1,024-byte minimum).
func (m *Marker) parkedBody(mk Mark, now time.Time, maxBytes int) (string, error) {
	msg := ParkedMessage{
		Table:     m.cfg.Table,
		PK:        mk.Key.PK,
		SK:        mk.Key.SK,
		ErrorCode: mk.Result.ErrorCode,
		Reason:    mk.Result.ErrorMessage,
		ParkedAt:  now,
		EventID:   mk.Envelope.EventID,
		Image:     mk.Image,
	}
	if mk.Envelope.EventID != "" {
		env := mk.Envelope
		msg.Envelope = &env
	}
	shrink := []func(*ParkedMessage){
		func(*ParkedMessage) {},
		func(p *ParkedMessage) {
			if p.Envelope != nil {
				env := *p.Envelope
				env.Payload = nil
				p.Envelope = &env
			}
			p.Image = nil
			p.Reason = cutUTF8(p.Reason, parkedReasonBytes)
		},
		func(p *ParkedMessage) {
			p.Envelope = nil
			p.Reason = cutUTF8(p.Reason, parkedShortBytes)
		},
		func(p *ParkedMessage) {
			p.Table = cutUTF8(p.Table, parkedKeyBytes)
			p.PK = cutUTF8(p.PK, parkedKeyBytes)
			p.SK = cutUTF8(p.SK, parkedKeyBytes)
			p.EventID = cutUTF8(p.EventID, parkedKeyBytes)
		},
	}
	var last error
	for step, fn := range shrink {
		fn(&msg)
		msg.Truncated = msg.Truncated || step > 0
		b, err := json.Marshal(msg)
		if err != nil && (msg.Envelope != nil && msg.Envelope.Payload != nil || msg.Image != nil) {
			// A payload or image that is not valid JSON cannot be embedded raw.
			if msg.Envelope != nil {
				env := *msg.Envelope
				env.Payload = nil
				msg.Envelope = &env
			}
			msg.Image, msg.Truncated = nil, true
			b, err = json.Marshal(msg)
		}
		if err != nil {
			return "", fmt.Errorf("park %s/%s: encode DLQ message: %w", mk.Key.PK, mk.Key.SK, err)
		}
		body := sqsmsg.EscapeJSON(string(b))
		if last = sqsmsg.Check(body, maxBytes); last == nil {
			return body, nil
		}
		if !errors.Is(last, sqsmsg.ErrTooLarge) {
			return "", fmt.Errorf("park %s/%s: DLQ message: %w", mk.Key.PK, mk.Key.SK, last)
		}
	}
	return "", fmt.Errorf("park %s/%s: DLQ message does not fit even without payload and envelope: %w", mk.Key.PK, mk.Key.SK, last)
}

// parkedAttributes returns the parked message's attributes (error_code,
// and event_id when known), their values made legal for SQS and bounded.
func parkedAttributes(mk Mark) map[string]sqstypes.MessageAttributeValue {
	str := func(v string) sqstypes.MessageAttributeValue {
		v = sqsmsg.Sanitize(v, parkedAttrBytes)
		if v == "" {
			v = "unknown"
		}
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrs := map[string]sqstypes.MessageAttributeValue{"error_code": str(mk.Result.ErrorCode)}
	if mk.Envelope.EventID != "" {
		attrs["event_id"] = str(mk.Envelope.EventID)
	}
	return attrs
}

// messageAttributeBytes is the size message attributes add to an SQS
// message: name + data type + value bytes of each (Amazon SQS API
// Reference, MessageAttributeValue).
func messageAttributeBytes(attrs map[string]sqstypes.MessageAttributeValue) int {
	n := 0
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// cutUTF8 returns s cut to at most n bytes on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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
		TableName:                 aws.String(m.cfg.Table),
		Key:                       key.AttributeValues(),
		UpdateExpression:          expr.Update(),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
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
