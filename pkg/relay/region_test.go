package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

const (
	regionA = "eu-west-1"
	regionB = "eu-central-1"
)

// withOrigin sets (or, with "", removes) the record's origin_region in its
// stream image, as a multi-Region writer stamps it.
func withOrigin(rec events.DynamoDBEventRecord, origin string) events.DynamoDBEventRecord {
	img := make(map[string]events.DynamoDBAttributeValue, len(rec.Change.NewImage)+1)
	for k, v := range rec.Change.NewImage {
		img[k] = v
	}
	delete(img, outbox.AttrOriginRegion)
	if origin != "" {
		img[outbox.AttrOriginRegion] = events.NewStringAttribute(origin)
	}
	rec.Change.NewImage = img
	return rec
}

// TestHandleSkipsForeignRecords: a relay in Region A publishes and marks
// A's records only; a record replicated from B, or one without an origin,
// is acknowledged (no batch item failure), not published, not marked,
// counted and emitted as ForeignRecordsSkipped. In single-Region mode the
// same batch is published whole.
func TestHandleSkipsForeignRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, region string
		wantSent     []string // aggregate ids
		wantSkipped  int64
	}{
		{"multi-Region A", regionA, []string{"a"}, 2},
		{"multi-Region B", regionB, []string{"b"}, 2},
		{"single-Region", "", []string{"a", "b", "none"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eb, ddb := &fakeEventBridge{}, &fakeDDB{}
			cfg := testConfig()
			cfg.Region = tc.region
			var metrics bytes.Buffer
			cfg.Marker.Metrics = &metrics
			r, err := relay.New(eb, ddb, &fakeSQS{}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]string{}
			var ev events.DynamoDBEvent
			for i, o := range []struct{ agg, origin string }{{"a", regionA}, {"b", regionB}, {"none", ""}} {
				env := envelope(t, o.agg, 1, 10)
				ids[env.EventID] = o.agg
				ev.Records = append(ev.Records, withOrigin(insertRecord(t, env, fmt.Sprintf("10000000000000000000%d", i)), o.origin))
			}
			resp, err := r.Handle(context.Background(), ev)
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("resp %+v, err %v: a foreign record must be acknowledged", resp, err)
			}
			var sent []string
			for id := range eb.sent() {
				sent = append(sent, ids[id])
			}
			if strings.Join(sortStrings(sent), ",") != strings.Join(tc.wantSent, ",") {
				t.Errorf("published %v, want %v", sent, tc.wantSent)
			}
			marked := ddb.byPK()
			for _, agg := range []string{"a", "b", "none"} {
				_, ok := marked["Order#"+agg]
				if want := contains(tc.wantSent, agg); ok != want {
					t.Errorf("record %s marked = %v, want %v", agg, ok, want)
				}
			}
			if got := r.ForeignSkipped(); got != tc.wantSkipped {
				t.Errorf("ForeignSkipped = %d, want %d", got, tc.wantSkipped)
			}
			hasMetric := strings.Contains(metrics.String(), `"`+relay.MetricForeignRecordsSkipped+`":2`)
			if hasMetric != (tc.wantSkipped > 0) {
				t.Errorf("EMF %q: %s metric present = %v, want %v", metrics.String(), relay.MetricForeignRecordsSkipped, hasMetric, tc.wantSkipped > 0)
			}
		})
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestConfigRegionValidated: a misspelled Region is refused at New.
func TestConfigRegionValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		region string
		ok     bool
	}{{"", true}, {regionA, true}, {"eu-west1", false}, {"EU-WEST-1", false}, {"euwest", false}} {
		cfg := testConfig()
		cfg.Region = tc.region
		_, err := relay.New(&fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}, cfg)
		if (err == nil) != tc.ok {
			t.Errorf("Region %q: err %v, want ok=%v", tc.region, err, tc.ok)
		}
	}
}

// bumpAfterGet raises the record's redrive_generation right after Redrive
// read it: another operator's redrive in between.
type bumpAfterGet struct {
	*dynamodb.Client
	table string
}

func (b bumpAfterGet) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := b.Client.GetItem(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	_, err = b.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(b.table), Key: in.Key,
		UpdateExpression:          aws.String("ADD #g :one"),
		ExpressionAttributeNames:  map[string]string{"#g": outbox.AttrRedriveGeneration},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}},
	})
	return out, err
}

// TestRedriveInRegion: in multi-Region mode a parked record is redriven
// only in its origin Region (ErrNotOrigin elsewhere, the record unchanged),
// into its Region's pending shard, with redrive_generation bumped; a
// generation that moves between the read and the write is a conflict
// (ErrRedriveConflict, the record still PARKED). Single-Region mode is
// unchanged: the plain shard, no generation.
func TestRedriveInRegion(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil
	env.CreateTable(t, in)
	put := func(agg, origin string) outbox.Key {
		e := envelope(t, agg, 1, 10)
		rec := outbox.NewRecord(e, 0, 4)
		rec.Status, rec.PendingShard = outbox.StatusParked, ""
		item := rec.Item()
		if origin != "" {
			item[outbox.AttrOriginRegion] = &ddbtypes.AttributeValueMemberS{Value: origin}
		}
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
		return rec.Key
	}
	get := func(k outbox.Key) map[string]ddbtypes.AttributeValue {
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: k.AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	s := func(item map[string]ddbtypes.AttributeValue, name string) string {
		switch v := item[name].(type) {
		case *ddbtypes.AttributeValueMemberS:
			return v.Value
		case *ddbtypes.AttributeValueMemberN:
			return v.Value
		}
		return ""
	}
	now := time.Now()

	// Wrong Region: refused, nothing written.
	kb := put("from-b", regionB)
	if err := relay.Redrive(ctx, env.DDB, table, 4, kb, now, relay.RedriveInRegion(regionA)); !errors.Is(err, relay.ErrNotOrigin) {
		t.Fatalf("redrive of B's record in A: %v, want ErrNotOrigin", err)
	}
	if it := get(kb); s(it, outbox.AttrStatus) != outbox.StatusParked || s(it, outbox.AttrRedriveGeneration) != "" {
		t.Fatalf("B's record after a refused redrive: %v", it)
	}
	// A record without an origin is nobody's in multi-Region mode.
	kn := put("no-origin", "")
	if err := relay.Redrive(ctx, env.DDB, table, 4, kn, now, relay.RedriveInRegion(regionA)); !errors.Is(err, relay.ErrNotOrigin) {
		t.Fatalf("redrive of a record without origin: %v, want ErrNotOrigin", err)
	}
	// Origin Region: redriven into its Region's shard, generation 1, then 2.
	if err := relay.Redrive(ctx, env.DDB, table, 4, kb, now, relay.RedriveInRegion(regionB)); err != nil {
		t.Fatal(err)
	}
	it := get(kb)
	if s(it, outbox.AttrStatus) != outbox.StatusPending || !strings.HasPrefix(s(it, outbox.AttrPendingShard), regionB+"#p") || s(it, outbox.AttrRedriveGeneration) != "1" {
		t.Fatalf("redriven record %v: want PENDING in %s#pNN, generation 1", it, regionB)
	}
	// A second redrive of a record no longer parked: ErrNotParked.
	if err := relay.Redrive(ctx, env.DDB, table, 4, kb, now, relay.RedriveInRegion(regionB)); !errors.Is(err, relay.ErrNotParked) {
		t.Fatalf("redrive of a pending record: %v, want ErrNotParked", err)
	}
	// Generation conflict.
	ka := put("from-a", regionA)
	racing := bumpAfterGet{Client: env.DDB, table: table}
	if err := relay.Redrive(ctx, racing, table, 4, ka, now, relay.RedriveInRegion(regionA)); !errors.Is(err, relay.ErrRedriveConflict) {
		t.Fatalf("redrive racing another: %v, want ErrRedriveConflict", err)
	}
	if it := get(ka); s(it, outbox.AttrStatus) != outbox.StatusParked {
		t.Fatalf("record after a conflict: %v, want PARKED", it)
	}
	// Generation 1 read, 1 still there: succeeds and moves to 2.
	if err := relay.Redrive(ctx, env.DDB, table, 4, ka, now, relay.RedriveInRegion(regionA)); err != nil {
		t.Fatal(err)
	}
	if it := get(ka); s(it, outbox.AttrRedriveGeneration) != "2" {
		t.Fatalf("generation %q, want 2", s(it, outbox.AttrRedriveGeneration))
	}
	// Single-Region mode: unchanged behaviour.
	k1 := put("single", "")
	if err := relay.Redrive(ctx, env.DDB, table, 4, k1, now); err != nil {
		t.Fatal(err)
	}
	if it := get(k1); !strings.HasPrefix(s(it, outbox.AttrPendingShard), "p") || s(it, outbox.AttrRedriveGeneration) != "" {
		t.Fatalf("single-Region redrive %v: want the plain shard, no generation", it)
	}
	if err := relay.Redrive(ctx, env.DDB, table, 4, k1, now, relay.RedriveInRegion("eu-west")); err == nil {
		t.Fatal("a misspelled Region was accepted")
	}
}
