package reconciler_test

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// legacyOwner returns the reconciler of region as the legacy owner (the
// first Region of OUTBOX_REGIONS) on f's table.
func (f fixture) legacyOwner(t *testing.T, region string) *reconciler.Reconciler {
	t.Helper()
	return f.reconciler(t, f.env.DDB, io.Discard, func(c *reconciler.Config) { c.Region, c.LegacyOwner = region, true })
}

// TestLegacyRecordsAfterTheSwitch: records a single-Region writer left
// pending (no origin_region, in the plain pNN shards) before the table
// switched to multi-Region mode are published once by the legacy owner's
// reconciler and marked PUBLISHED; the other Region's reconciler never
// touches them; a young one waits for ReconcileAfter but is counted.
func TestLegacyRecordsAfterTheSwitch(t *testing.T) {
	t.Parallel()
	f := setup(t, 4)
	old := f.write(t, "legacy-old", time.Hour) // single-Region writer: unstamped, pNN
	young := f.write(t, "legacy-young", 0)
	own := f.putRegional(t, regionA, "own", time.Hour)
	if it := f.item(t, keyOf(old)); sAttr(it, outbox.AttrOriginRegion) != "" || !strings.HasPrefix(sAttr(it, outbox.AttrPendingShard), "p") {
		t.Fatalf("fixture: not a legacy record: %v", it)
	}
	oldBefore := f.item(t, keyOf(old))

	// Region B (second of the list) leaves the legacy records alone.
	repB, err := f.regional(t, regionB).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if repB.Legacy != 0 || repB.Resent != 0 || f.sentCount(old.EventID) != 0 || repB.Pending != 0 {
		t.Fatalf("B's run %+v: want nothing swept or counted", repB)
	}
	if after := f.item(t, keyOf(old)); !reflect.DeepEqual(after, oldBefore) {
		t.Fatalf("B wrote a legacy record:\nbefore %v\nafter  %v", oldBefore, after)
	}

	// The legacy owner A publishes the stale one (and its own), once.
	a := f.legacyOwner(t, regionA)
	rep, err := a.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Legacy != 1 || rep.Resent != 2 || rep.Pending != 1 || rep.Skipped != 0 {
		t.Fatalf("legacy owner's run %+v: want 1 legacy + 1 own re-sent, the young legacy record counted pending", rep)
	}
	if got := f.record(t, old).Status; got != outbox.StatusPublished {
		t.Errorf("legacy record %s, want PUBLISHED", got)
	}
	if got := f.record(t, own).Status; got != outbox.StatusPublished {
		t.Errorf("own record %s, want PUBLISHED", got)
	}
	if got := f.record(t, young).Status; got != outbox.StatusPending || f.sentCount(young.EventID) != 0 {
		t.Errorf("young legacy record %s, sent %d times: want left pending until ReconcileAfter", got, f.sentCount(young.EventID))
	}
	if it := f.item(t, keyOf(old)); sAttr(it, outbox.AttrOriginRegion) != "" {
		t.Errorf("the legacy owner stamped the record: %v", it)
	}
	rep2, err := a.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep2.Legacy != 0 || f.sentCount(old.EventID) != 1 {
		t.Errorf("second run %+v, legacy record sent %d times: want once", rep2, f.sentCount(old.EventID))
	}
}

// TestLegacyLaneRefusesStamped: a pending record that carries an origin
// Region but sits in a plain pNN shard (the writer never puts it there; a
// hostile or broken writer might) is neither claimed nor published by the
// legacy lane, whichever Region stamped it; the item is left as it was.
func TestLegacyLaneRefusesStamped(t *testing.T) {
	t.Parallel()
	for _, origin := range []string{regionB, regionA} {
		t.Run(origin, func(t *testing.T) {
			t.Parallel()
			f := setup(t, 1)
			e := f.putRegional(t, origin, "stamped", time.Hour)
			if _, err := f.env.DDB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
				TableName: aws.String(f.table), Key: keyOf(e).AttributeValues(),
				UpdateExpression:          aws.String("SET pending_shard = :s"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": &ddbtypes.AttributeValueMemberS{Value: outbox.ShardName(0)}},
			}); err != nil {
				t.Fatal(err)
			}
			before := f.item(t, keyOf(e))
			rep, err := f.legacyOwner(t, regionA).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Legacy != 0 || rep.Resent != 0 || f.sentCount(e.EventID) != 0 || rep.Skipped != 1 {
				t.Fatalf("report %+v: want the stamped record skipped, not sent", rep)
			}
			if after := f.item(t, keyOf(e)); !reflect.DeepEqual(after, before) {
				t.Errorf("the legacy lane claimed a stamped record:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestLegacyOwnerSingleRegion: single-Region mode is unchanged (it sweeps
// the plain shards as always, Report.Legacy stays 0), and LegacyOwner
// without a Region is refused.
func TestLegacyOwnerSingleRegion(t *testing.T) {
	t.Parallel()
	f := setup(t, 2)
	e := f.write(t, "single", time.Hour)
	rep, err := f.reconciler(t, f.env.DDB, io.Discard, nil).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resent != 1 || rep.Legacy != 0 || f.sentCount(e.EventID) != 1 {
		t.Fatalf("single-Region run %+v", rep)
	}
	_, err = reconciler.New(f.env.DDB, f.relay.Publisher(), f.relay.Marker(), reconciler.Config{Table: f.table, LegacyOwner: true})
	if err == nil || !strings.Contains(err.Error(), "LegacyOwner") {
		t.Errorf("LegacyOwner without Region: %v, want an error naming it", err)
	}
}
