package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// DynamoDBAPI is the DynamoDB subset the operator reads with, with the
// SDK's exact signatures (relay.RedriveAPI plus Query).
type DynamoDBAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// StatusOptions select what ReadStatus reads.
type StatusOptions struct {
	// Table is the outbox table. Required.
	Table string
	// Shards is the pending index shard count (the writers'
	// PENDING_SHARDS, 1..config.MaxPendingShards).
	Shards int
	// Window counts records published in the last Window (0: skip the
	// table Scan, and so the parked count too).
	Window time.Duration
	// Queues are the queues whose depth to report.
	Queues []QueueRef
	// Now is the reference time (default time.Now()).
	Now time.Time
	// Region selects a Region's pending shards in multi-Region mode
	// (outbox.RegionShardName: "<region>#pNN"); "" reads the single-Region
	// shards ("pNN").
	Region string
	// LegacyOwner, with Region, also reads the single-Region shards
	// ("pNN"): Region is the legacy owner (the first Region of
	// OUTBOX_REGIONS), whose reconciler sweeps the records written before
	// the switch to multi-Region mode (reconciler.Config.LegacyOwner).
	LegacyOwner bool
}

// Status is what ReadStatus found.
type Status struct {
	Table string
	// PendingByShard counts pending records per pending index shard value
	// ("p00".."pNN", or "<region>#p00".. with StatusOptions.Region, then
	// "p00".."pNN" with StatusOptions.LegacyOwner), every shard present.
	PendingByShard []ShardCount
	// Pending is the sum of PendingByShard.
	Pending int
	// OldestPending is the created_at of the oldest pending record (zero
	// when none); OldestPendingAge is Now minus it.
	OldestPending    time.Time
	OldestPendingAge time.Duration
	// Scanned is true when the table Scan ran (Window > 0); Parked and
	// PublishedInWindow are set only then.
	Scanned           bool
	Parked            int
	PublishedInWindow int
	Window            time.Duration
	Queues            []QueueDepth
	Now               time.Time
}

// ShardCount is the pending count of one pending index shard.
type ShardCount struct {
	Shard string
	Count int
}

// ReadStatus reads the outbox's state: per shard a COUNT Query and a
// Limit-1 Query (oldest first) of the pending index; with Window > 0 one
// Scan of the table (projection status and published_at) counting PARKED
// records and PUBLISHED ones whose published_at is within Window of Now;
// each queue's approximate depth. A queue that cannot be read is reported
// in its QueueDepth.Err, not as an error; a store error is returned
// wrapped with the table and step.
func ReadStatus(ctx context.Context, ddb DynamoDBAPI, sqsc QueueAPI, opts StatusOptions) (Status, error) {
	if opts.Table == "" {
		return Status{}, errors.New("status: the outbox table is required")
	}
	if opts.Shards < 1 || opts.Shards > config.MaxPendingShards {
		return Status{}, fmt.Errorf("status: %d pending shards out of range 1..%d (use the writers' %s)", opts.Shards, config.MaxPendingShards, config.EnvPendingShards)
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	st := Status{Table: opts.Table, Window: opts.Window, Now: opts.Now}
	if opts.Region != "" {
		if err := config.ValidRegionName(opts.Region); err != nil {
			return Status{}, fmt.Errorf("status: %w", err)
		}
	}
	if opts.LegacyOwner && opts.Region == "" {
		return Status{}, errors.New("status: LegacyOwner needs a Region (multi-Region mode)")
	}
	var shards []string
	for i := range opts.Shards {
		shards = append(shards, outbox.RegionShardName(opts.Region, i))
	}
	if opts.LegacyOwner {
		for i := range opts.Shards {
			shards = append(shards, outbox.ShardName(i))
		}
	}
	for _, shard := range shards {
		n, oldest, err := pendingInShard(ctx, ddb, opts.Table, shard)
		if err != nil {
			return st, err
		}
		st.PendingByShard = append(st.PendingByShard, ShardCount{Shard: shard, Count: n})
		st.Pending += n
		if !oldest.IsZero() && (st.OldestPending.IsZero() || oldest.Before(st.OldestPending)) {
			st.OldestPending = oldest
		}
	}
	if !st.OldestPending.IsZero() {
		st.OldestPendingAge = opts.Now.Sub(st.OldestPending)
	}
	if opts.Window > 0 {
		if err := scanCounts(ctx, ddb, &st, opts.Now.Add(-opts.Window)); err != nil {
			return st, err
		}
	}
	if sqsc != nil {
		st.Queues = Depths(ctx, sqsc, opts.Queues)
	}
	return st, nil
}

// pendingInShard returns the shard's pending count and its oldest
// created_at (zero when empty).
func pendingInShard(ctx context.Context, ddb DynamoDBAPI, table, shard string) (int, time.Time, error) {
	expr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key(outbox.AttrPendingShard).Equal(expression.Value(shard))).Build()
	if err != nil {
		return 0, time.Time{}, err
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(table), IndexName: aws.String(outbox.PendingIndexName),
		KeyConditionExpression: expr.KeyCondition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		Select: types.SelectCount,
	}
	n := 0
	p := dynamodb.NewQueryPaginator(ddb, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("status: count pending in %s shard %s: %w", table, shard, err)
		}
		n += int(page.Count)
	}
	if n == 0 {
		return 0, time.Time{}, nil
	}
	oexpr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key(outbox.AttrPendingShard).Equal(expression.Value(shard))).
		WithProjection(expression.NamesList(expression.Name(outbox.AttrCreatedAt))).Build()
	if err != nil {
		return 0, time.Time{}, err
	}
	first := dynamodb.QueryInput{
		TableName: aws.String(table), IndexName: aws.String(outbox.PendingIndexName),
		KeyConditionExpression: oexpr.KeyCondition(), ProjectionExpression: oexpr.Projection(),
		ExpressionAttributeNames: oexpr.Names(), ExpressionAttributeValues: oexpr.Values(),
		ScanIndexForward: aws.Bool(true), Limit: aws.Int32(1),
	}
	out, err := ddb.Query(ctx, &first)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("status: oldest pending in %s shard %s: %w", table, shard, err)
	}
	if len(out.Items) == 0 {
		return n, time.Time{}, nil
	}
	ms, _ := strconv.ParseInt(attrN(out.Items[0], outbox.AttrCreatedAt), 10, 64)
	return n, time.UnixMilli(ms).UTC(), nil
}

// scanCounts scans the table once for parked records and records published
// since cutoff.
func scanCounts(ctx context.Context, ddb DynamoDBAPI, st *Status, cutoff time.Time) error {
	status := expression.Name(outbox.AttrStatus)
	expr, err := expression.NewBuilder().
		WithFilter(status.Equal(expression.Value(outbox.StatusParked)).Or(status.Equal(expression.Value(outbox.StatusPublished)))).
		WithProjection(expression.NamesList(status, expression.Name(outbox.AttrPublishedAt))).Build()
	if err != nil {
		return err
	}
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{
		TableName: aws.String(st.Table), FilterExpression: expr.Filter(), ProjectionExpression: expr.Projection(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("status: scan %s: %w", st.Table, err)
		}
		for _, it := range page.Items {
			switch attrS(it, outbox.AttrStatus) {
			case outbox.StatusParked:
				st.Parked++
			case outbox.StatusPublished:
				if t, err := time.Parse(time.RFC3339Nano, attrS(it, outbox.AttrPublishedAt)); err == nil && !t.Before(cutoff) {
					st.PublishedInWindow++
				}
			}
		}
	}
	st.Scanned = true
	return nil
}

// Write prints the status as aligned text lines.
func (s Status) Write(w io.Writer) {
	fmt.Fprintf(w, "outbox table      %s\n", s.Table)
	age := "-"
	if !s.OldestPending.IsZero() {
		age = s.OldestPendingAge.Round(time.Second).String() + " (created " + s.OldestPending.Format(time.RFC3339) + ")"
	}
	fmt.Fprintf(w, "pending           %d\n", s.Pending)
	fmt.Fprintf(w, "oldest pending    %s\n", age)
	if s.Pending > 0 {
		fmt.Fprint(w, "pending by shard ")
		for _, c := range s.PendingByShard {
			if c.Count > 0 {
				fmt.Fprintf(w, " %s=%d", c.Shard, c.Count)
			}
		}
		fmt.Fprintln(w)
	}
	if s.Scanned {
		fmt.Fprintf(w, "parked            %d\n", s.Parked)
		fmt.Fprintf(w, "published (%s) %d\n", s.Window, s.PublishedInWindow)
	}
	for _, q := range s.Queues {
		if q.Err != nil {
			fmt.Fprintf(w, "queue  %-16s %-24s error: %v\n", q.Kind, q.Name, q.Err)
			continue
		}
		fmt.Fprintf(w, "queue  %-16s %-24s %d visible, %d in flight\n", q.Kind, q.Name, q.Visible, q.InFlight)
	}
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func attrN(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}
