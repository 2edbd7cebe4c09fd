package relay_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// FuzzStreamRecord feeds arbitrary bytes through the relay's decoding path
// as Lambda would: json.Unmarshal into events.DynamoDBEvent, then
// streamimage.ToAttributeValueMap and outbox.RecordFromItem on every image,
// then Relay.Handle with fakes. Properties: never a panic; a decoded image
// round-trips through FromAttributeValueMap unchanged; a decoded outbox
// record round-trips through Record.Item; Handle either fails the whole
// batch with an error or reports at most one batchItemFailures entry whose
// identifier is the non-empty SequenceNumber of a record of the batch.
// Seed corpus: testdata/fuzz/FuzzStreamRecord (events/samples/stream-batch.json
// and edge cases).
func FuzzStreamRecord(f *testing.F) {
	f.Add([]byte(`{"Records":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev events.DynamoDBEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return
		}
		if len(ev.Records) > 20 {
			ev.Records = ev.Records[:20]
		}
		seqs := map[string]bool{}
		for _, rec := range ev.Records {
			seqs[rec.Change.SequenceNumber] = true
			for _, img := range []map[string]events.DynamoDBAttributeValue{rec.Change.Keys, rec.Change.NewImage, rec.Change.OldImage} {
				item, err := streamimage.ToAttributeValueMap(img)
				if err != nil {
					continue
				}
				_, _ = streamimage.ToJSON(img)
				back, err := streamimage.FromAttributeValueMap(item)
				if err != nil {
					t.Fatalf("FromAttributeValueMap of a decoded image: %v", err)
				}
				again, err := streamimage.ToAttributeValueMap(back)
				if err != nil || !reflect.DeepEqual(again, item) {
					t.Fatalf("image does not round-trip: %v\n%#v\n%#v", err, item, again)
				}
				r, err := outbox.RecordFromItem(item)
				if err != nil {
					continue
				}
				r2, err := outbox.RecordFromItem(r.Item())
				if err != nil {
					t.Fatalf("record %+v does not re-decode: %v", r.Key, err)
				}
				if !reflect.DeepEqual(r2.Envelope, r.Envelope) || r2.Key != r.Key {
					t.Fatalf("record does not round-trip:\n%+v\n%+v", r.Envelope, r2.Envelope)
				}
			}
		}

		rl, err := relay.New(&fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rl.Handle(context.Background(), ev)
		if err != nil {
			return // the whole batch is retried: allowed
		}
		switch len(resp.BatchItemFailures) {
		case 0:
		case 1:
			id := resp.BatchItemFailures[0].ItemIdentifier
			if id == "" || !seqs[id] {
				t.Fatalf("itemIdentifier %q is not a sequence number of the batch", id)
			}
		default:
			t.Fatalf("%d batchItemFailures, want at most 1", len(resp.BatchItemFailures))
		}
	})
}
