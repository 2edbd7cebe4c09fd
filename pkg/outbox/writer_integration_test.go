package outbox_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestWriteIsAtomicAgainstDynamoDB runs against a real DynamoDB-compatible
// server: a change whose business condition fails leaves no outbox record,
// and a committed change leaves exactly one pending record without TTL.
func TestWriteIsAtomicAgainstDynamoDB(t *testing.T) {
	env := ddbtest.New(t)
	ctx := context.Background()
	orders, ob := ddbtest.Name("orders"), ddbtest.Name("outbox")
	env.CreateTable(t, ddbtest.SimpleTableInput(orders))
	env.CreateTable(t, outbox.CreateTableInput(ob))
	w := newWriter(t, env.DDB, outbox.WriterConfig{Source: "com.example.test", Table: ob})

	failing := types.TransactWriteItem{Put: &types.Put{
		TableName:           aws.String(orders),
		Item:                map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ORDER#x"}},
		ConditionExpression: aws.String("attribute_exists(pk)"), // the order does not exist
	}}
	err := w.Write(ctx, []types.TransactWriteItem{failing}, []outbox.Envelope{envelope(t, map[string]any{})})
	if te, ok := outbox.AsTxError(err); !ok || !te.ConditionFailed(0) {
		t.Fatalf("want condition failure on action 0, got %v", err)
	}
	if n := count(t, env.DDB, ob); n != 0 {
		t.Fatalf("cancelled transaction left %d outbox records", n)
	}

	e := envelope(t, map[string]any{"order_id": "o-1"})
	if err := w.Write(ctx, []types.TransactWriteItem{putIn(orders, "ORDER#o-1")}, []outbox.Envelope{e}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(ob), ConsistentRead: aws.Bool(true),
		Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0).AttributeValues()})
	if err != nil || out.Item == nil {
		t.Fatalf("outbox record not found: %v", err)
	}
	if _, ok := out.Item[outbox.AttrExpiresAt]; ok {
		t.Fatal("pending record has a TTL")
	}
	// The same aggregate version cannot be recorded twice.
	err = w.Write(ctx, []types.TransactWriteItem{putIn(orders, "ORDER#o-2")}, []outbox.Envelope{e})
	if te, ok := outbox.AsTxError(err); !ok || !te.ConditionFailed(1) {
		t.Fatalf("want condition failure on the outbox put, got %v", err)
	}
	if n := count(t, env.DDB, orders); n != 1 {
		t.Fatalf("orders table has %d items, want 1", n)
	}
}

func count(t *testing.T, c *dynamodb.Client, table string) int32 {
	t.Helper()
	out, err := c.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), Select: types.SelectCount})
	if err != nil {
		t.Fatalf("scan %s: %v", table, err)
	}
	return out.Count
}

func putIn(table, pk string) types.TransactWriteItem {
	it := businessPut(pk)
	it.Put.TableName = aws.String(table)
	return it
}
