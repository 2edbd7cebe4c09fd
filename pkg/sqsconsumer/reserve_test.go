package sqsconsumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// With the default Reserve, a function shorter than 4 × DefaultReserve (a
// scaled-down local run, 1 s) keeps a quarter of its time, not 2 s: its
// messages are handled rather than all reported back unstarted.
func TestHandleDefaultReserveShrinksForShortFunctions(t *testing.T) {
	t.Parallel()
	var started []string
	h := newHandler(t, func(ctx context.Context, ev events.EventBridgeEvent) error {
		started = append(started, ev.ID)
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > 800*time.Millisecond {
			t.Errorf("handler deadline %v in %v, want at most three quarters of the second left", d, time.Until(d))
		}
		return nil
	}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: `{"version":"0","id":"e1","detail-type":"applied","source":"s","detail":{}}`},
		{MessageId: "m2", Body: `{"version":"0","id":"e2","detail-type":"applied","source":"s","detail":{}}`},
	}})
	if err != nil || len(resp.BatchItemFailures) != 0 || len(started) != 2 {
		t.Fatalf("resp %+v, err %v, started %v: want both handled", resp, err, started)
	}
}
