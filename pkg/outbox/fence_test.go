package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// seqEnvelope returns an envelope of aggregate typ/id at sequence seq.
func seqEnvelope(t *testing.T, typ, id string, seq int64) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: typ, ID: id, Sequence: seq},
		outbox.Event{Type: "Happened", Version: 1, Payload: map[string]any{}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// withEventID returns env with event id id.
func withEventID(env outbox.Envelope, id string) outbox.Envelope {
	env.EventID = id
	return env
}

// TestBuildFencesEachAggregate: after the outbox puts comes one home action
// per aggregate, in order of first appearance: a Put of the home item when
// the aggregate's lowest sequence in the change is 1, else a ConditionCheck
// on its home item, both returning the stored item on failure. A
// single-Region writer builds exactly today's transaction.
func TestBuildFencesEachAggregate(t *testing.T) {
	t.Parallel()
	events := []outbox.Envelope{
		seqEnvelope(t, "Order", "o-2", 5), seqEnvelope(t, "Order", "o-1", 2),
		seqEnvelope(t, "Order", "o-2", 6), seqEnvelope(t, "Order", "o-1", 1),
	}
	writes := []types.TransactWriteItem{businessPut("ORDER#o-1")}

	single := newWriter(t, &fakeTx{}, outbox.WriterConfig{Source: "com.example.test"})
	in, err := single.Build(writes, events)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.TransactItems) != 1+len(events) {
		t.Fatalf("single-Region transaction has %d actions, want %d", len(in.TransactItems), 1+len(events))
	}
	for i, e := range events {
		if got, want := in.TransactItems[1+i].Put.Item, outbox.NewRecord(e, i, 16).Item(); !sameItem(got, want) {
			t.Fatalf("single-Region record %d differs from NewRecord's", i)
		}
	}

	w := newWriter(t, &fakeTx{}, outbox.WriterConfig{Source: "com.example.test", Region: "eu-west-1"})
	in, err = w.Build(writes, events)
	if err != nil {
		t.Fatal(err)
	}
	items := in.TransactItems
	if len(items) != 1+len(events)+2 {
		t.Fatalf("%d actions, want %d (+2 home actions)", len(items), 1+len(events)+2)
	}
	for i := range events {
		it := items[1+i].Put.Item
		if v, _ := it[outbox.AttrOriginRegion].(*types.AttributeValueMemberS); v == nil || v.Value != "eu-west-1" {
			t.Fatalf("record %d has no origin_region: %v", i, it)
		}
		if v := it[outbox.AttrPendingShard].(*types.AttributeValueMemberS).Value; !strings.HasPrefix(v, "eu-west-1#p") {
			t.Fatalf("record %d pending shard %q", i, v)
		}
	}
	check := items[1+len(events)].ConditionCheck // o-2: lowest sequence 5
	if check == nil || check.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld ||
		!sameItem(check.Key, outbox.HomeKey("Order", "o-2").AttributeValues()) || aws.ToString(check.TableName) != "outbox" {
		t.Fatalf("home action of o-2: %+v", items[1+len(events)])
	}
	if !strings.Contains(aws.ToString(check.ConditionExpression), "=") || len(check.ExpressionAttributeValues) != 1 {
		t.Fatalf("ConditionCheck condition %q %v", aws.ToString(check.ConditionExpression), check.ExpressionAttributeValues)
	}
	put := items[2+len(events)].Put // o-1: lowest sequence 1
	if put == nil || put.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld ||
		put.Item[outbox.AttrHomeRegion].(*types.AttributeValueMemberS).Value != "eu-west-1" ||
		put.Item[outbox.AttrPK].(*types.AttributeValueMemberS).Value != outbox.HomeKey("Order", "o-1").PK {
		t.Fatalf("home action of o-1: %+v", items[2+len(events)])
	}
	if c := aws.ToString(put.ConditionExpression); !strings.Contains(c, "attribute_not_exists") {
		t.Fatalf("home put condition %q", c)
	}
}

func sameItem(a, b map[string]types.AttributeValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !equalAV(v, b[k]) {
			return false
		}
	}
	return true
}

func equalAV(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberN:
		y, ok := b.(*types.AttributeValueMemberN)
		return ok && x.Value == y.Value
	}
	return false
}

// TestFenceLimits: the home actions count toward the 100-action limit and
// the one-action-per-item check, and an aggregate whose home key exceeds
// DynamoDB's 2,048-byte partition key limit is refused before anything is
// sent (single-Region mode sends it, as before).
func TestFenceLimits(t *testing.T) {
	t.Parallel()
	var full []outbox.Envelope // 99 events of one aggregate + 1 write = 100 actions
	for i := int64(1); i <= 99; i++ {
		full = append(full, seqEnvelope(t, "Order", "o-1", i))
	}
	long := strings.Repeat("x", outbox.MaxPartitionKeyBytes-len("Order#")) // the record's pk fits; the home key does not
	homeWrite := types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String("outbox"),
		Key: outbox.HomeKey("Order", "o-1").AttributeValues(), ConditionExpression: aws.String("attribute_exists(pk)")}}
	cases := []struct {
		name        string
		region      string
		writes      []types.TransactWriteItem
		events      []outbox.Envelope
		want        error // nil: sent
		wantMessage string
	}{
		{"100 actions single-Region", "", []types.TransactWriteItem{businessPut("A")}, full, nil, ""},
		{"100 actions + home", "eu-west-1", []types.TransactWriteItem{businessPut("A")}, full, outbox.ErrTransactionTooLarge, "101 actions"},
		{"a write on the home item", "eu-west-1", []types.TransactWriteItem{homeWrite}, full[1:2], outbox.ErrDuplicateAction, ""},
		{"home key too long", "eu-west-1", nil, []outbox.Envelope{seqEnvelope(t, "Order", long, 1)}, outbox.ErrKeyTooLong, "2048"},
		{"long id single-Region", "", nil, []outbox.Envelope{seqEnvelope(t, "Order", long, 1)}, nil, ""},
		// A survivor's takeover mark on the record is keyed
		// "<survivor>#<event_id>" (a 1,024-byte sort key): an event id that
		// cannot fit is refused in multi-Region mode only.
		{"event id too long for a takeover mark", "eu-west-1", nil, []outbox.Envelope{withEventID(seqEnvelope(t, "Order", "o-1", 1), strings.Repeat("e", outbox.MaxRegionEventIDBytes+1))}, outbox.ErrKeyTooLong, "event id"},
		{"longest event id", "eu-west-1", nil, []outbox.Envelope{withEventID(seqEnvelope(t, "Order", "o-1", 1), strings.Repeat("e", outbox.MaxRegionEventIDBytes))}, nil, ""},
		{"long event id single-Region", "", nil, []outbox.Envelope{withEventID(seqEnvelope(t, "Order", "o-1", 1), strings.Repeat("e", 2000))}, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tx := &fakeTx{}
			w := newWriter(t, tx, outbox.WriterConfig{Source: "com.example.test", Region: c.region})
			err := w.Write(context.Background(), c.writes, c.events)
			switch {
			case c.want == nil && (err != nil || tx.calls != 1):
				t.Fatalf("want sent, got %v after %d calls", err, tx.calls)
			case c.want != nil && (!errors.Is(err, c.want) || tx.calls != 0):
				t.Fatalf("want %v before sending, got %v after %d calls", c.want, err, tx.calls)
			case c.want != nil && !strings.Contains(err.Error(), c.wantMessage):
				t.Fatalf("error %q does not say %q", err, c.wantMessage)
			}
		})
	}
}

// TestWriterConfigRegion: Region must be shaped like an AWS Region code.
func TestWriterConfigRegion(t *testing.T) {
	t.Parallel()
	for region, ok := range map[string]bool{"": true, "eu-west-1": true, "us-gov-west-1": true, "EU-West-1": false, "eu-west": false, "eu_west_1": false} {
		_, err := outbox.NewWriter(&fakeTx{}, outbox.WriterConfig{Table: "outbox", Source: "com.example.test", Region: region})
		if ok != (err == nil) {
			t.Errorf("Region %q: NewWriter error %v", region, err)
		}
		if err != nil && !strings.Contains(err.Error(), "Region") {
			t.Errorf("Region %q: error %q does not name the setting", region, err)
		}
	}
}

// TestNotHomeTranslation: a cancellation whose home action failed is a
// *NotHomeError naming the stored Region (CancellationReason.Item), or ""
// when DynamoDB returned no item (the home item is absent); a failure of
// another action stays a *TxError carrying the returned items.
func TestNotHomeTranslation(t *testing.T) {
	t.Parallel()
	stored := map[string]types.AttributeValue{outbox.AttrHomeRegion: &types.AttributeValueMemberS{Value: "us-east-1"}}
	none, failed := aws.String(outbox.ReasonNone), aws.String(outbox.ReasonConditionalCheckFailed)
	cases := []struct {
		name    string
		reasons []types.CancellationReason // actions: business write, outbox record, home check
		home    string                     // want a *NotHomeError with this Home; "-" wants a *TxError
	}{
		{"home names another Region", []types.CancellationReason{{Code: none}, {Code: none}, {Code: failed, Item: stored}}, "us-east-1"},
		{"no home item", []types.CancellationReason{{Code: none}, {Code: none}, {Code: failed}}, ""},
		{"business condition only", []types.CancellationReason{{Code: failed, Item: stored}, {Code: none}, {Code: none}}, "-"},
		{"conflict on the home item", []types.CancellationReason{{Code: none}, {Code: none}, {Code: aws.String(outbox.ReasonTransactionConflict)}}, "-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tx := &fakeTx{err: &types.TransactionCanceledException{Message: aws.String("cancelled"), CancellationReasons: c.reasons}}
			w := newWriter(t, tx, outbox.WriterConfig{Source: "com.example.test", Region: "eu-west-1"})
			err := w.Write(context.Background(), []types.TransactWriteItem{businessPut("A")}, []outbox.Envelope{seqEnvelope(t, "Order", "o-1", 3)})
			var nh *outbox.NotHomeError
			if c.home == "-" {
				te, ok := outbox.AsTxError(err)
				if !ok || errors.Is(err, outbox.ErrNotHomeRegion) {
					t.Fatalf("want a *TxError, got %v", err)
				}
				if c.reasons[0].Item != nil && te.Item(0) == nil {
					t.Fatal("TxError lost the returned item")
				}
				return
			}
			if !errors.As(err, &nh) || nh.Home != c.home || nh.Here != "eu-west-1" || nh.AggregateID != "o-1" {
				t.Fatalf("want NotHomeError home %q, got %#v", c.home, err)
			}
		})
	}
}

// TestRecordRegionAttributes: OriginRegion and RedriveGeneration round-trip
// through Item and RecordFromItem, are absent from the item when unset, and
// a redrive_generation that is not a number is refused.
func TestRecordRegionAttributes(t *testing.T) {
	t.Parallel()
	e := seqEnvelope(t, "Order", "o-1", 1)
	for _, r := range []outbox.Record{outbox.NewRecord(e, 0, 4), outbox.NewRecordIn("eu-west-1", e, 0, 4)} {
		r.RedriveGeneration = map[string]int64{"": 0, "eu-west-1": 3}[r.OriginRegion]
		item := r.Item()
		_, hasOrigin := item[outbox.AttrOriginRegion]
		_, hasGen := item[outbox.AttrRedriveGeneration]
		if hasOrigin != (r.OriginRegion != "") || hasGen != (r.RedriveGeneration != 0) {
			t.Fatalf("region %q: item %v", r.OriginRegion, item)
		}
		got, err := outbox.RecordFromItem(item)
		if err != nil || got.OriginRegion != r.OriginRegion || got.RedriveGeneration != r.RedriveGeneration || got.PendingShard != r.PendingShard {
			t.Fatalf("round trip of %+v: %+v %v", r, got, err)
		}
		item[outbox.AttrRedriveGeneration] = &types.AttributeValueMemberS{Value: "3"}
		if _, err := outbox.RecordFromItem(item); !errors.Is(err, outbox.ErrInvalidEnvelope) {
			t.Fatalf("redrive_generation as a string: %v", err)
		}
	}
}
