package reconciler_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// putRegionalID is putRegional with a caller's event id (Writer.Write takes
// the caller's envelopes, so an event id is any non-empty string).
func (f fixture) putRegionalID(t *testing.T, region, id, eventID string, age time.Duration) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: 1},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]string{"id": id}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	env.EventID = eventID
	env.OccurredAt = env.OccurredAt.Add(-age)
	item := outbox.NewRecordIn(region, env, 0, f.shards).Item()
	if _, err := f.env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	return env
}

// putMark writes survivor's takeover mark on failed's record of e, as the
// survivor's claimMark and finishMark leave it.
func (f fixture) putMark(t *testing.T, failed, survivor string, e outbox.Envelope, state string) {
	t.Helper()
	k := keyOf(e)
	m := reconciler.MarkKey(failed, survivor, e.EventID).AttributeValues()
	m[reconciler.AttrTakeoverState] = &ddbtypes.AttributeValueMemberS{Value: state}
	m[reconciler.AttrMarkEventID] = &ddbtypes.AttributeValueMemberS{Value: e.EventID}
	m[reconciler.AttrMarkRecordPK] = &ddbtypes.AttributeValueMemberS{Value: k.PK}
	m[reconciler.AttrMarkRecordSK] = &ddbtypes.AttributeValueMemberS{Value: k.SK}
	m[outbox.AttrBusEventID] = &ddbtypes.AttributeValueMemberS{Value: "by-" + survivor}
	if _, err := f.env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: m}); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptionSurvivesHostileMarkKeys: one page of the origin's due records
// holds two records sharing an event id and one whose event id is too long
// for a mark's 1,024-byte sort key. BatchGetItem refuses a request with a
// duplicate key or an over-long one as a whole (ValidationException), so
// neither may reach it: the record a survivor published is still adopted
// (not sent again), and the others are published by their origin.
func TestAdoptionSurvivesHostileMarkKeys(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	good := f.putRegional(t, regionA, "good", time.Hour)
	f.putMark(t, regionA, regionB, good, reconciler.MarkPublished)
	f.putRegionalID(t, regionA, "dup1", "same-id", time.Hour)
	f.putRegionalID(t, regionA, "dup2", "same-id", time.Hour)
	long := f.putRegionalID(t, regionA, "long", strings.Repeat("e", 1020), time.Hour)
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rc := f.regional(t, regionA)
	rep, err := rc.Run(ctx)
	if err != nil || rep.Adopted != 1 || rep.Resent != 3 {
		t.Fatalf("report %+v %v: want 1 adopted, 3 resent", rep, err)
	}
	if f.sentCount(good.EventID) != 0 || f.sentCount("same-id") != 2 || f.sentCount(long.EventID) != 1 {
		t.Fatalf("sent %d events: want the adopted one not sent, the others sent", len(f.eb.sent))
	}
	if got := f.record(t, good); got.Status != outbox.StatusPublished {
		t.Fatalf("adopted record %s, want PUBLISHED", got.Status)
	}
}

// TestAdoptionMatchesMarkToRecord: a mark covers the record it names
// (record_pk, record_sk), not every record carrying its event id: a second
// record reusing the event id was never published by the survivor, so it
// is sent by its origin, never marked PUBLISHED unsent.
func TestAdoptionMatchesMarkToRecord(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	first := f.putRegionalID(t, regionA, "first", "reused-id", time.Hour)
	f.putRegionalID(t, regionA, "second", "reused-id", time.Hour)
	f.putMark(t, regionA, regionB, first, reconciler.MarkPublished)
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rc := f.reconciler(t, f.env.DDB, io.Discard, func(c *reconciler.Config) { c.Region = regionA })
	rep, err := rc.Run(ctx)
	if err != nil || rep.Adopted != 1 || rep.Resent != 1 || f.sentCount("reused-id") != 1 {
		t.Fatalf("report %+v %v, sent %v: want the marked record adopted and the other one sent", rep, err, f.eb.sent)
	}
}

// TestAdoptionIgnoresClaimedAndFailedMarks: a mark the survivor only
// CLAIMED (it may never have sent the event) or marked FAILED is no proof
// of publication: the origin publishes the record itself.
func TestAdoptionIgnoresClaimedAndFailedMarks(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	claimed := f.putRegional(t, regionA, "claimed", time.Hour)
	failed := f.putRegional(t, regionA, "failed", time.Hour)
	f.putMark(t, regionA, regionB, claimed, reconciler.MarkClaimed)
	f.putMark(t, regionA, regionB, failed, reconciler.MarkFailed)
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err := f.regional(t, regionA).Run(ctx)
	if err != nil || rep.Adopted != 0 || rep.Resent != 2 || f.sentCount(claimed.EventID) != 1 || f.sentCount(failed.EventID) != 1 {
		t.Fatalf("report %+v %v, sent %v: want both sent by their origin, none adopted", rep, err, f.eb.sent)
	}
}

// longKeySpy counts the PutItem calls naming a sort key longer than
// DynamoDB's 1,024 bytes (which DynamoDB refuses).
type longKeySpy struct {
	*dynamodb.Client
	mu   sync.Mutex
	long int
}

func (s *longKeySpy) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if sk, ok := in.Item[outbox.AttrSK].(*ddbtypes.AttributeValueMemberS); ok && len(sk.Value) > outbox.MaxSortKeyBytes {
		s.mu.Lock()
		s.long++
		s.mu.Unlock()
	}
	return s.Client.PutItem(ctx, in, opts...)
}

// TestTakeoverLongEventID: a failed Region's record whose event id cannot
// fit a takeover mark's sort key (written before MaxRegionEventIDBytes, or
// by another writer) is not taken over, no mark with an over-long key is
// sent, and its aggregate's later record is held behind it; the rest of
// the failed Region's backlog is taken over.
func TestTakeoverLongEventID(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	long := f.putRegionalID(t, regionA, "agg", strings.Repeat("e", 1020), time.Hour)
	next, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "agg", Sequence: 2},
		outbox.Event{Type: "OrderShipped", Version: 1, Payload: map[string]string{}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	next.OccurredAt = next.OccurredAt.Add(-50 * time.Minute)
	if _, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: outbox.NewRecordIn(regionA, next, 0, f.shards).Item()}); err != nil {
		t.Fatal(err)
	}
	other := f.putRegional(t, regionA, "other", time.Hour)
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	spy := &longKeySpy{Client: f.env.DDB}
	rep, err := f.reconciler(t, spy, io.Discard, func(c *reconciler.Config) { c.Region = regionB }).Run(ctx)
	if err != nil || rep.TakenOver != 1 || f.sentCount(other.EventID) != 1 || f.sentCount(long.EventID) != 0 || f.sentCount(next.EventID) != 0 || rep.HeldBack != 1 {
		t.Fatalf("report %+v %v, sent %d: want only the other aggregate's record taken over, the later record held", rep, err, len(f.eb.sent))
	}
	if spy.long != 0 {
		t.Fatalf("%d PutItem calls with a sort key over %d bytes", spy.long, outbox.MaxSortKeyBytes)
	}
}

// TestTakeoverItemBadLagMargin: a takeover item whose lag_margin_ms is
// negative, missing or not a number (written by hand or by another tool;
// DeclareTakeover refuses such a margin) fails safe: the survivor waits the
// longest margin (MaxLagMargin) rather than none, so a record the failed
// Region may still be publishing is left alone.
func TestTakeoverItemBadLagMargin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		margin ddbtypes.AttributeValue
	}{
		{"negative", &ddbtypes.AttributeValueMemberN{Value: "-3600000"}},
		{"missing", nil},
		{"not a number", &ddbtypes.AttributeValueMemberS{Value: "10m"}},
		{"beyond int64", &ddbtypes.AttributeValueMemberN{Value: "99999999999999999999"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, 1)
			ctx := context.Background()
			young := f.putRegional(t, regionA, "young", 10*time.Minute) // past the 5-minute stale age
			item := reconciler.TakeoverKey(regionA, regionB).AttributeValues()
			item[reconciler.AttrTakeoverState] = &ddbtypes.AttributeValueMemberS{Value: reconciler.TakeoverActive}
			item[reconciler.AttrFailedRegion] = &ddbtypes.AttributeValueMemberS{Value: regionA}
			item[reconciler.AttrSurvivorRegion] = &ddbtypes.AttributeValueMemberS{Value: regionB}
			if c.margin != nil {
				item[reconciler.AttrLagMarginMs] = c.margin
			}
			if _, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
				t.Fatal(err)
			}
			tks, err := reconciler.ListTakeovers(ctx, f.env.DDB, f.table)
			if err != nil || len(tks) != 1 || tks[0].LagMargin != reconciler.MaxLagMargin {
				t.Fatalf("ListTakeovers %+v %v: want the lag margin read as MaxLagMargin", tks, err)
			}
			rep, err := f.regional(t, regionB).Run(ctx)
			if err != nil || rep.TakenOver != 0 || f.sentCount(young.EventID) != 0 {
				t.Fatalf("report %+v %v: a 10-minute-old record of the failed Region was taken over", rep, err)
			}
		})
	}
}

// TestAdoptionRespectsRedriveGeneration: a survivor's PUBLISHED mark is
// proof for the generation of the record it published. Once the origin
// requeues or redrives the record (redrive_generation bumped), the old mark
// must not mark the new generation published unsent: the operator asked
// for it to be published again. A mark carries the generation it read;
// one without reads as generation 0.
func TestAdoptionRespectsRedriveGeneration(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	requeued := f.putRegional(t, regionA, "requeued", time.Hour)
	same := f.putRegional(t, regionA, "same", time.Hour)
	f.putMark(t, regionA, regionB, requeued, reconciler.MarkPublished)
	f.putMark(t, regionA, regionB, same, reconciler.MarkPublished)
	// The origin requeued "requeued" after the survivor had published it.
	if _, err := f.env.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(f.table), Key: keyOf(requeued).AttributeValues(),
		UpdateExpression:          aws.String("SET #g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": outbox.AttrRedriveGeneration},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": &ddbtypes.AttributeValueMemberN{Value: "1"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err := f.regional(t, regionA).Run(ctx)
	if err != nil || rep.Adopted != 1 || rep.Resent != 1 || f.sentCount(requeued.EventID) != 1 || f.sentCount(same.EventID) != 0 {
		t.Fatalf("report %+v %v, sent %v: want the requeued generation sent, the other adopted", rep, err, f.eb.sent)
	}
}

// TestTakeoverMarkCarriesGeneration: the survivor's mark records the
// redrive generation of the record it published, and the origin adopts
// that generation.
func TestTakeoverMarkCarriesGeneration(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	e := f.putRegional(t, regionA, "g", time.Hour)
	if _, err := f.env.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(f.table), Key: keyOf(e).AttributeValues(),
		UpdateExpression:          aws.String("SET #g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": outbox.AttrRedriveGeneration},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": &ddbtypes.AttributeValueMemberN{Value: "3"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if rep, err := f.regional(t, regionB).Run(ctx); err != nil || rep.TakenOver != 1 {
		t.Fatalf("survivor: %+v %v", rep, err)
	}
	if got := sAttr(f.item(t, reconciler.MarkKey(regionA, regionB, e.EventID)), outbox.AttrRedriveGeneration); got != "3" {
		t.Fatalf("mark's generation %q, want 3", got)
	}
	rep, err := f.regional(t, regionA).Run(ctx)
	if err != nil || rep.Adopted != 1 || f.sentCount(e.EventID) != 1 {
		t.Fatalf("origin: %+v %v, sent %v: want adopted, sent once (by the survivor)", rep, err, f.eb.sent)
	}
}

// TestAdoptionStaleIndexAfterRequeue: the pending index is eventually
// consistent. A record the survivor published (mark at generation 0) was
// requeued by its origin (generation 1) after the index copy the run reads
// (still generation 0): adoption's marking is conditioned on the
// generation, so the requeued record is published, not marked PUBLISHED
// unsent.
func TestAdoptionStaleIndexAfterRequeue(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	e := f.putRegional(t, regionA, "stale", time.Hour)
	f.putMark(t, regionA, regionB, e, reconciler.MarkPublished)
	stale := f.item(t, keyOf(e))
	if _, err := f.env.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(f.table), Key: keyOf(e).AttributeValues(),
		UpdateExpression:          aws.String("SET #g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": outbox.AttrRedriveGeneration},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": &ddbtypes.AttributeValueMemberN{Value: "1"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	q := staleIndexOf{Client: f.env.DDB, shard: outbox.RegionShardName(regionA, 0), items: []map[string]ddbtypes.AttributeValue{stale}}
	rep, err := f.reconciler(t, q, io.Discard, func(c *reconciler.Config) { c.Region = regionA }).Run(ctx)
	if err != nil || rep.Adopted != 0 || rep.Resent != 1 || f.sentCount(e.EventID) != 1 {
		t.Fatalf("report %+v %v, sent %v: want the requeued record published, not adopted", rep, err, f.eb.sent)
	}
	if got := f.record(t, e); got.Status != outbox.StatusPublished || got.RedriveGeneration != 1 {
		t.Fatalf("record %s at generation %d, want PUBLISHED at 1", got.Status, got.RedriveGeneration)
	}
}
