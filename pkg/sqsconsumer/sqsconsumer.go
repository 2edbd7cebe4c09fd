// Package sqsconsumer runs an EventBridge-event handler (a consumer such as
// one built with dedup's Consumer.Handler) behind a Lambda SQS event source mapping, the
// consumer delivery path of this project:
//
//	EventBridge rule ──▶ consumer SQS queue ──▶ Lambda SQS event source mapping
//	   (redrive policy: maxReceiveCount ──▶ consumer DLQ)     ──▶ Handler.Handle
//
// Why not the rule's direct Lambda target: EventBridge invokes a Lambda target
// asynchronously, and an asynchronous invocation whose function keeps failing
// is retried twice and then discarded unless an on-failure destination is
// set (Lambda developer guide, invocation-async-error-handling). A queue in
// between keeps every event until the consumer applied it or a bounded
// number of receives moved it to an alarmed DLQ, from which it is redriven.
//
// # Contract of Handle
//
//   - Each SQS message body is the EventBridge event JSON the rule delivered
//     ({"version":"0","id":…,"detail-type":…,"source":…,"detail":{…}}).
//   - Messages are grouped by aggregate (Config.Group: by default the outbox
//     envelope's aggregate_type and aggregate_id in the event's detail);
//     each group's messages are handled one at a time in sequence order,
//     different groups concurrently, at most Config.Concurrency at once
//     (default DefaultConcurrency; 1 handles the batch one message at a
//     time in batch order). A message whose body names no aggregate is a
//     group of its own. The response is a
//     partial batch response (FunctionResponseTypes
//     ["ReportBatchItemFailures"]) naming, by messageId, every message not
//     done: Lambda deletes the others and the named ones come back after the
//     queue's visibility timeout, with ApproximateReceiveCount + 1.
//   - A handler error wrapping a *PermanentError (see Permanent), or a body
//     that is not an EventBridge event, is dead-lettered at once: the
//     original body is sent to Config.DLQURL with the message attributes
//     AttrReason, AttrError, AttrConsumer and AttrSourceMessageID, and the
//     message is acknowledged. If that send fails the message is reported
//     as failed (nothing is lost; the redrive policy still applies).
//   - Any other error reports the message as failed (retried, then moved to
//     the DLQ by the queue's redrive policy after maxReceiveCount receives).
//   - Deadline budget: a message is started only while more than the
//     reserve remains before the invocation deadline, and its handler
//     context ends the reserve before it (Config.Reserve; by default 2 s, or
//     a quarter of the time left when Handle starts if that is less); messages not started are
//     reported as failed, so the answer always arrives before Lambda's
//     timeout would throw it (and the whole batch's progress) away.
//   - A message without a messageId makes Handle return an error: an empty
//     itemIdentifier would fail the whole batch anyway.
//
// Handlers must be idempotent (delivery is at least once): the consumers
// deduplicate on the outbox event_id with a dedup marker (pkg/dedup).
package sqsconsumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/jsonstrict"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// EventHandler handles one EventBridge event; dedup's Consumer.Handler
// returns one. A nil error means the event's effect is applied (or was
// already applied).
type EventHandler func(ctx context.Context, ev events.EventBridgeEvent) error

// MessageSender is the one SQS method Handler calls, with the exact signature
// of (*sqs.Client).SendMessage. Implementations must be safe for concurrent use.
type MessageSender interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Message attributes set on a message this package dead-letters.
const (
	AttrReason          = "reason"            // why: a PermanentError's Reason
	AttrError           = "error"             // the error text, at most MaxErrorAttributeBytes
	AttrConsumer        = "consumer"          // Config.Name
	AttrSourceMessageID = "source_message_id" // the consumer queue's messageId
	AttrReceiveCount    = "receive_count"     // ApproximateReceiveCount when dead-lettered
)

// Reasons used by this package.
const (
	// ReasonMalformedEvent: the body is not an EventBridge event.
	ReasonMalformedEvent = "malformed_event"
)

// Bounds of a queue's MaximumMessageSize, and so of Config.MaxMessageBytes
// (Amazon SQS message quotas: 1,024 bytes to 1 MiB, default 256 KiB).
const (
	MinQueueMessageBytes     = sqsmsg.MinMaxBytes
	MaxQueueMessageBytes     = sqsmsg.MaxMaxBytes
	DefaultQueueMessageBytes = sqsmsg.DefaultMaxBytes
)

// CheckMessageBody returns an error when body cannot be an SQS message body
// of a queue whose MaximumMessageSize is maxBytes (≤ 0: the default): empty,
// over the size, or holding a character outside SQS's allowed set (#x9, #xA,
// #xD, #x20–#xD7FF, #xE000–#xFFFD, #x10000–#x10FFFF; SQS API reference,
// SendMessage).
func CheckMessageBody(body string, maxBytes int) error { return sqsmsg.Check(body, maxBytes) }

// MaxErrorAttributeBytes bounds the AttrError value (message attributes count
// toward the SQS message size).
const MaxErrorAttributeBytes = 1024

// Defaults for Config.
const (
	// DefaultReserve is the time kept before the invocation deadline to stop
	// starting messages and answer: 2 s.
	DefaultReserve = 2 * time.Second
	// DefaultSendTimeout bounds one dead-letter SendMessage call: 5 s.
	DefaultSendTimeout = 5 * time.Second
)

// PermanentError marks an event that retrying cannot fix (malformed,
// unsupported version, forged or impossible values). Handle dead-letters it
// at once with Reason instead of retrying it.
type PermanentError struct {
	// Reason is a short machine-readable cause, e.g. "unsupported_version",
	// "forged_source", "sequence_gap".
	Reason string
	// Err is the underlying error.
	Err error
}

func (e *PermanentError) Error() string {
	return fmt.Sprintf("permanent (%s): %v", e.Reason, e.Err)
}

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a *PermanentError with reason. A nil err gives an
// error whose text is the reason.
func Permanent(reason string, err error) error {
	if err == nil {
		err = errors.New(reason)
	}
	return &PermanentError{Reason: reason, Err: err}
}

// AsPermanent returns the *PermanentError in err's chain, if any.
func AsPermanent(err error) (*PermanentError, bool) {
	var p *PermanentError
	ok := errors.As(err, &p)
	return p, ok
}

// Config configures a Handler. Zero values take the defaults.
type Config struct {
	// Name is the consumer's name (logs, AttrConsumer). Required.
	Name string
	// DLQ and DLQURL receive permanently failing events. When DLQ is nil,
	// permanent failures are reported as failed like any other error, and
	// the queue's redrive policy moves them after maxReceiveCount receives.
	DLQ    MessageSender
	DLQURL string
	// MaxMessageBytes is the DLQ's MaximumMessageSize (default 262,144).
	MaxMessageBytes int
	// Reserve is kept before the invocation deadline. Zero means the
	// default: DefaultReserve (2 s), or a quarter of the time left when
	// Handle starts if that is less (a short function still gets work
	// done).
	Reserve time.Duration
	// SendTimeout bounds one dead-letter SendMessage (default 5 s).
	SendTimeout time.Duration
	// RetryDelay, when set with Queue, gives each message reported failed
	// (not dead-lettered) a new visibility timeout of RetryDelay(its
	// ApproximateReceiveCount, the error), rounded to whole seconds, through
	// ChangeMessageVisibility on the queue named by its eventSourceARN: it
	// comes back sooner than the queue's visibility timeout (RetryDelays is
	// an exponential policy). Nil: the queue's visibility timeout applies.
	RetryDelay func(receiveCount int, err error) time.Duration
	Queue      VisibilityChanger
	// Logger receives one line per failed or dead-lettered message
	// (default slog.Default()).
	Logger *slog.Logger
	// Concurrency bounds the groups of a batch handled at once (default
	// DefaultConcurrency; 1: one message at a time, in batch order). The
	// handler must be safe for concurrent use.
	Concurrency int
	// Group returns the group of a message body and its order within the
	// group (e.g. aggregate and sequence), ok false when the body names
	// none. Default GroupByAggregate.
	Group func(body string) (key string, order int64, ok bool)
}

// DefaultConcurrency is Config.Concurrency's default: 10, the SQS event
// source mapping's default BatchSize, so a batch of ten different
// aggregates takes about the time of its slowest message.
const DefaultConcurrency = 10

// GroupByAggregate is the default Config.Group: the outbox envelope's
// "aggregate_type" "#" "aggregate_id" in the EventBridge event's detail,
// ordered by its "sequence". Bodies that are not such events have no group.
func GroupByAggregate(body string) (string, int64, bool) {
	var ev struct {
		Detail struct {
			AggregateType string `json:"aggregate_type"`
			AggregateID   string `json:"aggregate_id"`
			Sequence      int64  `json:"sequence"`
		} `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil || ev.Detail.AggregateID == "" {
		return "", 0, false
	}
	return ev.Detail.AggregateType + "#" + ev.Detail.AggregateID, ev.Detail.Sequence, true
}

func (c *Config) setDefaults() {
	if c.Reserve == 0 {
		c.Reserve = DefaultReserve
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = sqsmsg.DefaultMaxBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Group == nil {
		c.Group = GroupByAggregate
	}
}

// Validate reports the first invalid setting (after defaults).
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("sqsconsumer: Config.Name is required")
	case c.DLQ != nil && c.DLQURL == "":
		return errors.New("sqsconsumer: Config.DLQURL is required with Config.DLQ")
	case c.Concurrency < 1:
		return fmt.Errorf("sqsconsumer: Concurrency %d must be >= 1", c.Concurrency)
	case c.Reserve < 0 || c.SendTimeout < 0:
		return errors.New("sqsconsumer: Reserve and SendTimeout must not be negative")
	case c.MaxMessageBytes < sqsmsg.MinMaxBytes || c.MaxMessageBytes > sqsmsg.MaxMaxBytes:
		return fmt.Errorf("sqsconsumer: MaxMessageBytes %d is outside %d..%d", c.MaxMessageBytes, sqsmsg.MinMaxBytes, sqsmsg.MaxMaxBytes)
	}
	return nil
}

// Handler adapts an EventHandler to a Lambda SQS event source mapping. Safe
// for concurrent use.
type Handler struct {
	h           EventHandler
	cfg         Config
	autoReserve bool
	log         *slog.Logger
}

// New returns a Handler running h. It returns an error when h is nil or cfg
// does not validate.
func New(h EventHandler, cfg Config) (*Handler, error) {
	auto := cfg.Reserve == 0
	cfg.setDefaults()
	if h == nil {
		return nil, errors.New("sqsconsumer: nil handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Handler{h: h, cfg: cfg, autoReserve: auto, log: cfg.Logger.With("consumer", cfg.Name)}, nil
}

type msgKey struct{}

// MessageFromContext returns the SQS message whose event the handler is
// handling (ApproximateReceiveCount is in Attributes), when called from
// inside Handle.
func MessageFromContext(ctx context.Context) (events.SQSMessage, bool) {
	m, ok := ctx.Value(msgKey{}).(events.SQSMessage)
	return m, ok
}

// ReceiveCount returns the message's ApproximateReceiveCount (0 if absent).
func ReceiveCount(m events.SQSMessage) int {
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	return n
}

// Handle processes one SQS batch; see the package documentation.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	for _, m := range ev.Records {
		if m.MessageId == "" {
			return events.SQSEventResponse{}, errors.New("sqsconsumer: message without messageId; failing the whole batch")
		}
	}
	deadline, hasDeadline := ctx.Deadline()
	reserve := h.cfg.Reserve
	if hasDeadline && h.autoReserve {
		// A short function (a scaled-down local run) keeps a quarter of
		// its time instead, so that it still gets work done.
		reserve = min(reserve, time.Until(deadline)/4)
	}
	var (
		mu         sync.Mutex
		failed     = make([]bool, len(ev.Records))
		notStarted int
	)
	pos := make(map[string]int, len(ev.Records))
	for i, m := range ev.Records {
		pos[m.MessageId] = i
	}
	fail := func(m events.SQSMessage) {
		mu.Lock()
		defer mu.Unlock()
		failed[pos[m.MessageId]] = true
	}
	var g errgroup.Group
	g.SetLimit(h.cfg.Concurrency)
	for _, group := range h.groups(ev.Records) {
		g.Go(func() error {
			for i, m := range group {
				if hasDeadline && time.Until(deadline) <= reserve {
					for _, rest := range group[i:] {
						fail(rest)
					}
					mu.Lock()
					notStarted += len(group) - i
					mu.Unlock()
					return nil
				}
				if !h.one(ctx, deadline.Add(-reserve), hasDeadline, m) {
					fail(m)
				}
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines never return an error
	if notStarted > 0 {
		h.log.WarnContext(ctx, "sqsconsumer: deadline reserve reached, leaving messages for redelivery",
			"not_started", notStarted, "reserve", reserve)
	}
	var resp events.SQSEventResponse
	for i, m := range ev.Records { // batch order
		if failed[i] {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp, nil
}

// groups splits a batch by Config.Group, each group in its order (stable
// for equal orders), groups in the order of their first message; with
// Concurrency 1 the batch is one group in batch order.
func (h *Handler) groups(ms []events.SQSMessage) [][]events.SQSMessage {
	if h.cfg.Concurrency == 1 {
		return [][]events.SQSMessage{ms}
	}
	type keyed struct {
		m     events.SQSMessage
		order int64
	}
	index := map[string]int{}
	var groups [][]keyed
	for _, m := range ms {
		key, order, ok := h.cfg.Group(m.Body)
		if !ok {
			groups = append(groups, []keyed{{m: m}})
			continue
		}
		i, seen := index[key]
		if !seen {
			i = len(groups)
			index[key] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], keyed{m: m, order: order})
	}
	out := make([][]events.SQSMessage, len(groups))
	for i, g := range groups {
		sort.SliceStable(g, func(a, b int) bool { return g[a].order < g[b].order })
		for _, k := range g {
			out[i] = append(out[i], k.m)
		}
	}
	return out
}

// one handles a message and reports whether it is done (applied, or
// dead-lettered).
func (h *Handler) one(ctx context.Context, stop time.Time, hasDeadline bool, m events.SQSMessage) bool {
	mctx := context.WithValue(context.WithValue(ctx, msgKey{}, m), deadLettererKey{}, DeadLetterer(h))
	if hasDeadline {
		var cancel context.CancelFunc
		mctx, cancel = context.WithDeadline(mctx, stop)
		defer cancel()
	}
	var ev events.EventBridgeEvent
	err := jsonstrict.Check([]byte(m.Body))
	if err == nil {
		err = jsonstrict.CheckFields([]byte(m.Body), &ev)
	}
	if err == nil {
		err = json.Unmarshal([]byte(m.Body), &ev)
	}
	var span trace.Span
	if err != nil {
		_, span = h.startMessageSpan(mctx, m, nil)
		err = Permanent(ReasonMalformedEvent, fmt.Errorf("message body is not an EventBridge event: %w", err))
	} else {
		mctx, span = h.startMessageSpan(mctx, m, &ev)
		err = h.call(mctx, ev)
	}
	if err == nil {
		endMessageSpan(span, "", "", nil) // the handler recorded applied / duplicate / ignored
		return true
	}
	p, permanent := AsPermanent(err)
	if !permanent || h.cfg.DLQ == nil {
		h.log.WarnContext(ctx, "sqsconsumer: event failed, left for redelivery",
			"message_id", m.MessageId, "receive_count", ReceiveCount(m), "error", err)
		h.retryLater(ctx, m, err)
		outcome := outboxtrace.OutcomeRetry
		if handlerOutcome(span) == outboxtrace.OutcomeHeld {
			outcome = "" // held for order: the handler said so
		}
		endMessageSpan(span, outcome, "", err)
		return false
	}
	if derr := h.deadLetter(ctx, m, p); derr != nil {
		h.log.ErrorContext(ctx, "sqsconsumer: dead-lettering failed, left for redelivery",
			"message_id", m.MessageId, "reason", p.Reason, "error", err, "dlq_error", derr)
		endMessageSpan(span, outboxtrace.OutcomeRetry, p.Reason, derr)
		return false
	}
	h.log.ErrorContext(ctx, "sqsconsumer: event dead-lettered",
		"message_id", m.MessageId, "reason", p.Reason, "error", err)
	endMessageSpan(span, outboxtrace.OutcomeDeadLettered, p.Reason, err)
	return true
}

func (h *Handler) call(ctx context.Context, ev events.EventBridgeEvent) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sqsconsumer: handler panicked: %v", r)
		}
	}()
	return h.h(ctx, ev)
}

// DeadLetterer sends an event body to a consumer's DLQ with the reason
// attributes sqsconsumer sets (AttrReason, AttrError, AttrConsumer,
// AttrSourceMessageID = sourceID). A *Handler is one, and is found in the
// context it gives a handler (DeadLettererFromContext): so an event the
// handler applies on behalf of another (a resequencer draining a buffered
// event) can be dead-lettered on its own. Implementations must be safe for
// concurrent use.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, body, sourceID string, p *PermanentError) error
}

type deadLettererKey struct{}

// WithDeadLetterer returns ctx carrying d, for work outside Handle that may
// dead-letter events (an ordered consumer's scheduled resequencer sweep).
func WithDeadLetterer(ctx context.Context, d DeadLetterer) context.Context {
	return context.WithValue(ctx, deadLettererKey{}, d)
}

// DeadLettererFromContext returns the DeadLetterer of the Handler whose
// handler is running (false outside Handle, or without a DLQ).
func DeadLettererFromContext(ctx context.Context) (DeadLetterer, bool) {
	d, ok := ctx.Value(deadLettererKey{}).(DeadLetterer)
	if !ok {
		return nil, false
	}
	if h, isHandler := d.(*Handler); isHandler && h.cfg.DLQ == nil {
		return nil, false
	}
	return d, true
}

// DeadLetter sends body to Config.DLQURL with p's reason (see
// DeadLetterer); receive_count is 0. It returns an error when the Handler
// has no DLQ, the body and attributes exceed Config.MaxMessageBytes
// (sqsmsg.ErrTooLarge), the body is not legal in SQS, or SendMessage fails.
func (h *Handler) DeadLetter(ctx context.Context, body, sourceID string, p *PermanentError) error {
	if h.cfg.DLQ == nil {
		return errors.New("sqsconsumer: no DLQ configured")
	}
	return h.deadLetter(ctx, events.SQSMessage{MessageId: sourceID, Body: body}, p)
}

// deadLetter sends m's body to the DLQ with the reason attributes.
func (h *Handler) deadLetter(ctx context.Context, m events.SQSMessage, p *PermanentError) error {
	errText := sqsmsg.Sanitize(p.Error(), MaxErrorAttributeBytes)
	attrs := map[string]sqstypes.MessageAttributeValue{
		AttrReason:          strAttr(sqsmsg.Sanitize(p.Reason, 256)),
		AttrError:           strAttr(errText),
		AttrConsumer:        strAttr(h.cfg.Name),
		AttrSourceMessageID: strAttr(sqsmsg.Sanitize(m.MessageId, 256)),
		AttrReceiveCount:    {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(max(ReceiveCount(m), 0)))},
	}
	// The body came from an SQS queue, so it is legal; with the attributes
	// it can only be too large for a smaller DLQ. Then the original stays in
	// the source queue until its redrive policy moves it whole. (Check is
	// not given the remaining budget: it reads a limit <= 0 as the default.)
	if size := len(m.Body) + attrBytes(attrs); size > h.cfg.MaxMessageBytes {
		return fmt.Errorf("dead-letter: %w: body and attributes are %d bytes, DLQ limit %d", sqsmsg.ErrTooLarge, size, h.cfg.MaxMessageBytes)
	}
	if err := sqsmsg.Check(m.Body, sqsmsg.MaxMaxBytes); err != nil {
		return fmt.Errorf("dead-letter body: %w", err)
	}
	// The handler's context ends Reserve before the invocation deadline; the
	// invocation's own context (ctx) still has Reserve left for this call.
	sctx, cancel := context.WithTimeout(ctx, h.cfg.SendTimeout)
	defer cancel()
	_, err := h.cfg.DLQ.SendMessage(sctx, &sqs.SendMessageInput{
		QueueUrl:          aws.String(h.cfg.DLQURL),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: attrs,
	})
	return err
}

func strAttr(v string) sqstypes.MessageAttributeValue {
	if v == "" {
		v = "-"
	}
	return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// attrBytes is the size message attributes add to a message: name, data
// type and value bytes (Amazon SQS message quotas).
func attrBytes(attrs map[string]sqstypes.MessageAttributeValue) int {
	n := 0
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}
