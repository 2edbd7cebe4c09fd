package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// UpdateAPI is the DynamoDB method Requeue calls, with the SDK's exact
// signature.
type UpdateAPI interface {
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// ReplayRequeued is the outcome of a record Requeue made pending again.
const ReplayRequeued = "requeued"

// AttrReplayedAt is set (RFC 3339, UTC) on a record Requeue made pending
// again: the audit trail of an operator's replay.
const AttrReplayedAt = "replayed_at"

// Requeue replays each PUBLISHED view through the reconciler: the record
// becomes PENDING again, in its pending index shard (shards must be the
// writers' PENDING_SHARDS), its TTL removed (a pending record never
// expires) and replayed_at set, under the condition that it is still
// PUBLISHED. It keeps created_at_ms, so the reconciler's next run (every
// record older than RECONCILE_AFTER) publishes it and marks it published
// again: the normal path, by the role the bus admits (the bus policy
// refuses PutEvents from any other principal, docs/SECURITY-MODEL.md S1).
// PENDING, PARKED and undecodable records are skipped as by Replay. The
// error is non-nil when any update failed (a record no longer PUBLISHED
// fails with ErrNotPublished).
//
// Without RequeueInRegion a record carrying an origin Region (written in
// multi-Region mode) is refused with relay.ErrNotOrigin: it would go to a
// shard no multi-Region reconciler sweeps. A single-Region table's records
// carry none.
//
// With RequeueInRegion (multi-Region mode) a record written in another
// Region is refused (relay.ErrNotOrigin: its status has one writing
// Region, its origin), the record goes to its Region's pending shard
// (outbox.PendingShardIn) and its outbox.AttrRedriveGeneration is bumped,
// conditioned on the generation in the view (relay.ErrRedriveConflict when
// it moved since the view was read) and on its origin.
func Requeue(ctx context.Context, ddb UpdateAPI, table string, shards int, views []EventView, now time.Time, opts ...RequeueOption) ([]ReplayResult, error) {
	var o requeueOptions
	for _, fn := range opts {
		fn(&o)
	}
	if shards < 1 || shards > config.MaxPendingShards {
		return nil, fmt.Errorf("requeue: %d pending shards out of range 1..%d (use the writers' %s)", shards, config.MaxPendingShards, config.EnvPendingShards)
	}
	if o.region != "" {
		if err := config.ValidRegionName(o.region); err != nil {
			return nil, fmt.Errorf("requeue: %w", err)
		}
	}
	results := make([]ReplayResult, len(views))
	var errs []error
	for i, v := range views {
		results[i] = ReplayResult{View: v, Outcome: ReplaySkipped}
		if reason := replayable(v); reason != "" {
			results[i].Reason = reason
			continue
		}
		shard := outbox.PendingShardIn(o.region, v.EventID, shards)
		cond := expression.Name(outbox.AttrStatus).Equal(expression.Value(outbox.StatusPublished))
		upd := expression.
			Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusPending)).
			Set(expression.Name(outbox.AttrPendingShard), expression.Value(shard)).
			Set(expression.Name(AttrReplayedAt), expression.Value(now.UTC().Format(time.RFC3339Nano))).
			Remove(expression.Name(outbox.AttrExpiresAt))
		var gen int64
		if origin := attrS(v.item, outbox.AttrOriginRegion); o.region == "" && origin != "" {
			// Written in multi-Region mode: the plain shard is swept by no
			// multi-Region reconciler, and only the origin writes the record.
			err := fmt.Errorf("requeue %s (%s/%s): written in multi-Region mode (origin Region %s): requeue it in %s with RequeueInRegion (outboxctl -regions, %s): %w",
				v.EventID, v.Key.PK, v.Key.SK, origin, origin, config.EnvRegions, relay.ErrNotOrigin)
			errs = append(errs, err)
			results[i].Outcome, results[i].Reason = ReplayFailed, err.Error()
			continue
		}
		if o.region != "" {
			var err error
			if origin := attrS(v.item, outbox.AttrOriginRegion); origin != o.region {
				err = fmt.Errorf("requeue %s (%s/%s): origin Region %q, this is %s: %w", v.EventID, v.Key.PK, v.Key.SK, origin, o.region, relay.ErrNotOrigin)
			} else if gen, err = relay.RedriveGeneration(v.item); err != nil {
				err = fmt.Errorf("requeue %s (%s/%s): %w", v.EventID, v.Key.PK, v.Key.SK, err)
			}
			if err != nil {
				errs = append(errs, err)
				results[i].Outcome, results[i].Reason = ReplayFailed, err.Error()
				continue
			}
			cond = cond.And(expression.Name(outbox.AttrOriginRegion).Equal(expression.Value(o.region))).And(relay.GenerationCondition(gen))
			upd = upd.Set(expression.Name(outbox.AttrRedriveGeneration), expression.Value(gen+1))
		}
		expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
		if err != nil {
			return results, err
		}
		_, err = ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: v.Key.AttributeValues(),
			ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
			ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			err = ErrNotPublished
			if o.region != "" && len(ccf.Item) > 0 {
				if cur, gerr := relay.RedriveGeneration(ccf.Item); gerr != nil || cur != gen {
					err = fmt.Errorf("read generation %d: %w", gen, relay.ErrRedriveConflict)
				}
			}
		}
		if err != nil {
			err = fmt.Errorf("requeue %s (%s/%s): %w", v.EventID, v.Key.PK, v.Key.SK, err)
			errs = append(errs, err)
			results[i].Outcome, results[i].Reason = ReplayFailed, err.Error()
			continue
		}
		results[i].Outcome, results[i].Reason = ReplayRequeued, "PENDING in shard "+shard
	}
	return results, errors.Join(errs...)
}

// RequeueOption adjusts Requeue. Without options Requeue works in
// single-Region mode, as it always did.
type RequeueOption func(*requeueOptions)

type requeueOptions struct{ region string }

// RequeueInRegion runs Requeue in multi-Region mode for region (the
// caller's Region; "" keeps single-Region mode): see Requeue.
func RequeueInRegion(region string) RequeueOption {
	return func(o *requeueOptions) { o.region = region }
}

// ErrNotPublished is returned (wrapped) by Requeue for a record that is no
// longer PUBLISHED when it is updated.
var ErrNotPublished = errors.New("outbox record is not published")

// replayable returns why v cannot be replayed ("" when it can): only a
// PUBLISHED record holding a valid envelope is.
func replayable(v EventView) string {
	switch v.Status {
	case outbox.StatusPublished:
	case outbox.StatusParked:
		return "parked: redrive it (outboxctl redrive) once its cause is fixed"
	default:
		return fmt.Sprintf("status %s: the relay or the reconciler publishes it", v.Status)
	}
	if _, err := outbox.RecordFromItem(v.item); err != nil {
		return "not a valid envelope: " + err.Error()
	}
	return ""
}
