package dedup_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

func TestCheckOrigin(t *testing.T) {
	t.Parallel()
	detail, _ := json.Marshal(testEnvelope(t, 1))
	tests := []struct {
		name            string
		cfg             dedup.ConsumerConfig
		source, account string
		want            error
		reason          string
	}{
		{"default source", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, testSource, "123456789012", nil, ""},
		{"forged source", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, "evil.example", "123456789012", dedup.ErrForeignSource, dedup.ReasonForeignSource},
		{"empty source", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, "", "123456789012", dedup.ErrForeignSource, dedup.ReasonForeignSource},
		{"source differs only in case", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, "COM.ddb-outbox.orders", "123456789012", dedup.ErrForeignSource, dedup.ReasonForeignSource},
		{"configured source", dedup.ConsumerConfig{ExpectedSource: "com.example.custom"}, "com.example.custom", "1", nil, ""},
		{"default source when another is configured", dedup.ConsumerConfig{ExpectedSource: "com.example.custom"}, testSource, "1", dedup.ErrForeignSource, dedup.ReasonForeignSource},
		{"account not checked when unset", dedup.ConsumerConfig{ExpectedSource: "com.example.test"}, testSource, "999999999999", nil, ""},
		{"expected account", dedup.ConsumerConfig{ExpectedSource: "com.example.test", ExpectedAccount: "123456789012"}, testSource, "123456789012", nil, ""},
		{"forged account", dedup.ConsumerConfig{ExpectedSource: "com.example.test", ExpectedAccount: "123456789012"}, testSource, "999999999999", dedup.ErrForeignAccount, dedup.ReasonForeignAccount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := events.EventBridgeEvent{ID: "eb-1", DetailType: "OrderPaid", Source: tt.source, AccountID: tt.account, Detail: detail}
			err := tt.cfg.CheckOrigin(ev)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("CheckOrigin = %v, want %v", err, tt.want)
			}
			env, derr := tt.cfg.Decode(ev)
			if (derr == nil) != (tt.want == nil) || !errors.Is(derr, tt.want) {
				t.Fatalf("Decode = %v, want %v", derr, tt.want)
			}
			if got := dedup.OriginReason(derr); got != tt.reason {
				t.Fatalf("OriginReason = %q, want %q", got, tt.reason)
			}
			if derr == nil && env.EventID == "" {
				t.Fatal("Decode returned no envelope")
			}
		})
	}
	bad := events.EventBridgeEvent{ID: "eb-2", Source: testSource, Detail: json.RawMessage(`[]`)}
	if _, err := (dedup.ConsumerConfig{ExpectedSource: "com.example.test"}).Decode(bad); !errors.Is(err, dedup.ErrMalformedEvent) || dedup.OriginReason(err) != dedup.ReasonMalformedEvent {
		t.Fatalf("malformed: %v", err)
	}
}

func TestNewConsumerExpectedAccount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		account string
		ok      bool
	}{{"", true}, {"123456789012", true}, {"12345678901", false}, {"12345678901x", false}, {"1234567890123", false}} {
		c, err := dedup.NewConsumer("ledger", &fakeTx{}, dedup.ConsumerConfig{ExpectedSource: "com.example.test", Table: "t", Dedup: dedup.Config{Table: "d"}, ExpectedAccount: tt.account}, 0, dedup.Unordered)
		if (err == nil) != tt.ok {
			t.Errorf("ExpectedAccount %q: err = %v, want ok=%v", tt.account, err, tt.ok)
		}
		if err == nil && c.Config.ExpectedSource != testSource {
			t.Errorf("ExpectedSource default = %q", c.Config.ExpectedSource)
		}
	}
}

// TestNewConsumerNeedsItsSource: the library has no default event source:
// a consumer without ExpectedSource is refused with a message saying what
// to give, and CheckOrigin with an empty one accepts nothing.
func TestNewConsumerNeedsItsSource(t *testing.T) {
	t.Parallel()
	_, err := dedup.NewConsumer("wallet", &fakeGetTx{}, dedup.ConsumerConfig{Table: "wallet"}, 0, dedup.Ordered)
	if err == nil || !strings.Contains(err.Error(), "ExpectedSource is required") {
		t.Fatalf("NewConsumer without ExpectedSource: %v", err)
	}
	ev := events.EventBridgeEvent{ID: "e", Source: ""}
	if err := (dedup.ConsumerConfig{}).CheckOrigin(ev); !errors.Is(err, dedup.ErrForeignSource) {
		t.Fatalf("CheckOrigin with no ExpectedSource: %v, want ErrForeignSource", err)
	}
}
