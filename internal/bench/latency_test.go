package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// ByConsumer measures commit → applied per consumer, each over the events it
// applied (its first success only).
func TestApplyRecorderByConsumer(t *testing.T) {
	r := NewApplyRecorder()
	ic := r.Interceptor()
	ok := func(context.Context, events.EventBridgeEvent) error { return nil }
	ev := func(id string, age time.Duration) events.EventBridgeEvent {
		d, _ := json.Marshal(map[string]any{"event_id": id, "occurred_at": time.Now().Add(-age)})
		return events.EventBridgeEvent{Detail: d}
	}
	e1, e2 := ev("e1", time.Second), ev("e2", 3*time.Second)
	for _, c := range []struct {
		consumer string
		e        events.EventBridgeEvent
	}{{"ledger", e1}, {"notifier", e1}, {"notifier", e2}, {"notifier", e2}} {
		if err := ic(context.Background(), c.consumer, c.e, 1, ok); err != nil {
			t.Fatal(err)
		}
	}
	got := r.ByConsumer()
	if got["ledger"].N != 1 || got["notifier"].N != 2 {
		t.Fatalf("ByConsumer = %+v, want ledger 1 event, notifier 2", got)
	}
	if l := got["ledger"].P50; l < 900 || l > 1500 {
		t.Errorf("ledger p50 %.0f ms, want about 1000", l)
	}
	if n := got["notifier"].Max; n < 2900 || n > 3500 {
		t.Errorf("notifier max %.0f ms, want about 3000", n)
	}
}
