package localrt

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
)

// An EventBridge rule with an SQS target sends the matched event as the
// message body: the event JSON with version, id, detail-type, source,
// account, time, region, resources and detail (EventBridge user guide,
// eb-events-structure and eb-targets "Amazon SQS queues").
func TestBusSubscribeQueueDeliversEventJSON(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, nil)
	q := newTestSQSQueue(t, SQSQueueConfig{})
	b.SubscribeQueue(testNotifier, q, q.URL())
	detail := `{"event_id":"e1","order_id":"o1","total":12.5,"note":"caf\u00e9 \u2603"}`
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, detail)}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	waitIdle(t, b)
	msgs := receiveN(t, q, 10)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	body := aws.ToString(msgs[0].Body)
	if evs := b.Events(); len(evs) != 1 || body != string(evs[0]) {
		t.Fatalf("body %s is not the accepted event JSON %s", body, evs)
	}
	var ev struct {
		Version    string          `json:"version"`
		ID         string          `json:"id"`
		DetailType string          `json:"detail-type"`
		Source     string          `json:"source"`
		Detail     json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Version != "0" || ev.ID != aws.ToString(out.Entries[0].EventId) || ev.DetailType != testPlaced || ev.Source != testSource {
		t.Errorf("event %+v", ev)
	}
	var got, want map[string]any
	_ = json.Unmarshal(ev.Detail, &got)
	_ = json.Unmarshal([]byte(detail), &want)
	if gb, _ := json.Marshal(got); string(gb) != func() string { wb, _ := json.Marshal(want); return string(wb) }() {
		t.Errorf("detail %s, want %s", ev.Detail, detail)
	}
	if st := b.Stats(); st.Deliveries[testNotifier] != 1 || len(b.DeadLetters()) != 0 {
		t.Errorf("stats %+v dead letters %v", st, b.DeadLetters())
	}
}

// A detail holding U+FFFF is valid JSON and accepted by PutEvents, but SQS
// refuses the body (quotas-messages: InvalidMessageContents). The rule's
// target fails every attempt and the event is dead-lettered after the retry
// policy's attempts (EventBridge user guide, eb-rule-retry-policy and
// eb-rule-dlq).
func TestBusSubscribeQueueRefusedBodyIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, func(c *BusConfig) { c.TargetMaxAttempts = 3 })
	q := newTestSQSQueue(t, SQSQueueConfig{})
	b.SubscribeQueue(testNotifier, q, q.URL())
	detail := "{\"event_id\":\"e2\",\"note\":\"bad \uFFFF char\"}" // the raw character, not a JSON escape
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, detail)}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	waitIdle(t, b)
	if q.Len() != 0 {
		t.Fatalf("the queue accepted a body with U+FFFF")
	}
	dls := b.DeadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Consumer != testNotifier || dl.Attempts != 3 || !strings.Contains(dl.Error, "InvalidMessageContents") || dl.Event.ID != aws.ToString(out.Entries[0].EventId) {
		t.Errorf("dead letter %+v", dl)
	}
	if st := b.Stats(); st.Attempts[testNotifier] != 3 || st.Retries[testNotifier] != 2 ||
		st.DeadLettered[testNotifier] != 1 || st.Deliveries[testNotifier] != 0 {
		t.Errorf("stats %+v", st)
	}
}
