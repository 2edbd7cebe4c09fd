package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// queues routes each call by QueueUrl, as one *sqs.Client serves every queue
// of an account: consumerDLQ gets a single client for the DLQ and the queue.
type queues map[string]*localrt.SQSQueue

func (qs queues) get(url *string) (*localrt.SQSQueue, error) {
	q, ok := qs[aws.ToString(url)]
	if !ok {
		return nil, &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue", Message: aws.ToString(url)}
	}
	return q, nil
}

func (qs queues) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	q, err := qs.get(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	return q.SendMessage(ctx, in, o...)
}

func (qs queues) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	q, err := qs.get(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	return q.ReceiveMessage(ctx, in, o...)
}

func (qs queues) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	q, err := qs.get(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	return q.DeleteMessage(ctx, in, o...)
}

func (qs queues) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	q, err := qs.get(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	return q.ChangeMessageVisibility(ctx, in, o...)
}

var _ sqsconsumer.QueueAPI = queues(nil)

// setup returns a consumer queue and its DLQ holding two messages: one with
// a reason attribute (dead-lettered by sqsconsumer) and one without (moved
// by the redrive policy).
func setup(t *testing.T) (queues, *localrt.SQSQueue, *localrt.SQSQueue) {
	t.Helper()
	dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "ledger-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, in := range []*sqs.SendMessageInput{
		{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(`{"detail":{"n":1}}`)},
		{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(`{"detail":{"n":2}}`), MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			sqsconsumer.AttrReason: {DataType: aws.String("String"), StringValue: aws.String("forged_source")},
			sqsconsumer.AttrError:  {DataType: aws.String("String"), StringValue: aws.String("source is not the outbox")},
		}},
	} {
		if _, err := dlq.SendMessage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	return queues{dlq.URL(): dlq, q.URL(): q}, q, dlq
}

// captureStdout runs f with os.Stdout redirected and returns what it wrote.
// Tests using it must not run in parallel.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old, oldErr := os.Stdout, os.Stderr
	os.Stdout = w
	devnull, _ := os.Open(os.DevNull)
	os.Stderr = devnull
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	defer func() { os.Stdout, os.Stderr = old, oldErr; _ = devnull.Close() }()
	f()
	_ = w.Close()
	return <-done
}

func TestConsumerDLQListsAndLeaves(t *testing.T) {
	qs, _, dlq := setup(t)
	var err error
	out := captureStdout(t, func() {
		err = consumerDLQ(context.Background(), "consumer-dlq", qs, dlq.URL(), "", 100, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %d lines, want one per message:\n%s", len(lines), out)
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{"dead-lettered\t", "\t" + sqsconsumer.ReasonMaxReceiveCount + "\t", "\tforged_source\tsource is not the outbox"} {
		if !strings.Contains(joined, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, l := range lines {
		if f := strings.Split(l, "\t"); len(f) != 4 || f[0] != "dead-lettered" || f[1] == "" {
			t.Errorf("line %q: want verb, message id, reason, error", l)
		}
	}
	if v, i := dlq.Counts(); v != 2 || i != 0 {
		t.Fatalf("consumer-dlq left %d visible, %d in flight; want 2 visible", v, i)
	}
}

func TestConsumerRedriveMoves(t *testing.T) {
	qs, q, dlq := setup(t)
	var err error
	out := captureStdout(t, func() {
		err = consumerDLQ(context.Background(), "consumer-redrive", qs, dlq.URL(), q.URL(), 100, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "redriven\t"); n != 2 {
		t.Fatalf("printed %d redriven lines, want 2:\n%s", n, out)
	}
	if dlq.Len() != 0 || q.Len() != 2 {
		t.Fatalf("DLQ %d, queue %d; want 0 and 2", dlq.Len(), q.Len())
	}
}

func TestConsumerDLQRequiresURLs(t *testing.T) {
	qs, q, dlq := setup(t)
	ctx := context.Background()
	tests := []struct{ cmd, dlq, queue, want string }{
		{"consumer-dlq", "", "", "-dlq is required"},
		{"consumer-redrive", "", q.URL(), "-dlq is required"},
		{"consumer-redrive", dlq.URL(), "", "-queue is required"},
	}
	for _, tc := range tests {
		out := captureStdout(t, func() {
			err := consumerDLQ(ctx, tc.cmd, qs, tc.dlq, tc.queue, 100, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s -dlq %q -queue %q: err = %v, want %q", tc.cmd, tc.dlq, tc.queue, err, tc.want)
			}
		})
		if out != "" {
			t.Errorf("%s: printed %q before refusing", tc.cmd, out)
		}
	}
	if dlq.Len() != 2 || q.Len() != 0 {
		t.Fatalf("a refused command moved messages: DLQ %d, queue %d", dlq.Len(), q.Len())
	}
}
