package dedup

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

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
	// could take it (yet: the next drain or sweep tries again).
	FailedReason string `json:"failed_reason,omitempty"`
	// Applied is true for an event stored after it was applied (it
	// arrived ahead of the gate with its marker present): the gate adopts
	// it in turn, never applies it again.
	Applied bool `json:"applied,omitempty"`
	// Failures counts the drains in which applying it failed for now (an
	// error, a panic, a timeout); ResequencerConfig.DrainMaxFailures of
	// them dead-letter it.
	Failures int `json:"drain_failures,omitempty"`
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
	if v, ok := item[AttrApplied].(*types.AttributeValueMemberBOOL); ok {
		b.Applied = v.Value
	}
	if n, ok := item[AttrDrainFailures].(*types.AttributeValueMemberN); ok {
		v, err := strconv.Atoi(n.Value)
		if err != nil {
			return b, fmt.Errorf("dedup: buffer item %s %s %q: %w", b.Key, AttrDrainFailures, n.Value, err)
		}
		b.Failures = v
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

// envelope is the part of the buffered event's envelope the gate uses.
func (b BufferedEvent) envelope() outbox.Envelope {
	return outbox.Envelope{EventID: b.EventID, EventType: b.EventType, AggregateType: b.AggregateType, AggregateID: b.AggregateID, Sequence: b.Sequence}
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
// transaction, when cond holds on the ordering item (nil: always) — used
// for dead-lettered events and for those the gate is already past. A
// failed cond means the gate moved: someone else dealt with it (nil).
func (r *Resequencer) unbuffer(ctx context.Context, ref aggRef, seq int64, cond *expression.ConditionBuilder) error {
	b := expression.NewBuilder().WithUpdate(expression.Delete(expression.Name(AttrBuffered), expression.Value(seqSet(seq))))
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	e, err := b.Build()
	if err != nil {
		return fmt.Errorf("dedup: build unbuffer: %w", err)
	}
	_, err = r.a.write(ctx, []types.TransactWriteItem{
		r.a.deleteBufferItem(ref.typ, ref.id, seq),
		{Update: &types.Update{TableName: aws.String(r.a.cfg.Table), Key: r.a.seqKey(ref.typ, ref.id),
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()}},
	}, "unbuffer "+strconv.FormatInt(seq, 10))
	return err
}

// deadLetterBuffered hands a buffered event that cannot be applied to the
// consumer's DLQ (sqsconsumer.DeadLettererFromContext) with p's reason and,
// only once the DLQ has its copy, removes it from the buffer (when cond
// holds on the ordering item; nil: always). An event leaves the buffer only
// when it is applied or a copy is on a DLQ: when the send fails, or no DLQ
// is configured, the buffer item is marked failed (ListBuffered shows the
// reason) and stays; the next drain or sweep tries again. It reports
// whether the event left the buffer; an error only when the buffer write
// failed.
func (r *Resequencer) deadLetterBuffered(ctx context.Context, ref aggRef, item BufferedEvent, p *sqsconsumer.PermanentError, cond *expression.ConditionBuilder) (bool, error) {
	log := r.log.With("event_id", item.EventID, "aggregate_id", ref.id, "sequence", item.Sequence, "reason", p.Reason)
	dl, ok := sqsconsumer.DeadLettererFromContext(ctx)
	if !ok {
		log.ErrorContext(ctx, "dedup: buffered event cannot be applied and no DLQ is configured; left in the buffer, marked failed", "error", p.Err)
		return false, r.markFailed(ctx, item, p.Reason, p)
	}
	sctx, cancel := detached(ctx)
	defer cancel()
	if err := dl.DeadLetter(sctx, item.Body, "resequencer:"+item.EventID, p); err != nil {
		log.ErrorContext(ctx, "dedup: buffered event cannot be applied and its DLQ send failed; kept in the buffer, marked failed (the next drain or sweep sends it again)",
			"error", p.Err, "dlq_error", err)
		return false, r.markFailed(ctx, item, p.Reason, fmt.Errorf("%w (DLQ send failed: %v)", p, err))
	}
	log.ErrorContext(ctx, "dedup: buffered event cannot be applied; dead-lettered on its own, its successors wait for its redrive", "error", p.Err)
	return true, r.unbuffer(sctx, ref, item.Sequence, cond)
}

// detached returns ctx, or — when ctx is already done (the drain ran out of
// time) — a context that is not cancelled with it, bounded by
// detachedTimeout, so what the drain learnt is still written.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), detachedTimeout)
}

// detachedTimeout bounds a write made after the drain's context ended: the
// SQS consumer keeps its Reserve (2 s by default) before the invocation
// deadline for answering.
const detachedTimeout = time.Second

// markFailed records on the buffer item why applying it failed
// (AttrFailedReason, AttrFailedError, AttrFailedAt) without counting a
// drain failure. A missing item (drained meanwhile) is not an error.
func (r *Resequencer) markFailed(ctx context.Context, item BufferedEvent, reason string, cause error) error {
	return r.updateBuffered(ctx, item, expression.
		Set(expression.Name(AttrFailedReason), expression.Value(reason)).
		Set(expression.Name(AttrFailedError), expression.Value(clip(cause.Error(), 1024))).
		Set(expression.Name(AttrFailedAt), expression.Value(time.Now().UTC().Format(time.RFC3339))))
}

// countFailure adds one drain failure to the buffer item (AttrDrainFailures)
// with its error text, and returns the new count.
func (r *Resequencer) countFailure(ctx context.Context, item BufferedEvent, cause error) (int, error) {
	err := r.updateBuffered(ctx, item, expression.
		Add(expression.Name(AttrDrainFailures), expression.Value(1)).
		Set(expression.Name(AttrFailedError), expression.Value(clip(cause.Error(), 1024))).
		Set(expression.Name(AttrFailedAt), expression.Value(time.Now().UTC().Format(time.RFC3339))))
	return item.Failures + 1, err
}

// updateBuffered applies upd to the buffer item if it still exists.
func (r *Resequencer) updateBuffered(ctx context.Context, item BufferedEvent, upd expression.UpdateBuilder) error {
	e, err := expression.NewBuilder().WithUpdate(upd).WithCondition(expression.AttributeExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return fmt.Errorf("dedup: build buffer item update: %w", err)
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	_, err = r.a.write(wctx, []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String(r.a.cfg.Table), Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: item.Key}},
		UpdateExpression: e.Update(), ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}}}, "update buffered event "+item.EventID)
	return err
}

func isConditionFailure(err error) bool {
	te, ok := outbox.AsTxError(outbox.TranslateTxError(err))
	return ok && te.FirstConditionFailed() >= 0
}

// bufferOutcome is what a buffer write found.
type bufferOutcome int

const (
	bufferStored    bufferOutcome = iota // stored: OutcomeBuffered
	bufferDuplicate                      // this event is buffered already
	bufferRejudge                        // the gate moved under it: decide again
	bufferFull                           // MaxDepth reached or too large: hold it in the queue
)

// buffer stores env's event (s.ev) as the aggregate's buffered sequence,
// in one transaction conditioned on the gate still being short of it: Put
// of the buffer item (attribute_not_exists) and ADD of its sequence to the
// ordering item's buffered set, guarded by last_sequence < env.Sequence-1
// (or no last_sequence) and the set's size below MaxDepth. With applied the
// item is stored as applied (AttrApplied): the gate adopts it in turn; its
// body is kept when it fits (for the operator's view), never needed.
func (a *Applier) buffer(ctx context.Context, env outbox.Envelope, s *applyState, gs GateState, applied bool) (bufferOutcome, error) {
	if len(gs.Buffered) >= s.r.cfg.MaxDepth {
		return bufferFull, nil
	}
	body, err := json.Marshal(s.ev)
	if err != nil {
		return 0, fmt.Errorf("dedup: encode event %s for the buffer: %w", env.EventID, err)
	}
	if len(body) > MaxBufferedEventBytes {
		if !applied {
			return bufferFull, nil
		}
		body = nil
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
		AttrBufferedAt:    &types.AttributeValueMemberS{Value: now.Format(BufferedAtLayout)},
		AttrBufferShard:   &types.AttributeValueMemberS{Value: BufferShard(a.cfg.Consumer, env.AggregateType, env.AggregateID)},
	}
	if body != nil {
		item[AttrBody] = &types.AttributeValueMemberS{Value: string(body)}
	}
	if applied {
		item[AttrApplied] = &types.AttributeValueMemberBOOL{Value: true}
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
	items := []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(a.cfg.Table), Item: item, ConditionExpression: put.Condition(),
			ExpressionAttributeNames: put.Names(), ExpressionAttributeValues: put.Values()}},
		{Update: &types.Update{TableName: aws.String(a.cfg.Table), Key: a.seqKey(env.AggregateType, env.AggregateID),
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()}},
	}
	if err := outbox.CheckTransaction(items); err != nil {
		return bufferFull, nil //nolint:nilerr // too large to buffer: hold it in the queue instead
	}
	te, err := a.write(ctx, items, "buffer event "+env.EventID)
	switch {
	case err != nil:
		return 0, err
	case te == nil:
		return bufferStored, nil
	case te.ConditionFailed(1):
		return bufferRejudge, nil
	}
	// The buffer item exists: this event buffered already, or another one
	// claiming its sequence.
	other, err := s.r.getBuffered(ctx, aggRef{env.AggregateType, env.AggregateID}, env.Sequence)
	switch {
	case err != nil:
		return 0, err
	case other == nil:
		return bufferRejudge, nil // drained meanwhile
	case other.EventID != env.EventID:
		return 0, sqsconsumer.Permanent(ReasonSequenceConflict, fmt.Errorf("dedup: %s: event %s claims sequence %d of %s %s, which buffered event %s holds",
			a.cfg.Consumer, env.EventID, env.Sequence, env.AggregateType, env.AggregateID, other.EventID))
	case applied && !other.Applied:
		// Buffered before its marker was written by another delivery: the
		// drain must adopt it, never apply it again (its marker may expire).
		if err := s.r.updateBuffered(ctx, *other, expression.Set(expression.Name(AttrApplied), expression.Value(true))); err != nil {
			return 0, err
		}
	}
	return bufferDuplicate, nil
}
