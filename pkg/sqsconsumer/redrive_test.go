package sqsconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The SDK client and the local queue both satisfy QueueAPI.
var (
	_ sqsconsumer.QueueAPI = (*sqs.Client)(nil)
	_ sqsconsumer.QueueAPI = (*localrt.SQSQueue)(nil)
)

// consumerQueues is a consumer queue whose redrive policy (maxReceiveCount 1)
// moves messages to dlq.
func consumerQueues(t *testing.T, name string, dlqCfg localrt.SQSQueueConfig) (q, dlq *localrt.SQSQueue) {
	t.Helper()
	dlqCfg.Name = name + "-dlq"
	dlq, err := localrt.NewSQSQueue(dlqCfg)
	if err != nil {
		t.Fatal(err)
	}
	q, err = localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: name, Redrive: &localrt.RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return q, dlq
}

// moveToDLQ sends body to q and lets the redrive policy move it to the DLQ:
// one receive (count 1 = maxReceiveCount), visibility reset, and the next
// receive moves it (SQS sqs-dead-letter-queues). It returns the MessageId.
func moveToDLQ(t *testing.T, q *localrt.SQSQueue, body string) string {
	t.Helper()
	ctx := context.Background()
	out, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return aws.ToString(out.MessageId)
}

// deadLetterPermanently runs body through a Handler whose handler fails
// permanently, so the Handler dead-letters it to dlq with a reason.
func deadLetterPermanently(t *testing.T, dlq *localrt.SQSQueue, id, body string) {
	t.Helper()
	h, err := sqsconsumer.New(func(context.Context, events.EventBridgeEvent) error {
		return sqsconsumer.Permanent("unsupported_version", errors.New("version 9"))
	}, sqsconsumer.Config{Name: "notifier", DLQ: dlq, DLQURL: dlq.URL(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: id, Body: body}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle: %v %+v", err, resp)
	}
}

// Peek lists the DLQ and leaves every message there, visible again at once
// (it resets each receive's visibility with ChangeMessageVisibility 0,
// API_ChangeMessageVisibility).
func TestPeekLeavesMessages(t *testing.T) {
	t.Parallel()
	q, dlq := consumerQueues(t, "peek", localrt.SQSQueueConfig{})
	moved := moveToDLQ(t, q, eventBody("moved"))
	deadLetterPermanently(t, dlq, "src-1", eventBody("forged"))
	if dlq.Len() != 2 {
		t.Fatalf("DLQ Len = %d, want 2", dlq.Len())
	}
	var seen int
	got, err := sqsconsumer.Peek(context.Background(), dlq, dlq.URL(), sqsconsumer.RedriveOptions{OnMessage: func(sqsconsumer.DeadLetter) { seen++ }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || seen != 2 {
		t.Fatalf("Peek returned %d (OnMessage %d), want 2", len(got), seen)
	}
	reasons := map[string]sqsconsumer.DeadLetter{}
	for _, d := range got {
		reasons[d.Reason] = d
	}
	if d := reasons[sqsconsumer.ReasonMaxReceiveCount]; d.MessageID != moved || d.Body != eventBody("moved") {
		t.Errorf("redrive-policy message %+v", d)
	}
	if d := reasons["unsupported_version"]; d.Body != eventBody("forged") || !strings.Contains(d.Error, "version 9") {
		t.Errorf("dead-lettered message %+v", d)
	}
	if v, i := dlq.Counts(); v != 2 || i != 0 {
		t.Fatalf("after Peek: %d visible, %d in flight; want 2 visible", v, i)
	}
	// Max bounds the listing.
	got, err = sqsconsumer.Peek(context.Background(), dlq, dlq.URL(), sqsconsumer.RedriveOptions{Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("Peek Max 1: %d, %v", len(got), err)
	}
	if v, _ := dlq.Counts(); v != 2 {
		t.Fatalf("after Peek Max 1: %d visible", v)
	}
}

// Redrive moves every DLQ message back to the consumer queue with its body
// unchanged, empties the DLQ and counts them; more than one receive batch
// (10, API_ReceiveMessage) is drained.
func TestRedriveMovesAll(t *testing.T) {
	t.Parallel()
	q, dlq := consumerQueues(t, "redrive", localrt.SQSQueueConfig{})
	var bodies []string
	for i := range 12 {
		b := eventBody(fmt.Sprintf("e%02d", i))
		bodies = append(bodies, b)
		moveToDLQ(t, q, b)
	}
	bodies = append(bodies, eventBody("forged"))
	deadLetterPermanently(t, dlq, "src-1", eventBody("forged"))
	if q.Len() != 0 || dlq.Len() != 13 {
		t.Fatalf("setup: queue %d DLQ %d", q.Len(), dlq.Len())
	}
	reasons := map[string]int{}
	n, err := sqsconsumer.Redrive(context.Background(), dlq, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{
		OnMessage: func(d sqsconsumer.DeadLetter) { reasons[d.Reason]++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 13 || dlq.Len() != 0 || q.Len() != 13 {
		t.Fatalf("Redrive moved %d; DLQ %d, queue %d; want 13, 0, 13", n, dlq.Len(), q.Len())
	}
	if reasons[sqsconsumer.ReasonMaxReceiveCount] != 12 || reasons["unsupported_version"] != 1 {
		t.Errorf("reasons %v", reasons)
	}
	out, err := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range out.Messages {
		got = append(got, aws.ToString(m.Body))
		if len(m.MessageAttributes) != 0 {
			t.Errorf("redriven message kept the DLQ attributes %v", m.MessageAttributes)
		}
	}
	for _, b := range got {
		if !slices.Contains(bodies, b) {
			t.Errorf("redriven body %q is not one of the originals", b)
		}
	}

	// Max bounds a redrive.
	q2, dlq2 := consumerQueues(t, "redrive-max", localrt.SQSQueueConfig{})
	for i := range 3 {
		moveToDLQ(t, q2, eventBody(fmt.Sprint(i)))
	}
	if n, err := sqsconsumer.Redrive(context.Background(), dlq2, dlq2.URL(), q2, q2.URL(), sqsconsumer.RedriveOptions{Max: 2}); n != 2 || err != nil || dlq2.Len() != 1 {
		t.Fatalf("Redrive Max 2: %d, %v, DLQ %d", n, err, dlq2.Len())
	}
}

// A message the target refuses stays on the DLQ, visible for the next run,
// and Redrive returns the error; the others are moved. Here the target's
// MaximumMessageSize (1,024 bytes) is smaller than the DLQ's (SQS answers
// InvalidParameterValue, API_SendMessage).
func TestRedriveTargetRefuses(t *testing.T) {
	t.Parallel()
	_, dlq := consumerQueues(t, "refuse", localrt.SQSQueueConfig{})
	small, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "refuse-small", MaximumMessageSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := `{"detail":"` + strings.Repeat("x", 2000) + `"}`
	for _, b := range []string{eventBody("a"), big, eventBody("b")} {
		if _, err := dlq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := sqsconsumer.Redrive(ctx, dlq, dlq.URL(), small, small.URL(), sqsconsumer.RedriveOptions{})
	var ae smithy.APIError
	if err == nil || !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
		t.Fatalf("Redrive error = %v, want the target's InvalidParameterValue", err)
	}
	if n != 2 || small.Len() != 2 {
		t.Fatalf("moved %d, target holds %d; want 2 and 2", n, small.Len())
	}
	if v, i := dlq.Counts(); v != 1 || i != 0 {
		t.Fatalf("DLQ: %d visible %d in flight; want the refused message visible", v, i)
	}
	left, err := sqsconsumer.Peek(ctx, dlq, dlq.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || len(left) != 1 || left[0].Body != big {
		t.Fatalf("left on the DLQ: %+v %v", left, err)
	}
}

// samplingQueue answers the first short poll (WaitTimeSeconds 0) with no
// messages although some are available, as SQS may: "With short polling,
// the ReceiveMessage request queries only a subset of the servers … If the
// number of messages in the queue is extremely small, you might not receive
// any messages from a particular ReceiveMessage request" (SQS Developer
// Guide, sqs-short-and-long-polling). Long polling queries all servers and
// has no false empty response.
type samplingQueue struct {
	*localrt.SQSQueue
	mu         sync.Mutex
	falseEmpty bool
}

func (s *samplingQueue) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.mu.Lock()
	first := !s.falseEmpty && in.WaitTimeSeconds == 0
	if first {
		s.falseEmpty = true
	}
	s.mu.Unlock()
	if first {
		return &sqs.ReceiveMessageOutput{}, nil
	}
	return s.SQSQueue.ReceiveMessage(ctx, in, o...)
}

// An empty response must not end a Peek or Redrive while messages remain:
// they receive with long polling.
func TestPeekAndRedriveSurviveFalseEmptyResponses(t *testing.T) {
	t.Parallel()
	q, dlq := consumerQueues(t, "sampling", localrt.SQSQueueConfig{})
	moveToDLQ(t, q, eventBody("a"))
	moveToDLQ(t, q, eventBody("b"))
	ctx := context.Background()
	got, err := sqsconsumer.Peek(ctx, &samplingQueue{SQSQueue: dlq}, dlq.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || len(got) != 2 {
		t.Fatalf("Peek listed %d messages (%v), want 2", len(got), err)
	}
	n, err := sqsconsumer.Redrive(ctx, &samplingQueue{SQSQueue: dlq}, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || n != 2 || dlq.Len() != 0 {
		t.Fatalf("Redrive moved %d (%v), DLQ %d; want 2 and an empty DLQ", n, err, dlq.Len())
	}
}
