package outbox_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/tagtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Two Regions of one global table, as the writers see it: each writer's
// conditions are evaluated on the one table (replication already done).
const (
	regionA = "eu-west-1"
	regionB = "eu-central-1"
)

// countingDDB is the real client with its TransactWriteItems calls counted.
type countingDDB struct {
	*dynamodb.Client
	tx atomic.Int64
}

func (c *countingDDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.tx.Add(1)
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

// regionWriter returns a writer of region on the wallet and outbox tables
// of env, and its call counter.
func regionWriter(t *testing.T, env *ddbtest.Env, ob, region string) (*outbox.Writer, *countingDDB) {
	t.Helper()
	c := &countingDDB{Client: env.DDB}
	return newWriter(t, c, outbox.WriterConfig{Table: ob, Source: "com.example.wallet", Region: region}), c
}

// homeOf returns the stored home item of an aggregate, or nil.
func homeOf(t *testing.T, env *ddbtest.Env, ob, typ, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(ob), ConsistentRead: aws.Bool(true),
		Key: outbox.HomeKey(typ, id).AttributeValues()})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func s(item map[string]types.AttributeValue, name string) string {
	v, _ := item[name].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

// wantNotHome fails t unless err is the *NotHomeError of Wallet id with
// the given home and here.
func wantNotHome(t *testing.T, err error, id, home, here string) {
	t.Helper()
	var nh *outbox.NotHomeError
	if !errors.Is(err, outbox.ErrNotHomeRegion) || !errors.As(err, &nh) {
		t.Fatalf("want ErrNotHomeRegion, got %v", err)
	}
	want := outbox.NotHomeError{AggregateType: "Wallet", AggregateID: id, Home: home, Here: here}
	if *nh != want {
		t.Fatalf("NotHomeError %+v, want %+v", *nh, want)
	}
	if _, ok := outbox.AsTxError(err); ok {
		t.Fatalf("a refusal must not read as a *TxError (a caller would take it for a conflict): %v", err)
	}
}

// TestFencingRefusesForeignHome (issue 34 item 5): writers of two Regions
// on one table. A creates the aggregate, which makes A its home; B's write
// to it is refused with ErrNotHomeRegion naming A, and writes nothing (the
// business item is unchanged, no outbox record of B's event exists); A's
// next write succeeds. It fails on the outbox_unfenced build
// (TestUnfencedBuildFailsFencingTest).
func TestFencingRefusesForeignHome(t *testing.T) {
	t.Parallel()
	env, _, wallets, ob := walletTables(t, outbox.WriterConfig{})
	a, _ := regionWriter(t, env, ob, regionA)
	b, _ := regionWriter(t, env, ob, regionB)
	ctx := context.Background()
	if _, err := a.Update(ctx, walletInput(wallets, "w-1"), deposit(10)); err != nil {
		t.Fatalf("A creates: %v", err)
	}
	// B writes with Write (the business put of its own version), as a
	// writer that read the replicated item would.
	e := envelope(t, map[string]any{})
	e.AggregateType, e.AggregateID, e.Sequence = "Wallet", "w-1", 2
	put := types.TransactWriteItem{Put: &types.Put{TableName: aws.String(wallets), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "w-1"}, "version": &types.AttributeValueMemberN{Value: "2"}, "balance": &types.AttributeValueMemberN{Value: "999"},
	}}}
	err := b.Write(ctx, []types.TransactWriteItem{put}, []outbox.Envelope{e})
	wantNotHome(t, err, "w-1", regionA, regionB)
	if v, bal := wallet(t, env, wallets, "w-1"); v != 1 || bal != 10 {
		t.Fatalf("refused write changed the wallet: version %d balance %d, want 1 and 10", v, bal)
	}
	if got := sequences(t, env, ob, "Wallet#w-1"); len(got) != 1 {
		t.Fatalf("outbox holds sequences %v after the refusal, want [1]", got)
	}
	// B's Update is refused the same way.
	if _, err := b.Update(ctx, walletInput(wallets, "w-1"), deposit(5)); err == nil {
		t.Fatal("B's Update of an aggregate homed in A succeeded")
	} else {
		wantNotHome(t, err, "w-1", regionA, regionB)
	}
	res, err := a.Update(ctx, walletInput(wallets, "w-1"), deposit(5))
	if err != nil || res.Version != 2 {
		t.Fatalf("A's next write: %+v %v", res, err)
	}
	if v, bal := wallet(t, env, wallets, "w-1"); v != 2 || bal != 15 {
		t.Fatalf("wallet version %d balance %d, want 2 and 15", v, bal)
	}
}

// TestUnfencedBuildFailsFencingTest: the fencing test is able to fail — on
// a build without the fence (tag outbox_unfenced) it does.
func TestUnfencedBuildFailsFencingTest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds this package's tests again with -tags outbox_unfenced")
	}
	if !outbox.Fenced {
		t.Skip("this is the unfenced build")
	}
	t.Parallel()
	tagtest.MustFail(t, ".", "outbox_unfenced", "TestFencingRefusesForeignHome")
}

// TestRegionStamp (issue 34 item 1): in multi-Region mode the record carries
// its origin Region and the Region's pending shard, written in the business
// transaction; in single-Region mode the item is exactly today's
// (NewRecord's) and no home item is written.
func TestRegionStamp(t *testing.T) {
	t.Parallel()
	for _, region := range []string{"", regionA} {
		t.Run("region="+region, func(t *testing.T) {
			t.Parallel()
			env := ddbtest.New(t)
			ob := ddbtest.Name("outbox")
			env.CreateTable(t, outbox.CreateTableInput(ob))
			w := newWriter(t, env.DDB, outbox.WriterConfig{Table: ob, Source: "com.example.test", Region: region})
			e := envelope(t, map[string]any{"order_id": "o-1"})
			if err := w.Write(context.Background(), nil, []outbox.Envelope{e}); err != nil {
				t.Fatalf("Write: %v", err)
			}
			out, err := env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(ob), ConsistentRead: aws.Bool(true),
				Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0).AttributeValues()})
			if err != nil || out.Item == nil {
				t.Fatalf("record not found: %v", err)
			}
			rec, err := outbox.RecordFromItem(out.Item)
			if err != nil {
				t.Fatal(err)
			}
			if rec.OriginRegion != region || rec.PendingShard != outbox.PendingShardIn(region, e.EventID, 16) {
				t.Fatalf("origin %q shard %q, want %q and %q", rec.OriginRegion, rec.PendingShard, region, outbox.PendingShardIn(region, e.EventID, 16))
			}
			if want := outbox.NewRecordIn(region, e, 0, 16).Item(); !reflect.DeepEqual(out.Item, want) {
				t.Fatalf("stored item\n%v\nwant\n%v", out.Item, want)
			}
			home := homeOf(t, env, ob, e.AggregateType, e.AggregateID)
			switch {
			case region == "":
				if _, ok := out.Item[outbox.AttrOriginRegion]; ok {
					t.Fatal("single-Region record carries origin_region")
				}
				if !reflect.DeepEqual(out.Item, outbox.NewRecord(e, 0, 16).Item()) {
					t.Fatal("single-Region record differs from NewRecord's")
				}
				if home != nil || count(t, env.DDB, ob) != 1 {
					t.Fatalf("single-Region write left a home item %v (table holds %d items)", home, count(t, env.DDB, ob))
				}
			case s(home, outbox.AttrHomeRegion) != region:
				t.Fatalf("home item %v, want home_region %s", home, region)
			}
		})
	}
}

// TestHomeItemCreatedOnSequenceOne: the transaction of sequence 1 writes the
// home item (Region, aggregate, creation time); a later write checks it and
// leaves it as it is; writing sequence 1 again in the home Region (a retry
// of a committed creation) fails on the outbox record as in single-Region
// mode, not as a refusal.
func TestHomeItemCreatedOnSequenceOne(t *testing.T) {
	t.Parallel()
	env, _, wallets, ob := walletTables(t, outbox.WriterConfig{})
	a, _ := regionWriter(t, env, ob, regionA)
	ctx := context.Background()
	res, err := a.Update(ctx, walletInput(wallets, "w-1"), deposit(10))
	if err != nil {
		t.Fatal(err)
	}
	home := homeOf(t, env, ob, "Wallet", "w-1")
	if s(home, outbox.AttrHomeRegion) != regionA || s(home, outbox.AttrAggregateType) != "Wallet" || s(home, outbox.AttrAggregateID) != "w-1" {
		t.Fatalf("home item %v", home)
	}
	if n, ok := home[outbox.AttrCreatedAt].(*types.AttributeValueMemberN); !ok || n.Value == "0" {
		t.Fatalf("home item has no %s: %v", outbox.AttrCreatedAt, home)
	}
	if _, ok := home[outbox.AttrPendingShard]; ok {
		t.Fatal("home item is in the pending index")
	}
	if _, err := a.Update(ctx, walletInput(wallets, "w-1"), deposit(1)); err != nil {
		t.Fatalf("second write: %v", err)
	}
	if again := homeOf(t, env, ob, "Wallet", "w-1"); !reflect.DeepEqual(again, home) {
		t.Fatalf("home item changed by a later write: %v, was %v", again, home)
	}
	// The creation's transaction again: the outbox record exists.
	err = a.Write(ctx, nil, res.Events)
	te, ok := outbox.AsTxError(err)
	if !ok || !te.ConditionFailed(0) || errors.Is(err, outbox.ErrNotHomeRegion) {
		t.Fatalf("repeated creation: want the outbox put's condition failure, got %v", err)
	}
}

// TestFencingAggregateWithoutHome: an aggregate written before multi-Region
// mode has no home item; a multi-Region write to it is refused with Home ""
// and a message naming ClaimHome; after ClaimHome the write succeeds, and
// the other Region is refused.
func TestFencingAggregateWithoutHome(t *testing.T) {
	t.Parallel()
	env, single, wallets, ob := walletTables(t, outbox.WriterConfig{})
	ctx := context.Background()
	if _, err := single.Update(ctx, walletInput(wallets, "w-old"), deposit(10)); err != nil {
		t.Fatal(err)
	}
	a, calls := regionWriter(t, env, ob, regionA)
	_, err := a.Update(ctx, walletInput(wallets, "w-old"), deposit(1))
	wantNotHome(t, err, "w-old", "", regionA)
	if !strings.Contains(err.Error(), "ClaimHome") {
		t.Fatalf("message does not say how to claim the aggregate: %v", err)
	}
	if calls.tx.Load() != 1 {
		t.Fatalf("the refusal was retried: %d transactions", calls.tx.Load())
	}
	if err := a.ClaimHome(ctx, "Wallet", "w-old"); err != nil {
		t.Fatalf("ClaimHome: %v", err)
	}
	if res, err := a.Update(ctx, walletInput(wallets, "w-old"), deposit(1)); err != nil || res.Version != 2 {
		t.Fatalf("write after the claim: %+v %v", res, err)
	}
	b, _ := regionWriter(t, env, ob, regionB)
	_, err = b.Update(ctx, walletInput(wallets, "w-old"), deposit(1))
	wantNotHome(t, err, "w-old", regionA, regionB)
}

// TestClaimHome: ClaimHome writes an absent home item, accepts one naming
// its own Region (writing nothing), refuses one naming another, and a
// creation in a Region that claimed the aggregate first succeeds.
func TestClaimHome(t *testing.T) {
	t.Parallel()
	env, _, wallets, ob := walletTables(t, outbox.WriterConfig{})
	a, _ := regionWriter(t, env, ob, regionA)
	b, _ := regionWriter(t, env, ob, regionB)
	ctx := context.Background()
	if err := a.ClaimHome(ctx, "Wallet", "w-1"); err != nil {
		t.Fatalf("claim absent: %v", err)
	}
	first := homeOf(t, env, ob, "Wallet", "w-1")
	if s(first, outbox.AttrHomeRegion) != regionA {
		t.Fatalf("home item %v", first)
	}
	if err := a.ClaimHome(ctx, "Wallet", "w-1"); err != nil {
		t.Fatalf("claim again in the home Region: %v", err)
	}
	if again := homeOf(t, env, ob, "Wallet", "w-1"); !reflect.DeepEqual(again, first) {
		t.Fatalf("a repeated claim rewrote the home item: %v, was %v", again, first)
	}
	err := b.ClaimHome(ctx, "Wallet", "w-1")
	wantNotHome(t, err, "w-1", regionA, regionB)
	// Claimed before its creation: the creation in the home Region
	// passes, in the other Region it is refused.
	if _, err := b.Update(ctx, walletInput(wallets, "w-1"), deposit(1)); err == nil {
		t.Fatal("creation in the other Region succeeded")
	} else {
		wantNotHome(t, err, "w-1", regionA, regionB)
	}
	if res, err := a.Update(ctx, walletInput(wallets, "w-1"), deposit(1)); err != nil || res.Version != 1 {
		t.Fatalf("creation in the claiming Region: %+v %v", res, err)
	}
	single := newWriter(t, env.DDB, outbox.WriterConfig{Table: ob, Source: "com.example.wallet"})
	if err := single.ClaimHome(ctx, "Wallet", "w-2"); !errors.Is(err, outbox.ErrNoRegion) {
		t.Fatalf("single-Region ClaimHome: %v, want ErrNoRegion", err)
	}
	if err := a.ClaimHome(ctx, "Wallet", ""); err == nil {
		t.Fatal("ClaimHome accepted an empty id")
	}
	if err := a.ClaimHome(ctx, "Wallet", strings.Repeat("x", outbox.MaxPartitionKeyBytes)); !errors.Is(err, outbox.ErrKeyTooLong) {
		t.Fatalf("ClaimHome of an over-long id: %v, want ErrKeyTooLong", err)
	}
}
