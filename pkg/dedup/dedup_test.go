package dedup_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// fakeTx is a hand-written fake of dedup.TransactWriter that answers from a
// script of errors (nil = success) and records every input.
type fakeTx struct {
	script []error
	calls  atomic.Int32
	inputs []*dynamodb.TransactWriteItemsInput
}

func (f *fakeTx) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	n := int(f.calls.Add(1)) - 1
	f.inputs = append(f.inputs, in)
	if n < len(f.script) && f.script[n] != nil {
		return nil, f.script[n]
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func cancelled(codes ...string) error {
	reasons := make([]types.CancellationReason, len(codes))
	for i, c := range codes {
		reasons[i] = types.CancellationReason{Code: aws.String(c)}
	}
	return &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
}

func testEnvelope(t *testing.T, seq int64) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: seq},
		outbox.Event{Type: "OrderPaid", Version: 1, Payload: map[string]any{"order_id": "o-1", "amount_minor": 100, "currency": "EUR"}},
		outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func newApplier(t *testing.T, c dedup.TransactWriter, cfg dedup.Config) *dedup.Applier {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = "dedup"
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "test"
	}
	if cfg.BaseBackoff == 0 {
		cfg.BaseBackoff, cfg.MaxBackoff = time.Millisecond, 2*time.Millisecond
	}
	a, err := dedup.NewApplier(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  dedup.Config
		ok   bool
	}{
		{"defaults", dedup.Config{Table: "t", Consumer: "c"}, true},
		{"no table", dedup.Config{Consumer: "c"}, false},
		{"no consumer", dedup.Config{Table: "t"}, false},
		{"hash in consumer", dedup.Config{Table: "t", Consumer: "a#b"}, false},
		{"short retention", dedup.Config{Table: "t", Consumer: "c", Retention: time.Minute}, false},
		{"negative attempts", dedup.Config{Table: "t", Consumer: "c", MaxAttempts: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := dedup.NewApplier(&fakeTx{}, tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("NewApplier err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && a.Config().Retention != 7*24*time.Hour {
				t.Fatalf("default retention = %s", a.Config().Retention)
			}
		})
	}
}

func TestApplyMarkerShape(t *testing.T) {
	t.Parallel()
	f := &fakeTx{}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newApplier(t, f, dedup.Config{Consumer: "ledger", Now: func() time.Time { return now }})
	env := testEnvelope(t, 3)
	effect := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("side"),
		Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "X"}}}}
	applied, err := a.Apply(context.Background(), env, []types.TransactWriteItem{effect})
	if err != nil || !applied {
		t.Fatalf("Apply = %v, %v", applied, err)
	}
	items := f.inputs[0].TransactItems
	if len(items) != 2 || items[1].Put == nil || aws.ToString(items[1].Put.TableName) != "side" {
		t.Fatalf("want marker + 1 effect, got %d items", len(items))
	}
	m := items[dedup.MarkerIndex].Put
	if m == nil || aws.ToString(m.ConditionExpression) == "" {
		t.Fatal("marker is not a conditional Put")
	}
	want := map[string]string{
		dedup.AttrPK:          "ledger#" + env.EventID,
		dedup.AttrEventType:   "OrderPaid",
		dedup.AttrAggregateID: "o-1",
		dedup.AttrSequence:    "3",
		dedup.AttrExpiresAt:   strconv.FormatInt(now.Add(7*24*time.Hour).Unix(), 10),
		dedup.AttrAppliedAt:   now.Format(time.RFC3339Nano),
	}
	for k, v := range want {
		var got string
		switch av := m.Item[k].(type) {
		case *types.AttributeValueMemberS:
			got = av.Value
		case *types.AttributeValueMemberN:
			got = av.Value
		}
		if got != v {
			t.Errorf("marker %s = %q, want %q", k, got, v)
		}
	}
	if _, ok := m.Item[dedup.TTLAttribute].(*types.AttributeValueMemberN); !ok {
		t.Error("TTL attribute is not a number")
	}
}

func TestApplyOutcomes(t *testing.T) {
	t.Parallel()
	conflict := cancelled(outbox.ReasonNone, outbox.ReasonTransactionConflict)
	tests := []struct {
		name      string
		script    []error
		attempts  int
		applied   bool
		wantCalls int32
		check     func(t *testing.T, err error)
	}{
		{"success", nil, 0, true, 1, nil},
		{"duplicate: marker condition failed", []error{cancelled(outbox.ReasonConditionalCheckFailed, outbox.ReasonNone)}, 0, false, 1, nil},
		{"duplicate even when the effect also failed", []error{cancelled(outbox.ReasonConditionalCheckFailed, outbox.ReasonConditionalCheckFailed)}, 0, false, 1, nil},
		{"conflict then success", []error{conflict, conflict}, 5, true, 3, nil},
		{"conflict exhausted", []error{conflict, conflict, conflict}, 3, false, 3, func(t *testing.T, err error) {
			te, ok := outbox.AsTxError(err)
			if !ok || !te.Retryable() {
				t.Fatalf("want retryable TxError, got %v", err)
			}
		}},
		{"effect condition failed", []error{cancelled(outbox.ReasonNone, outbox.ReasonConditionalCheckFailed)}, 0, false, 1, func(t *testing.T, err error) {
			if i, ok := dedup.FailedEffect(err); !ok || i != 0 {
				t.Fatalf("FailedEffect = %d, %v; err %v", i, ok, err)
			}
			if !dedup.EffectConditionFailed(err, 0) {
				t.Fatal("EffectConditionFailed(err, 0) = false")
			}
		}},
		{"other error is not retried", []error{errors.New("boom")}, 5, false, 1, func(t *testing.T, err error) {
			if _, ok := outbox.AsTxError(err); ok || err == nil {
				t.Fatalf("want plain error, got %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeTx{script: tt.script}
			a := newApplier(t, f, dedup.Config{MaxAttempts: tt.attempts})
			eff := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("side"),
				Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "X"}}}}
			applied, err := a.Apply(context.Background(), testEnvelope(t, 1), []types.TransactWriteItem{eff})
			if applied != tt.applied {
				t.Fatalf("applied = %v, want %v (err %v)", applied, tt.applied, err)
			}
			if tt.check != nil {
				tt.check(t, err)
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got := f.calls.Load(); got != tt.wantCalls {
				t.Fatalf("calls = %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestApplyRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	f := &fakeTx{}
	a := newApplier(t, f, dedup.Config{})
	bad := testEnvelope(t, 1)
	bad.EventID = ""
	if _, err := a.Apply(context.Background(), bad, nil); !errors.Is(err, outbox.ErrInvalidEnvelope) {
		t.Fatalf("invalid envelope: err = %v", err)
	}
	// An effect on the marker's own item breaks "one action per item".
	env := testEnvelope(t, 1)
	same := types.TransactWriteItem{Update: &types.Update{TableName: aws.String("dedup"), Key: a.Key(env.EventID), UpdateExpression: aws.String("SET x = :x")}}
	if _, err := a.Apply(context.Background(), env, []types.TransactWriteItem{same}); !errors.Is(err, outbox.ErrDuplicateAction) {
		t.Fatalf("duplicate action: err = %v", err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("a request was sent")
	}
}

func TestDecodeEnvelope(t *testing.T) {
	t.Parallel()
	env := testEnvelope(t, 2)
	good, _ := json.Marshal(env)
	tests := []struct {
		name       string
		detailType string
		detail     string
		ok         bool
	}{
		{"valid", "OrderPaid", string(good), true},
		{"no detail-type is accepted", "", string(good), true},
		{"detail-type mismatch", "OrderShipped", string(good), false},
		{"empty detail", "OrderPaid", "", false},
		{"array detail", "OrderPaid", "[]", false},
		{"not json", "OrderPaid", "{nope", false},
		{"missing event_id", "OrderPaid", `{"event_type":"OrderPaid","event_version":1,"aggregate_type":"Order","aggregate_id":"o","sequence":1,"occurred_at":"2024-01-01T00:00:00Z","payload":{}}`, false},
		{"sequence zero", "OrderPaid", `{"event_id":"x","event_type":"OrderPaid","event_version":1,"aggregate_type":"Order","aggregate_id":"o","sequence":0,"occurred_at":"2024-01-01T00:00:00Z","payload":{}}`, false},
		{"sequence is a string", "OrderPaid", `{"event_id":"x","event_type":"OrderPaid","event_version":1,"aggregate_type":"Order","aggregate_id":"o","sequence":"1","occurred_at":"2024-01-01T00:00:00Z","payload":{}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := events.EventBridgeEvent{Version: "0", ID: "eb-1", DetailType: tt.detailType, Source: "com.ddb-outbox.orders", Detail: json.RawMessage(tt.detail)}
			got, err := dedup.DecodeEnvelope(ev)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok {
				if !errors.Is(err, dedup.ErrMalformedEvent) {
					t.Fatalf("err %v does not wrap ErrMalformedEvent", err)
				}
				return
			}
			if got.EventID != env.EventID || got.Sequence != 2 || !got.OccurredAt.Equal(env.OccurredAt) {
				t.Fatalf("decoded %+v", got)
			}
		})
	}
}

func TestCreateTableInput(t *testing.T) {
	t.Parallel()
	in := dedup.CreateTableInput("d")
	if aws.ToString(in.TableName) != "d" || len(in.KeySchema) != 1 || aws.ToString(in.KeySchema[0].AttributeName) != dedup.AttrPK ||
		in.BillingMode != types.BillingModePayPerRequest {
		t.Fatalf("unexpected table input %+v", in)
	}
	if dedup.TTLAttribute != "expires_at" {
		t.Fatalf("TTL attribute = %q", dedup.TTLAttribute)
	}
}
