package dedup_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// puts returns n effect Puts on distinct items of table, keyed by the
// event id.
func puts(table string, env outbox.Envelope, n int) []types.TransactWriteItem {
	items := make([]types.TransactWriteItem, n)
	for i := range items {
		items[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table),
			Item: pkKey(fmt.Sprintf("FX#%s#%d", env.EventID, i))}}
	}
	return items
}

func countItems(t *testing.T, env *ddbtest.Env, table string) int {
	t.Helper()
	out, err := env.DDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Items)
}

// TestHandlerHostileEffects: effects the protocol's transaction cannot
// take — one on the event's own dedup marker or ordering gate, more than
// the transaction holds with the marker and gate — are refused for good
// (dead-lettered with ReasonTransactionInvalid) rather than retried until
// the queue gives up, and nothing is written. No effects, or a nil slice,
// record the event as seen.
func TestHandlerHostileEffects(t *testing.T) {
	for _, ordering := range []dedup.Ordering{dedup.Unordered, dedup.Ordered} {
		t.Run(string(ordering), func(t *testing.T) {
			env := ddbtest.New(t)
			table := ddbtest.Name("hostile")
			env.CreateTable(t, dedup.CreateTableInput(table))
			c, err := dedup.NewConsumer("wallet", env.DDB, dedup.ConsumerConfig{Table: table, ExpectedSource: "com.example.wallet", Logger: quietLog}, 0, ordering)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// the most effects one event may carry: 100 - marker - gate
			// - (ordered) the buffer item's delete of a drained event
			most := outbox.MaxTransactionActions - 1
			if ordering == dedup.Ordered {
				most = outbox.MaxTransactionActions - 3
			}
			for _, tc := range []struct {
				name    string
				effects func(outbox.Envelope) []types.TransactWriteItem
				ordered bool
			}{
				{"effect on its own marker", func(e outbox.Envelope) []types.TransactWriteItem {
					return []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(table), Item: pkKey(dedup.MarkerKey("wallet", e.EventID))}}}
				}, false},
				{"effect on its own gate", func(e outbox.Envelope) []types.TransactWriteItem {
					return []types.TransactWriteItem{{Update: &types.Update{TableName: aws.String(table), Key: pkKey(dedup.SequenceKey("wallet", e.AggregateType, e.AggregateID)),
						UpdateExpression: aws.String("SET x = :x"), ExpressionAttributeValues: map[string]types.AttributeValue{":x": &types.AttributeValueMemberN{Value: "1"}}}}}
				}, true},
				{"one effect too many", func(e outbox.Envelope) []types.TransactWriteItem { return puts(table, e, most+1) }, false},
				{"two effects on one item", func(e outbox.Envelope) []types.TransactWriteItem {
					p := puts(table, e, 1)
					return append(p, p[0])
				}, false},
			} {
				if tc.ordered && ordering != dedup.Ordered {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					before := countItems(t, env, table)
					h, err := c.Handler(func(_ context.Context, e outbox.Envelope) ([]types.TransactWriteItem, error) {
						return tc.effects(e), nil
					})
					if err != nil {
						t.Fatal(err)
					}
					err = h(ctx, walletEvent(t, "w-"+tc.name, 1, 1))
					p, ok := sqsconsumer.AsPermanent(err)
					if !ok || p.Reason != dedup.ReasonTransactionInvalid {
						t.Fatalf("err %v: want a permanent error with reason %s", err, dedup.ReasonTransactionInvalid)
					}
					if n := countItems(t, env, table); n != before {
						t.Fatalf("%d items written", n-before)
					}
				})
			}
			t.Run("most effects, early then drained", func(t *testing.T) {
				h, err := c.Handler(func(_ context.Context, e outbox.Envelope) ([]types.TransactWriteItem, error) {
					return puts(table, e, most), nil
				})
				if err != nil {
					t.Fatal(err)
				}
				before := countItems(t, env, table)
				second, first := walletEvent(t, "w-most", 2, 1), walletEvent(t, "w-most", 1, 1)
				if err := h(ctx, second); err != nil {
					t.Fatalf("second (early): %v", err)
				}
				if err := h(ctx, first); err != nil {
					t.Fatalf("first: %v", err)
				}
				// effects of both, their markers, and (ordered) the gate
				want := 2*most + 2
				if ordering == dedup.Ordered {
					want++
				}
				if n := countItems(t, env, table) - before; n != want {
					t.Fatalf("%d items written, want %d", n, want)
				}
			})
			t.Run("no effects", func(t *testing.T) {
				for i, effects := range [][]types.TransactWriteItem{nil, {}} {
					h, err := c.Handler(func(context.Context, outbox.Envelope) ([]types.TransactWriteItem, error) { return effects, nil })
					if err != nil {
						t.Fatal(err)
					}
					ev := walletEvent(t, fmt.Sprintf("w-none-%d", i), 1, 1)
					if err := h(ctx, ev); err != nil {
						t.Fatal(err)
					}
					out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
						Key: c.Applier.Key(envelopeOf(t, ev).EventID)})
					if err != nil || out.Item == nil {
						t.Fatalf("no marker: %v", err)
					}
				}
			})
		})
	}
}

// TestConsumerConfigFromEnvHostileValues: values that would build a
// consumer refusing every event, or keeping markers for a surprising time,
// are refused at init, each naming its variable.
func TestConsumerConfigFromEnvHostileValues(t *testing.T) {
	good := map[string]string{config.EnvConsumerTable: "wallet-consumer", config.EnvEventSource: "com.example.wallet",
		config.EnvExpectedEventAccount: "123456789012", config.EnvDedupRetentionSeconds: "3600"}
	for _, tc := range []struct{ name, value string }{
		{config.EnvEventSource, "aws.wallet"},
		{config.EnvEventSource, "com.example.wallet "},
		{config.EnvConsumerTable, " wallet-consumer"},
		{config.EnvExpectedEventAccount, "12345678901"},
		{config.EnvExpectedEventAccount, "1234567890123"},
		{config.EnvExpectedEventAccount, "123456789012 "},
		{config.EnvDedupRetentionSeconds, "0"},
		{config.EnvDedupRetentionSeconds, "-3600"},
		{config.EnvDedupRetentionSeconds, "3599"},
		{config.EnvDedupRetentionSeconds, "18446751273"}, // wrapped to 2 h before
		{config.EnvDedupRetentionSeconds, "9223372036854775807"},
	} {
		for k, v := range good {
			t.Setenv(k, v)
		}
		t.Setenv(tc.name, tc.value)
		if c, err := dedup.ConsumerConfigFromEnv(); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%q: %+v, %v; want an error naming it", tc.name, tc.value, c, err)
		}
	}
	// The largest retention a duration holds is taken as it is.
	t.Setenv(config.EnvDedupRetentionSeconds, "9223372036")
	if c, err := dedup.ConsumerConfigFromEnv(); err != nil || c.Dedup.Retention != 9223372036*time.Second {
		t.Errorf("largest retention: %v, %v", c.Dedup.Retention, err)
	}
}

// TestNewConsumerRefusesAReservedSource: an ExpectedSource starting with
// "aws." matches no event a relay can publish.
func TestNewConsumerRefusesAReservedSource(t *testing.T) {
	env := ddbtest.New(t)
	_, err := dedup.NewConsumer("wallet", env.DDB, dedup.ConsumerConfig{Table: "t", ExpectedSource: "aws.wallet", Logger: quietLog}, 0, dedup.Unordered)
	if err == nil || !strings.Contains(err.Error(), "aws.") {
		t.Fatalf("%v", err)
	}
}
