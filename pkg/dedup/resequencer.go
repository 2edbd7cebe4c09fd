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
	"runtime/debug"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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
//	applied       = true for an event stored after it was applied (it arrived
//	                ahead of the gate with its marker present): adopted in turn
//	drain_failures = how often applying it failed for now when its turn came
//	failed_reason, failed_error, failed_at: why applying it failed (for good
//	with no DLQ able to take it yet, or for now; ListBuffered shows them)
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
	// AttrApplied (BOOL true) marks an event stored after it was applied:
	// it arrived ahead of the gate with its marker present; the gate
	// adopts it in turn.
	AttrApplied = "applied"
	// AttrDrainFailures (N) counts the drains in which applying the event
	// failed for now.
	AttrDrainFailures = "drain_failures"
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
	// DrainMaxFailures is how many drains may fail for now (the handler's
	// error, a panic, a timeout) on a buffered event whose turn came
	// before it is dead-lettered on its own (ReasonDrainFailed,
	// ReasonDrainPanic, ReasonDrainTimeout); below it the draining
	// delivery is retried. Default DefaultDrainMaxFailures (3); it must
	// stay below the consumer queue's maxReceiveCount.
	DrainMaxFailures int
	// DrainTimeout bounds one buffered event's apply in a drain (default
	// DefaultDrainTimeout, 10 s; never past the invocation's deadline).
	DrainTimeout time.Duration
	// LastReceive is the receive (SQS ApproximateReceiveCount) of the
	// draining delivery from which a failing buffered event is
	// dead-lettered at once instead of failing the delivery: the
	// predecessor's message is never moved to the DLQ by its successor.
	// Default ConsumerConfig.GapMaxReceives (the queue's maxReceiveCount).
	LastReceive int
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
	if c.DrainMaxFailures == 0 {
		c.DrainMaxFailures = DefaultDrainMaxFailures
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.LastReceive == 0 {
		c.LastReceive = config.DefaultConsumerGapMaxReceives
	}
}

// Validate reports an invalid setting (after defaults).
func (c ResequencerConfig) Validate() error {
	switch {
	case c.MaxDepth < 1 || c.MaxDepth > MaxBufferMaxDepth:
		return fmt.Errorf("dedup: Resequencer.MaxDepth %d is outside 1..%d", c.MaxDepth, MaxBufferMaxDepth)
	case c.SweepMinAge < 0:
		return fmt.Errorf("dedup: Resequencer.SweepMinAge %s is negative", c.SweepMinAge)
	case c.DrainMaxFailures < 1:
		return fmt.Errorf("dedup: Resequencer.DrainMaxFailures %d must be >= 1", c.DrainMaxFailures)
	case c.DrainTimeout < 0:
		return fmt.Errorf("dedup: Resequencer.DrainTimeout %s is negative", c.DrainTimeout)
	case c.LastReceive < 1:
		return fmt.Errorf("dedup: Resequencer.LastReceive %d must be >= 1", c.LastReceive)
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
// many it applied or adopted. Buffered events the gate is already past are
// settled first (settleBehind). A buffered event that cannot be applied is
// dead-lettered on its own (applyBuffered) and ends the drain: its
// successors wait for its redrive. The error is a read that failed, or a
// buffered event that failed for now below its bounds: the caller's
// delivery is retried, and its redelivery (or the next event of the
// aggregate, or a sweep) drains again.
func (r *Resequencer) drain(ctx context.Context, ref aggRef) (int, error) {
	st, err := r.a.ReadGate(ctx, ref.typ, ref.id)
	if err != nil {
		return 0, err
	}
	if err := r.settleBehind(ctx, ref, st); err != nil {
		return 0, err
	}
	n := 0
	for {
		next := st.Last + 1
		if !st.IsBuffered(next) {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		item, err := r.getBuffered(ctx, ref, next)
		if err != nil {
			return n, err
		}
		var done bool
		switch {
		case item == nil:
			// The set names it but the item is gone: only a hand edit can do
			// that (both change in one transaction). Unblock the set.
			r.log.ErrorContext(ctx, "dedup: buffered sequence without its buffer item; removing it from the set",
				"aggregate_type", ref.typ, "aggregate_id", ref.id, "sequence", next)
			if err := r.unbuffer(ctx, ref, next, nil); err != nil {
				return n, err
			}
		case item.Applied:
			moved, err := r.a.adopt(ctx, item.envelope(), true)
			if err != nil {
				return n, fmt.Errorf("dedup: adopt buffered applied event %s: %w", item.EventID, err)
			}
			if !moved {
				n++
				r.log.InfoContext(ctx, "dedup: applied event adopted by the gate in turn", "event_id", item.EventID,
					"aggregate_id", ref.id, "sequence", next)
			}
		default:
			if done, err = r.applyBuffered(ctx, ref, *item); err != nil {
				return n, err
			}
			if !done {
				return n, nil
			}
			n++
		}
		if st, err = r.a.ReadGate(ctx, ref.typ, ref.id); err != nil {
			return n, err
		}
	}
}

// Defaults of the drain's bounds (ResequencerConfig).
const (
	// DefaultDrainMaxFailures: a buffered event whose apply failed for now
	// this many times when its turn came is dead-lettered on its own.
	DefaultDrainMaxFailures = 3
	// DefaultDrainTimeout bounds one buffered event's apply in a drain.
	DefaultDrainTimeout = 10 * time.Second
)

// Dead-letter reasons of buffered events that failed when their turn came
// (besides their handler's own permanent reasons).
const (
	// ReasonDrainFailed: the handler returned an error for the event in
	// DrainMaxFailures drains (or on its predecessor's last receive).
	ReasonDrainFailed = "resequencer_drain_failed"
	// ReasonDrainPanic: the handler panicked on the event.
	ReasonDrainPanic = "resequencer_drain_panic"
	// ReasonDrainTimeout: the handler did not finish within DrainTimeout.
	ReasonDrainTimeout = "resequencer_drain_timeout"
	// ReasonBehindGate: the gate is past a buffered event that was never
	// applied (a gate restored or set without its buffer, a hand edit): it
	// is dead-lettered for an operator, never dropped.
	ReasonBehindGate = "behind_gate"
)

// applyBuffered applies one buffered event whose turn came, through the
// consumer's handler, isolated from the delivery that drains it: a panic
// is recovered and a run longer than DrainTimeout abandoned. It returns
// done = true when the event was applied (or found applied); done = false
// with a nil error when it was dead-lettered on its own (its handler's
// permanent reason; after DrainMaxFailures failures, or a failure on the
// draining delivery's last receive, ReasonDrainFailed, ReasonDrainPanic or
// ReasonDrainTimeout) or kept because that DLQ send failed; and an error
// for a failure below those bounds (counted on the buffer item): the
// draining delivery is retried.
func (r *Resequencer) applyBuffered(ctx context.Context, ref aggRef, item BufferedEvent) (bool, error) {
	var ev events.EventBridgeEvent
	if err := json.Unmarshal([]byte(item.Body), &ev); err != nil {
		p := &sqsconsumer.PermanentError{Reason: ReasonMalformedEvent, Err: fmt.Errorf("%w: buffered body of %s: %v", ErrMalformedEvent, item.Key, err)}
		_, err := r.deadLetterBuffered(ctx, ref, item, p, shortOf(item.Sequence))
		return false, err
	}
	outcome, herr, kind := r.run(ctx, ev, item)
	if herr == nil && outcome == 0 {
		herr = sqsconsumer.Permanent(ReasonNotApplied, fmt.Errorf("dedup: %s acknowledged buffered event %s (sequence %d of %s %s) without applying it",
			r.a.cfg.Consumer, item.EventID, item.Sequence, ref.typ, ref.id))
	}
	if herr == nil {
		if outcome == OutcomeApplied {
			r.log.InfoContext(ctx, "dedup: buffered event applied after its predecessor",
				"event_id", item.EventID, "aggregate_id", ref.id, "sequence", item.Sequence, "waited_ms", time.Since(item.BufferedAt).Milliseconds())
		}
		return true, nil
	}
	p, permanent := sqsconsumer.AsPermanent(herr)
	if !permanent {
		failures, err := r.countFailure(ctx, item, herr)
		if err != nil {
			r.log.WarnContext(ctx, "dedup: buffered event's drain failure not counted", "event_id", item.EventID, "error", err)
		}
		lastReceive := false
		if m, ok := sqsconsumer.MessageFromContext(ctx); ok {
			lastReceive = sqsconsumer.ReceiveCount(m) >= r.cfg.LastReceive
		}
		if failures < r.cfg.DrainMaxFailures && !lastReceive {
			r.log.WarnContext(ctx, "dedup: buffered event failed when its turn came; the drain is retried",
				"event_id", item.EventID, "aggregate_id", ref.id, "sequence", item.Sequence, "failures", failures, "error", herr)
			return false, fmt.Errorf("dedup: apply buffered event %s (sequence %d, failure %d of %d): %w", item.EventID, item.Sequence, failures, r.cfg.DrainMaxFailures, herr)
		}
		p = &sqsconsumer.PermanentError{Reason: kind, Err: fmt.Errorf("buffered event %s (sequence %d) failed in %d drains: %w", item.EventID, item.Sequence, failures, herr)}
	}
	_, err := r.deadLetterBuffered(ctx, ref, item, p, shortOf(item.Sequence))
	return false, err
}

// shortOf is the condition "the gate is still short of seq": a dead-lettered
// event leaves the buffer only while nobody applied it meanwhile.
func shortOf(seq int64) *expression.ConditionBuilder {
	c := expression.Name(AttrLastSequence).LessThan(expression.Value(seq))
	return &c
}

// run runs the consumer's handler for a buffered event in its own span
// (child of the run that drains it, when tracing is on), with the drain
// target set (its transaction deletes the buffer item), bounded by
// DrainTimeout and with panics recovered. It returns the outcome the
// handler's Apply recorded, the handler's error, and the reason a failure
// would be dead-lettered with (ReasonDrainFailed, ReasonDrainPanic,
// ReasonDrainTimeout).
func (r *Resequencer) run(ctx context.Context, ev events.EventBridgeEvent, item BufferedEvent) (Outcome, error, string) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	defer cancel()
	st := &applyState{r: r, ev: &ev, drain: &drainTarget{seq: item.Sequence, eventID: item.EventID}}
	if outboxtrace.Enabled() {
		var span trace.Span
		rctx, span = outboxtrace.Tracer().Start(rctx, "resequencer apply "+item.EventType, trace.WithAttributes(
			outboxtrace.AttrEventID.String(item.EventID), outboxtrace.AttrEventType.String(item.EventType),
			outboxtrace.AttrAggregateID.String(item.AggregateID), outboxtrace.AttrSequence.Int64(item.Sequence),
			outboxtrace.AttrConsumer.String(r.a.cfg.Consumer),
			attribute.Int64("outbox.buffered_ms", time.Since(item.BufferedAt).Milliseconds())))
		defer span.End()
		defer func() {
			if st.outcome == 0 {
				span.RecordError(errors.New("buffered event not applied"))
			}
		}()
	} else {
		// a non-recording span: SetOutcome leaves the predecessor's alone
		rctx = trace.ContextWithSpan(rctx, trace.SpanFromContext(context.Background()))
	}
	type result struct {
		err   error
		panic any
		stack []byte
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panic: p, stack: debug.Stack()}
			}
		}()
		done <- result{err: r.h(withState(rctx, st), ev)}
	}()
	select {
	case res := <-done:
		switch {
		case res.panic != nil:
			r.log.ErrorContext(ctx, "dedup: handler panicked on a buffered event", "event_id", item.EventID,
				"sequence", item.Sequence, "panic", fmt.Sprint(res.panic), "stack", string(res.stack))
			return 0, fmt.Errorf("dedup: handler panicked on buffered event %s: %v", item.EventID, res.panic), ReasonDrainPanic
		case res.err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			return st.outcome, fmt.Errorf("dedup: buffered event %s took longer than %s: %w", item.EventID, r.cfg.DrainTimeout, res.err), ReasonDrainTimeout
		}
		return st.outcome, res.err, ReasonDrainFailed
	case <-rctx.Done():
		// The handler ignores its context: abandon it. Should it still
		// commit, its transaction is the event's one apply (marker), and a
		// dead-lettered copy is a duplicate.
		if ctx.Err() != nil {
			return 0, fmt.Errorf("dedup: buffered event %s: the drain ran out of time: %w", item.EventID, ctx.Err()), ReasonDrainFailed
		}
		return 0, fmt.Errorf("dedup: buffered event %s took longer than %s", item.EventID, r.cfg.DrainTimeout), ReasonDrainTimeout
	}
}

// settleBehind takes out of the buffer the events the gate is already past
// (only a starting point set by an older version, a restored gate or a hand
// edit leaves them): an event that was applied (stored as applied, or its
// marker exists) is removed; one that never was is dead-lettered with
// ReasonBehindGate and removed only once the DLQ has it. Nothing is
// dropped unapplied.
func (r *Resequencer) settleBehind(ctx context.Context, ref aggRef, st GateState) error {
	for _, seq := range st.Buffered {
		if seq > st.Last {
			break
		}
		item, err := r.getBuffered(ctx, ref, seq)
		if err != nil {
			return err
		}
		applied := item == nil || item.Applied
		if !applied {
			if applied, err = r.a.markerExists(ctx, item.EventID); err != nil {
				return err
			}
		}
		if applied {
			r.log.InfoContext(ctx, "dedup: buffered event the gate is past was applied; removed from the buffer",
				"aggregate_type", ref.typ, "aggregate_id", ref.id, "sequence", seq, "last_sequence", st.Last)
			if err := r.unbuffer(ctx, ref, seq, nil); err != nil {
				return err
			}
			continue
		}
		p := &sqsconsumer.PermanentError{Reason: ReasonBehindGate, Err: fmt.Errorf("buffered event %s (sequence %d of %s %s) was never applied, but the gate is at %d",
			item.EventID, seq, ref.typ, ref.id, st.Last)}
		if _, err := r.deadLetterBuffered(ctx, ref, *item, p, nil); err != nil {
			return err
		}
	}
	return nil
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
