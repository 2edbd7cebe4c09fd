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
func Requeue(ctx context.Context, ddb UpdateAPI, table string, shards int, views []EventView, now time.Time) ([]ReplayResult, error) {
	if shards < 1 || shards > config.MaxPendingShards {
		return nil, fmt.Errorf("requeue: %d pending shards out of range 1..%d (use the writers' %s)", shards, config.MaxPendingShards, config.EnvPendingShards)
	}
	results := make([]ReplayResult, len(views))
	var errs []error
	for i, v := range views {
		results[i] = ReplayResult{View: v, Outcome: ReplaySkipped}
		if reason := replayable(v); reason != "" {
			results[i].Reason = reason
			continue
		}
		shard := outbox.PendingShard(v.EventID, shards)
		expr, err := expression.NewBuilder().
			WithCondition(expression.Name(outbox.AttrStatus).Equal(expression.Value(outbox.StatusPublished))).
			WithUpdate(expression.
				Set(expression.Name(outbox.AttrStatus), expression.Value(outbox.StatusPending)).
				Set(expression.Name(outbox.AttrPendingShard), expression.Value(shard)).
				Set(expression.Name(AttrReplayedAt), expression.Value(now.UTC().Format(time.RFC3339Nano))).
				Remove(expression.Name(outbox.AttrExpiresAt))).Build()
		if err != nil {
			return results, err
		}
		_, err = ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: v.Key.AttributeValues(),
			ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
			ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			err = ErrNotPublished
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
