package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestHandleHoldsBackAnAggregateAfterAFailure: in one invocation, an
// aggregate whose event was not published stops there: its later events are
// neither sent nor marked, other aggregates flow, and the response names the
// first record not done, so on redelivery no consumer sees A seq3 before A
// seq2.
func TestHandleHoldsBackAnAggregateAfterAFailure(t *testing.T) {
	t.Parallel()
	a1, a2, a3 := envelope(t, "A", 1, 10), envelope(t, "A", 2, 10), envelope(t, "A", 3, 10)
	b1 := envelope(t, "B", 1, 10)
	names := map[string]string{a1.EventID: "A1", a2.EventID: "A2", a3.EventID: "A3", b1.EventID: "B1"}
	seqNo := map[string]string{"A1": "500000000000000000001", "A2": "500000000000000000002", "A3": "500000000000000000003", "B1": "500000000000000000004"}
	byName := map[string]outbox.Envelope{"A1": a1, "A2": a2, "A3": a3, "B1": b1}
	tests := []struct {
		name        string
		batch       []string // stream order
		code        string   // A2's error code, every attempt
		wantSent    []string // published (accepted) events
		wantNotSent []string
		wantMarked  []string // PUBLISHED or PARKED
		wantReport  string   // the record named in batchItemFailures
	}{
		{"A2 throttled for good", []string{"A1", "A2", "A3", "B1"}, "ThrottlingException",
			[]string{"A1", "B1"}, []string{"A3"}, []string{"A1", "B1"}, "A2"},
		{"stream order differs from sequence order", []string{"A3", "B1", "A2", "A1"}, "InternalFailure",
			[]string{"A1", "B1"}, []string{"A3"}, []string{"A1", "B1"}, "A3"},
		{"A2 permanent: parked, A3 flows", []string{"A1", "A2", "A3", "B1"}, "MalformedDetail",
			[]string{"A1", "A3", "B1"}, nil, []string{"A1", "A2", "A3", "B1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ev events.DynamoDBEvent
			for _, n := range tt.batch {
				ev.Records = append(ev.Records, insertRecord(t, byName[n], seqNo[n]))
			}
			eb := &fakeEventBridge{fail: func(id string, _ int) string {
				if id == a2.EventID {
					return tt.code
				}
				return ""
			}}
			f := newRelay(t, eb, &fakeDDB{}, &fakeSQS{})
			resp, err := f.r.Handle(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			var accepted []string
			for _, c := range eb.calls {
				for _, e := range c {
					if n := names[detailEventID(e)]; n != "A2" {
						accepted = append(accepted, n)
					}
				}
			}
			if fmt.Sprint(sorted(accepted)) != fmt.Sprint(sorted(tt.wantSent)) {
				t.Errorf("published %v, want %v", accepted, tt.wantSent)
			}
			for _, n := range tt.wantNotSent {
				if eb.sent()[byName[n].EventID] != 0 {
					t.Errorf("%s was sent while an earlier event of its aggregate was not published", n)
				}
			}
			var marked []string
			for _, u := range f.ddb.updates {
				pk := u.Key[outbox.AttrPK].(*ddbtypes.AttributeValueMemberS).Value
				sk := u.Key[outbox.AttrSK].(*ddbtypes.AttributeValueMemberS).Value
				for n, e := range byName {
					if k := outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0); k.PK == pk && k.SK == sk {
						marked = append(marked, n)
					}
				}
			}
			if fmt.Sprint(sorted(marked)) != fmt.Sprint(sorted(tt.wantMarked)) {
				t.Errorf("marked %v, want %v", marked, tt.wantMarked)
			}
			var want []events.DynamoDBBatchItemFailure
			if tt.wantReport != "" {
				want = []events.DynamoDBBatchItemFailure{{ItemIdentifier: seqNo[tt.wantReport]}}
			}
			if fmt.Sprint(resp.BatchItemFailures) != fmt.Sprint(want) {
				t.Errorf("batchItemFailures %+v, want %+v", resp.BatchItemFailures, want)
			}
		})
	}
}

// TestPublishInOrderWaves: wave k carries each aggregate's k-th event, so
// PutEvents calls never hold two events of one aggregate, and a held-back
// event says why.
func TestPublishInOrderWaves(t *testing.T) {
	t.Parallel()
	var envs []outbox.Envelope
	for seq := int64(3); seq >= 1; seq-- { // given newest first
		for _, id := range []string{"A", "B"} {
			envs = append(envs, envelope(t, id, seq, 10))
		}
	}
	envs = append(envs, envelope(t, "C", 1, 10))
	blocked := envs[3] // B seq 2
	eb := &fakeEventBridge{fail: func(id string, _ int) string {
		if id == blocked.EventID {
			return "ThrottlingException"
		}
		return ""
	}}
	p := newPublisher(t, eb, func(c *relay.PublisherConfig) { c.MaxAttempts = 2 })
	res := p.PublishInOrder(context.Background(), envs, nil)
	for i, e := range envs {
		want := relay.Published
		if e.AggregateID == "B" && e.Sequence >= 2 {
			want = relay.RetryableFailure
		}
		if res[i].Status != want {
			t.Errorf("%s seq %d: %v %s, want %v", e.AggregateID, e.Sequence, res[i].Status, res[i].ErrorCode, want)
		}
	}
	if r := res[1]; r.ErrorCode != relay.CodeHeldBack || !strings.Contains(r.ErrorMessage, blocked.EventID) {
		t.Errorf("B seq 3: %+v, want held back naming %s", r, blocked.EventID)
	}
	// Waves: {A1,B1,C1}, {A2,B2}, retry {B2}, {A3}.
	var waves []string
	for _, c := range eb.calls {
		var ids []string
		agg := map[string]bool{}
		for _, e := range c {
			var env outbox.Envelope
			for _, x := range envs {
				if x.EventID == detailEventID(e) {
					env = x
				}
			}
			if agg[env.AggregateID] {
				t.Errorf("one call carries two events of %s", env.AggregateID)
			}
			agg[env.AggregateID] = true
			ids = append(ids, fmt.Sprint(env.AggregateID, env.Sequence))
		}
		waves = append(waves, strings.Join(sorted(ids), "+"))
	}
	if got, want := strings.Join(waves, " "), "A1+B1+C1 A2+B2 B2 A3"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestPublishInOrderCalls states the cost of per-aggregate order in
// PutEvents calls for a stream batch of 100 small events of equal-length
// aggregates: free while no aggregate has more than 10 events in the
// batch, one call per event when all 100 are one aggregate's (mixed
// lengths: TestPublishInOrderPacksPartialWaves).
func TestPublishInOrderCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		aggregates, each int
		wantCalls        int
	}{
		{100, 1, 10},
		{50, 2, 10},
		{10, 10, 10},
		{5, 20, 20},
		{1, 100, 100},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%dx%d", tt.aggregates, tt.each), func(t *testing.T) {
			t.Parallel()
			var envs []outbox.Envelope
			for a := range tt.aggregates {
				for s := range tt.each {
					envs = append(envs, envelope(t, fmt.Sprint("g", a), int64(s+1), 10))
				}
			}
			eb := &fakeEventBridge{}
			for i, r := range newPublisher(t, eb, nil).PublishInOrder(context.Background(), envs, nil) {
				if r.Status != relay.Published {
					t.Fatalf("event %d: %+v", i, r)
				}
			}
			if eb.callCount() != tt.wantCalls {
				t.Errorf("PutEvents calls %d, want %d", eb.callCount(), tt.wantCalls)
			}
		})
	}
}
