package dedup_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// walletEffects books an event's "delta" on the wallet's balance item: an
// entry Put keyed by the event id (effect 0, attribute_not_exists: it
// catches a redelivery after the marker expired) and an ADD on the balance
// (effect 1), conditioned, for a debit, on the balance covering it.
func walletEffects(table string) dedup.EffectsFunc {
	return func(_ context.Context, env outbox.Envelope) ([]types.TransactWriteItem, error) {
		var p struct {
			Delta *int64 `json:"delta"`
		}
		if err := json.Unmarshal(env.Payload, &p); err != nil || p.Delta == nil {
			return nil, sqsconsumer.Permanent("bad_payload", errors.New("no delta"))
		}
		entry, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))).Build()
		if err != nil {
			return nil, err
		}
		b := expression.NewBuilder().WithUpdate(expression.Add(expression.Name("bal"), expression.Value(*p.Delta)))
		if *p.Delta < 0 {
			b = b.WithCondition(expression.GreaterThanEqual(expression.Name("bal"), expression.Value(-*p.Delta)))
		}
		upd, err := b.Build()
		if err != nil {
			return nil, err
		}
		return []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ENTRY#" + env.EventID}},
				ConditionExpression: entry.Condition(), ExpressionAttributeNames: entry.Names()}},
			{Update: &types.Update{TableName: aws.String(table), Key: pkKey("BAL#" + env.AggregateID), UpdateExpression: upd.Update(),
				ConditionExpression: upd.Condition(), ExpressionAttributeNames: upd.Names(), ExpressionAttributeValues: upd.Values()}},
		}, nil
	}
}

func walletEvent(t *testing.T, id string, seq, delta int64) events.EventBridgeEvent {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Wallet", ID: id, Sequence: seq},
		outbox.Event{Type: "AmountBooked", Version: 1, Payload: map[string]int64{"delta": delta}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	ev := bridge(t, env)
	ev.Source = "com.example.wallet"
	return ev
}

// TestHandlerRunsTheProtocol: one Consumer.Handler call around an effect
// builder, against Dynoxide: applied; a duplicate (new EventBridge id)
// absorbed; an early event buffered, then applied right after its
// predecessor; a debit the balance cannot cover dead-lettered with
// ReasonEffectCondition and nothing written; a redelivery after the marker
// expired acknowledged through AppliedIf; a malformed or forged event and
// the builder's own permanent error dead-lettered with their reasons.
func TestHandlerRunsTheProtocol(t *testing.T) {
	env := ddbtest.New(t)
	table := ddbtest.Name("wallet-consumer")
	env.CreateTable(t, dedup.CreateTableInput(table))
	c, err := dedup.NewConsumer("wallet", env.DDB, dedup.ConsumerConfig{Table: table, ExpectedSource: "com.example.wallet", Logger: quietLog}, 0, dedup.Ordered)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Handler(walletEffects(table), dedup.AppliedIf(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	balance := func(id string) int64 {
		t.Helper()
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: pkKey("BAL#" + id), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := out.Item["bal"].(*types.AttributeValueMemberN)
		if n == nil {
			return 0
		}
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	reason := func(err error) string {
		p, ok := sqsconsumer.AsPermanent(err)
		if !ok {
			return "not permanent: " + errString(err)
		}
		return p.Reason
	}

	first := walletEvent(t, "w-1", 1, 10)
	if err := h(ctx, first); err != nil || balance("w-1") != 10 {
		t.Fatalf("applied: %v, balance %d", err, balance("w-1"))
	}
	again := first
	again.ID = "another-bridge-id"
	if err := h(ctx, again); err != nil || balance("w-1") != 10 {
		t.Fatalf("duplicate: %v, balance %d", err, balance("w-1"))
	}
	third, second := walletEvent(t, "w-1", 3, 100), walletEvent(t, "w-1", 2, -4)
	if err := h(ctx, third); err != nil || balance("w-1") != 10 {
		t.Fatalf("early event: %v, balance %d (want buffered, nothing applied)", err, balance("w-1"))
	}
	if err := h(ctx, second); err != nil || balance("w-1") != 106 {
		t.Fatalf("predecessor: %v, balance %d, want 106 (2 and the buffered 3 applied)", err, balance("w-1"))
	}
	if last, err := c.Applier.LastSequence(ctx, "Wallet", "w-1"); err != nil || last != 3 {
		t.Fatalf("gate at %d (%v), want 3", last, err)
	}

	// A debit the balance cannot cover: the effect's own answer.
	overdraft := walletEvent(t, "w-2", 1, -5)
	if err := h(ctx, overdraft); reason(err) != dedup.ReasonEffectCondition || balance("w-2") != 0 {
		t.Fatalf("overdraft: %v (reason %s), balance %d", err, reason(err), balance("w-2"))
	}

	// The marker expired (deleted here) and the event comes back: the
	// entry's condition proves it was applied; acknowledged, not booked.
	if _, err := env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: pkKey(dedup.MarkerKey("wallet", envelopeOf(t, first).EventID))}); err != nil {
		t.Fatal(err)
	}
	if err := h(ctx, first); err != nil || balance("w-1") != 106 {
		t.Fatalf("redelivery after the marker expired: %v, balance %d", err, balance("w-1"))
	}

	malformed := walletEvent(t, "w-3", 1, 1)
	malformed.Detail = json.RawMessage(`{"event_id":"x"}`)
	forged := walletEvent(t, "w-3", 1, 1)
	forged.Source = "com.example.other"
	noDelta := walletEvent(t, "w-3", 1, 1)
	noDelta.Detail = json.RawMessage(strings.Replace(string(noDelta.Detail), `"delta"`, `"other"`, 1))
	for _, tc := range []struct {
		name string
		ev   events.EventBridgeEvent
		want string
	}{
		{"malformed", malformed, dedup.ReasonMalformedEvent},
		{"forged", forged, dedup.ReasonForeignSource},
		{"builder's permanent error", noDelta, "bad_payload"},
	} {
		if err := h(ctx, tc.ev); reason(err) != tc.want {
			t.Errorf("%s: %v, reason %q, want %q", tc.name, err, reason(err), tc.want)
		}
	}
	if balance("w-3") != 0 {
		t.Fatalf("refused events booked %d", balance("w-3"))
	}
	// A sweep tick runs the resequencer's sweep and is acknowledged.
	if err := h(ctx, events.EventBridgeEvent{Source: "aws.events", DetailType: "Scheduled Event"}); err != nil {
		t.Fatalf("sweep tick: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func envelopeOf(t *testing.T, ev events.EventBridgeEvent) outbox.Envelope {
	t.Helper()
	env, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestConsumerConfigFromEnv reads the variables the consumer construct
// sets and names each missing or invalid one.
func TestConsumerConfigFromEnv(t *testing.T) {
	set := func(kv map[string]string) {
		for _, k := range []string{config.EnvConsumerTable, config.EnvEventSource, config.EnvExpectedEventAccount, config.EnvDedupRetentionSeconds} {
			t.Setenv(k, kv[k])
		}
	}
	set(map[string]string{config.EnvConsumerTable: "wallet-consumer", config.EnvEventSource: "com.example.wallet",
		config.EnvExpectedEventAccount: "123456789012", config.EnvDedupRetentionSeconds: "3600"})
	c, err := dedup.ConsumerConfigFromEnv()
	if err != nil || c.Table != "wallet-consumer" || c.ExpectedSource != "com.example.wallet" || c.ExpectedAccount != "123456789012" || c.Dedup.Retention.Seconds() != 3600 {
		t.Fatalf("%+v %v", c, err)
	}
	set(map[string]string{config.EnvExpectedEventAccount: "12345", config.EnvDedupRetentionSeconds: "week"})
	_, err = dedup.ConsumerConfigFromEnv()
	for _, name := range []string{config.EnvConsumerTable, config.EnvEventSource, config.EnvExpectedEventAccount, config.EnvDedupRetentionSeconds} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
}

// NewConsumerFromEnv takes the consumer's name from CONSUMER_NAME (the name
// the construct's alarms use) and refuses to start without it.
func TestNewConsumerFromEnv(t *testing.T) {
	t.Setenv(config.EnvConsumerTable, "wallet-consumer")
	t.Setenv(config.EnvEventSource, "com.example.wallet")
	t.Setenv(config.EnvExpectedEventAccount, "")
	t.Setenv(config.EnvDedupRetentionSeconds, "")
	t.Setenv(config.EnvConsumerName, "")
	if _, _, err := dedup.NewConsumerFromEnv(nil, dedup.Ordered); err == nil || !strings.Contains(err.Error(), config.EnvConsumerName) {
		t.Fatalf("without %s: %v", config.EnvConsumerName, err)
	}
	t.Setenv(config.EnvConsumerName, "statement")
	c, cfg, err := dedup.NewConsumerFromEnv(nopWriter{}, dedup.Ordered)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.Dedup.Consumer != "statement" || cfg.Table != "wallet-consumer" || c.Config.Ordering != dedup.Ordered {
		t.Fatalf("consumer %q ordering %v, config table %q", c.Config.Dedup.Consumer, c.Config.Ordering, cfg.Table)
	}
}

// nopWriter is a client NewConsumer accepts for an ordered consumer
// (TransactWriteItems and GetItem) that is never called.
type nopWriter struct {
	dedup.TransactWriter
	dedup.ItemGetter
}
