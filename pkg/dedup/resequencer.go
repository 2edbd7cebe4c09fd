package dedup

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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
	// Default config.MetricsWriter() (Lambda's log stream in Lambda,
	// nothing elsewhere; config.EnvMetrics overrides); io.Discard disables.
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
		c.Metrics = config.MetricsWriter()
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
