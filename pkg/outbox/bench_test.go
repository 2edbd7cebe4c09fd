package outbox_test

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// benchPayload is a typical OrderPlaced payload (about 200 bytes of JSON).
var benchPayload = map[string]any{
	"order_id":    "o-7f3c2a90-1b2d-4e8f-9a61-3c5d7e9f1a2b",
	"customer_id": "c-42",
	"currency":    "EUR",
	"total_cents": 12999,
	"lines": []map[string]any{
		{"sku": "SKU-1", "qty": 2, "price_cents": 4999},
		{"sku": "SKU-2", "qty": 1, "price_cents": 3001},
	},
}

func benchEnvelope(b *testing.B) outbox.Envelope {
	b.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-7f3c2a90", Sequence: 3},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: benchPayload},
		outbox.Metadata{CorrelationID: "req-5d1e", CausationID: "cmd-9a0b"})
	if err != nil {
		b.Fatal(err)
	}
	return env
}

// BenchmarkEnvelopeDetail measures encoding one envelope as the EventBridge
// Detail, the relay's per-event encoding cost.
func BenchmarkEnvelopeDetail(b *testing.B) {
	env := benchEnvelope(b)
	d, _ := env.Detail()
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := env.Detail(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordFromItem measures decoding a stored outbox item.
func BenchmarkRecordFromItem(b *testing.B) {
	item := outbox.NewRecord(benchEnvelope(b), 0, 16).Item()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := outbox.RecordFromItem(item); err != nil {
			b.Fatal(err)
		}
	}
}
