package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestUnsafeNumbersRefusedAtWriteTime: the contract is that every number a
// published detail holds lies within ±(2^53-1), so JavaScript, jq and other
// double-based parsers read what the producer wrote. NewEnvelope, Validate
// and Writer.Write refuse anything beyond (ErrUnsafeNumber, also
// ErrInvalidEnvelope) before a request is sent; values beyond must travel as
// strings.
func TestUnsafeNumbersRefusedAtWriteTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload any
		unsafe  bool
	}{
		{"issue input: bigInt 12345678901234567890", map[string]any{"bigInt": json.Number("12345678901234567890")}, true},
		{"2^53", map[string]any{"n": json.Number("9007199254740992")}, true},
		{"-(2^53)", map[string]any{"n": json.Number("-9007199254740992")}, true},
		{"int64 max as Go int64", map[string]any{"n": int64(1<<63 - 1)}, true},
		{"uint64 max", map[string]any{"n": uint64(1<<64 - 1)}, true},
		{"exponent 1e16", map[string]any{"n": json.Number("1e16")}, true},
		{"2^53 with a fraction spelling", map[string]any{"n": json.Number("9007199254740992.0")}, true},
		{"beyond by a half", map[string]any{"n": json.Number("9007199254740991.5")}, true},
		{"float64 1e300", map[string]any{"n": 1e300}, true},
		{"huge exponent", map[string]any{"n": json.Number("1e400")}, true},
		{"nested in an array", map[string]any{"lines": []any{map[string]any{"q": json.Number("1"), "id": json.Number("90071992547409930")}}}, true},
		{"as an object member deep down", map[string]any{"a": map[string]any{"b": map[string]any{"c": json.Number("-12345678901234567890")}}}, true},
		{"2^53-1", map[string]any{"n": json.Number("9007199254740991")}, false},
		{"-(2^53-1)", map[string]any{"n": int64(-(1<<53 - 1))}, false},
		{"2^53-1 with a fraction spelling", map[string]any{"n": json.Number("9007199254740991.0")}, false},
		{"order amount bound 1e15", map[string]any{"amount_minor": int64(1_000_000_000_000_000)}, false},
		{"small float", map[string]any{"n": 0.1, "m": json.Number("-1.5e-300")}, false},
		{"big integer carried as a string", map[string]any{"bigInt": "12345678901234567890"}, false},
		{"digits inside strings only", map[string]any{"s": "99999999999999999999", "t": []any{"1e400"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			agg := outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: 1}
			env, err := outbox.NewEnvelope(agg, outbox.Event{Type: "OrderPlaced", Version: 1, Payload: tt.payload}, outbox.Metadata{})
			if got := errors.Is(err, outbox.ErrUnsafeNumber); got != tt.unsafe {
				t.Fatalf("NewEnvelope err = %v, want unsafe=%v", err, tt.unsafe)
			}
			if tt.unsafe && !errors.Is(err, outbox.ErrInvalidEnvelope) {
				t.Fatalf("NewEnvelope err = %v, want it to wrap ErrInvalidEnvelope too", err)
			}
			if !tt.unsafe {
				if err != nil {
					t.Fatal(err)
				}
				detail, _ := env.Detail()
				var back map[string]any
				if err := json.Unmarshal(detail, &back); err != nil {
					t.Fatal(err)
				}
				return
			}
			// An envelope built by hand (not through NewEnvelope) is refused
			// by the writer before anything is sent.
			payload, err := json.Marshal(tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			hand := outbox.Envelope{EventID: "01900f7a-3b2c-7d4e-9f10-2a3b4c5d6e7f", EventType: "OrderPlaced", EventVersion: 1,
				AggregateType: "Order", AggregateID: "o-1", Sequence: 1, OccurredAt: time.Now().UTC(), Payload: payload}
			tx := &fakeTx{}
			w := newWriter(t, tx, outbox.WriterConfig{Source: "com.example.test"})
			err = w.Write(context.Background(), []types.TransactWriteItem{businessPut("a")}, []outbox.Envelope{hand})
			if !errors.Is(err, outbox.ErrUnsafeNumber) || tx.calls != 0 {
				t.Fatalf("Write err = %v after %d calls, want ErrUnsafeNumber before sending", err, tx.calls)
			}
		})
	}
}

// TestUnsafeEnvelopeNumbersRefused: the envelope's own integers (sequence,
// event_version) are held to the same bound.
func TestUnsafeEnvelopeNumbersRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		seq     int64
		version int
		unsafe  bool
	}{
		{"sequence 2^53", 1 << 53, 1, true},
		{"sequence int64 max", 1<<63 - 1, 1, true},
		{"event_version 2^53", 1, 1 << 53, true},
		{"sequence 2^53-1", 1<<53 - 1, 1, false},
		{"event_version 2^53-1", 1, 1<<53 - 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: tt.seq},
				outbox.Event{Type: "OrderPlaced", Version: tt.version, Payload: map[string]any{}}, outbox.Metadata{})
			if got := errors.Is(err, outbox.ErrUnsafeNumber); got != tt.unsafe || (!tt.unsafe && err != nil) {
				t.Fatalf("err = %v, want unsafe=%v", err, tt.unsafe)
			}
		})
	}
}
