package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// Only dedup marker Puts count as an apply: not a resequencer buffer item
// (pk "<consumer>#BUF#…"), not an outbox record, not an Update.
func TestMarkerAppliesReadsOnlyMarkers(t *testing.T) {
	t.Parallel()
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{Item: map[string]types.AttributeValue{"pk": s("ledger#e1"), "consumer": s("ledger"), "event_id": s("e1")}}},
		{Put: &types.Put{Item: map[string]types.AttributeValue{"pk": s("ledger#BUF#Order#o1#2"), "consumer": s("ledger"), "event_id": s("e2")}}},
		{Put: &types.Put{Item: map[string]types.AttributeValue{"pk": s("Order#o1"), "event_id": s("e3")}}},
		{Update: &types.Update{Key: map[string]types.AttributeValue{"pk": s("ledger#SEQ#Order#o1")}}},
	}}
	got := markerApplies(in)
	if len(got) != 1 || got[0] != (markerApply{"ledger", "e1"}) {
		t.Errorf("marker applies %+v, want only ledger/e1", got)
	}
	if markerApplies(&dynamodb.PutItemInput{}) != nil {
		t.Error("a PutItem counted as an apply")
	}
}

// An ordered consumer's resequencer acknowledges an early event when it has
// buffered it: commit → applied runs to its marker's commit (in its
// predecessor's invocation), not to the acknowledgement. A consumer without
// markers (fulfilment) is applied when its handler succeeds. A delivery
// acknowledged whose marker never committed is not applied.
func TestApplyRecorderAppliedIsTheMarkerCommit(t *testing.T) {
	t.Parallel()
	r := NewApplyRecorder()
	commit := time.Now().Add(-time.Second)
	detail := func(id string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"event_id": id, "occurred_at": commit})
		return b
	}
	ok := func(context.Context, events.EventBridgeEvent) error { return nil }
	in := r.Interceptor()
	for _, d := range []struct{ consumer, id string }{{"ledger", "e2"}, {"fulfilment", "e2"}, {"ledger", "e3"}} {
		if err := in(context.Background(), d.consumer, events.EventBridgeEvent{Detail: detail(d.id)}, 1, ok); err != nil {
			t.Fatal(err)
		}
	}
	// e2 buffered by the ledger, applied 5 s after its commit.
	r.markerCommitted("ledger", "e2", commit.Add(5*time.Second))
	by := r.ByConsumer()
	if got := by["ledger"]; got.N != 1 || got.P99 < 5000 || got.P99 > 5001 {
		t.Errorf("ledger %+v, want one event applied 5,000 ms after its commit (its marker), not at the acknowledgement", got)
	}
	if got := by["fulfilment"]; got.N != 1 || got.P99 < 1000 || got.P99 > 3000 {
		t.Errorf("fulfilment %+v, want its handler's success, about 1,000 ms", got)
	}
	st := r.Stats()
	if st.Events != 1 || st.NotApplied != 1 || st.Latency.P99 < 5000 {
		t.Errorf("stats %+v, want 1 event applied (at 5 s by its last consumer) and e3 not applied", st)
	}
	if got := r.LatencySamplesMs(); len(got) != 1 || got[0] < 5000 {
		t.Errorf("samples %v", got)
	}
}

// The AWS prediction of a consumer that writes markers runs to the marker's
// commit too: the ledger acknowledged e at 340 ms (buffered) and committed
// it at 600 ms: predicted 200 + 20 + 100 + (600 − 340) = 580 ms, counted as
// buffered, and left out of the one-run Lambda duration.
func TestCloudResultAppliedIsTheMarkerCommit(t *testing.T) {
	t.Parallel()
	c := NewCloud(DefaultCloudHops())
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	c.markerConsumers["ledger"] = true
	c.ev["e"] = &cloudSpan{commit: t0, streamHop: 200 * time.Millisecond, relayStart: ms(210), published: ms(230),
		consumers: map[string]*consumerSpan{
			"ledger":     {targetHop: 100 * time.Millisecond, start: ms(340), applied: ms(350), committed: ms(600), attempts: 1},
			"fulfilment": {targetHop: 150 * time.Millisecond, start: ms(385), applied: ms(400), attempts: 1},
		}}
	r := c.Result()
	if r.PredictedByConsumer["ledger"].P99 != 580 || r.PredictedByConsumer["fulfilment"].P99 != 385 {
		t.Errorf("per consumer %+v, want ledger 580 and fulfilment 385", r.PredictedByConsumer)
	}
	if r.Total.P50 != 600 || r.Buffered != 1 || r.Consumer.N != 1 {
		t.Errorf("total %v buffered %d one-run durations %d, want 600, 1, 1", r.Total.P50, r.Buffered, r.Consumer.N)
	}
}
