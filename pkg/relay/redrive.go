package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// RedriveAPI is the DynamoDB subset the redrive operations call, with the
// SDK's exact signatures.
type RedriveAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// ErrNotParked is returned by Redrive when the record does not exist or is
// not PARKED (nothing is changed).
var ErrNotParked = errors.New("relay: outbox record is not parked")

// ParkedRecord is a parked outbox record as ListParked returns it.
type ParkedRecord struct {
	Key       outbox.Key
	EventID   string
	EventType string
	Reason    string
	ParkedAt  string
}

// ListParked returns every PARKED record of the outbox table. Parked records
// are not indexed (they are rare and alarmed), so this is a Scan with a
// filter: an operator tool, never a request path. limit > 0 stops after that
// many records.
func ListParked(ctx context.Context, ddb RedriveAPI, table string, limit int) ([]ParkedRecord, error) {
	expr, err := expression.NewBuilder().
		WithFilter(expression.Name(outbox.AttrStatus).Equal(expression.Value(outbox.StatusParked))).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		FilterExpression:          expr.Filter(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}
	var out []ParkedRecord
	p := dynamodb.NewScanPaginator(ddb, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("list parked records in %s: %w", table, err)
		}
		for _, it := range page.Items {
			out = append(out, ParkedRecord{
				Key:       outbox.Key{PK: attrS(it, outbox.AttrPK), SK: attrS(it, outbox.AttrSK)},
				EventID:   attrS(it, outbox.AttrEventID),
				EventType: attrS(it, outbox.AttrEventType),
				Reason:    attrS(it, outbox.AttrParkedReason),
				ParkedAt:  attrS(it, outbox.AttrParkedAt),
			})
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

// ErrNotOrigin is returned (wrapped) by Redrive in multi-Region mode when
// the record's outbox.AttrOriginRegion is not the caller's Region (or is
// missing): a record and its status have one writing Region, its origin,
// and a backward move (PARKED or PUBLISHED to PENDING) made elsewhere could
// be undone or could undo a newer state under global tables'
// last-writer-wins (docs/MULTI-REGION.md). Run the command in the record's
// origin Region. Nothing is changed.
var ErrNotOrigin = errors.New("relay: the outbox record was written in another Region; only its origin Region may move its status back")

// ErrRedriveConflict is returned (wrapped) by Redrive in multi-Region mode
// when the record's outbox.AttrRedriveGeneration changed between the read
// and the conditional write (another redrive or requeue ran in between).
// Nothing is changed; read the record again before retrying.
var ErrRedriveConflict = errors.New("relay: the outbox record's redrive generation moved since it was read (another redrive or requeue ran)")

// RedriveOption adjusts Redrive. Without options Redrive works in
// single-Region mode, as it always did.
type RedriveOption func(*redriveOptions)

type redriveOptions struct {
	region      string
	legacyOwner bool
}

// RedriveInRegion runs Redrive in multi-Region mode for region (the
// caller's Region, config.RegionFromEnv; "" keeps single-Region mode): the
// record must have been written in region (else ErrNotOrigin), it goes
// back into region's pending shards (outbox.PendingShardIn) and its
// outbox.AttrRedriveGeneration is bumped, conditioned on the generation
// read (else ErrRedriveConflict).
func RedriveInRegion(region string) RedriveOption {
	return func(o *redriveOptions) { o.region = region }
}

// RedriveAsLegacyOwner, with RedriveInRegion, says the caller's Region is
// the legacy owner: the first Region of OUTBOX_REGIONS
// (config.RegionsFromEnv()[0]), whose reconciler (reconciler.Config.LegacyOwner)
// sweeps the records written before the table switched to multi-Region
// mode. Redrive then also accepts a record without an origin Region
// (outbox.AttrOriginRegion): it stays unstamped and goes back to its
// single-Region shard (outbox.PendingShard), conditioned on having no
// origin Region and on the generation read. Without RedriveInRegion,
// Redrive returns an error.
func RedriveAsLegacyOwner() RedriveOption {
	return func(o *redriveOptions) { o.legacyOwner = true }
}

// RedriveGeneration returns an item's outbox.AttrRedriveGeneration (N; 0
// when absent), or an error when it is not a whole number, or when it is
// math.MaxInt64: the generation read is bumped to gen+1, which would wrap
// to a negative generation that every later read refuses.
func RedriveGeneration(item map[string]types.AttributeValue) (int64, error) {
	v, ok := item[outbox.AttrRedriveGeneration]
	if !ok {
		return 0, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%s is not a number (N)", outbox.AttrRedriveGeneration)
	}
	g, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || g < 0 {
		return 0, fmt.Errorf("%s %q is not a whole number", outbox.AttrRedriveGeneration, n.Value)
	}
	if g == math.MaxInt64 {
		return 0, fmt.Errorf("%s %q is the int64 maximum and cannot be bumped", outbox.AttrRedriveGeneration, n.Value)
	}
	return g, nil
}

// GenerationCondition returns the condition that an item's
// outbox.AttrRedriveGeneration is still gen (absent counts as 0), for the
// conditional write that bumps it to gen+1.
func GenerationCondition(gen int64) expression.ConditionBuilder {
	name := expression.Name(outbox.AttrRedriveGeneration)
	if gen == 0 {
		return expression.AttributeNotExists(name).Or(name.Equal(expression.Value(0)))
	}
	return name.Equal(expression.Value(gen))
}

// Redrive returns one parked record to the pending state once its cause is
// fixed (a permission, a rule, a payload): status PENDING, its pending index
// shard set again (shards must match the writers' PENDING_SHARDS) and
// created_at_ms kept, so the reconciler's next run (it is older than the
// threshold) publishes it through the normal path, at least once, with
// consumer dedup absorbing any duplicate. No TTL is set. A reconciler run's
// claim (claimed_until) is removed, so the next run may take it. It returns
// ErrNotParked (wrapped) when the record is absent or not PARKED, and
// ErrNotOrigin (wrapped) when the record carries an origin Region
// (outbox.AttrOriginRegion: written in multi-Region mode) and
// RedriveInRegion is not given: it would go to a shard no multi-Region
// reconciler sweeps. A single-Region table's records carry none.
//
// With RedriveInRegion (multi-Region mode) it also refuses a record of
// another Region (ErrNotOrigin), puts the record in its Region's pending
// shard (outbox.PendingShardIn) and bumps outbox.AttrRedriveGeneration,
// conditioned on the status, the origin and the generation it read
// (ErrRedriveConflict when the generation moved). A record without an
// origin Region (written before the switch to multi-Region mode) is
// refused too (ErrNotOrigin), unless RedriveAsLegacyOwner is given: then
// it goes back, unstamped, to its single-Region shard, which the legacy
// owner's reconciler sweeps.
func Redrive(ctx context.Context, ddb RedriveAPI, table string, shards int, key outbox.Key, now time.Time, opts ...RedriveOption) error {
	var o redriveOptions
	for _, fn := range opts {
		fn(&o)
	}
	if shards < 1 || shards > config.MaxPendingShards {
		return fmt.Errorf("redrive: %d pending shards out of range 1..%d (use the writers' %s)", shards, config.MaxPendingShards, config.EnvPendingShards)
	}
	if o.region != "" {
		if err := config.ValidRegionName(o.region); err != nil {
			return fmt.Errorf("redrive: %w", err)
		}
	}
	if o.legacyOwner && o.region == "" {
		return errors.New("redrive: RedriveAsLegacyOwner needs RedriveInRegion (multi-Region mode)")
	}
	got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("redrive %s/%s: read: %w", key.PK, key.SK, err)
	}
	if got.Item == nil {
		return fmt.Errorf("redrive %s/%s: %w", key.PK, key.SK, ErrNotParked)
	}
	origin := attrS(got.Item, outbox.AttrOriginRegion)
	_, stamped := got.Item[outbox.AttrOriginRegion]
	legacy := o.legacyOwner && !stamped // written before the switch; the legacy owner's
	switch {
	case o.region != "" && origin == "" && !stamped && !o.legacyOwner:
		return fmt.Errorf("redrive %s/%s: no origin Region (written before the switch to multi-Region mode): redrive it in the legacy owner, the first Region of %s: %w", key.PK, key.SK, config.EnvRegions, ErrNotOrigin)
	case o.region != "" && origin != o.region && !legacy:
		return fmt.Errorf("redrive %s/%s: origin Region %q, this is %s: %w", key.PK, key.SK, origin, o.region, ErrNotOrigin)
	case o.region == "" && origin != "":
		// Written in multi-Region mode: the plain shard is swept by no
		// multi-Region reconciler, and only the origin writes the record.
		return fmt.Errorf("redrive %s/%s: written in multi-Region mode (origin Region %s): redrive it in %s with RedriveInRegion (outboxctl -regions, %s): %w", key.PK, key.SK, origin, origin, config.EnvRegions, ErrNotOrigin)
	}
	if attrS(got.Item, outbox.AttrStatus) != outbox.StatusParked {
		return fmt.Errorf("redrive %s/%s: %w", key.PK, key.SK, ErrNotParked)
	}
	eventID := attrS(got.Item, outbox.AttrEventID)
	shard := outbox.PendingShardIn(o.region, eventID, shards)
	if legacy {
		shard = outbox.PendingShard(eventID, shards)
	}
	if eventID == "" { // a poison record without an event id cannot be re-published
		return fmt.Errorf("redrive %s/%s: record has no event_id: %w", key.PK, key.SK, ErrNotParked)
	}
	cond := expression.Name(outbox.AttrStatus).Equal(expression.Value(outbox.StatusParked))
	upd := expression.
		Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusPending)).
		Set(expression.Name(outbox.AttrPendingShard), expression.Value(shard)).
		Set(expression.Name("redriven_at"), expression.Value(now.UTC().Format(time.RFC3339Nano))).
		// A reconciler run's claim (it may have parked the record) must not
		// keep the next run off the redriven record.
		Remove(expression.Name(outbox.AttrClaimedUntil))
	var gen int64
	if o.region != "" {
		if gen, err = RedriveGeneration(got.Item); err != nil {
			return fmt.Errorf("redrive %s/%s: %w", key.PK, key.SK, err)
		}
		originCond := expression.Name(outbox.AttrOriginRegion).Equal(expression.Value(o.region))
		if legacy {
			originCond = expression.AttributeNotExists(expression.Name(outbox.AttrOriginRegion))
		}
		cond = cond.And(originCond).And(GenerationCondition(gen))
		upd = upd.Set(expression.Name(outbox.AttrRedriveGeneration), expression.Value(gen+1))
	}
	if _, ok := got.Item[outbox.AttrCreatedAt]; !ok {
		upd = upd.Set(expression.Name(outbox.AttrCreatedAt), expression.Value(now.UnixMilli()))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return err
	}
	_, err = ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 key.AttributeValues(),
		ConditionExpression:                 expr.Condition(),
		UpdateExpression:                    expr.Update(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if o.region != "" && len(ccf.Item) > 0 {
			if cur, gerr := RedriveGeneration(ccf.Item); gerr != nil || cur != gen {
				return fmt.Errorf("redrive %s/%s: read generation %d: %w", key.PK, key.SK, gen, ErrRedriveConflict)
			}
		}
		return fmt.Errorf("redrive %s/%s: %w", key.PK, key.SK, ErrNotParked)
	}
	if err != nil {
		return fmt.Errorf("redrive %s/%s: %w", key.PK, key.SK, err)
	}
	return nil
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
