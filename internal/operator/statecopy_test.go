package operator

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestCopyConsumerState: upgrading from the shared dedup table, the
// ledger's markers, ordering item and buffered event are copied into the
// ledger's own table — the notifier's state is not, an expired marker is
// left behind, an item the target already holds is kept — and the ledger
// then finds there what it applied (a redelivery is a duplicate) and the
// event it was holding (applied when its predecessor arrives).
func TestCopyConsumerState(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	now := time.Now()
	old, own := ddbtest.Name("old-dedup"), ddbtest.Name("ledger")
	env.CreateTable(t, dedup.CreateTableInput(old))
	env.CreateTable(t, ledger.CreateTableInput(own))

	// The old table: what the ordered ledger and the notifier wrote.
	envs := make([]outbox.Envelope, 4)
	for i := range envs {
		e, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: int64(i + 1)},
			outbox.Event{Type: "OrderStep", Version: 1, Payload: map[string]any{"n": i}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	put := func(table string, item map[string]types.AttributeValue) {
		t.Helper()
		if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	oldLedger, err := dedup.NewApplier(env.DDB, dedup.Config{Table: old, Consumer: "ledger", Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs[:2] {
		if _, err := oldLedger.Apply(ctx, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(old, oldLedger.Marker(envs[2], now.Add(-30*24*time.Hour)).Put.Item) // an old marker: its TTL has passed
	buffered := map[string]types.AttributeValue{
		dedup.AttrPK:          &types.AttributeValueMemberS{Value: dedup.BufferKey("ledger", "Order", "o-1", 4)},
		dedup.AttrConsumer:    &types.AttributeValueMemberS{Value: "ledger"},
		dedup.AttrSequence:    &types.AttributeValueMemberN{Value: "4"},
		dedup.AttrEventID:     &types.AttributeValueMemberS{Value: envs[3].EventID},
		dedup.AttrBufferShard: &types.AttributeValueMemberS{Value: dedup.BufferShard("ledger", "Order", "o-1")},
		dedup.AttrBufferedAt:  &types.AttributeValueMemberS{Value: now.UTC().Format(dedup.BufferedAtLayout)},
	}
	put(old, buffered)
	if _, err := env.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(old),
		Key:              map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: dedup.SequenceKey("ledger", "Order", "o-1")}},
		UpdateExpression: aws.String("ADD #b :s"), ExpressionAttributeNames: map[string]string{"#b": dedup.AttrBuffered},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberNS{Value: []string{"4"}}}}); err != nil {
		t.Fatal(err)
	}
	notifier, err := dedup.NewApplier(env.DDB, dedup.Config{Table: old, Consumer: "notifier"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notifier.Apply(ctx, envs[0], nil); err != nil {
		t.Fatal(err)
	}
	// The target already holds one of the markers (kept, not overwritten).
	put(own, oldLedger.Marker(envs[1], now).Put.Item)

	dry, err := CopyConsumerState(ctx, env.DDB, old, own, "ledger", now, true)
	if err != nil || dry.Markers != 2 || dry.Gates != 1 || dry.Buffered != 1 || dry.Expired != 1 {
		t.Fatalf("dry run = %v, %v; want 2 markers, 1 gate, 1 buffered, 1 expired", dry, err)
	}
	got, err := CopyConsumerState(ctx, env.DDB, old, own, "ledger", now, false)
	if err != nil || got.Markers != 1 || got.Kept != 1 || got.Gates != 1 || got.Buffered != 1 || got.Expired != 1 {
		t.Fatalf("copy = %v, %v; want 1 marker copied, 1 kept, 1 gate, 1 buffered, 1 expired", got, err)
	}
	items := map[string]bool{}
	out, err := env.DDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(own), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range out.Items {
		items[attrS(it, dedup.AttrPK)] = true
	}
	if items[dedup.MarkerKey("notifier", envs[0].EventID)] || items[dedup.MarkerKey("ledger", envs[2].EventID)] || len(items) != 4 {
		t.Fatalf("target holds %v", items)
	}
	a, err := dedup.NewApplier(env.DDB, dedup.Config{Table: own, Consumer: "ledger", Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.ReadGate(ctx, "Order", "o-1"); err != nil || st.Last != 2 || !st.IsBuffered(4) {
		t.Fatalf("gate in the ledger's table = %+v, %v; want last 2, 4 buffered", st, err)
	}
	if o, err := a.ApplyEvent(ctx, envs[0], nil); err != nil || o != dedup.OutcomeDuplicate {
		t.Fatalf("a redelivery of sequence 1 = %v, %v; want a duplicate", o, err)
	}
	for _, bad := range []struct{ from, to, consumer string }{{old, own, ""}, {old, own, "a#b"}, {old, old, "ledger"}, {"", own, "ledger"}} {
		if _, err := CopyConsumerState(ctx, env.DDB, bad.from, bad.to, bad.consumer, now, true); err == nil {
			t.Errorf("CopyConsumerState(%q, %q, %q) accepted", bad.from, bad.to, bad.consumer)
		}
	}
}
