package bench

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The fitted lognormal gives back the published p50 and p99, and a seeded
// sample has about that median.
func TestHopFitReproducesPublishedQuantiles(t *testing.T) {
	t.Parallel()
	h := DefaultCloudHops()
	for _, hop := range []*Hop{&h.Stream, &h.EventBridge, &h.SQS, &h.DynamoDB, &h.DynamoDBTransact} {
		if got := float64(hop.Quantile(0.5)) / 1e6; math.Abs(got-hop.P50Ms) > 0.01 {
			t.Errorf("%s: fitted p50 %.3f ms, published %.1f", hop.Name, got, hop.P50Ms)
		}
		if got := float64(hop.Quantile(0.99)) / 1e6; math.Abs(got-hop.P99Ms) > 0.01 {
			t.Errorf("%s: fitted p99 %.3f ms, published %.1f", hop.Name, got, hop.P99Ms)
		}
	}
	c := NewCloud(h)
	ms := make([]float64, 4000)
	for i := range ms {
		ms[i] = float64(c.hops.Stream.sample(c.rng)) / 1e6
	}
	if q := NewQuantiles(ms); math.Abs(q.P50-213)/213 > 0.05 || math.Abs(q.P99-552)/552 > 0.15 {
		t.Errorf("4,000 stream draws: p50 %.1f p99 %.1f, want about 213 / 552", q.P50, q.P99)
	}
}

func streamRecordJSON(t *testing.T, id string, at time.Time) json.RawMessage {
	t.Helper()
	r := events.DynamoDBEventRecord{EventName: "INSERT", Change: events.DynamoDBStreamRecord{NewImage: map[string]events.DynamoDBAttributeValue{
		outbox.AttrEventID:    events.NewStringAttribute(id),
		outbox.AttrOccurredAt: events.NewStringAttribute(at.Format(time.RFC3339Nano)),
	}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Records committed in one poll slot share a draw (due = commit + the
// slot's draw); a record of another slot gets its own; anything that is
// not an outbox INSERT is not held.
func TestCloudStreamHoldSharesADrawPerPollSlot(t *testing.T) {
	t.Parallel()
	c := NewCloud(DefaultCloudHops())
	base := time.Unix(1_700_000_000, 0) // on a 250 ms boundary
	a := c.deliverAt(streamRecordJSON(t, "a", base.Add(10*time.Millisecond)))
	b := c.deliverAt(streamRecordJSON(t, "b", base.Add(60*time.Millisecond)))
	if d1, d2 := a.Sub(base.Add(10*time.Millisecond)), b.Sub(base.Add(60*time.Millisecond)); d1 != d2 || d1 <= 0 {
		t.Fatalf("same slot: holds %v and %v, want one positive draw", d1, d2)
	}
	other := 0
	for i := 1; i <= 5; i++ {
		at := base.Add(time.Duration(i) * 250 * time.Millisecond)
		if c.deliverAt(streamRecordJSON(t, "x", at)).Sub(at) != a.Sub(base.Add(10*time.Millisecond)) {
			other++
		}
	}
	if other == 0 {
		t.Error("five other slots all got the first slot's draw")
	}
	if !c.deliverAt(json.RawMessage(`{"eventName":"MODIFY","dynamodb":{}}`)).IsZero() {
		t.Error("a MODIFY record is held")
	}
}

// Result splits an event's commit → applied into the injected hops, ours
// and the rest, with the last consumer's numbers.
func TestCloudResultSplitsAnEvent(t *testing.T) {
	t.Parallel()
	c := NewCloud(DefaultCloudHops())
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	c.ev["e"] = &cloudSpan{commit: t0, streamHop: 200 * time.Millisecond, relayStart: ms(210), published: ms(230),
		consumers: map[string]*consumerSpan{
			"early": {targetHop: 100 * time.Millisecond, start: ms(340), applied: ms(350), attempts: 1},
			"last":  {targetHop: 150 * time.Millisecond, start: ms(385), applied: ms(400), attempts: 1},
		}}
	c.callOf["e"] = callRef{id: 1, start: ms(225)}
	r := c.Result()
	// total 400; injected 200 + 150 = 350; ours (230−210) + (400−385) = 35;
	// rest 15 = stream side 10 + target side 385 − 225 − 150 = 10, minus the
	// 5 ms the PutEvents call overlapped its hop.
	if r.Events != 1 || r.Total.P50 != 400 || r.Injected.P50 != 350 || r.Ours.P50 != 35 || r.Rest.P50 != 15 {
		t.Fatalf("split %+v", r)
	}
	// predicted = injected + ours = 385; share 35 / 385 = 9.09 %.
	if r.Predicted.P50 != 385 || r.RestStream.P50 != 10 || r.RestTarget.P50 != 10 || r.OurShareP50Pct != 9.09 || r.TargetsPerEvent != 2 {
		t.Fatalf("stream rest %v, target rest %v, share %v, targets %v", r.RestStream.P50, r.RestTarget.P50, r.OurShareP50Pct, r.TargetsPerEvent)
	}
}

// The prediction per consumer, by hand, for the event of
// TestCloudResultSplitsAnEvent: stream 200 + relay (230 − 210) 20 + the
// consumer's hop + its first attempt → success: early 200 + 20 + 100 + 10 =
// 330, last 200 + 20 + 150 + 15 = 385 (the per-event prediction).
func TestCloudResultPredictsEachConsumer(t *testing.T) {
	t.Parallel()
	c := NewCloud(DefaultCloudHops())
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	c.ev["e"] = &cloudSpan{commit: t0, streamHop: 200 * time.Millisecond, relayStart: ms(210), published: ms(230),
		consumers: map[string]*consumerSpan{
			"early": {targetHop: 100 * time.Millisecond, start: ms(340), applied: ms(350), attempts: 1},
			"last":  {targetHop: 150 * time.Millisecond, start: ms(385), applied: ms(400), attempts: 1},
		}}
	r := c.Result()
	if got := r.PredictedByConsumer; got["early"].P99 != 330 || got["last"].P99 != 385 || got["last"].N != 1 {
		t.Errorf("per consumer %+v, want early 330 and last 385", got)
	}
}
