package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The drain: applying an aggregate's buffered events once their turn
// comes, each isolated from the delivery that drains it (docs/ORDERING.md
// "Poison in the drain").

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
		if ctx.Err() != nil {
			return n, r.cut(ctx, ref, next, ctx.Err())
		}
		item, err := r.getBuffered(ctx, ref, next)
		if err != nil {
			return n, err
		}
		var done bool
		switch {
		case item == nil:
			// Another drain applied it between the two reads (its
			// transaction removes the item and the set's member together):
			// read the gate again. Only when the set still names it is the
			// item really gone — a hand edit — and the set is unblocked.
			again, err := r.a.ReadGate(ctx, ref.typ, ref.id)
			if err != nil {
				return n, err
			}
			if again.IsBuffered(next) {
				r.log.ErrorContext(ctx, "dedup: buffered sequence without its buffer item; removing it from the set",
					"aggregate_type", ref.typ, "aggregate_id", ref.id, "sequence", next)
				if err := r.unbuffer(ctx, ref, next, nil); err != nil {
					return n, err
				}
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

// cut answers a drain cut short by the draining invocation's own deadline
// (not the buffered event's failure: nothing is counted or dead-lettered).
// Below its last receive the delivery is retried (an error: its
// redelivery, a duplicate, drains again at once); on its last receive it
// succeeds (nil) — failing it would move the predecessor's message, an
// applied event, to the DLQ — and what is left waits for the next event of
// the aggregate or the sweep.
func (r *Resequencer) cut(ctx context.Context, ref aggRef, seq int64, cause error) error {
	if m, ok := sqsconsumer.MessageFromContext(ctx); !ok || sqsconsumer.ReceiveCount(m) < r.cfg.LastReceive {
		return fmt.Errorf("dedup: drain of %s %s cut at sequence %d by the invocation's deadline (a redelivery drains it): %w", ref.typ, ref.id, seq, cause)
	}
	r.log.WarnContext(ctx, "dedup: drain cut by the invocation's deadline on the delivery's last receive; the sweep or the next event drains the rest",
		"aggregate_type", ref.typ, "aggregate_id", ref.id, "sequence", seq, "error", cause)
	return nil
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
// draining delivery is retried. A run cut by the draining invocation's own
// deadline is not the event's failure (cut).
func (r *Resequencer) applyBuffered(ctx context.Context, ref aggRef, item BufferedEvent) (bool, error) {
	var ev events.EventBridgeEvent
	if err := json.Unmarshal([]byte(item.Body), &ev); err != nil {
		p := &sqsconsumer.PermanentError{Reason: ReasonMalformedEvent, Err: fmt.Errorf("%w: buffered body of %s: %v", ErrMalformedEvent, item.Key, err)}
		_, err := r.deadLetterBuffered(ctx, ref, item, p, shortOf(item.Sequence))
		return false, err
	}
	outcome, kind, herr := r.run(ctx, ev, item)
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
	if !permanent && ctx.Err() != nil {
		// The draining invocation ran out of time, not the event: neither
		// counted nor dead-lettered.
		return false, r.cut(ctx, ref, item.Sequence, herr)
	}
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
// handler's Apply recorded, the reason a failure would be dead-lettered
// with (ReasonDrainFailed, ReasonDrainPanic, ReasonDrainTimeout), and the
// handler's error.
func (r *Resequencer) run(ctx context.Context, ev events.EventBridgeEvent, item BufferedEvent) (Outcome, string, error) {
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
			return 0, ReasonDrainPanic, fmt.Errorf("dedup: handler panicked on buffered event %s: %v", item.EventID, res.panic)
		case res.err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			return st.outcome, ReasonDrainTimeout, fmt.Errorf("dedup: buffered event %s took longer than %s: %w", item.EventID, r.cfg.DrainTimeout, res.err)
		}
		return st.outcome, ReasonDrainFailed, res.err
	case <-rctx.Done():
		// The handler ignores its context: abandon it. Should it still
		// commit, its transaction is the event's one apply (marker), and a
		// dead-lettered copy is a duplicate.
		if ctx.Err() != nil {
			return 0, ReasonDrainFailed, fmt.Errorf("dedup: buffered event %s: the drain ran out of time: %w", item.EventID, ctx.Err())
		}
		return 0, ReasonDrainTimeout, fmt.Errorf("dedup: buffered event %s took longer than %s", item.EventID, r.cfg.DrainTimeout)
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
