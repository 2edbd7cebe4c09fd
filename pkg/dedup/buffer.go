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
