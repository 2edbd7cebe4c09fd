package dedup_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// putEffect returns a side-effect Put into table; when mustExist is true its
// condition attribute_exists(pk) fails on an empty table (a forced failure).
func putEffect(table, pk string, mustExist bool) types.TransactWriteItem {
	p := &types.Put{TableName: aws.String(table),
		Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}}
	if mustExist {
		p.ConditionExpression = aws.String("attribute_exists(pk)")
	}
	return types.TransactWriteItem{Put: p}
}

func exists(t *testing.T, c *dynamodb.Client, table string, key map[string]types.AttributeValue) bool {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

func pkKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}

// TestApplyAgainstDynamoDB proves, on a real DynamoDB-compatible server, that
// the marker and the side effect commit in one transaction: a failing effect
// leaves no marker (so the event is not lost), a second delivery of the same
// envelope is a no-op, and the marker is keyed by consumer and event_id.
func TestApplyAgainstDynamoDB(t *testing.T) {
	env := ddbtest.New(t)
	ctx := context.Background()
	dd, side := ddbtest.Name("dedup"), ddbtest.Name("side")
	env.CreateTable(t, dedup.CreateTableInput(dd))
	env.CreateTable(t, ddbtest.SimpleTableInput(side))
	a := newApplier(t, env.DDB, dedup.Config{Table: dd, Consumer: "ledger"})
	e := testEnvelope(t, 1)

	// A forced failing effect: nothing is written, not even the marker.
	applied, err := a.Apply(ctx, e, []types.TransactWriteItem{putEffect(side, "A", false), putEffect(side, "B", true)})
	if applied || !dedup.EffectConditionFailed(err, 1) {
		t.Fatalf("want effect 1 condition failure, got applied=%v err=%v", applied, err)
	}
	if exists(t, env.DDB, dd, a.Key(e.EventID)) {
		t.Fatal("marker committed without its side effect")
	}
	if exists(t, env.DDB, side, pkKey("A")) {
		t.Fatal("effect A committed although the transaction was cancelled")
	}

	// The redelivery applies it once.
	applied, err = a.Apply(ctx, e, []types.TransactWriteItem{putEffect(side, "A", false)})
	if err != nil || !applied {
		t.Fatalf("Apply = %v, %v", applied, err)
	}
	if !exists(t, env.DDB, dd, pkKey("ledger#"+e.EventID)) || !exists(t, env.DDB, side, pkKey("A")) {
		t.Fatal("marker or effect missing after apply")
	}

	// A duplicate (the same event_id, whatever the EventBridge id) changes nothing.
	applied, err = a.Apply(ctx, e, []types.TransactWriteItem{putEffect(side, "C", false)})
	if err != nil || applied {
		t.Fatalf("duplicate Apply = %v, %v; want false, nil", applied, err)
	}
	if exists(t, env.DDB, side, pkKey("C")) {
		t.Fatal("duplicate delivery applied its effect")
	}

	// Another consumer has its own marker for the same event.
	b := newApplier(t, env.DDB, dedup.Config{Table: dd, Consumer: "notifier"})
	if applied, err := b.Apply(ctx, e, nil); err != nil || !applied {
		t.Fatalf("second consumer Apply = %v, %v", applied, err)
	}
}
