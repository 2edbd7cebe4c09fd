package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// fakeTx records the one TransactWriteItems call it receives.
type fakeTx struct {
	calls int
	in    *dynamodb.TransactWriteItemsInput
	err   error
}

func (f *fakeTx) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.calls++
	f.in = in
	return &dynamodb.TransactWriteItemsOutput{}, f.err
}

func envelope(t *testing.T, payload any) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: 1},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: payload}, outbox.Metadata{CorrelationID: "c-1"})
	if err != nil {
		t.Fatalf("NewEnvelope: %v", err)
	}
	return env
}

func businessPut(pk string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String("orders"),
		Item:      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
	}}
}

func newWriter(t *testing.T, tx outbox.TransactWriter, cfg outbox.WriterConfig) *outbox.Writer {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = "outbox"
	}
	w, err := outbox.NewWriter(tx, cfg)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return w
}

func TestWriteCommitsChangeAndOutboxRecordInOneTransaction(t *testing.T) {
	tx := &fakeTx{}
	w := newWriter(t, tx, outbox.WriterConfig{Source: "com.example.test"})
	env := envelope(t, map[string]any{"order_id": "o-1"})
	if err := w.Write(context.Background(), []types.TransactWriteItem{businessPut("ORDER#o-1")}, []outbox.Envelope{env}, outbox.WithClientRequestToken("tok")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if tx.calls != 1 || len(tx.in.TransactItems) != 2 {
		t.Fatalf("want 1 call with 2 actions, got %d calls, %d actions", tx.calls, len(tx.in.TransactItems))
	}
	if aws.ToString(tx.in.ClientRequestToken) != "tok" {
		t.Errorf("ClientRequestToken = %q", aws.ToString(tx.in.ClientRequestToken))
	}
	put := tx.in.TransactItems[1].Put
	if put == nil || aws.ToString(put.TableName) != "outbox" {
		t.Fatalf("action 1 is not a put on the outbox table: %+v", tx.in.TransactItems[1])
	}
	if !strings.Contains(aws.ToString(put.ConditionExpression), "attribute_not_exists") {
		t.Errorf("outbox put condition = %q, want attribute_not_exists", aws.ToString(put.ConditionExpression))
	}
	// No TTL while pending; the sparse pending attribute is present.
	if _, ok := put.Item[outbox.AttrExpiresAt]; ok {
		t.Errorf("pending outbox record carries TTL attribute %s", outbox.AttrExpiresAt)
	}
	if _, ok := put.Item[outbox.AttrPendingShard]; !ok {
		t.Errorf("pending outbox record lacks %s", outbox.AttrPendingShard)
	}
	rec, err := outbox.RecordFromItem(put.Item)
	if err != nil {
		t.Fatalf("RecordFromItem: %v", err)
	}
	if rec.Envelope.EventID != env.EventID || rec.Status != outbox.StatusPending || string(rec.Envelope.Payload) != string(env.Payload) {
		t.Errorf("round trip mismatch: %+v vs %+v", rec.Envelope, env)
	}
	if !rec.Envelope.OccurredAt.Equal(env.OccurredAt) {
		t.Errorf("occurred_at %v != %v", rec.Envelope.OccurredAt, env.OccurredAt)
	}
}

func TestWriteRejectsBeforeSending(t *testing.T) {
	big := strings.Repeat("x", 300*1024)
	tests := []struct {
		name   string
		cfg    outbox.WriterConfig
		writes func() []types.TransactWriteItem
		events func(t *testing.T) []outbox.Envelope
		want   error
	}{
		{"no events", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem { return []types.TransactWriteItem{businessPut("a")} },
			func(*testing.T) []outbox.Envelope { return nil }, outbox.ErrNoEvents},
		{"entry over 256 KB", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem { return nil },
			func(t *testing.T) []outbox.Envelope {
				return []outbox.Envelope{envelope(t, map[string]string{"x": big})}
			}, outbox.ErrEntryTooLarge},
		{"entry over a configured 2 KB limit", outbox.WriterConfig{Source: "com.example.test", MaxEntryBytes: 2048}, func() []types.TransactWriteItem { return nil },
			func(t *testing.T) []outbox.Envelope {
				return []outbox.Envelope{envelope(t, map[string]string{"x": strings.Repeat("y", 2048)})}
			}, outbox.ErrEntryTooLarge},
		{"101 actions", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem {
			var w []types.TransactWriteItem
			for i := 0; i < 100; i++ {
				w = append(w, businessPut(strings.Repeat("k", i+1)))
			}
			return w
		}, func(t *testing.T) []outbox.Envelope { return []outbox.Envelope{envelope(t, map[string]any{})} }, outbox.ErrTransactionTooLarge},
		{"two actions on one item", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem {
			return []types.TransactWriteItem{businessPut("same"), businessPut("same")}
		}, func(t *testing.T) []outbox.Envelope { return []outbox.Envelope{envelope(t, map[string]any{})} }, outbox.ErrDuplicateAction},
		{"item over 400 KB", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem {
			return []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("orders"), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "a"}, "blob": &types.AttributeValueMemberS{Value: strings.Repeat("z", 401*1024)}}}}}
		}, func(t *testing.T) []outbox.Envelope { return []outbox.Envelope{envelope(t, map[string]any{})} }, outbox.ErrTransactionTooLarge},
		{"U+FFFF in the payload (SQS refuses it)", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem { return nil },
			func(t *testing.T) []outbox.Envelope {
				return []outbox.Envelope{envelope(t, map[string]string{"reason": "x\uffffy"})}
			}, outbox.ErrUndeliverableText},
		{"U+FFFE in the payload (SQS refuses it)", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem { return nil },
			func(t *testing.T) []outbox.Envelope {
				return []outbox.Envelope{envelope(t, map[string]string{"reason": "\ufffe"})}
			}, outbox.ErrUndeliverableText},
		{"lone surrogate escape in the payload", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem { return nil },
			func(t *testing.T) []outbox.Envelope {
				e := envelope(t, map[string]any{})
				e.Payload = json.RawMessage(`{"reason":"\ud800"}`)
				return []outbox.Envelope{e}
			}, outbox.ErrUndeliverableText},
		{"payload not an object", outbox.WriterConfig{Source: "com.example.test"}, func() []types.TransactWriteItem { return nil },
			func(t *testing.T) []outbox.Envelope {
				e := envelope(t, map[string]any{})
				e.Payload = json.RawMessage(`[1,2]`)
				return []outbox.Envelope{e}
			}, outbox.ErrInvalidEnvelope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := &fakeTx{}
			w := newWriter(t, tx, tc.cfg)
			err := w.Write(context.Background(), tc.writes(), tc.events(t))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tx.calls != 0 {
				t.Fatalf("a rejected write sent %d requests", tx.calls)
			}
		})
	}
}

func TestWriteTranslatesCancellation(t *testing.T) {
	tx := &fakeTx{err: &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{
		{Code: aws.String("ConditionalCheckFailed")}, {Code: aws.String("None")},
	}}}
	w := newWriter(t, tx, outbox.WriterConfig{Source: "com.example.test"})
	err := w.Write(context.Background(), []types.TransactWriteItem{businessPut("a")}, []outbox.Envelope{envelope(t, map[string]any{})})
	te, ok := outbox.AsTxError(err)
	if !ok {
		t.Fatalf("err %v is not a TxError", err)
	}
	if !te.ConditionFailed(0) || te.ConditionFailed(1) || te.FirstConditionFailed() != 0 || te.Retryable() {
		t.Fatalf("unexpected translation %+v", te.Reasons)
	}
	conflict := &outbox.TxError{Reasons: []string{"None", "TransactionConflict"}}
	if !conflict.Retryable() {
		t.Fatal("TransactionConflict should be retryable")
	}
}

func TestEntrySizeCountsAsAWSDoes(t *testing.T) {
	// 14 for Time + UTF-8 bytes of Source, DetailType, Detail and Resources.
	got := outbox.EntrySize("src", "Type", []byte(`{"a":"é"}`), "arn:1")
	want := 14 + 3 + 4 + len(`{"a":"é"}`) + 5
	if got != want {
		t.Fatalf("EntrySize = %d, want %d", got, want)
	}
}

func TestPendingShardSpreadsAndIsStable(t *testing.T) {
	seen := map[string]int{}
	for i := 0; i < 1600; i++ {
		env := envelope(t, map[string]any{})
		s := outbox.PendingShard(env.EventID, 16)
		if s != outbox.PendingShard(env.EventID, 16) {
			t.Fatal("PendingShard is not deterministic")
		}
		seen[s]++
	}
	if len(seen) != 16 {
		t.Fatalf("1600 ids hit %d of 16 shards", len(seen))
	}
	for s, n := range seen {
		if n < 40 {
			t.Errorf("shard %s got only %d of 1600", s, n)
		}
	}
}

func TestRecordFromItemRejectsBadItems(t *testing.T) {
	good := outbox.NewRecord(envelope(t, map[string]any{"k": 1}), 0, 4).Item()
	tests := map[string]func(m map[string]types.AttributeValue){
		"missing event_id": func(m map[string]types.AttributeValue) { delete(m, outbox.AttrEventID) },
		"sequence not N": func(m map[string]types.AttributeValue) {
			m[outbox.AttrSequence] = &types.AttributeValueMemberS{Value: "1"}
		},
		"bad occurred_at": func(m map[string]types.AttributeValue) {
			m[outbox.AttrOccurredAt] = &types.AttributeValueMemberS{Value: "yesterday"}
		},
		"payload not object": func(m map[string]types.AttributeValue) {
			m[outbox.AttrPayload] = &types.AttributeValueMemberS{Value: "42"}
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			m := map[string]types.AttributeValue{}
			for k, v := range good {
				m[k] = v
			}
			mutate(m)
			if _, err := outbox.RecordFromItem(m); !errors.Is(err, outbox.ErrInvalidEnvelope) {
				t.Fatalf("err = %v, want ErrInvalidEnvelope", err)
			}
		})
	}
	if _, err := outbox.RecordFromItem(good); err != nil {
		t.Fatalf("good item: %v", err)
	}
}

func TestRequestTokenIsDeterministicAndBounded(t *testing.T) {
	a, b := outbox.RequestToken("key", "hash"), outbox.RequestToken("key", "hash")
	if a != b || len(a) != 36 {
		t.Fatalf("tokens %q %q", a, b)
	}
	if outbox.RequestToken("key", "other") == a || outbox.RequestToken("ke", "yhash") == a {
		t.Fatal("different inputs gave the same token")
	}
}

// TestCheckTransactionTakesEachTablesKeyNames: a team's table keyed by
// other names than pk/sk ("PK", "id") is judged by its own key: two Puts of
// one item are refused as duplicates, two items sharing a partition key
// but not a sort key are not; without the names, a table whose items carry
// neither pk nor sk is judged by the whole item, so two Puts of one item
// with different attributes slip through (the reason to give them).
func TestCheckTransactionTakesEachTablesKeyNames(t *testing.T) {
	t.Parallel()
	put := func(table string, item map[string]types.AttributeValue) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: item}}
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	accounts := outbox.TableKeys{Table: "accounts", Names: []string{"PK", "SK"}}
	sameItem := []types.TransactWriteItem{
		put("accounts", map[string]types.AttributeValue{"PK": s("acct-1"), "SK": s("BALANCE"), "amount": s("1")}),
		put("accounts", map[string]types.AttributeValue{"PK": s("acct-1"), "SK": s("BALANCE"), "amount": s("2")}),
	}
	if err := outbox.CheckTransaction(sameItem, accounts); !errors.Is(err, outbox.ErrDuplicateAction) {
		t.Fatalf("two Puts of one PK/SK item: %v, want ErrDuplicateAction", err)
	}
	if err := outbox.CheckTransaction(sameItem); err != nil {
		t.Fatalf("without the key names the items differ as wholes: %v", err)
	}
	twoItems := []types.TransactWriteItem{
		put("accounts", map[string]types.AttributeValue{"PK": s("acct-1"), "SK": s("BALANCE")}),
		put("accounts", map[string]types.AttributeValue{"PK": s("acct-1"), "SK": s("ENTRY#1")}),
	}
	if err := outbox.CheckTransaction(twoItems, accounts); err != nil {
		t.Fatalf("two items of one partition: %v", err)
	}
	byID := []types.TransactWriteItem{
		put("wallets", map[string]types.AttributeValue{"id": s("w-1"), "v": s("1")}),
		{Update: &types.Update{TableName: aws.String("wallets"), Key: map[string]types.AttributeValue{"id": s("w-1")}}},
	}
	if err := outbox.CheckTransaction(byID, outbox.TableKeys{Table: "wallets", Names: []string{"id"}}); !errors.Is(err, outbox.ErrDuplicateAction) {
		t.Fatalf("a Put and an Update of one id-keyed item: %v, want ErrDuplicateAction", err)
	}
	// The writer passes its Keys on.
	w, err := outbox.NewWriter(&fakeTx{}, outbox.WriterConfig{Source: "com.example.test", Table: "outbox", Keys: []outbox.TableKeys{accounts}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Build(sameItem, []outbox.Envelope{envelope(t, map[string]any{"n": 1})}); !errors.Is(err, outbox.ErrDuplicateAction) {
		t.Fatalf("Writer.Build with the accounts table's keys: %v, want ErrDuplicateAction", err)
	}
}

// TestWriterNeedsItsSource: the library has no default event source: a
// writer without one, or with one EventBridge refuses ("aws."), is refused
// with a message that says what to give.
func TestWriterNeedsItsSource(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{"": "WriterConfig.Source is required", "aws.orders": `starts with "aws."`} {
		if _, err := outbox.NewWriter(&fakeTx{}, outbox.WriterConfig{Source: src, Table: "outbox"}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Source %q: %v, want %q", src, err, want)
		}
	}
}
