package streamimage_test

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// BenchmarkDecodeOutboxNewImage measures what the relay does per stream
// record: convert a typical outbox NewImage (Lambda's shape) to SDK
// attribute values and decode it as an outbox record.
func BenchmarkDecodeOutboxNewImage(b *testing.B) {
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-7f3c2a90", Sequence: 3},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]any{
			"order_id": "o-7f3c2a90-1b2d-4e8f-9a61-3c5d7e9f1a2b", "customer_id": "c-42", "currency": "EUR", "total_cents": 12999,
			"lines": []map[string]any{{"sku": "SKU-1", "qty": 2, "price_cents": 4999}, {"sku": "SKU-2", "qty": 1, "price_cents": 3001}},
		}},
		outbox.Metadata{CorrelationID: "req-5d1e"})
	if err != nil {
		b.Fatal(err)
	}
	image, err := streamimage.FromAttributeValueMap(outbox.NewRecord(env, 0, 16).Item())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		item, err := streamimage.ToAttributeValueMap(image)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := outbox.RecordFromItem(item); err != nil {
			b.Fatal(err)
		}
	}
}
