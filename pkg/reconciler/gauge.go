package reconciler

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// gaugeConcurrency bounds the shards counted at once by gauge.
const gaugeConcurrency = 4

// gauge counts every pending index shard's records (this Region's, and the
// single-Region shards too on the legacy owner) into rep.Pending and
// returns the oldest created_at_ms found (-1 when none), with the Query
// errors of the shards that failed (the others are still counted). Shards
// are counted gaugeConcurrency at a time; one not reached before ctx ends
// sets rep.Truncated.
func (r *Reconciler) gauge(ctx context.Context, rep *Report) (int64, []error) {
	var (
		mu     sync.Mutex
		errs   []error
		oldest int64 = -1
		g      errgroup.Group
	)
	g.SetLimit(gaugeConcurrency)
	var shards []string
	for i := 0; i < r.cfg.PendingShards; i++ {
		shards = append(shards, outbox.RegionShardName(r.cfg.Region, i))
	}
	if r.cfg.LegacyOwner {
		for i := 0; i < r.cfg.PendingShards; i++ {
			shards = append(shards, outbox.ShardName(i))
		}
	}
	for _, shard := range shards {
		g.Go(func() error {
			if ctx.Err() != nil {
				mu.Lock()
				rep.Truncated = true
				mu.Unlock()
				return nil
			}
			n, truncated, err := r.count(ctx, shard)
			var ms int64 = -1
			var oldErr error
			if err == nil && n > 0 {
				var ok bool
				ms, ok, oldErr = r.oldest(ctx, shard)
				if !ok {
					ms = -1
				}
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Pending += n
			rep.Truncated = rep.Truncated || truncated
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("count shard %s: %w", shard, err))
			case oldErr != nil:
				errs = append(errs, fmt.Errorf("oldest in shard %s: %w", shard, oldErr))
			case ms >= 0 && (oldest < 0 || ms < oldest):
				oldest = ms
			}
			return nil
		})
	}
	_ = g.Wait() // the shards' errors are collected in errs
	return oldest, errs
}

// count returns the number of items in one shard of the pending index.
func (r *Reconciler) count(ctx context.Context, shard string) (int, bool, error) {
	expr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key(outbox.AttrPendingShard).Equal(expression.Value(shard))).Build()
	if err != nil {
		return 0, false, err
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.cfg.Table),
		IndexName:                 aws.String(outbox.PendingIndexName),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		Select:                    types.SelectCount,
	}
	total := 0
	for page := 0; ; page++ {
		if page == r.cfg.MaxPagesPerShard {
			return total, true, nil
		}
		out, err := r.query(ctx, in)
		if err != nil {
			return total, false, err
		}
		total += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return total, false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// oldest returns created_at_ms of the first item of a shard (ascending).
func (r *Reconciler) oldest(ctx context.Context, shard string) (int64, bool, error) {
	expr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key(outbox.AttrPendingShard).Equal(expression.Value(shard))).
		WithProjection(expression.NamesList(expression.Name(outbox.AttrCreatedAt))).Build()
	if err != nil {
		return 0, false, err
	}
	out, err := r.query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(r.cfg.Table),
		IndexName:                 aws.String(outbox.PendingIndexName),
		KeyConditionExpression:    expr.KeyCondition(),
		ProjectionExpression:      expr.Projection(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ScanIndexForward:          aws.Bool(true),
		Limit:                     aws.Int32(1),
	})
	if err != nil || len(out.Items) == 0 {
		return 0, false, err
	}
	n, ok := out.Items[0][outbox.AttrCreatedAt].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, nil
	}
	ms, err := strconv.ParseInt(n.Value, 10, 64)
	return ms, err == nil, nil
}
