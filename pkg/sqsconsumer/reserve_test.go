package sqsconsumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
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

func TestRetryDelays(t *testing.T) {
	t.Parallel()
	d := sqsconsumer.RetryDelays(2*time.Second, 15*time.Second)
	for n, want := range map[int]time.Duration{0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 4: 15 * time.Second, 50: 15 * time.Second} {
		if got := d(n, nil); got != want {
			t.Errorf("receive %d: %s, want %s", n, got, want)
		}
	}
}

func TestQueueURLFromARN(t *testing.T) {
	t.Parallel()
	for arn, want := range map[string]string{
		"arn:aws:sqs:us-east-1:000000000000:local-ledger": "https://sqs.us-east-1.amazonaws.com/000000000000/local-ledger",
		"arn:aws-cn:sqs:cn-north-1:123456789012:q":        "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q",
		"arn:aws:sns:us-east-1:000000000000:topic":        "",
		"not-an-arn":               "",
		"arn:aws:sqs:us-east-1::q": "",
	} {
		got, err := sqsconsumer.QueueURLFromARN(arn)
		if want == "" && err == nil || want != "" && got != want {
			t.Errorf("QueueURLFromARN(%q) = %q, %v; want %q", arn, got, err, want)
		}
	}
}
