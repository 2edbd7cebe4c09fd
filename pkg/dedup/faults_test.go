package dedup_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// addOne is a side effect with no guard of its own: counter += 1.
func addOne(table string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{TableName: aws.String(table), Key: pkKey("counter"),
		UpdateExpression:          aws.String("ADD n :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}}}
}

// The ambiguous case on the consumer side: the transaction (marker +
// effect) commits but its response is lost, so Apply fails and the
// platform redelivers. The redelivery finds the marker and applies nothing:
// an unguarded counter is incremented exactly once. A failure before send
// writes nothing, and the next delivery applies it.
func TestFaultResponseLostTransactionAppliedOnce(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	dd, side := ddbtest.Name("dedup"), ddbtest.Name("side")
	env.CreateTable(t, dedup.CreateTableInput(dd))
	env.CreateTable(t, ddbtest.SimpleTableInput(side))
	counter := func() int {
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(side), Key: pkKey("counter"), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Item == nil {
			return 0
		}
		n, _ := strconv.Atoi(out.Item["n"].(*types.AttributeValueMemberN).Value)
		return n
	}

	for _, tc := range []struct {
		kind       faults.Kind
		afterFault int
	}{{faults.ResponseLost, 1}, {faults.FailBeforeSend, 0}} {
		in, err := faults.New(faults.Config{Rates: map[faults.Kind]float64{tc.kind: 1}})
		if err != nil {
			t.Fatal(err)
		}
		faulty := newApplier(t, in.TransactWriter(env.DDB), dedup.Config{Table: dd, Consumer: string(tc.kind)})
		healthy := newApplier(t, env.DDB, dedup.Config{Table: dd, Consumer: string(tc.kind)})
		e := testEnvelope(t, 1)
		before := counter()

		applied, err := faulty.Apply(ctx, e, []types.TransactWriteItem{addOne(side)})
		if applied || !faults.IsInjected(err) {
			t.Fatalf("%s: Apply = %v, %v; want the injected error", tc.kind, applied, err)
		}
		if got := counter() - before; got != tc.afterFault {
			t.Fatalf("%s: counter moved by %d after the fault, want %d", tc.kind, got, tc.afterFault)
		}
		applied, err = healthy.Apply(ctx, e, []types.TransactWriteItem{addOne(side)})
		if err != nil || applied != (tc.afterFault == 0) {
			t.Fatalf("%s: redelivery Apply = %v, %v", tc.kind, applied, err)
		}
		if got := counter() - before; got != 1 {
			t.Fatalf("%s: counter moved by %d, want exactly 1", tc.kind, got)
		}
	}
}
