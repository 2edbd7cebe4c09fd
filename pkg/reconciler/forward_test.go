package reconciler_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestStatusOnlyMovesForward lists every write of the status attribute in
// the relay and the reconciler and drives each against a record already
// PUBLISHED (bus_event_id "first"): the record stays PUBLISHED with the
// first publish's details. Each path's condition is what holds it: mark
// published (status <> PUBLISHED), park (status <> PUBLISHED AND status <>
// PARKED), the reconciler's claim (status = PENDING, so a stale pending
// index copy is never re-published), adoption (a mark published), and
// redrive (status = PARKED). The operator's requeue, the one deliberate
// backward move, is tested in internal/operator. With one writing Region
// per record (docs/MULTI-REGION.md) a replicated image is an older image of
// the same writer, so these conditions are what keeps a status from
// regressing.
func TestStatusOnlyMovesForward(t *testing.T) {
	t.Parallel()
	type path struct {
		name string
		// write tries to change the record (key k, envelope e) of table.
		write func(t *testing.T, f fixture, k outbox.Key, e outbox.Envelope, stale map[string]ddbtypes.AttributeValue)
	}
	ctx := context.Background()
	paths := []path{
		{"relay mark published (UpdateItem)", func(t *testing.T, f fixture, k outbox.Key, e outbox.Envelope, _ map[string]ddbtypes.AttributeValue) {
			if err := f.relay.Marker().MarkPublished(ctx, k, e, "second"); err != nil {
				t.Fatal(err)
			}
		}},
		{"relay mark published (BatchExecuteStatement)", func(t *testing.T, f fixture, k outbox.Key, e outbox.Envelope, _ map[string]ddbtypes.AttributeValue) {
			other := f.write(t, "other", time.Hour)
			res := relay.Result{Status: relay.Published, EventID: "second"}
			for _, err := range f.relay.Marker().MarkAll(ctx, []relay.Mark{{Key: k, Envelope: e, Result: res}, {Key: keyOf(other), Envelope: other, Result: res}}) {
				if err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"relay park", func(t *testing.T, f fixture, k outbox.Key, e outbox.Envelope, _ map[string]ddbtypes.AttributeValue) {
			if err := f.relay.Marker().Park(ctx, relay.Mark{Key: k, Envelope: e, Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: "MalformedDetail"}}); err != nil {
				t.Fatal(err)
			}
		}},
		{"reconciler claim from a stale index copy", func(t *testing.T, f fixture, k outbox.Key, e outbox.Envelope, stale map[string]ddbtypes.AttributeValue) {
			q := staleIndexOf{Client: f.env.DDB, shard: outbox.ShardName(0), items: []map[string]ddbtypes.AttributeValue{stale}}
			rep, err := f.reconciler(t, q, io.Discard, nil).Run(ctx)
			if err != nil || rep.Resent != 0 || rep.Skipped != 1 {
				t.Fatalf("report %+v %v", rep, err)
			}
		}},
		{"reconciler claim, multi-Region, from a stale index copy", func(t *testing.T, f fixture, k outbox.Key, e outbox.Envelope, stale map[string]ddbtypes.AttributeValue) {
			q := staleIndexOf{Client: f.env.DDB, shard: outbox.RegionShardName(regionA, 0), items: []map[string]ddbtypes.AttributeValue{stale}}
			rep, err := f.reconciler(t, q, io.Discard, func(c *reconciler.Config) { c.Region = regionA }).Run(ctx)
			if err != nil || rep.Resent != 0 || rep.Skipped != 1 {
				t.Fatalf("report %+v %v", rep, err)
			}
		}},
		{"redrive", func(t *testing.T, f fixture, k outbox.Key, _ outbox.Envelope, _ map[string]ddbtypes.AttributeValue) {
			// Without the Region option a stamped record is refused before
			// its status is read (it would go to a shard no multi-Region
			// reconciler sweeps).
			if err := relay.Redrive(ctx, f.env.DDB, f.table, f.shards, k, time.Now()); !errors.Is(err, relay.ErrNotOrigin) {
				t.Fatalf("redrive: %v, want ErrNotOrigin", err)
			}
			if err := relay.Redrive(ctx, f.env.DDB, f.table, f.shards, k, time.Now(), relay.RedriveInRegion(regionA)); !errors.Is(err, relay.ErrNotParked) {
				t.Fatalf("redrive in Region: %v, want ErrNotParked", err)
			}
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, 1)
			e := f.putRegional(t, regionA, "done", time.Hour)
			k := keyOf(e)
			stale := f.item(t, k) // the pending image, as a stale index copy has it
			if err := f.relay.Marker().MarkPublished(ctx, k, e, "first"); err != nil {
				t.Fatal(err)
			}
			before := f.item(t, k)
			p.write(t, f, k, e, stale)
			after := f.item(t, k)
			if sAttr(after, outbox.AttrStatus) != outbox.StatusPublished || sAttr(after, outbox.AttrBusEventID) != "first" ||
				sAttr(after, outbox.AttrPublishedAt) != sAttr(before, outbox.AttrPublishedAt) || sAttr(after, outbox.AttrPendingShard) != "" {
				t.Fatalf("record moved:\nbefore %v\nafter  %v", before, after)
			}
			if n := f.sentCount(e.EventID); n != 0 {
				t.Errorf("a PUBLISHED record was sent %d times", n)
			}
		})
	}
}

// TestTakeoverMarkOnlyMovesForward: a takeover mark already PUBLISHED is
// neither claimed again nor set back by a later survivor run, even when
// the failed Region's record still reads PENDING.
func TestTakeoverMarkOnlyMovesForward(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx := context.Background()
	e := f.putRegional(t, regionA, "a", time.Hour)
	mk := reconciler.MarkKey(regionA, regionB, e.EventID)
	item := mk.AttributeValues()
	item[reconciler.AttrTakeoverState] = &ddbtypes.AttributeValueMemberS{Value: reconciler.MarkPublished}
	item[outbox.AttrBusEventID] = &ddbtypes.AttributeValueMemberS{Value: "first"}
	item[reconciler.AttrMarkEventID] = &ddbtypes.AttributeValueMemberS{Value: e.EventID}
	if _, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, f.env.DDB, f.table, reconciler.TakeoverDecl{Failed: regionA, Survivor: regionB}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err := f.regional(t, regionB).Run(ctx)
	if err != nil || rep.TakenOver != 0 || f.sentCount(e.EventID) != 0 {
		t.Fatalf("report %+v %v, sent %v", rep, err, f.eb.sent)
	}
	after := f.item(t, mk)
	if sAttr(after, reconciler.AttrTakeoverState) != reconciler.MarkPublished || sAttr(after, outbox.AttrBusEventID) != "first" {
		t.Fatalf("mark moved: %v", after)
	}
}
