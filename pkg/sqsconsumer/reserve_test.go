package sqsconsumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

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

// loopingQueue is a DLQ whose every moved message comes straight back (a
// consumer still refusing it): a redrive must not loop.
type loopingQueue struct {
	bodies  []string
	handles int
	sends   int
}

func (q *loopingQueue) ReceiveMessage(_ context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out := &sqs.ReceiveMessageOutput{}
	for _, b := range q.bodies {
		q.handles++
		out.Messages = append(out.Messages, sqstypes.Message{MessageId: aws.String(fmt.Sprint(q.handles)), ReceiptHandle: aws.String(fmt.Sprint(q.handles)), Body: aws.String(b)})
	}
	return out, nil
}

func (q *loopingQueue) SendMessage(_ context.Context, _ *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	q.sends++
	return &sqs.SendMessageOutput{}, nil
}

func (q *loopingQueue) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return &sqs.DeleteMessageOutput{}, nil
}

func (q *loopingQueue) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func TestRedriveMovesEachBodyOncePerRun(t *testing.T) {
	t.Parallel()
	q := &loopingQueue{bodies: []string{`{"a":1}`, `{"b":2}`}}
	n, err := sqsconsumer.Redrive(context.Background(), q, "dlq", q, "queue", sqsconsumer.RedriveOptions{})
	if err != nil || n != 2 || q.sends != 2 {
		t.Fatalf("Redrive = %d, %v with %d sends; want each of the 2 bodies moved once and the run ended", n, err, q.sends)
	}
}
