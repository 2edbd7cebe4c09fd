package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

const (
	regionA = "eu-west-1"
	regionB = "eu-central-1"
)

// putRegional writes a pending outbox record as region's writer commits it
// (origin_region stamped, in region's pending shard), aged age. Written
// into the one table directly, it stands for a record replicated from
// region as much as for one written there.
func (f fixture) putRegional(t *testing.T, region, id string, age time.Duration) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: 1},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]string{"id": id}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	env.OccurredAt = env.OccurredAt.Add(-age)
	rec := outbox.NewRecord(env, 0, f.shards)
	item := rec.Item()
	item[outbox.AttrOriginRegion] = &ddbtypes.AttributeValueMemberS{Value: region}
	item[outbox.AttrPendingShard] = &ddbtypes.AttributeValueMemberS{Value: outbox.PendingShardIn(region, env.EventID, f.shards)}
	if _, err := f.env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	return env
}

func (f fixture) item(t *testing.T, k outbox.Key) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.table), Key: k.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func keyOf(e outbox.Envelope) outbox.Key {
	return outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0)
}

func sAttr(item map[string]ddbtypes.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *ddbtypes.AttributeValueMemberS:
		return v.Value
	case *ddbtypes.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

// regional returns a reconciler of region on f's table (default stale age,
// 5 minutes).
func (f fixture) regional(t *testing.T, region string) *reconciler.Reconciler {
	t.Helper()
	return f.reconciler(t, f.env.DDB, io.Discard, func(c *reconciler.Config) { c.Region = region })
}

func (f fixture) sentCount(id string) int {
	f.eb.mu.Lock()
	defer f.eb.mu.Unlock()
	n := 0
	for _, s := range f.eb.sent {
		if s == id {
			n++
		}
	}
	return n
}

// TestRegionSweepsOwnShardsOnly: a reconciler in Region A publishes A's
// stale records and never claims or writes B's (replicated) ones; it
// writes its heartbeat; it counts only A's shards.
func TestRegionSweepsOwnShardsOnly(t *testing.T) {
	t.Parallel()
	f := setup(t, 4)
	a := f.putRegional(t, regionA, "a", time.Hour)
	b := f.putRegional(t, regionB, "b", time.Hour)
	bBefore := f.item(t, keyOf(b))
	rep, err := f.regional(t, regionA).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resent != 1 || rep.Pending != 0 || f.sentCount(a.EventID) != 1 || f.sentCount(b.EventID) != 0 {
		t.Fatalf("report %+v, sent %v: want A's record only", rep, f.eb.sent)
	}
	if got := f.record(t, a).Status; got != outbox.StatusPublished {
		t.Errorf("A's record %s, want PUBLISHED", got)
	}
	if after := f.item(t, keyOf(b)); !reflect.DeepEqual(after, bBefore) {
		t.Errorf("A's reconciler wrote B's record:\nbefore %v\nafter  %v", bBefore, after)
	}
	hb, err := reconciler.ReadHeartbeats(context.Background(), f.env.DDB, f.table, []string{regionA, regionB})
	if err != nil {
		t.Fatal(err)
	}
	if hb[0].At.IsZero() || time.Since(hb[0].At) > time.Minute || !hb[1].At.IsZero() {
		t.Errorf("heartbeats %+v: want A's fresh, none of B", hb)
	}
	// B's own run counts B's pending record (B's shards).
	repB, err := f.regional(t, regionB).Run(context.Background())
	if err != nil || repB.Resent != 1 || f.sentCount(b.EventID) != 1 {
		t.Fatalf("B's run %+v %v", repB, err)
	}
}

// TestRegionClaimRefusesForeignOrigin: a record of B that sits in A's
// shard (it cannot, by the writer's shard choice, but the claim does not
// rely on it) is neither claimed nor published by A.
func TestRegionClaimRefusesForeignOrigin(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	b := f.putRegional(t, regionB, "b", time.Hour)
	if _, err := f.env.DDB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(f.table), Key: keyOf(b).AttributeValues(),
		UpdateExpression:          aws.String("SET pending_shard = :s"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": &ddbtypes.AttributeValueMemberS{Value: outbox.RegionShardName(regionA, 0)}},
	}); err != nil {
		t.Fatal(err)
	}
	before := f.item(t, keyOf(b))
	rep, err := f.regional(t, regionA).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resent != 0 || f.sentCount(b.EventID) != 0 || rep.Skipped != 1 {
		t.Fatalf("report %+v: want B's record skipped, not sent", rep)
	}
	if after := f.item(t, keyOf(b)); !reflect.DeepEqual(after, before) {
		t.Errorf("A claimed B's record: %v", after)
	}
}

// TestTakeover walks a takeover through: not declared, B publishes none of
// A's pending records; declared, B publishes A's records older than the
// stale age plus the lag margin, once, recording takeover marks and
// leaving A's records untouched; released, it stops; back, A adopts B's
// PUBLISHED marks without re-sending.
func TestTakeover(t *testing.T) {
	t.Parallel()
	f := setup(t, 4)
	ctx := context.Background()
	old := f.putRegional(t, regionA, "old", time.Hour)
	// Past the stale age (5 min), within stale age + margin (5 + 10 min).
	young := f.putRegional(t, regionA, "young", 7*time.Minute)
	own := f.putRegional(t, regionB, "own", time.Hour)
	oldBefore, youngBefore := f.item(t, keyOf(old)), f.item(t, keyOf(young))
	b := f.regional(t, regionB)

	// 1. No takeover: B publishes its own record only.
	rep, err := b.Run(ctx)
	if err != nil || rep.Resent != 1 || rep.TakenOver != 0 || f.sentCount(own.EventID) != 1 || f.sentCount(old.EventID) != 0 {
		t.Fatalf("no takeover: report %+v %v, sent %v", rep, err, f.eb.sent)
	}

	// 2. Declared: B publishes A's old record once; A's records untouched.
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB, LagMargin: 10 * time.Minute, DeclaredBy: "test"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); !errors.Is(err, reconciler.ErrTakeoverActive) {
		t.Fatalf("second declaration: %v, want ErrTakeoverActive", err)
	}
	rep, err = b.Run(ctx)
	if err != nil || rep.TakenOver != 1 || len(rep.Takeovers) != 1 || rep.Takeovers[0] != regionA {
		t.Fatalf("takeover run: report %+v %v", rep, err)
	}
	if f.sentCount(old.EventID) != 1 || f.sentCount(young.EventID) != 0 {
		t.Fatalf("sent %v: want A's old record once, not the young one (within the lag margin)", f.eb.sent)
	}
	if !reflect.DeepEqual(f.item(t, keyOf(old)), oldBefore) || !reflect.DeepEqual(f.item(t, keyOf(young)), youngBefore) {
		t.Fatal("the survivor wrote A's records")
	}
	mark := f.item(t, reconciler.MarkKey(regionA, regionB, old.EventID))
	if sAttr(mark, reconciler.AttrTakeoverState) != reconciler.MarkPublished || sAttr(mark, outbox.AttrBusEventID) != "bus-"+old.EventID ||
		sAttr(mark, outbox.AttrExpiresAt) == "" || sAttr(mark, outbox.AttrClaimedUntil) != "" || sAttr(mark, outbox.AttrEventID) != "" {
		t.Fatalf("mark %v: want PUBLISHED with the bus id and a TTL, no claim, no event_id", mark)
	}
	// Again: the mark says published; nothing is sent twice.
	if rep, err = b.Run(ctx); err != nil || rep.TakenOver != 0 || f.sentCount(old.EventID) != 1 {
		t.Fatalf("second takeover run: %+v %v, sent %v", rep, err, f.eb.sent)
	}
	tks, err := reconciler.ListTakeovers(ctx, f.env.DDB, f.table)
	if err != nil || len(tks) != 1 || !tks[0].Active() || tks[0].LagMargin != 10*time.Minute || tks[0].DeclaredBy != "test" {
		t.Fatalf("ListTakeovers %+v %v", tks, err)
	}

	// 3. Released: B stops; a new old record of A is left to A.
	if err := reconciler.ReleaseTakeover(ctx, f.env.DDB, f.table, regionA, regionB, "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.ReleaseTakeover(ctx, f.env.DDB, f.table, regionA, regionB, "test", time.Now()); !errors.Is(err, reconciler.ErrNoTakeover) {
		t.Fatalf("second release: %v, want ErrNoTakeover", err)
	}
	later := f.putRegional(t, regionA, "later", time.Hour)
	if rep, err = b.Run(ctx); err != nil || rep.TakenOver != 0 || len(rep.Takeovers) != 0 || f.sentCount(later.EventID) != 0 {
		t.Fatalf("after release: %+v %v, sent %v", rep, err, f.eb.sent)
	}

	// 4. A is back: it adopts the record B published (no re-send) and
	// publishes the rest of its backlog itself.
	a := f.reconciler(t, f.env.DDB, io.Discard, func(c *reconciler.Config) { c.Region = regionA; c.ReconcileAfter = 2 * time.Minute })
	rep, err = a.Run(ctx)
	if err != nil || rep.Adopted != 1 || rep.Resent != 2 {
		t.Fatalf("A's run: %+v %v: want 1 adopted, 2 resent (young, later)", rep, err)
	}
	if f.sentCount(old.EventID) != 1 || f.sentCount(young.EventID) != 1 || f.sentCount(later.EventID) != 1 {
		t.Fatalf("sent %v: want each once", f.eb.sent)
	}
	adopted := f.record(t, old)
	if adopted.Status != outbox.StatusPublished || adopted.PendingShard != "" || adopted.ExpiresAt.IsZero() {
		t.Fatalf("adopted record %+v", adopted)
	}
	if got := sAttr(f.item(t, keyOf(old)), outbox.AttrBusEventID); got != "bus-"+old.EventID {
		t.Errorf("adopted record's bus_event_id %q, want the survivor's", got)
	}
}

// TestTakeoverSkipsRecordPublishedMeanwhile: a failed Region's record whose
// PUBLISHED status replicated after its pending index copy was read (a
// stale index) is not published by the survivor: it reads the record
// before claiming a mark.
func TestTakeoverSkipsRecordPublishedMeanwhile(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	a := f.putRegional(t, regionA, "a", time.Hour)
	stale := f.item(t, keyOf(a))
	if err := f.relay.Marker().MarkPublished(ctx, keyOf(a), a, "bus-by-a"); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	q := staleIndexOf{Client: f.env.DDB, shard: outbox.RegionShardName(regionA, 0), items: []map[string]ddbtypes.AttributeValue{stale}}
	rc := f.reconciler(t, q, io.Discard, func(c *reconciler.Config) { c.Region = regionB })
	rep, err := rc.Run(ctx)
	if err != nil || rep.TakenOver != 0 || f.sentCount(a.EventID) != 0 || rep.Skipped != 1 {
		t.Fatalf("report %+v %v, sent %v: want the published record skipped", rep, err, f.eb.sent)
	}
	if m := f.item(t, reconciler.MarkKey(regionA, regionB, a.EventID)); m != nil {
		t.Errorf("a mark was written for a published record: %v", m)
	}
}

// staleIndexOf answers the due-record Query of one shard with fixed items
// (a stale pending index copy) and passes everything else through.
type staleIndexOf struct {
	*dynamodb.Client
	shard string
	items []map[string]ddbtypes.AttributeValue
}

func (q staleIndexOf) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if isDueQuery(in) && aws.ToString(in.IndexName) == outbox.PendingIndexName {
		for _, v := range in.ExpressionAttributeValues {
			if s, ok := v.(*ddbtypes.AttributeValueMemberS); ok && s.Value == q.shard {
				return &dynamodb.QueryOutput{Items: q.items}, nil
			}
		}
	}
	return q.Client.Query(ctx, in, opts...)
}

// multiClient is what a multi-Region reconciler needs; *dynamodb.Client is one.
var _ reconciler.MultiRegionAPI = (*dynamodb.Client)(nil)

// TestTakeoverDeclValidate: the declarations DeclareTakeover refuses.
func TestTakeoverDeclValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		d    reconciler.TakeoverDecl
		want string
	}{
		{"ok", reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB, LagMargin: time.Minute}, ""},
		{"zero margin", reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, ""},
		{"itself", reconciler.TakeoverDecl{Failed: regionA, Survivor: regionA}, "itself"},
		{"misspelled failed", reconciler.TakeoverDecl{Failed: "eu-west", Survivor: regionB}, "failed Region"},
		{"misspelled survivor", reconciler.TakeoverDecl{Failed: regionA, Survivor: "EU-CENTRAL-1"}, "survivor Region"},
		{"negative margin", reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB, LagMargin: -time.Second}, "negative"},
		{"absurd margin", reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB, LagMargin: 25 * time.Hour}, "above"},
	} {
		err := tc.d.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, reconciler.ErrBadTakeover) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrBadTakeover mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestRegionConfig: a misspelled Region is refused; a Region needs a
// client with the multi-Region methods.
func TestRegionConfig(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	if _, err := reconciler.New(f.env.DDB, f.relay.Publisher(), f.relay.Marker(), reconciler.Config{Table: f.table, Region: "eu-west"}); err == nil {
		t.Error("a misspelled Region was accepted")
	}
	if _, err := reconciler.New(&queryRecorder{DynamoDBAPI: f.env.DDB}, f.relay.Publisher(), f.relay.Marker(), reconciler.Config{Table: f.table, Region: regionA}); err == nil ||
		!strings.Contains(err.Error(), "MultiRegionAPI") {
		t.Errorf("a client without GetItem/PutItem/BatchGetItem: %v", err)
	}
}

// batchGetLimits refuses what BatchGetItem refuses (more than 100 keys:
// ValidationException) and answers its first call with the last 10 keys
// unprocessed, as DynamoDB may under load.
type batchGetLimits struct {
	*dynamodb.Client
	mu    sync.Mutex
	calls int
	max   int
}

func (b *batchGetLimits) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	b.mu.Lock()
	b.calls++
	first := b.calls == 1
	b.mu.Unlock()
	var n int
	for _, ka := range in.RequestItems {
		n += len(ka.Keys)
	}
	b.mu.Lock()
	b.max = max(b.max, n)
	b.mu.Unlock()
	if n > reconciler.MaxBatchGetKeys {
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "Too many items requested for the BatchGetItem call"}
	}
	if !first {
		return b.Client.BatchGetItem(ctx, in, opts...)
	}
	req := map[string]ddbtypes.KeysAndAttributes{}
	held := map[string]ddbtypes.KeysAndAttributes{}
	for table, ka := range in.RequestItems {
		cut := max(len(ka.Keys)-10, 0)
		sent, kept := ka, ka
		sent.Keys, kept.Keys = ka.Keys[:cut], ka.Keys[cut:]
		req[table], held[table] = sent, kept
	}
	out, err := b.Client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req}, opts...)
	if err != nil {
		return out, err
	}
	out.UnprocessedKeys = held
	return out, nil
}

// TestAdoptionBatchesMarkReads: adopting 150 records reads their marks in
// BatchGetItem calls of at most 100 keys and retries the unprocessed ones:
// every record is adopted, none re-sent.
func TestAdoptionBatchesMarkReads(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	const n = 150
	var envs []outbox.Envelope
	for i := range n {
		e := f.putRegional(t, regionA, fmt.Sprintf("o%03d", i), time.Hour)
		envs = append(envs, e)
		m := reconciler.MarkKey(regionA, regionB, e.EventID).AttributeValues()
		m[reconciler.AttrTakeoverState] = &ddbtypes.AttributeValueMemberS{Value: reconciler.MarkPublished}
		m[reconciler.AttrMarkEventID] = &ddbtypes.AttributeValueMemberS{Value: e.EventID}
		m[outbox.AttrBusEventID] = &ddbtypes.AttributeValueMemberS{Value: "by-b"}
		if _, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	spy := &batchGetLimits{Client: f.env.DDB}
	rc := f.reconciler(t, spy, io.Discard, func(c *reconciler.Config) { c.Region = regionA; c.PageSize = 1000 })
	rep, err := rc.Run(ctx)
	if err != nil || rep.Adopted != n || rep.Resent != 0 {
		t.Fatalf("report %+v %v: want %d adopted, none resent", rep, err, n)
	}
	if spy.max > reconciler.MaxBatchGetKeys || spy.calls < 3 {
		t.Errorf("BatchGetItem: %d calls, largest %d keys: want chunks of at most 100 and a retry of the unprocessed", spy.calls, spy.max)
	}
	if len(f.eb.sent) != 0 {
		t.Errorf("sent %d events, want none", len(f.eb.sent))
	}
	for _, e := range envs[:3] {
		if got := f.record(t, e).Status; got != outbox.StatusPublished {
			t.Errorf("record %s %s, want PUBLISHED", e.AggregateID, got)
		}
	}
}
