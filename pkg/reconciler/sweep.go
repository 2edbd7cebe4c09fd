package reconciler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// cursor pages through the due records of one pending index shard.
type cursor struct {
	shard string
	in    *dynamodb.QueryInput
	pages int
	more  bool  // a next page exists (LastEvaluatedKey, or not read yet)
	last  int64 // created_at_ms of the last item read; unread items are >= it
}

// sweep reads the due records of every shard merged in created_at order,
// and releases them in rounds: a record is released once every shard that
// still has unread records has read past its created_at (the frontier), so
// an aggregate's earlier record (created earlier, in whatever shard its
// event id hashed to) is always released with or before its later ones.
// Each round's records are claimed, re-published in order per aggregate (PublishInOrder) and
// marked (process). Reading stops when every shard is read, when a shard at
// MaxPagesPerShard still has records (the frontier cannot move past it), or
// when pubCtx ends; both set Truncated, and records read but not released
// wait for the next run. A shard whose Query fails is left out of the
// frontier (its error is returned) so the other shards still progress; an
// aggregate with a record in that shard may then be published ahead of it,
// and an ordered consumer holds the later record until the gap closes.
//
// The lane says whose records these are: this Region's own (claim and mark
// the record) or, during a takeover, a failed Region's (claim and mark a
// takeover mark, never the record).
func (r *Reconciler) sweep(ctx, pubCtx context.Context, l *lane, cutoffMs int64, rep *Report) []error {
	var errs []error
	var cursors []*cursor
	for i := 0; i < r.cfg.PendingShards; i++ {
		shard := l.shardName(i)
		expr, err := expression.NewBuilder().
			WithKeyCondition(expression.Key(outbox.AttrPendingShard).Equal(expression.Value(shard)).
				And(expression.Key(outbox.AttrCreatedAt).LessThan(expression.Value(cutoffMs)))).Build()
		if err != nil {
			return append(errs, err)
		}
		cursors = append(cursors, &cursor{shard: shard, more: true, last: math.MinInt64, in: &dynamodb.QueryInput{
			TableName:                 aws.String(r.cfg.Table),
			IndexName:                 aws.String(outbox.PendingIndexName),
			KeyConditionExpression:    expr.KeyCondition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
			ScanIndexForward:          aws.Bool(true),
			Limit:                     aws.Int32(int32(r.cfg.PageSize)), //nolint:gosec // G115: Config.Validate bounds PageSize to 1..1000
		}})
	}
	var buffered []map[string]types.AttributeValue
	// read fetches the next page of each cursor, sweepConcurrency at a
	// time (the shards are separate partitions of the pending index), and
	// buffers the items in cursor order.
	read := func(batch []*cursor) {
		pages := make([][]map[string]types.AttributeValue, len(batch))
		failed := make([]error, len(batch))
		var g errgroup.Group
		g.SetLimit(sweepConcurrency)
		for i, c := range batch {
			g.Go(func() error {
				out, err := r.query(ctx, c.in)
				c.pages++
				if err != nil {
					failed[i] = fmt.Errorf("sweep shard %s: %w", c.shard, err)
					c.more = false
					return nil
				}
				pages[i] = out.Items
				if n := len(out.Items); n > 0 {
					c.last = createdAt(out.Items[n-1])
				}
				c.more = len(out.LastEvaluatedKey) > 0
				c.in.ExclusiveStartKey = out.LastEvaluatedKey
				return nil
			})
		}
		_ = g.Wait() // each shard's error is in failed
		for i := range batch {
			if failed[i] != nil {
				errs = append(errs, failed[i])
			}
			buffered = append(buffered, pages[i]...)
		}
	}
	blocked := map[string]bool{} // aggregates (pk) held back for the rest of the run
	for {
		if pubCtx.Err() != nil {
			rep.Truncated = true
			break
		}
		// Read the shards at the frontier (at first: all of them).
		frontier := int64(math.MaxInt64)
		for _, c := range cursors {
			if c.more {
				frontier = min(frontier, c.last)
			}
		}
		stuck := false
		var batch []*cursor
		for _, c := range cursors {
			if !c.more || c.last != frontier {
				continue
			}
			if c.pages == r.cfg.MaxPagesPerShard {
				stuck = true
				continue
			}
			batch = append(batch, c)
		}
		read(batch)
		frontier = math.MaxInt64
		for _, c := range cursors {
			if c.more {
				frontier = min(frontier, c.last)
			}
		}
		var release, keep []map[string]types.AttributeValue
		for _, item := range buffered {
			// Strictly older than the frontier: an unread record with the
			// same created_at_ms could be an earlier one of the same
			// aggregate. Once a shard is stuck at its page bound the
			// frontier no longer moves, and records at it are released
			// too, so that a run always progresses.
			if at := createdAt(item); at < frontier || stuck && at == frontier {
				release = append(release, item)
			} else {
				keep = append(keep, item)
			}
		}
		buffered = keep
		r.process(ctx, pubCtx, l, release, blocked, rep)
		anyMore := false
		for _, c := range cursors {
			anyMore = anyMore || c.more
		}
		if !anyMore {
			break
		}
		if stuck {
			rep.Truncated = true
			break
		}
	}
	return errs
}

// sweepConcurrency bounds the pending index shards a sweep reads at once.
const sweepConcurrency = 8

// createdAt returns an item's created_at_ms, or math.MinInt64 if it has none
// (such an item is released at once and parked as undecodable).
func createdAt(item map[string]types.AttributeValue) int64 {
	if n, ok := item[outbox.AttrCreatedAt].(*types.AttributeValueMemberN); ok {
		if v, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			return v
		}
	}
	return math.MinInt64
}

// claimOutcome is the result of claiming one record.
type claimOutcome int

const (
	claimed       claimOutcome = iota // this run holds it; item is the base table's
	notPending                        // published, parked or gone: nothing to do
	claimedByPeer                     // another run holds it
	claimFailed                       // the call failed; retry next run
)

// claim takes one record for this run: UpdateItem SET claimed_until = now +
// ClaimLease with condition attribute_exists(pk) AND status = PENDING AND
// (attribute_not_exists(claimed_until) OR claimed_until < now) (and, in
// multi-Region mode, origin_region = Region), returning
// the item as it is now in the base table (ALL_NEW; on a failed condition,
// ALL_OLD tells a record no longer pending from one another run holds).
func (r *Reconciler) claim(ctx context.Context, key outbox.Key, _ map[string]types.AttributeValue) (claimOutcome, map[string]types.AttributeValue, error) {
	if r.cfg.Region == "" {
		return r.claimWhere(ctx, key, nil, nil)
	}
	// One writing Region per record: a record of another Region (which
	// its pending shard should already rule out) is never claimed here.
	origin := expression.Name(outbox.AttrOriginRegion).Equal(expression.Value(r.cfg.Region))
	return r.claimWhere(ctx, key, &origin, nil)
}

// claimLegacy is the legacy lane's claim: claim's, with
// attribute_not_exists(origin_region) in place of origin_region = Region.
// A pending record that has an origin Region (which the writer never puts
// in a single-Region shard) is not this lane's: notPending, never claimed.
func (r *Reconciler) claimLegacy(ctx context.Context, key outbox.Key, _ map[string]types.AttributeValue) (claimOutcome, map[string]types.AttributeValue, error) {
	origin := expression.AttributeNotExists(expression.Name(outbox.AttrOriginRegion))
	return r.claimWhere(ctx, key, &origin, func(old map[string]types.AttributeValue) bool {
		_, stamped := old[outbox.AttrOriginRegion]
		return stamped
	})
}

// claimWhere is claim with an optional extra condition on the record's
// origin; foreign, when given, tells from the ALL_OLD item of a failed
// condition that the record is not this lane's (notPending).
func (r *Reconciler) claimWhere(ctx context.Context, key outbox.Key, origin *expression.ConditionBuilder, foreign func(map[string]types.AttributeValue) bool) (claimOutcome, map[string]types.AttributeValue, error) {
	now := r.cfg.Now().UnixMilli()
	until := expression.Name(outbox.AttrClaimedUntil)
	cond := expression.AttributeExists(expression.Name(outbox.AttrPK)).
		And(expression.Name(outbox.AttrStatus).Equal(expression.Value(outbox.StatusPending))).
		And(expression.AttributeNotExists(until).Or(until.LessThan(expression.Value(now))))
	if origin != nil {
		cond = cond.And(*origin)
	}
	expr, err := expression.NewBuilder().
		WithCondition(cond).
		WithUpdate(expression.Set(until, expression.Value(now+r.cfg.ClaimLease.Milliseconds()))).
		Build()
	if err != nil {
		return claimFailed, nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	out, err := r.ddb.UpdateItem(callCtx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(r.cfg.Table),
		Key:                                 key.AttributeValues(),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return claimFailed, nil, err
		}
		if len(ccf.Item) == 0 {
			return notPending, nil, nil // gone (deleted by its TTL after publishing)
		}
		if foreign != nil && foreign(ccf.Item) {
			return notPending, ccf.Item, nil
		}
		if st, ok := ccf.Item[outbox.AttrStatus].(*types.AttributeValueMemberS); ok && st.Value == outbox.StatusPending {
			return claimedByPeer, ccf.Item, nil
		}
		return notPending, ccf.Item, nil
	}
	return claimed, out.Attributes, nil
}

// due is one released record on its way through claim, publish and mark.
type due struct {
	key     outbox.Key
	item    map[string]types.AttributeValue
	outcome claimOutcome
	err     error
}

// process claims, re-publishes and marks one round of released records.
// Records are grouped by aggregate (pk) and ordered by sk (sequence, index);
// an aggregate in blocked, or whose record is claimed by another run or
// cannot be claimed, has its later records held back (not claimed, not sent)
// and stays blocked for the rest of the run; so does one whose record was
// not published.
//
// On the own lane, records a survivor already published during a takeover
// (a PUBLISHED takeover mark) are adopted first: marked published without
// being sent (adopt). On a takeover lane, claim and finish are the
// takeover mark's, and a permanent failure marks the mark FAILED (the
// failed Region parks its own record once it is back).
func (r *Reconciler) process(ctx, pubCtx context.Context, l *lane, items []map[string]types.AttributeValue, blocked map[string]bool, rep *Report) {
	if len(items) == 0 {
		return
	}
	if len(l.adoptFrom) > 0 {
		items = r.adopt(ctx, l, items, rep)
		if len(items) == 0 {
			return
		}
	}
	groups := map[string][]*due{}
	var pks []string
	for _, item := range items {
		d := &due{key: outbox.Key{PK: str(item[outbox.AttrPK]), SK: str(item[outbox.AttrSK])}, item: item}
		if _, ok := groups[d.key.PK]; !ok {
			pks = append(pks, d.key.PK)
		}
		groups[d.key.PK] = append(groups[d.key.PK], d)
	}
	for _, g := range groups {
		sort.SliceStable(g, func(i, j int) bool { return g[i].key.SK < g[j].key.SK })
	}

	// Claim, aggregate by aggregate (in sequence order), aggregates in parallel.
	var claims errgroup.Group
	claims.SetLimit(r.cfg.ClaimConcurrency)
	var mu sync.Mutex
	for _, pk := range pks {
		mu.Lock()
		isBlocked := blocked[pk]
		mu.Unlock()
		if isBlocked {
			for _, d := range groups[pk] {
				d.outcome = claimedByPeer
				d.err = errHeld
			}
			continue
		}
		g := groups[pk]
		claims.Go(func() error {
			for i, d := range g {
				if pubCtx.Err() != nil {
					for _, rest := range g[i:] {
						rest.outcome, rest.err = claimFailed, pubCtx.Err()
					}
					return nil
				}
				var item map[string]types.AttributeValue
				d.outcome, item, d.err = l.claim(pubCtx, d.key, d.item)
				if d.outcome == claimed {
					d.item = item
				}
				if d.outcome == claimedByPeer || d.outcome == claimFailed {
					mu.Lock()
					blocked[pk] = true
					mu.Unlock()
					for _, rest := range g[i+1:] {
						rest.outcome, rest.err = claimedByPeer, errHeld
					}
					return nil
				}
			}
			return nil
		})
	}
	_ = claims.Wait() // outcomes are recorded per record

	// Publish what was claimed, in order per aggregate, then mark.
	var marks []relay.Mark
	var envs []outbox.Envelope
	var keys []outbox.Key
	var markIdx []int // index into marks of each envelope
	for _, pk := range pks {
		for _, d := range groups[pk] {
			switch {
			case errors.Is(d.err, errHeld):
				rep.Failed++
				rep.HeldBack++
				continue
			case d.outcome == claimFailed:
				rep.Failed++
				r.cfg.Logger.WarnContext(ctx, "reconciler: claim failed, left pending", "pk", d.key.PK, "sk", d.key.SK, "error", d.err)
				continue
			case d.outcome != claimed:
				rep.Skipped++
				r.cfg.Logger.InfoContext(ctx, "reconciler: due record not claimed (no longer pending, or claimed by another run)", "pk", d.key.PK, "sk", d.key.SK)
				continue
			}
			rec, err := outbox.RecordFromItem(d.item)
			if err != nil && l.failed != "" {
				// Never the survivor's to park: the failed Region parks it.
				rep.Failed++
				r.cfg.Logger.ErrorContext(ctx, "reconciler: undecodable record of a failed Region, left to its origin", "pk", d.key.PK, "sk", d.key.SK, "failed_region", l.failed, "error", err)
				continue
			}
			if err != nil {
				r.cfg.Logger.ErrorContext(ctx, "reconciler: undecodable pending record, parking", "pk", d.key.PK, "sk", d.key.SK, "error", err)
				marks = append(marks, relay.Mark{Key: d.key, Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: relay.CodePoisonRecord, ErrorMessage: err.Error()}})
				continue
			}
			markIdx = append(markIdx, len(marks))
			marks = append(marks, relay.Mark{Key: rec.Key, Envelope: rec.Envelope})
			envs = append(envs, rec.Envelope)
			keys = append(keys, rec.Key)
		}
	}
	if len(envs) > 0 {
		for j, res := range r.pub.PublishInOrder(pubCtx, envs, keys) {
			marks[markIdx[j]].Result = res
			if res.Status == relay.RetryableFailure {
				blocked[keys[j].PK] = true
			}
		}
	}
	if len(marks) == 0 {
		return
	}
	for i, err := range l.finish(ctx, marks) {
		m := marks[i]
		switch {
		case err != nil:
			rep.Failed++
			r.cfg.Logger.ErrorContext(ctx, "reconciler: marking failed", "event_id", m.Envelope.EventID,
				"aggregate_id", m.Envelope.AggregateID, "sequence", m.Envelope.Sequence, "error", err)
		case m.Result.Status == relay.Published && l.failed != "":
			rep.TakenOver++
			r.cfg.Logger.InfoContext(ctx, "reconciler: published a failed Region's pending record (takeover mark)", "event_id", m.Envelope.EventID,
				"aggregate_id", m.Envelope.AggregateID, "sequence", m.Envelope.Sequence, "failed_region", l.failed)
		case m.Result.Status == relay.Published:
			rep.Resent++
			if l.legacy {
				rep.Legacy++
			}
			r.cfg.Logger.InfoContext(ctx, "reconciler: re-published pending record", "event_id", m.Envelope.EventID,
				"aggregate_id", m.Envelope.AggregateID, "sequence", m.Envelope.Sequence, "legacy", l.legacy)
		case m.Result.Status == relay.PermanentFailure && l.failed != "":
			rep.Failed++
		case m.Result.Status == relay.PermanentFailure:
			rep.Parked++
		default:
			rep.Failed++
			if m.Result.ErrorCode == relay.CodeHeldBack {
				rep.HeldBack++
			}
			r.cfg.Logger.WarnContext(ctx, "reconciler: re-publish failed, left pending", "event_id", m.Envelope.EventID,
				"aggregate_id", m.Envelope.AggregateID, "sequence", m.Envelope.Sequence,
				"error_code", m.Result.ErrorCode, "error", m.Result.ErrorMessage)
		}
	}
}

// errHeld marks a record held back behind an earlier record of its aggregate.
var errHeld = errors.New("held back behind an earlier record of its aggregate")
