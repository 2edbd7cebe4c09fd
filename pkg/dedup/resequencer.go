package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The resequencer buffer (promise I4; docs/ORDERING.md "The resequencer").
//
// An ordered consumer that receives an aggregate's event before its
// predecessor stores it in its own dedup table, one buffer item per event,
// and acknowledges the message: the event waits durably in DynamoDB, not in
// the queue. The ordering item's AttrBuffered set names the waiting
// sequences, so the transaction that applies the predecessor sees them
// (its gate is conditioned on attribute_not_exists(buffered)) and the same
// invocation applies the successors right after it.
//
// A buffer item:
//
//	pk            = "<consumer>#BUF#<aggregate_type>#<aggregate_id>#<sequence>"
//	consumer, aggregate_type, aggregate_id, sequence (N), event_id, event_type
//	body          = the EventBridge event JSON as delivered (applied from it later)
//	buffered_at   = when it was buffered (BufferedAtLayout, UTC; the index's sort key)
//	buffer_shard  = "<consumer>#<00..BufferShards-1>" (the index's partition key)
//	failed_reason, failed_error, failed_at: set when applying it failed for
//	good and no DLQ could take it (ListBuffered shows them)
//
// The sparse global secondary index BufferIndex (buffer_shard, buffered_at)
// holds only buffer items; the sweep and ListBuffered query it, so finding
// what waits never scans the markers.

// BufferInfix separates the consumer from the aggregate in a buffer item's
// key: "<consumer>#BUF#<aggregate_type>#<aggregate_id>#<sequence>".
const BufferInfix = "#BUF#"

// Attribute names of a buffer item (besides AttrPK, AttrConsumer,
// AttrAggregateType, AttrAggregateID, AttrSequence, AttrEventID,
// AttrEventType).
const (
	AttrBody         = "body"          // S: the EventBridge event JSON
	AttrBufferedAt   = "buffered_at"   // S: BufferedAtLayout, UTC; BufferIndex sort key
	AttrBufferShard  = "buffer_shard"  // S: "<consumer>#<nn>"; BufferIndex partition key
	AttrFailedReason = "failed_reason" // S: why applying it failed for good
	AttrFailedError  = "failed_error"  // S: the error text, at most 1,024 bytes
	AttrFailedAt     = "failed_at"     // S: RFC 3339, UTC
)

// BufferIndex is the dedup table's sparse global secondary index over
// buffer items: partition key AttrBufferShard (S), sort key AttrBufferedAt
// (S), projecting the keys and BufferIndexAttributes. The CDK construct and
// CreateTableInput declare it.
const BufferIndex = "buffered"

// BufferIndexAttributes are the non-key attributes BufferIndex projects
// (INCLUDE): what ListBuffered and the sweep read, not the body.
var BufferIndexAttributes = []string{AttrConsumer, AttrAggregateType, AttrAggregateID, AttrSequence, AttrEventID, AttrEventType, AttrFailedReason}

// BufferShards is the number of BufferIndex partition key values per
// consumer. Buffer writes of one consumer spread over them by a hash of the
// aggregate, so the index takes BufferShards times one partition's write
// rate (DynamoDB: 1,000 writes/s per partition).
const BufferShards = 16

// BufferedAtLayout is AttrBufferedAt's fixed-width layout, so the index's
// string order is time order.
const BufferedAtLayout = "2006-01-02T15:04:05.000000Z"

// Limits of the buffer.
const (
	// DefaultBufferMaxDepth is the default bound on events buffered for one
	// aggregate (ResequencerConfig.MaxDepth).
	DefaultBufferMaxDepth = 100
	// MaxBufferMaxDepth is the largest MaxDepth accepted: the ordering
	// item carries the buffered set and must stay small (a 400 KB item
	// limit; 1,000 sequences are a few KB).
	MaxBufferMaxDepth = 1000
	// MaxBufferedEventBytes bounds the stored event JSON: DynamoDB's item
	// size limit is 400 KB (409,600 bytes, names and values); 8 KiB are
	// kept for the other attributes. A larger event is held in its queue
	// instead (the fallback), never dropped.
	MaxBufferedEventBytes = 400*1024 - 8*1024
	// DefaultSweepMinAge is how long an event waits in the buffer before a
	// sweep looks at its aggregate: the live path drains within
	// milliseconds, the sweep is for what a crash left behind.
	DefaultSweepMinAge = 30 * time.Second
)

// Dead-letter reasons of the resequencer.
const (
	// ReasonSequenceConflict: two different events claim one sequence of
	// an aggregate (the buffer holds another event id for it). The write
	// side never does that; the event is dead-lettered, not guessed at.
	ReasonSequenceConflict = "sequence_conflict"
	// ReasonNotApplied: the consumer acknowledged a buffered event without
	// applying it (its handler returned nil but no Apply committed or
	// found it applied); it is dead-lettered so the gap stays visible.
	ReasonNotApplied = "resequencer_not_applied"
)

// Outcome is what an ordered or unordered Apply did with one delivery.
type Outcome int

// Outcomes of Applier.ApplyEvent.
const (
	// OutcomeApplied: marker, effects and gate committed by this delivery.
	OutcomeApplied Outcome = iota + 1
	// OutcomeDuplicate: applied before (marker or gate); nothing written.
	OutcomeDuplicate
	// OutcomeBuffered: the event is early; it is stored in the
	// resequencer buffer and will be applied right after its predecessor.
	// Acknowledge the delivery.
	OutcomeBuffered
)

func (o Outcome) String() string {
	switch o {
	case OutcomeApplied:
		return "applied"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeBuffered:
		return "buffered"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// BufferKey returns a buffer item's partition key value.
func BufferKey(consumer, aggregateType, aggregateID string, sequence int64) string {
	return consumer + BufferInfix + aggregateType + "#" + aggregateID + "#" + strconv.FormatInt(sequence, 10)
}

// BufferShard returns the AttrBufferShard value of an aggregate's buffer
// items: "<consumer>#<nn>", nn = FNV-1a(aggregate_type "#" aggregate_id)
// mod BufferShards, two digits.
func BufferShard(consumer, aggregateType, aggregateID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(aggregateType + "#" + aggregateID))
	return fmt.Sprintf("%s#%02d", consumer, h.Sum32()%BufferShards)
}

// ResequencerConfig configures the resequencer of an ordered consumer
// (ConsumerConfig.Resequencer). Zero values take the defaults.
type ResequencerConfig struct {
	// Disabled turns the buffer off: an early event is refused with a
	// *GapError and held in its queue (ConsumerConfig.Hold), the behaviour
	// before the resequencer. For comparison runs only.
	Disabled bool
	// MaxDepth bounds the events buffered for one aggregate (default
	// DefaultBufferMaxDepth, 1..MaxBufferMaxDepth). An early event past it
	// is held in its queue instead and, if the gap does not close, dead-
	// lettered with ReasonSequenceGap: never dropped.
	MaxDepth int
	// SweepMinAge is the age from which Sweep looks at a buffered event's
	// aggregate (default DefaultSweepMinAge).
	SweepMinAge time.Duration
	// Metrics receives one EMF line per sweep tick (SweepReport.WriteEMF).
	// Default os.Stdout (Lambda's log stream); io.Discard disables.
	Metrics io.Writer
}

func (c *ResequencerConfig) setDefaults() {
	if c.MaxDepth == 0 {
		c.MaxDepth = DefaultBufferMaxDepth
	}
	if c.SweepMinAge == 0 {
		c.SweepMinAge = DefaultSweepMinAge
	}
	if c.Metrics == nil {
		c.Metrics = os.Stdout
	}
}

// Validate reports an invalid setting (after defaults).
func (c ResequencerConfig) Validate() error {
	switch {
	case c.MaxDepth < 1 || c.MaxDepth > MaxBufferMaxDepth:
		return fmt.Errorf("dedup: Resequencer.MaxDepth %d is outside 1..%d", c.MaxDepth, MaxBufferMaxDepth)
	case c.SweepMinAge < 0:
		return fmt.Errorf("dedup: Resequencer.SweepMinAge %s is negative", c.SweepMinAge)
	}
	return nil
}

// BufferClient is the DynamoDB subset the resequencer calls, with the SDK's
// exact signatures; *dynamodb.Client satisfies it. Implementations must be
// safe for concurrent use.
type BufferClient interface {
	TransactWriter
	ItemGetter
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Resequencer applies an ordered consumer's events in sequence order at
// full speed (promise I4). It wraps the consumer's event handler: an event
// that arrives before its predecessor is stored in the buffer by the
// handler's own Apply call (OutcomeBuffered) and acknowledged; when an
// Apply commits an event whose successors wait, the Resequencer runs the
// handler again for each of them, in sequence, from its stored body, each
// in its own transaction (effects + marker + gate + buffer delete). It is
// safe for concurrent use.
type Resequencer struct {
	a      *Applier
	client BufferClient
	h      sqsconsumer.EventHandler
	cfg    ResequencerConfig
	log    *slog.Logger
}

// NewResequencer returns the Resequencer of an ordered Applier running
// handler h, which must decode the event, build its effects and call
// a.ApplyEvent (or Apply) with the context it was given. It returns an
// error when a is not ordered, its client does not implement BufferClient,
// h is nil or cfg does not validate.
func NewResequencer(a *Applier, h sqsconsumer.EventHandler, cfg ResequencerConfig, log *slog.Logger) (*Resequencer, error) {
	cfg.setDefaults()
	switch {
	case a == nil || !a.cfg.Ordered:
		return nil, errors.New("dedup: a Resequencer needs an ordered Applier")
	case h == nil:
		return nil, errors.New("dedup: nil handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bc, ok := a.client.(BufferClient)
	if !ok {
		return nil, errors.New("dedup: a Resequencer needs a client with TransactWriteItems, GetItem and Query (BufferClient)")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Resequencer{a: a, client: bc, h: h, cfg: cfg, log: log.With("consumer", a.cfg.Consumer)}, nil
}

// Config returns the effective configuration.
func (r *Resequencer) Config() ResequencerConfig { return r.cfg }

// aggRef names one aggregate.
type aggRef struct{ typ, id string }

// applyState is what one handler run shares with the Apply calls it makes
// (through the context): the event being handled (stored as is when it is
// buffered), the buffered event it drains, and what Apply found.
type applyState struct {
	r       *Resequencer
	ev      *events.EventBridgeEvent
	drain   *drainTarget
	outcome Outcome
	follows []aggRef
}

// drainTarget is the buffered event a drain runs the handler for.
type drainTarget struct {
	seq     int64
	eventID string
}

func (d *drainTarget) matches(env outbox.Envelope) bool {
	return d != nil && d.seq == env.Sequence && d.eventID == env.EventID
}

func (s *applyState) follow(typ, id string) {
	if s == nil {
		return
	}
	ref := aggRef{typ, id}
	for _, f := range s.follows {
		if f == ref {
			return
		}
	}
	s.follows = append(s.follows, ref)
}

type stateKey struct{}

func withState(ctx context.Context, s *applyState) context.Context {
	return context.WithValue(ctx, stateKey{}, s)
}

func stateFrom(ctx context.Context) *applyState {
	s, _ := ctx.Value(stateKey{}).(*applyState)
	return s
}

// IsSweepTick reports whether ev is a sweep tick: the scheduled event
// ("source" "aws.events", "detail-type" "Scheduled Event") the stack's
// schedule puts on an ordered consumer's queue every
// config.ResequencerSweepInterval. No producer can publish such an event:
// PutEvents refuses sources that start with "aws." (EventBridge
// PutEventsRequestEntry), and the consumer queue's policy admits only its
// rules.
func IsSweepTick(ev events.EventBridgeEvent) bool {
	return ev.Source == "aws.events" && ev.DetailType == "Scheduled Event"
}

// Handle runs the consumer's handler for ev with the resequencer: an early
// event is buffered and acknowledged (nil), and every buffered successor
// an Apply of this run made next is applied before Handle returns. It
// returns the handler's error, or an error when the event was applied but
// draining its successors failed for now (a conflict, throttling, the
// deadline): the delivery is then retried, and its redelivery — a
// duplicate — drains them (so does the next event of the aggregate, or
// Sweep). A successor that fails for good is dead-lettered on its own
// (sqsconsumer's DLQ, found in ctx) and does not fail ev.
//
// A sweep tick (IsSweepTick) runs Sweep instead, logs what it found and
// writes its metrics (ResequencerConfig.Metrics); it always returns nil:
// a failed sweep is logged, and the next tick sweeps again.
func (r *Resequencer) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if IsSweepTick(ev) {
		r.tick(ctx)
		return nil
	}
	st := &applyState{r: r, ev: &ev}
	err := r.h(withState(ctx, st), ev)
	drained := 0
	for _, ref := range st.follows {
		n, derr := r.drain(ctx, ref)
		drained += n
		if derr != nil {
			if err == nil {
				err = fmt.Errorf("dedup: %s: event %s done, its buffered successors of %s %s wait (a redelivery drains them): %w",
					r.a.cfg.Consumer, ev.ID, ref.typ, ref.id, derr)
			}
			return err
		}
	}
	if errors.Is(err, ErrSequenceGap) && drained > 0 {
		// The drain closed (part of) the gap the event was held for.
		st = &applyState{r: r, ev: &ev}
		err = r.h(withState(ctx, st), ev)
		for _, ref := range st.follows {
			if _, derr := r.drain(ctx, ref); derr != nil && err == nil {
				return derr
			}
		}
	}
	return err
}

// drain applies the aggregate's buffered events that are next, one
// transaction each, until the next sequence is not buffered. It returns how
// many it applied. Buffered events at or below the gate (left before a
// starting point was set: SetBaseline) are removed with a warning.
func (r *Resequencer) drain(ctx context.Context, ref aggRef) (int, error) {
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		st, err := r.a.ReadGate(ctx, ref.typ, ref.id)
		if err != nil {
			return n, err
		}
		if err := r.dropStale(ctx, ref, st); err != nil {
			return n, err
		}
		next := st.Last + 1
		if !st.IsBuffered(next) {
			return n, nil
		}
		item, err := r.getBuffered(ctx, ref, next)
		if err != nil {
			return n, err
		}
		if item == nil {
			// The set names it but the item is gone: only a hand edit can do
			// that (both change in one transaction). Unblock the set.
			r.log.ErrorContext(ctx, "dedup: buffered sequence without its buffer item; removing it from the set",
				"aggregate_type", ref.typ, "aggregate_id", ref.id, "sequence", next)
			if err := r.unbuffer(ctx, ref, next, nil); err != nil {
				return n, err
			}
			continue
		}
		var ev events.EventBridgeEvent
		if err := json.Unmarshal([]byte(item.Body), &ev); err != nil {
			p := &sqsconsumer.PermanentError{Reason: ReasonMalformedEvent, Err: fmt.Errorf("%w: buffered body of %s: %v", ErrMalformedEvent, item.Key, err)}
			if err := r.deadLetterBuffered(ctx, ref, *item, p); err != nil {
				return n, err
			}
			return n, nil
		}
		dst := &applyState{r: r, ev: &ev, drain: &drainTarget{seq: next, eventID: item.EventID}}
		herr := r.applyBuffered(ctx, dst, ev, *item)
		if herr == nil && dst.outcome == 0 {
			herr = sqsconsumer.Permanent(ReasonNotApplied, fmt.Errorf("dedup: %s acknowledged buffered event %s (sequence %d of %s %s) without applying it",
				r.a.cfg.Consumer, item.EventID, next, ref.typ, ref.id))
		}
		if herr != nil {
			if p, ok := sqsconsumer.AsPermanent(herr); ok {
				return n, r.deadLetterBuffered(ctx, ref, *item, p)
			}
			return n, fmt.Errorf("dedup: apply buffered event %s (sequence %d): %w", item.EventID, next, herr)
		}
		if dst.outcome == OutcomeApplied {
			n++
			r.log.InfoContext(ctx, "dedup: buffered event applied after its predecessor",
				"event_id", item.EventID, "aggregate_id", ref.id, "sequence", next, "waited_ms", time.Since(item.BufferedAt).Milliseconds())
		}
	}
}

// applyBuffered runs the handler for a buffered event in its own span
// (child of the run that drains it, when tracing is on), so its outcome
// is recorded on it, not on the predecessor's span.
func (r *Resequencer) applyBuffered(ctx context.Context, st *applyState, ev events.EventBridgeEvent, item BufferedEvent) error {
	if !outboxtrace.Enabled() {
		// a non-recording span: SetOutcome leaves the predecessor's alone
		return r.h(withState(trace.ContextWithSpan(ctx, trace.SpanFromContext(context.Background())), st), ev)
	}
	ctx, span := outboxtrace.Tracer().Start(ctx, "resequencer apply "+item.EventType, trace.WithAttributes(
		outboxtrace.AttrEventID.String(item.EventID), outboxtrace.AttrEventType.String(item.EventType),
		outboxtrace.AttrAggregateID.String(item.AggregateID), outboxtrace.AttrSequence.Int64(item.Sequence),
		outboxtrace.AttrConsumer.String(r.a.cfg.Consumer),
		attribute.Int64("outbox.buffered_ms", time.Since(item.BufferedAt).Milliseconds())))
	defer span.End()
	err := r.h(withState(ctx, st), ev)
	if err != nil {
		span.RecordError(err)
	}
	return err
}

// dropStale removes buffered events at or below the gate: events before a
// starting point set after they were buffered (SetBaseline). They are
// logged, never applied.
func (r *Resequencer) dropStale(ctx context.Context, ref aggRef, st GateState) error {
	for _, seq := range st.Buffered {
		if seq > st.Last {
			break
		}
		r.log.WarnContext(ctx, "dedup: buffered event is at or before the consumer's starting point; removed unapplied",
			"aggregate_type", ref.typ, "aggregate_id", ref.id, "sequence", seq, "last_sequence", st.Last)
		if err := r.unbuffer(ctx, ref, seq, nil); err != nil {
			return err
		}
	}
	return nil
}

// BufferedEvent is one event waiting in a consumer's buffer.
type BufferedEvent struct {
	Key           string    `json:"key"`
	Consumer      string    `json:"consumer"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	Sequence      int64     `json:"sequence"`
	EventID       string    `json:"event_id"`
	EventType     string    `json:"event_type"`
	BufferedAt    time.Time `json:"buffered_at"`
	// FailedReason is set when applying it failed for good and no DLQ
	// could take it.
	FailedReason string `json:"failed_reason,omitempty"`
	// Body is the stored EventBridge event JSON (only from getBuffered;
	// ListBuffered reads the index, which does not project it).
	Body string `json:"-"`
}

func decodeBuffered(item map[string]types.AttributeValue) (BufferedEvent, error) {
	b := BufferedEvent{
		Key: str(item, AttrPK), Consumer: str(item, AttrConsumer), AggregateType: str(item, AttrAggregateType),
		AggregateID: str(item, AttrAggregateID), EventID: str(item, AttrEventID), EventType: str(item, AttrEventType),
		FailedReason: str(item, AttrFailedReason), Body: str(item, AttrBody),
	}
	if n, ok := item[AttrSequence].(*types.AttributeValueMemberN); ok {
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return b, fmt.Errorf("dedup: buffer item %s sequence %q: %w", b.Key, n.Value, err)
		}
		b.Sequence = v
	}
	if at := str(item, AttrBufferedAt); at != "" {
		t, err := time.Parse(BufferedAtLayout, at)
		if err != nil {
			return b, fmt.Errorf("dedup: buffer item %s buffered_at %q: %w", b.Key, at, err)
		}
		b.BufferedAt = t
	}
	return b, nil
}

func str(item map[string]types.AttributeValue, name string) string {
	if s, ok := item[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func (r *Resequencer) getBuffered(ctx context.Context, ref aggRef, seq int64) (*BufferedEvent, error) {
	key := BufferKey(r.a.cfg.Consumer, ref.typ, ref.id, seq)
	cctx, cancel := context.WithTimeout(ctx, r.a.cfg.CallTimeout)
	defer cancel()
	out, err := r.client.GetItem(cctx, &dynamodb.GetItemInput{
		TableName: aws.String(r.a.cfg.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: key}},
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: read %s: %w", key, err)
	}
	if out == nil || out.Item == nil {
		return nil, nil
	}
	b, err := decodeBuffered(out.Item)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// unbuffer deletes a buffer item and its sequence from the set in one
// transaction, when the gate is still short of it (cond, nil: the gate is
// past it) — used for stale entries and dead-lettered ones.
func (r *Resequencer) unbuffer(ctx context.Context, ref aggRef, seq int64, cond *expression.ConditionBuilder) error {
	upd := expression.Delete(expression.Name(AttrBuffered), expression.Value(seqSet(seq)))
	b := expression.NewBuilder().WithUpdate(upd)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	e, err := b.Build()
	if err != nil {
		return fmt.Errorf("dedup: build unbuffer: %w", err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Delete: &types.Delete{TableName: aws.String(r.a.cfg.Table),
			Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: BufferKey(r.a.cfg.Consumer, ref.typ, ref.id, seq)}}}},
		{Update: &types.Update{TableName: aws.String(r.a.cfg.Table), Key: r.a.seqKey(ref.typ, ref.id),
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()}},
	}}
	var last error
	for attempt := 1; attempt <= r.a.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, r.a.backoff(attempt-1)); err != nil {
				return fmt.Errorf("dedup: unbuffer %d: %w (last: %v)", seq, err, last)
			}
		}
		err := r.a.call(ctx, in)
		if err == nil {
			return nil
		}
		err = outbox.TranslateTxError(err)
		te, ok := outbox.AsTxError(err)
		if !ok {
			return fmt.Errorf("dedup: unbuffer %d: %w", seq, err)
		}
		if te.ConditionFailed(1) {
			return nil // the gate moved: someone else dealt with it
		}
		if !te.Retryable() {
			return fmt.Errorf("dedup: unbuffer %d: %w", seq, te)
		}
		last = te
	}
	return fmt.Errorf("dedup: unbuffer %d: gave up after %d attempts: %w", seq, r.a.cfg.MaxAttempts, last)
}

// deadLetterBuffered hands a buffered event that failed for good to the
// consumer's DLQ (sqsconsumer.DeadLettererFromContext) with p's reason and
// removes it from the buffer; the gate stays short of it, so its successors
// keep waiting until it is redriven. Without a DLQ in ctx it marks the
// buffer item failed (ListBuffered shows the reason) and leaves it.
func (r *Resequencer) deadLetterBuffered(ctx context.Context, ref aggRef, item BufferedEvent, p *sqsconsumer.PermanentError) error {
	log := r.log.With("event_id", item.EventID, "aggregate_id", ref.id, "sequence", item.Sequence, "reason", p.Reason)
	if dl, ok := sqsconsumer.DeadLettererFromContext(ctx); ok {
		if err := dl.DeadLetter(ctx, item.Body, "resequencer:"+item.EventID, p); err != nil {
			return fmt.Errorf("dedup: dead-letter buffered event %s: %w", item.EventID, err)
		}
		log.ErrorContext(ctx, "dedup: buffered event failed for good; dead-lettered, its successors wait for its redrive", "error", p.Err)
		short := expression.Name(AttrLastSequence).LessThan(expression.Value(item.Sequence))
		return r.unbuffer(ctx, ref, item.Sequence, &short)
	}
	log.ErrorContext(ctx, "dedup: buffered event failed for good and no DLQ is configured; left in the buffer, marked failed", "error", p.Err)
	e, err := expression.NewBuilder().WithUpdate(expression.
		Set(expression.Name(AttrFailedReason), expression.Value(p.Reason)).
		Set(expression.Name(AttrFailedError), expression.Value(clip(p.Error(), 1024))).
		Set(expression.Name(AttrFailedAt), expression.Value(time.Now().UTC().Format(time.RFC3339)))).
		WithCondition(expression.AttributeExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return fmt.Errorf("dedup: build failed mark: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, r.a.cfg.CallTimeout)
	defer cancel()
	_, err = r.a.client.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String(r.a.cfg.Table), Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: item.Key}},
		UpdateExpression: e.Update(), ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}}}})
	if err != nil && !isConditionFailure(err) {
		return fmt.Errorf("dedup: mark buffered event %s failed: %w", item.EventID, err)
	}
	return nil
}

func isConditionFailure(err error) bool {
	te, ok := outbox.AsTxError(outbox.TranslateTxError(err))
	return ok && te.ConditionFailed(0)
}

// bufferOutcome is what a buffer write found.
type bufferOutcome int

const (
	bufferStored    bufferOutcome = iota // stored: OutcomeBuffered
	bufferDuplicate                      // this event is buffered already
	bufferRejudge                        // the gate moved under it: apply again
	bufferFull                           // MaxDepth reached: hold in the queue
)

// buffer stores env's event (st.ev) as the aggregate's buffered sequence,
// in one transaction conditioned on the gate still being short of it:
// Put of the buffer item (attribute_not_exists) and ADD of its sequence to
// the ordering item's buffered set, guarded by last_sequence <
// env.Sequence-1 (or no last_sequence) and the set's size below MaxDepth.
func (a *Applier) buffer(ctx context.Context, env outbox.Envelope, s *applyState, gs GateState) (bufferOutcome, error) {
	if len(gs.Buffered) >= s.r.cfg.MaxDepth {
		return bufferFull, nil
	}
	body, err := json.Marshal(s.ev)
	if err != nil {
		return 0, fmt.Errorf("dedup: encode event %s for the buffer: %w", env.EventID, err)
	}
	if len(body) > MaxBufferedEventBytes {
		return bufferFull, nil
	}
	now := a.cfg.Now().UTC()
	key := BufferKey(a.cfg.Consumer, env.AggregateType, env.AggregateID, env.Sequence)
	item := map[string]types.AttributeValue{
		AttrPK:            &types.AttributeValueMemberS{Value: key},
		AttrConsumer:      &types.AttributeValueMemberS{Value: a.cfg.Consumer},
		AttrAggregateType: &types.AttributeValueMemberS{Value: env.AggregateType},
		AttrAggregateID:   &types.AttributeValueMemberS{Value: env.AggregateID},
		AttrSequence:      &types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence, 10)},
		AttrEventID:       &types.AttributeValueMemberS{Value: env.EventID},
		AttrEventType:     &types.AttributeValueMemberS{Value: env.EventType},
		AttrBody:          &types.AttributeValueMemberS{Value: string(body)},
		AttrBufferedAt:    &types.AttributeValueMemberS{Value: now.Format(BufferedAtLayout)},
		AttrBufferShard:   &types.AttributeValueMemberS{Value: BufferShard(a.cfg.Consumer, env.AggregateType, env.AggregateID)},
	}
	last, buffered := expression.Name(AttrLastSequence), expression.Name(AttrBuffered)
	// env.Sequence > last+1 >= 1 here, so env.Sequence >= 2.
	cond := expression.AttributeNotExists(last).Or(last.LessThan(expression.Value(env.Sequence - 1)))
	cond = cond.And(expression.Or(expression.AttributeNotExists(buffered),
		expression.Size(buffered).LessThan(expression.Value(s.r.cfg.MaxDepth))))
	e, err := expression.NewBuilder().WithCondition(cond).WithUpdate(expression.
		Add(buffered, expression.Value(seqSet(env.Sequence))).
		Set(expression.Name(AttrConsumer), expression.Value(a.cfg.Consumer)).
		Set(expression.Name(AttrAggregateType), expression.Value(env.AggregateType)).
		Set(expression.Name(AttrAggregateID), expression.Value(env.AggregateID))).Build()
	if err != nil {
		return 0, fmt.Errorf("dedup: build buffer update: %w", err)
	}
	put, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return 0, fmt.Errorf("dedup: build buffer put: %w", err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(a.cfg.Table), Item: item, ConditionExpression: put.Condition(),
			ExpressionAttributeNames: put.Names(), ExpressionAttributeValues: put.Values()}},
		{Update: &types.Update{TableName: aws.String(a.cfg.Table), Key: a.seqKey(env.AggregateType, env.AggregateID),
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()}},
	}}
	if err := outbox.CheckTransaction(in.TransactItems); err != nil {
		return bufferFull, nil //nolint:nilerr // too large to buffer: hold it in the queue instead
	}
	var lastErr error
	for attempt := 1; attempt <= a.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, a.backoff(attempt-1)); err != nil {
				return 0, fmt.Errorf("dedup: buffer event %s: %w (last: %v)", env.EventID, err, lastErr)
			}
		}
		err := a.call(ctx, in)
		if err == nil {
			return bufferStored, nil
		}
		err = outbox.TranslateTxError(err)
		te, ok := outbox.AsTxError(err)
		if !ok {
			return 0, fmt.Errorf("dedup: buffer event %s: %w", env.EventID, err)
		}
		switch {
		case te.ConditionFailed(0):
			other, err := s.r.getBuffered(ctx, aggRef{env.AggregateType, env.AggregateID}, env.Sequence)
			switch {
			case err != nil:
				return 0, err
			case other == nil:
				return bufferRejudge, nil // drained meanwhile
			case other.EventID != env.EventID:
				return 0, sqsconsumer.Permanent(ReasonSequenceConflict, fmt.Errorf("dedup: %s: event %s claims sequence %d of %s %s, which buffered event %s holds",
					a.cfg.Consumer, env.EventID, env.Sequence, env.AggregateType, env.AggregateID, other.EventID))
			}
			return bufferDuplicate, nil
		case te.ConditionFailed(1):
			return bufferRejudge, nil
		case !te.Retryable():
			return 0, fmt.Errorf("dedup: buffer event %s: %w", env.EventID, te)
		}
		lastErr = te
	}
	return 0, fmt.Errorf("dedup: buffer event %s: gave up after %d attempts: %w", env.EventID, a.cfg.MaxAttempts, lastErr)
}

// afterDuplicate is an ordered Apply's step after the marker showed a
// duplicate: when the gate is exactly one short of the event (the event was
// applied while the consumer was unordered, or before its starting point
// was declared) the gate adopts it, so replaying history starts the gate;
// and when the next sequence waits in the buffer (a crash between applying
// an event and draining its successors), the handler run drains it. It
// returns an error when the ordering item cannot be read or the adoption
// fails for now: the duplicate is then delivered again (its redelivery is
// how a crash's leftovers are drained, so it must not be acknowledged
// unread).
func (a *Applier) afterDuplicate(ctx context.Context, env outbox.Envelope, s *applyState) error {
	st, err := a.ReadGate(ctx, env.AggregateType, env.AggregateID)
	if err != nil {
		return err
	}
	if env.Sequence == st.Last+1 {
		items := make([]types.TransactWriteItem, 0, 2)
		g, err := a.gate(env, a.cfg.Now(), gateBuffered)
		if err != nil {
			return err
		}
		items = append(items, g)
		if st.IsBuffered(env.Sequence) {
			items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(a.cfg.Table),
				Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: BufferKey(a.cfg.Consumer, env.AggregateType, env.AggregateID, env.Sequence)}}}})
		}
		switch err := a.call(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); {
		case err == nil:
			st.Last = env.Sequence
		case isConditionFailure(err):
			return nil // the gate moved meanwhile: someone else advanced it
		default:
			return fmt.Errorf("dedup: adopt applied event %s into the ordering gate: %w", env.EventID, err)
		}
	}
	if st.IsBuffered(st.Last + 1) {
		s.follow(env.AggregateType, env.AggregateID)
	}
	return nil
}

// ListBuffered returns every event waiting in consumer's buffer in the
// dedup table (through BufferIndex, BufferShards queries), oldest first
// per shard. It returns an error naming the failed query.
func ListBuffered(ctx context.Context, client BufferClient, table, consumer string) ([]BufferedEvent, error) {
	var all []BufferedEvent
	for shard := 0; shard < BufferShards; shard++ {
		items, err := queryShard(ctx, client, table, fmt.Sprintf("%s#%02d", consumer, shard))
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
	}
	return all, nil
}

func queryShard(ctx context.Context, client BufferClient, table, shard string) ([]BufferedEvent, error) {
	k, err := expression.NewBuilder().WithKeyCondition(expression.Key(AttrBufferShard).Equal(expression.Value(shard))).Build()
	if err != nil {
		return nil, fmt.Errorf("dedup: build buffer query: %w", err)
	}
	in := &dynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String(BufferIndex),
		KeyConditionExpression: k.KeyCondition(), ExpressionAttributeNames: k.Names(), ExpressionAttributeValues: k.Values()}
	var out []BufferedEvent
	for {
		cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
		page, err := client.Query(cctx, in)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dedup: query %s %s: %w", BufferIndex, shard, err)
		}
		for _, it := range page.Items {
			b, err := decodeBuffered(it)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// SweepReport is what one Sweep found and did.
type SweepReport struct {
	// Buffered is the number of events waiting after the sweep, and
	// Aggregates the number of aggregates they belong to.
	Buffered   int
	Aggregates int
	// OldestAge is the age of the oldest event still waiting (0: none).
	OldestAge time.Duration
	// Drained is the number of buffered events the sweep applied.
	Drained int
	// Failed counts aggregates whose drain failed for now (retried by the
	// next sweep).
	Failed int
}

// Sweep finds every event of this consumer waiting in the buffer for at
// least SweepMinAge, and drains each such aggregate whose next sequence is
// buffered (what a crash between applying an event and draining its
// successors, or a starting point set by SetBaseline, leaves behind).
// Aggregates whose gap is real stay buffered: they wait for the missing
// event (its redrive drains them). It returns what is left (SweepReport),
// for the OldestBufferedAgeSeconds metric; an error only when the buffer
// cannot be listed. Draining runs the handler, so a DLQ for events that
// fail for good is found in ctx as during Handle.
func (r *Resequencer) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	all, err := ListBuffered(ctx, r.client, r.a.cfg.Table, r.a.cfg.Consumer)
	if err != nil {
		return rep, err
	}
	now := r.a.cfg.Now()
	byAgg := map[aggRef][]BufferedEvent{}
	var order []aggRef
	for _, b := range all {
		ref := aggRef{b.AggregateType, b.AggregateID}
		if _, ok := byAgg[ref]; !ok {
			order = append(order, ref)
		}
		byAgg[ref] = append(byAgg[ref], b)
	}
	for _, ref := range order {
		waiting := byAgg[ref]
		oldest := waiting[0].BufferedAt
		for _, b := range waiting {
			if b.BufferedAt.Before(oldest) {
				oldest = b.BufferedAt
			}
		}
		if now.Sub(oldest) >= r.cfg.SweepMinAge && ctx.Err() == nil {
			n, err := r.drain(ctx, ref)
			rep.Drained += n
			if err != nil {
				rep.Failed++
				r.log.WarnContext(ctx, "dedup: sweep could not drain an aggregate; the next sweep retries", "aggregate_type", ref.typ, "aggregate_id", ref.id, "error", err)
			}
			if st, err := r.a.ReadGate(ctx, ref.typ, ref.id); err == nil {
				kept := waiting[:0]
				for _, b := range waiting {
					if st.IsBuffered(b.Sequence) && b.Sequence > st.Last {
						kept = append(kept, b)
					}
				}
				waiting = kept
			}
		}
		if len(waiting) == 0 {
			continue
		}
		rep.Aggregates++
		rep.Buffered += len(waiting)
		for _, b := range waiting {
			rep.OldestAge = max(rep.OldestAge, now.Sub(b.BufferedAt))
		}
	}
	return rep, nil
}

// SetBaseline declares consumer's starting point for one aggregate: its
// ordering item gets last_sequence = last, so the consumer applies the
// aggregate's events after last, in order, and treats those up to last as
// applied before it (duplicates). It only sets a starting point where none
// exists (no last_sequence): it returns false, nil when the consumer
// already has one for the aggregate. Events of the aggregate already
// waiting in the buffer are drained (last+1 onward) or removed (at or
// below last) by the consumer's next Sweep or next event of the aggregate.
// It returns an error when last < 0 or the write fails.
func SetBaseline(ctx context.Context, client TransactWriter, table, consumer, aggregateType, aggregateID string, last int64, now time.Time) (bool, error) {
	if last < 0 {
		return false, fmt.Errorf("dedup: baseline %d of %s %s is negative", last, aggregateType, aggregateID)
	}
	seq := expression.Name(AttrLastSequence)
	e, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(seq)).WithUpdate(expression.
		Set(seq, expression.Value(last)).
		Set(expression.Name(AttrLastEventID), expression.Value("baseline")).
		Set(expression.Name(AttrConsumer), expression.Value(consumer)).
		Set(expression.Name(AttrAggregateType), expression.Value(aggregateType)).
		Set(expression.Name(AttrAggregateID), expression.Value(aggregateID)).
		Set(expression.Name(AttrAppliedAt), expression.Value(now.UTC().Format(time.RFC3339Nano)))).Build()
	if err != nil {
		return false, fmt.Errorf("dedup: build baseline: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
	defer cancel()
	_, err = client.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
		TableName:        aws.String(table),
		Key:              map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: SequenceKey(consumer, aggregateType, aggregateID)}},
		UpdateExpression: e.Update(), ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}}}})
	if err == nil {
		return true, nil
	}
	if isConditionFailure(err) {
		return false, nil
	}
	return false, fmt.Errorf("dedup: set baseline of %s %s for %s: %w", aggregateType, aggregateID, consumer, err)
}

// setOutcome records o on the run's state and the trace span.
func setOutcome(ctx context.Context, s *applyState, o Outcome) {
	if s != nil && o > 0 {
		s.outcome = o
	}
	switch o {
	case OutcomeApplied:
		outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeApplied)
	case OutcomeDuplicate:
		outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeDuplicate)
	case OutcomeBuffered, outcomeHeld:
		outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeHeld)
	}
}

// tick runs one sweep for a sweep tick: logged, metrics written.
func (r *Resequencer) tick(ctx context.Context) {
	rep, err := r.Sweep(ctx)
	if err != nil {
		r.log.ErrorContext(ctx, "dedup: resequencer sweep failed; the next tick sweeps again", "error", err)
		return
	}
	lvl := slog.LevelInfo
	if rep.Buffered > 0 {
		lvl = slog.LevelWarn
	}
	r.log.Log(ctx, lvl, "dedup: resequencer sweep", "buffered", rep.Buffered, "aggregates", rep.Aggregates,
		"oldest_buffered_age_s", rep.OldestAge.Seconds(), "drained", rep.Drained, "failed", rep.Failed)
	if err := rep.WriteEMF(r.cfg.Metrics, r.a.cfg.Consumer, time.Now()); err != nil {
		r.log.WarnContext(ctx, "dedup: resequencer metrics not written", "error", err)
	}
}

// WriteEMF writes the report as one CloudWatch embedded metric format line
// (namespace config.MetricNamespace, dimension
// config.MetricDimensionConsumer = consumer): config.MetricBufferedEvents
// (Count), config.MetricOldestBufferedAge (Seconds) and
// config.MetricResequencerDrained (Count), timestamped now. Lambda's log
// stream turns it into metrics (CloudWatch user guide,
// CloudWatch_Embedded_Metric_Format_Specification). It returns w's error.
func (r SweepReport) WriteEMF(w io.Writer, consumer string, now time.Time) error {
	type def struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	line := map[string]any{
		config.MetricDimensionConsumer:  consumer,
		config.MetricBufferedEvents:     r.Buffered,
		config.MetricOldestBufferedAge:  r.OldestAge.Seconds(),
		config.MetricResequencerDrained: r.Drained,
		"_aws": map[string]any{
			"Timestamp": now.UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  config.MetricNamespace,
				"Dimensions": [][]string{{config.MetricDimensionConsumer}},
				"Metrics": []def{
					{config.MetricBufferedEvents, "Count"},
					{config.MetricOldestBufferedAge, "Seconds"},
					{config.MetricResequencerDrained, "Count"},
				},
			}},
		},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
