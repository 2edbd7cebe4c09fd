package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// applyOrdered is ApplyEvent for an ordered Applier: the fast-path
// transaction, then, when DynamoDB cancels it, classify and decide
// (decide.go) and the action the decision names. Every step that sends or
// re-reads counts against MaxAttempts.
func (a *Applier) applyOrdered(ctx context.Context, env outbox.Envelope, effects []types.TransactWriteItem) (Outcome, error) {
	rs := stateFrom(ctx)
	mode, delBuffer := gateFast, false
	if rs != nil && rs.drain.matches(env) {
		// A drain of its buffer item: successors may wait behind it, and
		// its own buffer item goes with the apply.
		mode, delBuffer = gateBuffered, true
	}
	var (
		last    error // the last retryable cancellation
		retries int   // backoff exponent: only retries wait
		applied bool  // the marker showed the event applied: no need to send the transaction again
		te      *outbox.TxError
	)
	for attempt := 1; attempt <= a.cfg.MaxAttempts; attempt++ {
		if retries > 0 {
			if err := sleep(ctx, a.backoff(retries)); err != nil {
				return 0, fmt.Errorf("dedup: event %s: %w (last: %v)", env.EventID, err, last)
			}
		}
		if !applied {
			in, gate, err := a.transaction(env, effects, mode, delBuffer)
			if err != nil {
				return 0, err
			}
			err = a.call(ctx, in)
			if err == nil {
				if mode == gateBuffered {
					rs.follow(env.AggregateType, env.AggregateID)
				}
				setOutcome(ctx, rs, OutcomeApplied)
				return OutcomeApplied, nil
			}
			var ok bool
			if te, ok = outbox.AsTxError(outbox.TranslateTxError(err)); !ok {
				return 0, fmt.Errorf("dedup: apply event %s: %w", env.EventID, err)
			}
			switch classify(te, gate) {
			case verdictMarker:
				applied = true
			case verdictGate:
				// The gate decides: its effects' conditions were judged
				// against a state the gate did not allow, and must not
				// reach the consumer as its effects' answer.
				te = unjudged(te, gate)
			case verdictRetry:
				last, retries = te, retries+1
				continue
			default: // verdictPermanent, verdictEffect, verdictFatal: the caller's answer
				return 0, fmt.Errorf("dedup: apply event %s: %w", env.EventID, te)
			}
		}

		st, err := a.ReadGate(ctx, env.AggregateType, env.AggregateID)
		if err != nil {
			if applied {
				return 0, fmt.Errorf("dedup: event %s was applied before, but its ordering state could not be checked (deliver it again): %w", env.EventID, err)
			}
			return 0, fmt.Errorf("dedup: apply event %s: ordering gate failed: %w", env.EventID, err)
		}
		if st.IsBuffered(st.Last + 1) {
			// The next sequence waits (also what a crash between an apply
			// and its drain leaves): drain it after this run.
			rs.follow(env.AggregateType, env.AggregateID)
		}
		act, why, err := decide(observe(env.Sequence, applied, st))
		if err != nil {
			return 0, err
		}
		if rs != nil && rs.r != nil {
			rs.r.log.DebugContext(ctx, "dedup: ordered apply decision", "event_id", env.EventID, "aggregate_id", env.AggregateID,
				"sequence", env.Sequence, "last_sequence", st.Last, "buffered", len(st.Buffered), "applied", applied, "action", act.String(), "why", why)
		}
		switch act {
		case actDuplicate:
			setOutcome(ctx, rs, OutcomeDuplicate)
			return OutcomeDuplicate, nil
		case actAdopt:
			moved, err := a.adopt(ctx, env, st.IsBuffered(env.Sequence))
			if err != nil {
				return 0, fmt.Errorf("dedup: adopt applied event %s into the ordering gate: %w", env.EventID, err)
			}
			if moved {
				retries = 0
				continue // decide again on a fresh read
			}
			if st.IsBuffered(env.Sequence + 1) {
				rs.follow(env.AggregateType, env.AggregateID)
			}
			setOutcome(ctx, rs, OutcomeDuplicate)
			return OutcomeDuplicate, nil
		case actApply:
			if mode == gateBuffered {
				// Already sent past the buffer condition: the gate moved
				// between that transaction and the read, like a conflict.
				last, retries = te, retries+1
			} else {
				retries = 0
			}
			mode, delBuffer = gateBuffered, st.IsBuffered(env.Sequence)
			continue
		case actRetry:
			if te != nil && (te.Invalid() || te.CollectionFull()) {
				return 0, fmt.Errorf("dedup: apply event %s: %w", env.EventID, te)
			}
			last, retries = te, retries+1
			continue
		case actBuffer, actBufferApplied:
			if rs == nil || rs.r == nil {
				setOutcome(ctx, rs, outcomeHeld)
				return 0, a.gapError(env, st.Last)
			}
			bo, err := a.buffer(ctx, env, rs, st, act == actBufferApplied)
			switch {
			case err != nil:
				return 0, err
			case bo == bufferStored && act == actBufferApplied:
				rs.r.log.InfoContext(ctx, "dedup: applied event ahead of the gate kept in the buffer; the gate adopts it in turn",
					"event_id", env.EventID, "aggregate_id", env.AggregateID, "sequence", env.Sequence, "last_sequence", st.Last)
				setOutcome(ctx, rs, OutcomeDuplicate)
				return OutcomeDuplicate, nil
			case bo == bufferStored:
				rs.r.log.InfoContext(ctx, "dedup: early event buffered until its predecessor is applied",
					"event_id", env.EventID, "aggregate_id", env.AggregateID, "sequence", env.Sequence, "last_sequence", st.Last)
				setOutcome(ctx, rs, OutcomeBuffered)
				return OutcomeBuffered, nil
			case bo == bufferDuplicate:
				setOutcome(ctx, rs, OutcomeDuplicate)
				return OutcomeDuplicate, nil
			case bo == bufferFull:
				setOutcome(ctx, rs, outcomeHeld)
				return 0, a.gapError(env, st.Last)
			}
			// bufferRejudge: the gate moved under the buffer write.
			retries = 0
			continue
		}
	}
	if last == nil {
		last = errors.New("the ordering gate kept moving")
	}
	return 0, fmt.Errorf("dedup: apply event %s: gave up after %d attempts: %w", env.EventID, a.cfg.MaxAttempts, last)
}

// ReasonUnjudged replaces ConditionalCheckFailed at an effect of an
// ordered Apply whose gate's condition failed in the same transaction (in
// errors ApplyEvent returns after such a cancellation): the effect's
// condition was evaluated against a state the gate did not allow (its
// predecessor still committing), so it is not the effect's answer, and
// FailedEffect and EffectConditionFailed do not report it.
const ReasonUnjudged = "ConditionalCheckFailed (not judged: the ordering gate failed)"

// unjudged returns te with the effects' ConditionalCheckFailed codes (the
// actions between the marker and the gate) replaced by ReasonUnjudged.
func unjudged(te *outbox.TxError, gate int) *outbox.TxError {
	reasons := slices.Clone(te.Reasons)
	for i := MarkerIndex + 1; i < gate && i < len(reasons); i++ {
		if reasons[i] == outbox.ReasonConditionalCheckFailed {
			reasons[i] = ReasonUnjudged
		}
	}
	return &outbox.TxError{Reasons: reasons, Err: te.Err}
}

// adopt advances the gate over an event that was applied (its marker
// exists, or its buffer item was stored as applied) without applying it
// again: last_sequence = env.Sequence, conditioned on last_sequence =
// env.Sequence-1 (no last_sequence for sequence 1), its sequence removed
// from the buffered set and, with hasBufferItem, its buffer item deleted,
// in one transaction. It returns moved = true when the gate was not one
// short any more (someone else advanced it: decide again), and an error
// when the write failed for another reason.
func (a *Applier) adopt(ctx context.Context, env outbox.Envelope, hasBufferItem bool) (moved bool, err error) {
	g, err := a.gate(env, a.cfg.Now(), gateBuffered)
	if err != nil {
		return false, err
	}
	items := []types.TransactWriteItem{g}
	if hasBufferItem {
		items = append(items, a.deleteBufferItem(env.AggregateType, env.AggregateID, env.Sequence))
	}
	te, err := a.write(ctx, items, "adopt "+env.EventID)
	if err != nil {
		return false, err
	}
	return te != nil, nil
}

// deleteBufferItem is the Delete of a buffer item, for a transaction that
// also takes its sequence out of the gate's buffered set.
func (a *Applier) deleteBufferItem(aggregateType, aggregateID string, seq int64) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(a.cfg.Table),
		Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: BufferKey(a.cfg.Consumer, aggregateType, aggregateID, seq)}}}}
}

// write sends one of the resequencer's own transactions (no marker: an
// adoption, a buffer removal, a failure mark), sending it again on
// conflicts and throttling, bounded by MaxAttempts. It returns the
// *outbox.TxError when a condition failed (nothing written: the caller
// decides what that means), and an error for anything else.
func (a *Applier) write(ctx context.Context, items []types.TransactWriteItem, what string) (*outbox.TxError, error) {
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}
	var last error
	for attempt := 1; attempt <= a.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, a.backoff(attempt-1)); err != nil {
				return nil, fmt.Errorf("dedup: %s: %w (last: %v)", what, err, last)
			}
		}
		err := a.call(ctx, in)
		if err == nil {
			return nil, nil
		}
		te, ok := outbox.AsTxError(outbox.TranslateTxError(err))
		switch {
		case !ok:
			return nil, fmt.Errorf("dedup: %s: %w", what, err)
		case te.FirstConditionFailed() >= 0:
			return te, nil
		case !te.Retryable():
			return nil, fmt.Errorf("dedup: %s: %w", what, te)
		}
		last = te
	}
	return nil, fmt.Errorf("dedup: %s: gave up after %d attempts: %w", what, a.cfg.MaxAttempts, last)
}

// markerExists reports whether this consumer's dedup marker of eventID
// exists (a strongly consistent GetItem bounded by CallTimeout): the event
// was applied (within the marker's retention).
func (a *Applier) markerExists(ctx context.Context, eventID string) (bool, error) {
	if a.getter == nil {
		return false, errors.New("dedup: marker read on an unordered Applier")
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	defer cancel()
	out, err := a.getter.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(a.cfg.Table), Key: a.Key(eventID),
		ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String(AttrPK)})
	if err != nil {
		return false, fmt.Errorf("dedup: read marker of %s: %w", eventID, err)
	}
	return out != nil && out.Item != nil, nil
}
