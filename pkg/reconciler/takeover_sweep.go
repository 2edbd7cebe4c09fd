package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Metrics of a multi-Region reconciler run (EMF, namespace
// config.MetricNamespace, dimension config.MetricDimensionOutboxTable), one
// value each per run.
const (
	// MetricTakeoverPublished: a failed Region's records this run
	// published during a takeover it survives (Report.TakenOver).
	MetricTakeoverPublished = "TakeoverPublished"
	// MetricTakeoverAdopted: own records marked published without being
	// sent, a survivor having published them (Report.Adopted).
	MetricTakeoverAdopted = "TakeoverAdopted"
	// MetricActiveTakeovers: active takeovers this Region survives
	// (len(Report.Takeovers)); non-zero means this Region publishes for
	// another, and someone must release it once that Region is back.
	MetricActiveTakeovers = "ActiveTakeovers"
)

// MaxBatchGetKeys is BatchGetItem's limit on keys per call. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
const MaxBatchGetKeys = 100

// lane is whose records a sweep handles: this Region's own (failed == ""),
// during a takeover a failed Region's, or (legacy) the records without an
// origin Region that the legacy owner sweeps.
type lane struct {
	// region is the Region of the shards swept ("" in single-Region mode).
	region string
	// legacy: the single-Region shards (outbox.ShardName) of records
	// written before the switch to multi-Region mode (Config.LegacyOwner).
	legacy bool
	// failed is the failed Region of a takeover lane, "" on the own lane.
	failed    string
	lagMargin time.Duration
	// adoptFrom are the survivors of takeovers ever declared against this
	// Region (own lane, multi-Region mode): their PUBLISHED marks are
	// adopted.
	adoptFrom []string
	claim     func(ctx context.Context, key outbox.Key, item map[string]types.AttributeValue) (claimOutcome, map[string]types.AttributeValue, error)
	finish    func(ctx context.Context, marks []relay.Mark) []error
}

// ownLane is the sweep of this Region's records: claim and mark them.
func (r *Reconciler) ownLane() *lane {
	return &lane{region: r.cfg.Region, claim: r.claim, finish: r.marker.MarkAll}
}

// legacyLane is the legacy owner's sweep of the single-Region shards:
// claim (only records without an origin Region) and mark them as its own.
func (r *Reconciler) legacyLane() *lane {
	return &lane{legacy: true, claim: r.claimLegacy, finish: r.marker.MarkAll}
}

// shardName returns the pending index partition value of shard i of l.
func (l *lane) shardName(i int) string {
	if l.legacy {
		return outbox.ShardName(i)
	}
	return outbox.RegionShardName(l.region, i)
}

// takeoverLanes reads the takeover items (ListTakeovers) and returns a lane
// per ACTIVE takeover this Region survives; it also sets own.adoptFrom to
// the survivors of every takeover (active or released) of this Region.
func (r *Reconciler) takeoverLanes(ctx context.Context, own *lane) ([]*lane, error) {
	tks, err := ListTakeovers(ctx, r.ddb, r.cfg.Table)
	if err != nil {
		return nil, err
	}
	var lanes []*lane
	for _, t := range tks {
		if config.ValidRegionName(t.Failed) != nil || config.ValidRegionName(t.Survivor) != nil || t.Failed == t.Survivor {
			r.cfg.Logger.WarnContext(ctx, "reconciler: malformed takeover item ignored", "failed_region", t.Failed, "survivor_region", t.Survivor)
			continue
		}
		switch {
		case t.Failed == r.cfg.Region:
			own.adoptFrom = append(own.adoptFrom, t.Survivor)
		case t.Survivor == r.cfg.Region && t.Active():
			lanes = append(lanes, &lane{region: t.Failed, failed: t.Failed, lagMargin: t.LagMargin,
				claim: r.claimMark(t.Failed), finish: r.finishMarks(t.Failed)})
		}
	}
	return lanes, nil
}

// takeoverCutoff returns the created_at_ms below which a failed Region's
// record is due for a takeover: now − (after + lag), 0 when that sum
// overflows or reaches before the epoch (nothing is due).
func takeoverCutoff(now time.Time, after, lag time.Duration) int64 {
	if after < 0 || lag < 0 || lag > time.Duration(1<<63-1)-after {
		return 0
	}
	return max(now.UnixMilli()-(after+lag).Milliseconds(), 0)
}

// heartbeat writes this Region's heartbeat item (PutItem, unconditional:
// this Region is its only writer).
func (r *Reconciler) heartbeat(ctx context.Context, now time.Time) error {
	item := HeartbeatKey(r.cfg.Region).AttributeValues()
	item[AttrHeartbeatAtMs] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}
	item[AttrHeartbeatAt] = &types.AttributeValueMemberS{Value: now.UTC().Format(time.RFC3339Nano)}
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if _, err := r.multi.PutItem(callCtx, &dynamodb.PutItemInput{TableName: aws.String(r.cfg.Table), Item: item}); err != nil {
		return fmt.Errorf("heartbeat of %s: %w", r.cfg.Region, err)
	}
	return nil
}

// claimMark returns the claim of a takeover lane: it reads the failed
// Region's record in this Region's replica (GetItem, strongly consistent)
// and goes on only if it is still PENDING, written in failed and decodes
// as an outbox record (a record whose event id is too long for MarkKey's
// sort key is a claim failure, sent nowhere: its aggregate waits for its
// origin); then it
// puts this Region's takeover mark (MarkKey) with takeover_state CLAIMED
// and claimed_until = now + ClaimLease, conditioned on no mark or a lapsed
// CLAIMED one. A PUBLISHED or FAILED mark means nothing to do; a live
// CLAIMED one, another run holds it. The record is never written.
func (r *Reconciler) claimMark(failed string) func(context.Context, outbox.Key, map[string]types.AttributeValue) (claimOutcome, map[string]types.AttributeValue, error) {
	return func(ctx context.Context, key outbox.Key, item map[string]types.AttributeValue) (claimOutcome, map[string]types.AttributeValue, error) {
		eventID := str(item[outbox.AttrEventID])
		if eventID == "" {
			return notPending, nil, nil // undecodable: its origin parks it
		}
		if mk := MarkKey(failed, r.cfg.Region, eventID); len(mk.SK) > outbox.MaxSortKeyBytes {
			// No mark can name it (DynamoDB would refuse the key), so it
			// cannot be taken over; its aggregate waits for its origin.
			return claimFailed, nil, fmt.Errorf("takeover of %s/%s: event id of %d bytes does not fit a takeover mark's %d-byte sort key (outbox.MaxRegionEventIDBytes); left to %s", key.PK, key.SK, len(eventID), outbox.MaxSortKeyBytes, failed)
		}
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		got, err := r.multi.GetItem(callCtx, &dynamodb.GetItemInput{TableName: aws.String(r.cfg.Table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true)})
		cancel()
		if err != nil {
			return claimFailed, nil, err
		}
		if got.Item == nil || str(got.Item[outbox.AttrStatus]) != outbox.StatusPending || str(got.Item[outbox.AttrOriginRegion]) != failed {
			return notPending, nil, nil
		}
		if _, err := outbox.RecordFromItem(got.Item); err != nil {
			// Undecodable: never the survivor's to park, and no mark is
			// written for it; its origin parks it once back.
			r.cfg.Logger.ErrorContext(ctx, "reconciler: undecodable record of a failed Region, left to its origin", "pk", key.PK, "sk", key.SK, "failed_region", failed, "error", err)
			return notPending, nil, nil
		}
		now := r.cfg.Now().UnixMilli()
		mk := MarkKey(failed, r.cfg.Region, eventID)
		mark := mk.AttributeValues()
		mark[AttrTakeoverState] = &types.AttributeValueMemberS{Value: MarkClaimed}
		mark[outbox.AttrClaimedUntil] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now+r.cfg.ClaimLease.Milliseconds(), 10)}
		mark[AttrFailedRegion] = &types.AttributeValueMemberS{Value: failed}
		mark[AttrSurvivorRegion] = &types.AttributeValueMemberS{Value: r.cfg.Region}
		mark[AttrMarkEventID] = &types.AttributeValueMemberS{Value: eventID}
		mark[AttrMarkRecordPK] = &types.AttributeValueMemberS{Value: key.PK}
		mark[AttrMarkRecordSK] = &types.AttributeValueMemberS{Value: key.SK}
		if g, ok := got.Item[outbox.AttrRedriveGeneration]; ok {
			// The generation published: a later redrive or requeue in the
			// origin is not covered by this mark (adopt).
			mark[outbox.AttrRedriveGeneration] = g
		}
		state, until := expression.Name(AttrTakeoverState), expression.Name(outbox.AttrClaimedUntil)
		expr, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(outbox.AttrPK)).
			Or(state.Equal(expression.Value(MarkClaimed)).And(until.LessThan(expression.Value(now))))).Build()
		if err != nil {
			return claimFailed, nil, err
		}
		callCtx, cancel = context.WithTimeout(ctx, r.cfg.CallTimeout)
		defer cancel()
		_, err = r.multi.PutItem(callCtx, &dynamodb.PutItemInput{
			TableName: aws.String(r.cfg.Table), Item: mark,
			ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if str(ccf.Item[AttrTakeoverState]) == MarkClaimed {
				return claimedByPeer, nil, nil
			}
			return notPending, nil, nil
		}
		if err != nil {
			return claimFailed, nil, err
		}
		return claimed, got.Item, nil
	}
}

// finishMarks returns the finish of a takeover lane: a published record's
// mark becomes PUBLISHED (bus_event_id, published_at, expires_at = now +
// MarkRetention; claimed_until removed), a permanently failed one FAILED
// (mark_reason), each conditioned on the mark still being CLAIMED (a mark
// only moves forward); a retryable failure leaves the mark CLAIMED until
// its claim lapses. One error per mark, in order.
func (r *Reconciler) finishMarks(failed string) func(context.Context, []relay.Mark) []error {
	return func(ctx context.Context, marks []relay.Mark) []error {
		errs := make([]error, len(marks))
		var g errgroup.Group
		g.SetLimit(r.cfg.ClaimConcurrency)
		for i, m := range marks {
			if m.Result.Status == relay.RetryableFailure || m.Envelope.EventID == "" {
				continue
			}
			g.Go(func() error {
				errs[i] = r.finishMark(ctx, failed, m)
				return nil
			})
		}
		_ = g.Wait() // errors are per mark
		return errs
	}
}

func (r *Reconciler) finishMark(ctx context.Context, failed string, m relay.Mark) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("takeover mark %s: no time left: %w", m.Envelope.EventID, err)
	}
	now := r.cfg.Now().UTC()
	state := expression.Name(AttrTakeoverState)
	upd := expression.Remove(expression.Name(outbox.AttrClaimedUntil))
	if m.Result.Status == relay.Published {
		upd = upd.Set(state, expression.Value(MarkPublished)).
			Set(expression.Name(outbox.AttrBusEventID), expression.Value(m.Result.EventID)).
			Set(expression.Name(outbox.AttrPublishedAt), expression.Value(now.Format(time.RFC3339Nano))).
			Set(expression.Name(outbox.AttrExpiresAt), expression.Value(now.Add(r.cfg.MarkRetention).Unix()))
	} else {
		reason := m.Result.ErrorCode
		if m.Result.ErrorMessage != "" {
			reason += ": " + m.Result.ErrorMessage
		}
		upd = upd.Set(state, expression.Value(MarkFailed)).Set(expression.Name(AttrMarkReason), expression.Value(reason))
	}
	expr, err := expression.NewBuilder().WithUpdate(upd).WithCondition(state.Equal(expression.Value(MarkClaimed))).Build()
	if err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	_, err = r.ddb.UpdateItem(callCtx, &dynamodb.UpdateItemInput{
		TableName: aws.String(r.cfg.Table), Key: MarkKey(failed, r.cfg.Region, m.Envelope.EventID).AttributeValues(),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		r.cfg.Logger.WarnContext(ctx, "reconciler: takeover mark no longer CLAIMED; left as is", "event_id", m.Envelope.EventID, "failed_region", failed)
		return nil
	}
	if err != nil {
		return fmt.Errorf("takeover mark %s: %w", m.Envelope.EventID, err)
	}
	return nil
}

// adopt returns the items no survivor published: for every item with an
// event id and every survivor in l.adoptFrom it reads the survivor's mark
// (BatchGetItem, MaxBatchGetKeys keys a call, UnprocessedKeys retried with
// backoff), and marks each record a PUBLISHED mark covers published through
// the Marker (bus_event_id from the mark) without sending it. A mark covers
// the record it names (record_pk, record_sk), not another record carrying
// the same event id, and only at the redrive generation it published
// (outbox.AttrRedriveGeneration, copied from the record when claimed): a
// record the origin redrove or requeued since is sent again, as asked
// (the marking is conditioned on that generation too:
// relay.Marker.MarkPublishedAtGeneration). Each mark key is read once, and a key too long for a
// mark (MarkKey's sort key over outbox.MaxSortKeyBytes: no mark can exist)
// is not read: BatchGetItem refuses a request with a duplicate or an
// over-long key as a whole. A record whose adoption failed is left out too
// (the next run tries again); a record whose marks could not be read is
// kept (sent again at worst, I3).
func (r *Reconciler) adopt(ctx context.Context, l *lane, items []map[string]types.AttributeValue, rep *Report) []map[string]types.AttributeValue {
	var keys []map[string]types.AttributeValue
	asked := map[outbox.Key]bool{}
	for _, it := range items {
		id := str(it[outbox.AttrEventID])
		if id == "" {
			continue
		}
		for _, s := range l.adoptFrom {
			k := MarkKey(r.cfg.Region, s, id)
			if asked[k] || len(k.SK) > outbox.MaxSortKeyBytes {
				continue
			}
			asked[k] = true
			keys = append(keys, k.AttributeValues())
		}
	}
	type published struct {
		bus, pk, sk string
		gen         int64
		genErr      error
	}
	busIDs := map[string][]published{} // event id -> PUBLISHED marks
	for start := 0; start < len(keys); start += MaxBatchGetKeys {
		got, err := r.batchGet(ctx, keys[start:min(start+MaxBatchGetKeys, len(keys))])
		if err != nil {
			r.cfg.Logger.WarnContext(ctx, "reconciler: reading takeover marks failed; records not adopted this run", "error", err)
		}
		for _, m := range got {
			if str(m[AttrTakeoverState]) == MarkPublished {
				id := str(m[AttrMarkEventID])
				gen, genErr := relay.RedriveGeneration(m)
				busIDs[id] = append(busIDs[id], published{bus: str(m[outbox.AttrBusEventID]), pk: str(m[AttrMarkRecordPK]), sk: str(m[AttrMarkRecordSK]), gen: gen, genErr: genErr})
			}
		}
	}
	// covering returns the bus event id of a PUBLISHED mark on the record
	// item at its redrive generation (a mark without record_pk/record_sk
	// covers its event id; one without a generation, generation 0).
	covering := func(it map[string]types.AttributeValue) (string, bool) {
		gen, err := relay.RedriveGeneration(it)
		if err != nil {
			return "", false
		}
		for _, p := range busIDs[str(it[outbox.AttrEventID])] {
			if p.genErr != nil || p.gen != gen {
				continue
			}
			if p.pk == "" && p.sk == "" || p.pk == str(it[outbox.AttrPK]) && p.sk == str(it[outbox.AttrSK]) {
				return p.bus, true
			}
		}
		return "", false
	}
	if len(busIDs) == 0 {
		return items
	}
	var rest []map[string]types.AttributeValue
	type adoption struct {
		item map[string]types.AttributeValue
		rec  outbox.Record
		bus  string
		err  error
	}
	var adopts []*adoption
	for _, it := range items {
		bus, ok := covering(it)
		if !ok {
			rest = append(rest, it)
			continue
		}
		rec, err := outbox.RecordFromItem(it)
		if err != nil {
			rest = append(rest, it) // parked by the normal path
			continue
		}
		adopts = append(adopts, &adoption{item: it, rec: rec, bus: bus})
	}
	if gm, ok := r.marker.(generationMarker); ok {
		// Each conditioned on the generation the mark covers: the item
		// may be a stale pending index copy of a record requeued since.
		var g errgroup.Group
		g.SetLimit(r.cfg.ClaimConcurrency)
		for _, a := range adopts {
			g.Go(func() error {
				a.err = gm.MarkPublishedAtGeneration(ctx, a.rec.Key, a.rec.Envelope, a.bus, a.rec.RedriveGeneration)
				return nil
			})
		}
		_ = g.Wait() // errors are per adoption
	} else {
		marks := make([]relay.Mark, len(adopts))
		for i, a := range adopts {
			marks[i] = relay.Mark{Key: a.rec.Key, Envelope: a.rec.Envelope, Result: relay.Result{Status: relay.Published, EventID: a.bus}}
		}
		for i, err := range r.marker.MarkAll(ctx, marks) {
			adopts[i].err = err
		}
	}
	for _, a := range adopts {
		e := a.rec.Envelope
		switch {
		case errors.Is(a.err, relay.ErrRedriveConflict):
			// Redriven or requeued since the survivor published it: the
			// normal path claims and publishes the new generation.
			rest = append(rest, a.item)
			r.cfg.Logger.InfoContext(ctx, "reconciler: record redriven since a survivor published it; not adopted",
				"event_id", e.EventID, "aggregate_id", e.AggregateID, "sequence", e.Sequence)
		case a.err != nil:
			rep.Failed++
			r.cfg.Logger.ErrorContext(ctx, "reconciler: adopting a record a survivor published failed; retried next run",
				"event_id", e.EventID, "aggregate_id", e.AggregateID, "sequence", e.Sequence, "error", a.err)
		default:
			rep.Adopted++
			r.cfg.Logger.InfoContext(ctx, "reconciler: adopted a record a survivor published (marked published, not re-sent)",
				"event_id", e.EventID, "aggregate_id", e.AggregateID, "sequence", e.Sequence, "bus_event_id", a.bus)
		}
	}
	return rest
}

// generationMarker is the optional Marker method adoption uses (as
// *relay.Marker has it): MarkPublished conditioned on the record's redrive
// generation, failing with relay.ErrRedriveConflict when it moved. A
// Marker without it adopts through MarkAll, unconditioned on the
// generation.
type generationMarker interface {
	MarkPublishedAtGeneration(ctx context.Context, key outbox.Key, env outbox.Envelope, busEventID string, generation int64) error
}

// batchGet reads up to MaxBatchGetKeys keys, retrying UnprocessedKeys with
// the library's backoff until they are read or ctx ends.
func (r *Reconciler) batchGet(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	req := map[string]types.KeysAndAttributes{r.cfg.Table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	wait := retry.New(50*time.Millisecond, 2*time.Second)
	for len(req) > 0 && len(req[r.cfg.Table].Keys) > 0 {
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		got, err := r.multi.BatchGetItem(callCtx, &dynamodb.BatchGetItemInput{RequestItems: req})
		cancel()
		if err != nil {
			return out, err
		}
		out = append(out, got.Responses[r.cfg.Table]...)
		req = got.UnprocessedKeys
		if len(req) == 0 {
			break
		}
		if err := retry.Sleep(ctx, wait.NextBackOff()); err != nil {
			return out, fmt.Errorf("takeover marks: %d keys unprocessed: %w", len(req[r.cfg.Table].Keys), err)
		}
	}
	return out, nil
}
