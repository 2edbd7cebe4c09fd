package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// Source says where a Result came from.
type Source string

// Result sources.
const (
	SourceRun   Source = "run"   // the effect ran in this call
	SourceStore Source = "store" // a COMPLETED record in DynamoDB answered
	SourceCache Source = "cache" // the in-memory cache answered (no DynamoDB call)
	SourceNoKey Source = "nokey" // no key: ran without idempotency (Wrap with AllowMissingKey)
)

// Result is what Do returns: the effect's result bytes and where they came
// from.
type Result struct {
	Data   []byte
	Source Source
}

// Effect is the work Do makes idempotent. It returns the bytes to store and
// to hand to every repeat (at most Config.MaxResultBytes; nil is allowed).
type Effect func(ctx context.Context) ([]byte, error)

// Do runs fn at most once per key while key's record lives (see the package
// documentation for the states and the conditional writes).
//
// payloadHash identifies the request's content (see HashJSON); a repeat
// whose hash differs from the stored one, both being non-empty, gets
// ErrPayloadMismatch. Pass "" to turn validation off for this call.
//
// Returns:
//   - (Result{Source: SourceRun}, nil): fn ran now and its result is stored.
//   - (Result{Source: SourceStore or SourceCache}, nil): a COMPLETED record
//     answered; fn did not run.
//   - ErrNoKey (key is ""), ErrPayloadMismatch, ErrInProgress: fn did not run.
//   - fn's own error, unchanged (joined with the delete error if the
//     conditional DeleteItem failed): fn failed and its record was deleted,
//     so a retry runs fn again.
//   - ErrRecordTakenOver or ErrResultTooLarge (wrapped) with Result.Data
//     set: fn ran and returned, but its result could not be stored.
//   - the error of Config.BeforeComplete: fn ran; the record is left
//     IN_PROGRESS (a simulated crash).
//   - a wrapped DynamoDB error or the context's error otherwise.
func (s *Store) Do(ctx context.Context, key, payloadHash string, fn Effect) (Result, error) {
	if key == "" {
		return Result{}, ErrNoKey
	}
	if fn == nil {
		return Result{}, errors.New("idempotency: nil effect")
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("idempotency: key %s: %w", key, err)
	}
	pk := RecordKey(s.cfg.Namespace, key)
	if s.cache != nil {
		if e, ok := s.cache.get(pk, s.cfg.Now()); ok {
			if mismatch(e.hash, payloadHash) {
				s.n.mismatches.Add(1)
				return Result{}, fmt.Errorf("%w: key %s", ErrPayloadMismatch, key)
			}
			s.n.cacheHits.Add(1)
			outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeDuplicate)
			return Result{Data: bytes.Clone(e.data), Source: SourceCache}, nil
		}
	}

	token := uuid.NewString()
	var old map[string]types.AttributeValue
	won := false
	for attempt := 1; attempt <= startAttempts && !won; attempt++ {
		now := s.cfg.Now()
		out, err := s.put(ctx, pk, token, payloadHash, now, s.inProgressExpiry(ctx, now))
		if err == nil {
			won, old = true, out.Attributes
			break
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return Result{}, fmt.Errorf("idempotency: start %s: %w", key, err)
		}
		item := ccf.Item
		if len(item) == 0 {
			if item, err = s.get(ctx, pk); err != nil {
				return Result{}, fmt.Errorf("idempotency: read %s: %w", key, err)
			}
			if item == nil {
				continue // deleted since the condition failed: try again
			}
		}
		rec := decode(item)
		if mismatch(rec.hash, payloadHash) {
			s.n.mismatches.Add(1)
			return Result{}, fmt.Errorf("%w: key %s", ErrPayloadMismatch, key)
		}
		now = s.cfg.Now()
		switch {
		case rec.status == StatusCompleted && !rec.expired(now):
			s.n.storeHits.Add(1)
			if s.cache != nil {
				s.cache.put(pk, cacheEntry{data: rec.data, hash: rec.hash, expiresAt: rec.expiresAt})
			}
			outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeDuplicate)
			return Result{Data: rec.data, Source: SourceStore}, nil
		case rec.status == StatusInProgress && !rec.inProgressExpired(now) && !rec.expired(now):
			s.n.inProgress.Add(1)
			return Result{}, fmt.Errorf("%w: key %s (in-progress expiry %s)", ErrInProgress, key,
				time.UnixMilli(rec.inProgressExpiry).UTC().Format(time.RFC3339Nano))
		}
		// The record expired between the condition and now: try again.
	}
	if !won {
		return Result{}, fmt.Errorf("idempotency: key %s: the record kept changing during %d attempts; retry", key, startAttempts)
	}
	s.n.runs.Add(1)
	if old != nil {
		switch prev := decode(old); prev.status {
		case StatusInProgress:
			s.n.takenOver.Add(1)
			s.cfg.Logger.WarnContext(ctx, "idempotency: took over an expired in-progress record; the effect may have happened before",
				"idempotency_key", key, "in_progress_expiry", time.UnixMilli(prev.inProgressExpiry).UTC())
		case StatusCompleted:
			s.n.expired.Add(1)
		}
	}

	data, err := s.run(ctx, pk, token, fn)
	if err != nil {
		return Result{}, err
	}
	if len(data) > s.cfg.MaxResultBytes {
		return Result{Data: data, Source: SourceRun}, fmt.Errorf("%w: key %s: %d bytes, limit %d", ErrResultTooLarge, key, len(data), s.cfg.MaxResultBytes)
	}
	if s.cfg.BeforeComplete != nil {
		if err := s.cfg.BeforeComplete(ctx, key); err != nil {
			return Result{}, err
		}
	}
	expiresAt := s.cfg.Now().Add(s.cfg.Expiry).Unix()
	if err := s.complete(ctx, pk, token, data, expiresAt); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			s.n.lost.Add(1)
			s.cfg.Logger.WarnContext(ctx, "idempotency: record taken over while the effect ran; result not stored",
				"idempotency_key", key)
			return Result{Data: data, Source: SourceRun}, fmt.Errorf("%w: key %s", ErrRecordTakenOver, key)
		}
		return Result{Data: data, Source: SourceRun}, fmt.Errorf("idempotency: store result of %s (record left IN_PROGRESS): %w", key, err)
	}
	if s.cache != nil {
		s.cache.put(pk, cacheEntry{data: bytes.Clone(data), hash: payloadHash, expiresAt: expiresAt})
	}
	outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeApplied)
	return Result{Data: data, Source: SourceRun}, nil
}

// run calls fn; when fn fails or panics it deletes the record (conditioned
// on token) so that a retry runs again. A panic is re-raised after the
// delete.
func (s *Store) run(ctx context.Context, pk, token string, fn Effect) (data []byte, err error) {
	failed := true
	defer func() {
		if !failed {
			return
		}
		s.n.failures.Add(1)
		if derr := s.delete(ctx, pk, token); derr != nil {
			s.cfg.Logger.WarnContext(ctx, "idempotency: delete after failure failed; the record blocks the key until its in-progress expiry",
				"idempotency_key", pk, "error", derr)
			if err != nil {
				err = errors.Join(err, fmt.Errorf("idempotency: delete record %s: %w", pk, derr))
			}
		}
	}()
	data, err = fn(ctx)
	failed = err != nil
	return data, err
}

// inProgressExpiry is ctx's deadline, or now + Config.InProgressExpiry.
func (s *Store) inProgressExpiry(ctx context.Context, now time.Time) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return now.Add(s.cfg.InProgressExpiry)
}

func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.CallTimeout > 0 {
		return context.WithTimeout(ctx, s.cfg.CallTimeout)
	}
	return context.WithCancel(ctx)
}

// settleCtx is the context of the COMPLETED update and the failure delete:
// not cancelled with the caller's context (the effect often fails exactly
// because that context ended), but bounded by CallTimeout.
func (s *Store) settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.callCtx(context.WithoutCancel(ctx))
}

// put writes the IN_PROGRESS record, conditioned on the key being free.
func (s *Store) put(ctx context.Context, pk, token, hash string, now, ipExpiry time.Time) (*dynamodb.PutItemOutput, error) {
	// The record must not expire before its in-progress expiry, or the
	// expires_at branch of the condition would let a live attempt be taken
	// over early.
	expiresAt := max(now.Add(s.cfg.Expiry).Unix(), ipExpiry.Unix()+1)
	item := map[string]types.AttributeValue{
		AttrPK:               &types.AttributeValueMemberS{Value: pk},
		AttrStatus:           &types.AttributeValueMemberS{Value: StatusInProgress},
		AttrToken:            &types.AttributeValueMemberS{Value: token},
		AttrInProgressExpiry: &types.AttributeValueMemberN{Value: strconv.FormatInt(ipExpiry.UnixMilli(), 10)},
		AttrExpiresAt:        &types.AttributeValueMemberN{Value: strconv.FormatInt(expiresAt, 10)},
		AttrUpdatedAt:        &types.AttributeValueMemberS{Value: now.UTC().Format(time.RFC3339Nano)},
	}
	if hash != "" {
		item[AttrPayloadHash] = &types.AttributeValueMemberS{Value: hash}
	}
	cond := expression.AttributeNotExists(expression.Name(AttrPK)).Or(
		expression.Name(AttrExpiresAt).LessThan(expression.Value(now.Unix())),
		expression.Name(AttrStatus).Equal(expression.Value(StatusInProgress)).
			And(expression.Name(AttrInProgressExpiry).LessThan(expression.Value(now.UnixMilli()))),
	)
	ex, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return nil, fmt.Errorf("build start condition: %w", err)
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	return s.client.PutItem(cctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(s.cfg.Table),
		Item:                                item,
		ConditionExpression:                 ex.Condition(),
		ExpressionAttributeNames:            ex.Names(),
		ExpressionAttributeValues:           ex.Values(),
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
}

// ownCondition is token = :token AND status = IN_PROGRESS.
func ownCondition(token string) expression.ConditionBuilder {
	return expression.Name(AttrToken).Equal(expression.Value(token)).
		And(expression.Name(AttrStatus).Equal(expression.Value(StatusInProgress)))
}

// complete turns this attempt's IN_PROGRESS record into COMPLETED.
func (s *Store) complete(ctx context.Context, pk, token string, data []byte, expiresAt int64) error {
	upd := expression.Set(expression.Name(AttrStatus), expression.Value(StatusCompleted)).
		Set(expression.Name(AttrExpiresAt), expression.Value(expiresAt)).
		Set(expression.Name(AttrUpdatedAt), expression.Value(s.cfg.Now().UTC().Format(time.RFC3339Nano))).
		Remove(expression.Name(AttrInProgressExpiry))
	if len(data) > 0 {
		upd = upd.Set(expression.Name(AttrData), expression.Value(data))
	} else {
		upd = upd.Remove(expression.Name(AttrData))
	}
	ex, err := expression.NewBuilder().WithUpdate(upd).WithCondition(ownCondition(token)).Build()
	if err != nil {
		return fmt.Errorf("build complete update: %w", err)
	}
	cctx, cancel := s.settleCtx(ctx)
	defer cancel()
	_, err = s.client.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.cfg.Table),
		Key:                       map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: pk}},
		UpdateExpression:          ex.Update(),
		ConditionExpression:       ex.Condition(),
		ExpressionAttributeNames:  ex.Names(),
		ExpressionAttributeValues: ex.Values(),
	})
	return err
}

// delete removes this attempt's IN_PROGRESS record. A failed condition
// (another attempt owns the record now) is not an error.
func (s *Store) delete(ctx context.Context, pk, token string) error {
	ex, err := expression.NewBuilder().WithCondition(ownCondition(token)).Build()
	if err != nil {
		return fmt.Errorf("build delete condition: %w", err)
	}
	cctx, cancel := s.settleCtx(ctx)
	defer cancel()
	_, err = s.client.DeleteItem(cctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.cfg.Table),
		Key:                       map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: pk}},
		ConditionExpression:       ex.Condition(),
		ExpressionAttributeNames:  ex.Names(),
		ExpressionAttributeValues: ex.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil
	}
	return err
}

// get reads pk's record, strongly consistent; nil when absent.
func (s *Store) get(ctx context.Context, pk string) (map[string]types.AttributeValue, error) {
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	out, err := s.client.GetItem(cctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.cfg.Table),
		Key:            map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// record is a decoded idempotency item.
type record struct {
	status           string
	hash             string
	data             []byte
	inProgressExpiry int64 // epoch ms
	expiresAt        int64 // epoch s
}

func (r record) expired(now time.Time) bool { return r.expiresAt < now.Unix() }

func (r record) inProgressExpired(now time.Time) bool { return r.inProgressExpiry < now.UnixMilli() }

func decode(item map[string]types.AttributeValue) record {
	var r record
	if v, ok := item[AttrStatus].(*types.AttributeValueMemberS); ok {
		r.status = v.Value
	}
	if v, ok := item[AttrPayloadHash].(*types.AttributeValueMemberS); ok {
		r.hash = v.Value
	}
	if v, ok := item[AttrData].(*types.AttributeValueMemberB); ok {
		r.data = v.Value
	}
	if v, ok := item[AttrInProgressExpiry].(*types.AttributeValueMemberN); ok {
		r.inProgressExpiry, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	if v, ok := item[AttrExpiresAt].(*types.AttributeValueMemberN); ok {
		r.expiresAt, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	return r
}

// mismatch reports two payload hashes that are both set and differ. A record
// written with validation off (no hash) accepts any payload, so turning
// validation on does not block keys already in flight.
func mismatch(stored, given string) bool {
	return stored != "" && given != "" && stored != given
}
