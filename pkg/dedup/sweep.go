package dedup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"golang.org/x/sync/errgroup"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// ListBuffered returns every event waiting in consumer's buffer in the
// table holding its state (through BufferIndex: BufferShards queries,
// listShardsAtOnce at a time, so a sweep's listing costs about a quarter of
// their sequential time), oldest first per shard, shards in order. It
// returns an error naming a failed query.
func ListBuffered(ctx context.Context, client BufferClient, table, consumer string) ([]BufferedEvent, error) {
	shards := make([][]BufferedEvent, BufferShards)
	var g errgroup.Group
	g.SetLimit(listShardsAtOnce)
	for shard := range BufferShards {
		g.Go(func() error {
			items, err := queryShard(ctx, client, table, fmt.Sprintf("%s#%02d", consumer, shard))
			shards[shard] = items
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var all []BufferedEvent
	for _, items := range shards {
		all = append(all, items...)
	}
	return all, nil
}

// listShardsAtOnce bounds ListBuffered's concurrent queries.
const listShardsAtOnce = 4

func queryShard(ctx context.Context, client BufferClient, table, shard string) ([]BufferedEvent, error) {
	k, err := expression.NewBuilder().WithKeyCondition(expression.Key(AttrBufferShard).Equal(expression.Value(shard))).Build()
	if err != nil {
		return nil, fmt.Errorf("dedup: build buffer query: %w", err)
	}
	in := &dynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String(BufferIndex),
		KeyConditionExpression: k.KeyCondition(), ExpressionAttributeNames: k.Names(), ExpressionAttributeValues: k.Values()}
	var out []BufferedEvent
	for {
		cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
		page, err := client.Query(cctx, in)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dedup: query %s %s: %w", BufferIndex, shard, err)
		}
		for _, it := range page.Items {
			b, err := decodeBuffered(it)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// SweepReport is what one Sweep found and did.
type SweepReport struct {
	// Buffered is the number of events waiting after the sweep, and
	// Aggregates the number of aggregates they belong to.
	Buffered   int
	Aggregates int
	// OldestAge is the age of the oldest event still waiting (0: none).
	OldestAge time.Duration
	// Drained is the number of buffered events the sweep applied.
	Drained int
	// Failed counts aggregates whose drain failed for now (retried by the
	// next sweep).
	Failed int
}

// Sweep finds every event of this consumer waiting in the buffer for at
// least SweepMinAge, and drains each such aggregate whose next sequence is
// buffered (what a crash between applying an event and draining its
// successors, or a starting point set by SetBaseline, leaves behind).
// Aggregates whose gap is real stay buffered: they wait for the missing
// event (its redrive drains them). It returns what is left (SweepReport),
// for the OldestBufferedAgeSeconds metric; an error only when the buffer
// cannot be listed. Draining runs the handler, so a DLQ for events that
// fail for good is found in ctx as during Handle.
func (r *Resequencer) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	all, err := ListBuffered(ctx, r.client, r.a.cfg.Table, r.a.cfg.Consumer)
	if err != nil {
		return rep, err
	}
	now := r.a.cfg.Now()
	byAgg := map[aggRef][]BufferedEvent{}
	var order []aggRef
	for _, b := range all {
		ref := aggRef{b.AggregateType, b.AggregateID}
		if _, ok := byAgg[ref]; !ok {
			order = append(order, ref)
		}
		byAgg[ref] = append(byAgg[ref], b)
	}
	for _, ref := range order {
		waiting := byAgg[ref]
		oldest := waiting[0].BufferedAt
		for _, b := range waiting {
			if b.BufferedAt.Before(oldest) {
				oldest = b.BufferedAt
			}
		}
		if now.Sub(oldest) >= r.cfg.SweepMinAge && ctx.Err() == nil {
			n, err := r.drain(ctx, ref)
			rep.Drained += n
			if err != nil {
				rep.Failed++
				r.log.WarnContext(ctx, "dedup: sweep could not drain an aggregate; the next sweep retries", "aggregate_type", ref.typ, "aggregate_id", ref.id, "error", err)
			}
			if st, err := r.a.ReadGate(ctx, ref.typ, ref.id); err == nil {
				kept := waiting[:0]
				for _, b := range waiting {
					if st.IsBuffered(b.Sequence) && b.Sequence > st.Last {
						kept = append(kept, b)
					}
				}
				waiting = kept
			}
		}
		if len(waiting) == 0 {
			continue
		}
		rep.Aggregates++
		rep.Buffered += len(waiting)
		for _, b := range waiting {
			rep.OldestAge = max(rep.OldestAge, now.Sub(b.BufferedAt))
		}
	}
	return rep, nil
}

// BaselineClient is the DynamoDB subset SetBaseline calls, with the SDK's
// exact signatures; *dynamodb.Client satisfies it.
type BaselineClient interface {
	TransactWriter
	ItemGetter
}

// Baseline is what SetBaseline did for one aggregate.
type Baseline struct {
	// Set is false when the consumer already had a starting point for the
	// aggregate: nothing was written, Last is the existing one.
	Set bool
	// Last is the aggregate's starting point: the events after it are
	// applied, in order. Set, it is the requested one or, when events of
	// the aggregate already wait in the buffer at or below it, one below
	// the first of them (Lowered).
	Last int64
	// Lowered reports that the starting point was set below the requested
	// one so that it covers no event the consumer already holds.
	Lowered bool
}

// SetBaseline declares consumer's starting point for one aggregate: its
// ordering item gets last_sequence = last, so the consumer applies the
// aggregate's events after last, in order, and treats those up to last as
// belonging to the time before it (duplicates).
//
// A starting point never removes what the consumer received: when events
// of the aggregate already wait in the buffer at or below last (they
// arrived after the consumer's rule existed, so they are the consumer's to
// apply), the starting point is set one below the first of them instead
// (Baseline.Lowered) and they are applied in order by the consumer's next
// sweep or next event of the aggregate. The write is conditioned on no
// starting point existing and on the buffered set the decision was made
// from (its size: an event buffered meanwhile makes it read again).
//
// It only sets a starting point where none exists: Baseline.Set is false
// when the consumer already has one. It returns an error when last < 0, a
// read or the write fails, or the buffered set kept changing for
// DefaultMaxAttempts reads.
func SetBaseline(ctx context.Context, client BaselineClient, table, consumer, aggregateType, aggregateID string, last int64, now time.Time) (Baseline, error) {
	if last < 0 {
		return Baseline{}, fmt.Errorf("dedup: baseline %d of %s %s is negative", last, aggregateType, aggregateID)
	}
	key := map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: SequenceKey(consumer, aggregateType, aggregateID)}}
	for range DefaultMaxAttempts {
		cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
		out, err := client.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
		cancel()
		if err != nil {
			return Baseline{}, fmt.Errorf("dedup: read the starting point of %s %s for %s: %w", aggregateType, aggregateID, consumer, err)
		}
		st, err := decodeGate(SequenceKey(consumer, aggregateType, aggregateID), out.Item)
		if err != nil {
			return Baseline{}, err
		}
		if _, exists := out.Item[AttrLastSequence]; exists {
			return Baseline{Last: st.Last}, nil
		}
		b := Baseline{Set: true, Last: last}
		if len(st.Buffered) > 0 && st.Buffered[0]-1 < last {
			b.Last, b.Lowered = st.Buffered[0]-1, true
		}
		seq, buffered := expression.Name(AttrLastSequence), expression.Name(AttrBuffered)
		unchanged := expression.AttributeNotExists(buffered)
		if len(st.Buffered) > 0 {
			unchanged = expression.Size(buffered).Equal(expression.Value(len(st.Buffered)))
		}
		e, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(seq).And(unchanged)).WithUpdate(expression.
			Set(seq, expression.Value(b.Last)).
			Set(expression.Name(AttrLastEventID), expression.Value("baseline")).
			Set(expression.Name(AttrConsumer), expression.Value(consumer)).
			Set(expression.Name(AttrAggregateType), expression.Value(aggregateType)).
			Set(expression.Name(AttrAggregateID), expression.Value(aggregateID)).
			Set(expression.Name(AttrAppliedAt), expression.Value(now.UTC().Format(time.RFC3339Nano)))).Build()
		if err != nil {
			return Baseline{}, fmt.Errorf("dedup: build baseline: %w", err)
		}
		cctx, cancel = context.WithTimeout(ctx, DefaultCallTimeout)
		_, err = client.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
			TableName: aws.String(table), Key: key,
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		}}}})
		cancel()
		switch {
		case err == nil:
			return b, nil
		case !isConditionFailure(err):
			return Baseline{}, fmt.Errorf("dedup: set baseline of %s %s for %s: %w", aggregateType, aggregateID, consumer, err)
		}
		// A starting point appeared, or the buffer changed: read again.
	}
	return Baseline{}, fmt.Errorf("dedup: set baseline of %s %s for %s: the ordering item kept changing", aggregateType, aggregateID, consumer)
}

// tick runs one sweep for a sweep tick: logged, metrics written.
func (r *Resequencer) tick(ctx context.Context) {
	rep, err := r.Sweep(ctx)
	if err != nil {
		r.log.ErrorContext(ctx, "dedup: resequencer sweep failed; the next tick sweeps again", "error", err)
		return
	}
	lvl := slog.LevelInfo
	if rep.Buffered > 0 {
		lvl = slog.LevelWarn
	}
	r.log.Log(ctx, lvl, "dedup: resequencer sweep", "buffered", rep.Buffered, "aggregates", rep.Aggregates,
		"oldest_buffered_age_s", rep.OldestAge.Seconds(), "drained", rep.Drained, "failed", rep.Failed)
	if err := rep.WriteEMF(r.cfg.Metrics, r.a.cfg.Consumer, time.Now()); err != nil {
		r.log.WarnContext(ctx, "dedup: resequencer metrics not written", "error", err)
	}
}

// WriteEMF writes the report as one CloudWatch embedded metric format line
// (namespace config.MetricNamespace, dimension
// config.MetricDimensionConsumer = consumer): config.MetricBufferedEvents
// (Count), config.MetricOldestBufferedAge (Seconds) and
// config.MetricResequencerDrained (Count), timestamped now. Lambda's log
// stream turns it into metrics (CloudWatch user guide,
// CloudWatch_Embedded_Metric_Format_Specification). It returns w's error.
func (r SweepReport) WriteEMF(w io.Writer, consumer string, now time.Time) error {
	type def struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	line := map[string]any{
		config.MetricDimensionConsumer:  consumer,
		config.MetricBufferedEvents:     r.Buffered,
		config.MetricOldestBufferedAge:  r.OldestAge.Seconds(),
		config.MetricResequencerDrained: r.Drained,
		"_aws": map[string]any{
			"Timestamp": now.UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  config.MetricNamespace,
				"Dimensions": [][]string{{config.MetricDimensionConsumer}},
				"Metrics": []def{
					{config.MetricBufferedEvents, "Count"},
					{config.MetricOldestBufferedAge, "Seconds"},
					{config.MetricResequencerDrained, "Count"},
				},
			}},
		},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
