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
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
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

// consumerRole is the consumer function's execution role id; its sessions
// ("<role id>:<function>") are the SenderId of what the consumer sends.
var consumerRole = localrt.FunctionRoleID("notifier")

// proven is the provenance of consumerQueues' dead letters: moved by the
// queue's redrive policy, or sent by the consumer's role.
func proven(q *localrt.SQSQueue) sqsconsumer.Provenance {
	return sqsconsumer.Provenance{SourceQueueARN: q.ARN(), SenderIDs: []string{consumerRole}}
}

// deadLetterPermanently runs body through a Handler whose handler fails
// permanently, so the Handler dead-letters it to dlq with a reason; the
// Handler runs as the consumer function's role session, as Lambda runs it.
func deadLetterPermanently(t *testing.T, dlq *localrt.SQSQueue, id, body string) {
	t.Helper()
	deadLetterAs(t, localrt.FunctionSenderID("notifier"), dlq, id, body)
}

// deadLetterAs is deadLetterPermanently by the principal sender.
func deadLetterAs(t *testing.T, sender string, dlq *localrt.SQSQueue, id, body string) {
	t.Helper()
	h, err := sqsconsumer.New(func(context.Context, events.EventBridgeEvent) error {
		return sqsconsumer.Permanent("unsupported_version", errors.New("version 9"))
	}, sqsconsumer.Config{Name: "notifier", DLQ: dlq, DLQURL: dlq.URL(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Handle(localrt.WithSenderID(context.Background(), sender), events.SQSEvent{Records: []events.SQSMessage{{MessageId: id, Body: body}}})
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
	res, err := sqsconsumer.Redrive(context.Background(), attrFilter{dlq}, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{
		From:      proven(q),
		OnMessage: func(d sqsconsumer.DeadLetter) { reasons[d.Reason]++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 13 || len(res.Left) != 0 || dlq.Len() != 0 || q.Len() != 13 {
		t.Fatalf("Redrive moved %d, left %v; DLQ %d, queue %d; want 13, none, 0, 13", res.Moved, res.Left, dlq.Len(), q.Len())
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
	if res, err := sqsconsumer.Redrive(context.Background(), dlq2, dlq2.URL(), q2, q2.URL(), sqsconsumer.RedriveOptions{Max: 2, From: proven(q2)}); res.Moved != 2 || err != nil || dlq2.Len() != 1 {
		t.Fatalf("Redrive Max 2: %+v, %v, DLQ %d", res, err, dlq2.Len())
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
		// sent by the consumer itself (its dead-letter path)
		if _, err := dlq.SendMessage(localrt.WithSenderID(ctx, localrt.FunctionSenderID("notifier")), &sqs.SendMessageInput{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := sqsconsumer.Redrive(ctx, dlq, dlq.URL(), small, small.URL(), sqsconsumer.RedriveOptions{From: sqsconsumer.Provenance{SenderIDs: []string{consumerRole}}})
	var ae smithy.APIError
	if err == nil || !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
		t.Fatalf("Redrive error = %v, want the target's InvalidParameterValue", err)
	}
	if res.Moved != 2 || small.Len() != 2 {
		t.Fatalf("moved %d, target holds %d; want 2 and 2", res.Moved, small.Len())
	}
	if len(res.Left) != 1 || res.Left[0].Body != big || !strings.Contains(res.Left[0].Why, "InvalidParameterValue") {
		t.Fatalf("reported left %+v, want the refused message with the target's error", res.Left)
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
	res, err := sqsconsumer.Redrive(ctx, &samplingQueue{SQSQueue: dlq}, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{From: proven(q)})
	if err != nil || res.Moved != 2 || dlq.Len() != 0 {
		t.Fatalf("Redrive moved %d (%v), DLQ %d; want 2 and an empty DLQ", res.Moved, err, dlq.Len())
	}
}

// attrFilter is a DLQ that, as SQS does, returns only the message system
// attributes a ReceiveMessage names in MessageSystemAttributeNames ("All"
// for every one; API_ReceiveMessage). The local queue returns them all.
type attrFilter struct{ *localrt.SQSQueue }

func (f attrFilter) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := f.SQSQueue.ReceiveMessage(ctx, in, o...)
	if err != nil {
		return out, err
	}
	named := map[string]bool{}
	for _, n := range in.MessageSystemAttributeNames {
		named[string(n)] = true
	}
	for i, m := range out.Messages {
		kept := map[string]string{}
		for k, v := range m.Attributes {
			if named["All"] || named[k] {
				kept[k] = v
			}
		}
		out.Messages[i].Attributes = kept
	}
	return out, nil
}

// TestRedriveLeavesPlantedMessages: a DLQ accepts SendMessage from any
// principal allowed it, so a message on it proves nothing by its body or
// message attributes. Redrive moves only what SQS's own system attributes
// prove came from the consumer — DeadLetterQueueSourceArn of its queue (the
// redrive policy moved it), or SenderId of its role (the consumer
// dead-lettered it) — and lists every other message with its sender,
// leaving it on the DLQ: a planted event dressed as a dead letter (every
// reason attribute forged) and a message another queue's redrive policy
// moved there are not laundered into the consumer queue.
func TestRedriveLeavesPlantedMessages(t *testing.T) {
	t.Parallel()
	q, dlq := consumerQueues(t, "planted", localrt.SQSQueueConfig{})
	ctx := context.Background()
	moveToDLQ(t, q, eventBody("moved"))
	deadLetterPermanently(t, dlq, "src-1", eventBody("dead-lettered"))
	const intruder = "AIDAINTRUDERUSERID001"
	if _, err := dlq.SendMessage(localrt.WithSenderID(ctx, intruder), &sqs.SendMessageInput{
		QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(eventBody("planted")),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			sqsconsumer.AttrReason:          {DataType: aws.String("String"), StringValue: aws.String("unsupported_version")},
			sqsconsumer.AttrConsumer:        {DataType: aws.String("String"), StringValue: aws.String("notifier")},
			sqsconsumer.AttrSourceMessageID: {DataType: aws.String("String"), StringValue: aws.String("src-9")},
		},
	}); err != nil {
		t.Fatal(err)
	}
	// Another principal's role session named like the consumer's function.
	deadLetterAs(t, "AROAOTHERROLEID000001:notifier", dlq, "src-2", eventBody("other-role"))
	// Another queue whose redrive policy names the same DLQ.
	other, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "planted-other", Redrive: &localrt.RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	moveToDLQ(t, other, eventBody("other-queue"))
	if dlq.Len() != 5 {
		t.Fatalf("setup: DLQ holds %d", dlq.Len())
	}

	// Without provenance nothing is moved.
	if _, err := sqsconsumer.Redrive(ctx, dlq, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{}); !errors.Is(err, sqsconsumer.ErrNoProvenance) {
		t.Fatalf("Redrive without provenance: %v, want ErrNoProvenance", err)
	}
	for _, bad := range []sqsconsumer.Provenance{{SourceQueueARN: q.URL()}, {SenderIDs: []string{" "}}} {
		if _, err := sqsconsumer.Redrive(ctx, dlq, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{From: bad}); err == nil {
			t.Errorf("Redrive with %+v: no error", bad)
		}
	}
	if dlq.Len() != 5 || q.Len() != 0 {
		t.Fatalf("a refused Redrive moved messages: DLQ %d, queue %d", dlq.Len(), q.Len())
	}

	var listed []sqsconsumer.LeftMessage
	res, err := sqsconsumer.Redrive(ctx, attrFilter{dlq}, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{
		From: proven(q), OnLeft: func(l sqsconsumer.LeftMessage) { listed = append(listed, l) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 2 || q.Len() != 2 {
		t.Fatalf("moved %d (queue holds %d), want the 2 proven messages", res.Moved, q.Len())
	}
	left := map[string]sqsconsumer.LeftMessage{}
	for _, l := range res.Left {
		left[l.Body] = l
	}
	if len(res.Left) != 3 || len(listed) != 3 {
		t.Fatalf("left %d (listed %d), want 3: %+v", len(res.Left), len(listed), res.Left)
	}
	if l := left[eventBody("planted")]; l.SenderID != intruder || !strings.Contains(l.Why, intruder) || l.Reason != "unsupported_version" {
		t.Errorf("planted message reported as %+v, want its sender %s", l, intruder)
	}
	if l := left[eventBody("other-role")]; !strings.Contains(l.Why, "AROAOTHERROLEID000001:notifier") {
		t.Errorf("other role's message reported as %+v", l)
	}
	if l := left[eventBody("other-queue")]; l.SourceQueueARN != other.ARN() || !strings.Contains(l.Why, other.ARN()) {
		t.Errorf("other queue's message reported as %+v", l)
	}
	// They stay on the DLQ, visible again; the consumer queue got only the
	// proven bodies.
	if v, i := dlq.Counts(); v != 3 || i != 0 {
		t.Fatalf("DLQ after Redrive: %d visible, %d in flight; want the 3 left visible", v, i)
	}
	out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		if b := aws.ToString(m.Body); b != eventBody("moved") && b != eventBody("dead-lettered") {
			t.Errorf("the consumer queue got %s", b)
		}
	}
	// Peek reports where each came from.
	got, err := sqsconsumer.Peek(ctx, attrFilter{dlq}, dlq.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || len(got) != 3 {
		t.Fatalf("Peek: %d, %v", len(got), err)
	}
	for _, d := range got {
		if d.From() == "sender unknown" {
			t.Errorf("Peek did not ask for SenderId: %+v", d)
		}
	}
}

// TestRedriveRepeatedBody is the report's input: 22 messages on the DLQ,
// two of them with one body (an SQS duplicate, or an event dead-lettered
// twice). The previous Redrive ended the run at the batch where the body
// repeated and reported success with 19 moved and 3 left; every message
// present when the run started is moved, whatever its body.
func TestRedriveRepeatedBody(t *testing.T) {
	t.Parallel()
	q, dlq := consumerQueues(t, "repeated", localrt.SQSQueueConfig{})
	for i := range 21 {
		moveToDLQ(t, q, eventBody(fmt.Sprintf("e%02d", i)))
	}
	moveToDLQ(t, q, eventBody("e07"))
	if dlq.Len() != 22 {
		t.Fatalf("setup: DLQ holds %d", dlq.Len())
	}
	res, err := sqsconsumer.Redrive(context.Background(), dlq, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{From: proven(q)})
	if err != nil || res.Moved != 22 || len(res.Left) != 0 || dlq.Len() != 0 || q.Len() != 22 {
		t.Fatalf("Redrive: moved %d, left %d (%v), DLQ %d, queue %d; want 22 moved, none left", res.Moved, len(res.Left), err, dlq.Len(), q.Len())
	}
}

// A message refused again at once comes back to the DLQ during the run (a
// new message, sent after the run started): it is left and reported, not
// moved again, so a run never loops; the messages present at the start are
// all moved. The consumer here refuses everything permanently, as a
// consumer whose cause is not fixed does.
func TestRedriveLeavesWhatComesBack(t *testing.T) {
	t.Parallel()
	q, dlq := consumerQueues(t, "back", localrt.SQSQueueConfig{})
	for i := range 12 {
		deadLetterPermanently(t, dlq, fmt.Sprint("src-", i), eventBody(fmt.Sprintf("b%02d", i)))
	}
	// The consumer: every message sent to its queue comes back to the DLQ
	// at once, dead-lettered by the consumer's role or moved by the queue's
	// redrive policy, in the same millisecond or not.
	bouncing := bounceQueue{SQSQueue: q, t: t, dlq: dlq, n: new(int)}
	res, err := sqsconsumer.Redrive(context.Background(), dlq, dlq.URL(), bouncing, q.URL(), sqsconsumer.RedriveOptions{From: proven(q)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 12 || len(res.Left) != 12 || dlq.Len() != 12 {
		t.Fatalf("moved %d, left %d, DLQ %d; want 12 moved, the 12 that came back left", res.Moved, len(res.Left), dlq.Len())
	}
	for _, l := range res.Left {
		if !strings.Contains(l.Why, "during this run") {
			t.Errorf("left %s: %s", l.MessageID, l.Why)
		}
	}
	if v, i := dlq.Counts(); v != 12 || i != 0 {
		t.Fatalf("DLQ %d visible, %d in flight; want the 12 visible again", v, i)
	}
}

// bounceQueue is a consumer queue (maxReceiveCount 1) whose consumer
// refuses every message sent to it at once: every other one is
// dead-lettered by the consumer (a new message naming its source in
// AttrSourceMessageID), the others fail until the redrive policy moves them
// (same MessageId).
type bounceQueue struct {
	*localrt.SQSQueue
	t   *testing.T
	dlq *localrt.SQSQueue
	n   *int
}

func (b bounceQueue) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := b.SQSQueue.SendMessage(ctx, in, o...)
	if err != nil {
		return out, err
	}
	*b.n++
	if *b.n%2 == 0 {
		deadLetterPermanently(b.t, b.dlq, aws.ToString(out.MessageId), aws.ToString(in.MessageBody))
		_, _ = b.SQSQueue.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: in.QueueUrl})
		return out, nil
	}
	for range 2 { // receive 1 = maxReceiveCount; the next receive moves it
		r, err := b.SQSQueue.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: in.QueueUrl, MaxNumberOfMessages: 10})
		if err != nil {
			b.t.Error(err)
		}
		for _, m := range r.Messages {
			_, _ = b.SQSQueue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: in.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		}
	}
	return out, nil
}
