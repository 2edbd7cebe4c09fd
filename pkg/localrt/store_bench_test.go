package localrt

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/localstate"
)

// benchStores runs f with no store (in memory, as before persistence) and
// with a state journal, side by side.
func benchStores(b *testing.B, f func(b *testing.B, store StateStore)) {
	b.Run("memory", func(b *testing.B) { f(b, nil) })
	b.Run("journal", func(b *testing.B) {
		j, err := localstate.Open(filepath.Join(b.TempDir(), "state"), localstate.Options{Binding: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		f(b, j)
	})
}

// BenchmarkSQSQueueMessageLifecycle is one consumer message's life on the
// hot path: SendMessage (a 1.5 KB event), ReceiveMessage, DeleteMessage.
func BenchmarkSQSQueueMessageLifecycle(b *testing.B) {
	benchStores(b, func(b *testing.B, store StateStore) {
		q, err := NewSQSQueue(SQSQueueConfig{Name: "bench", Store: store})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		body := aws.String(`{"detail":"` + strings.Repeat("x", 1500) + `"}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: body}); err != nil {
				b.Fatal(err)
			}
			out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL())})
			if err != nil || len(out.Messages) != 1 {
				b.Fatalf("receive: %v %v", out, err)
			}
			if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBusPutEventsToQueues is one relay PutEvents of one entry routed
// to three consumer queues (the stack's fan-out), delivered.
func BenchmarkBusPutEventsToQueues(b *testing.B) {
	benchStores(b, func(b *testing.B, store StateStore) {
		bus, err := NewBus(BusConfig{Name: testBus, Rules: testRules(), Logger: slog.New(slog.DiscardHandler), Store: store})
		if err != nil {
			b.Fatal(err)
		}
		var qs []*SQSQueue
		for _, c := range []string{testLedger, testNotifier, testFulfilment} {
			q, err := NewSQSQueue(SQSQueueConfig{Name: c, Store: store})
			if err != nil {
				b.Fatal(err)
			}
			bus.SubscribeQueue(c, q, q.URL())
			qs = append(qs, q)
		}
		ctx := context.Background()
		in := &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPaid, `{"event_id":"e","payload":"`+strings.Repeat("x", 1200)+`"}`)}}
		b.ReportAllocs()
		for b.Loop() {
			out, err := bus.PutEvents(ctx, in)
			if err != nil || out.FailedEntryCount != 0 {
				b.Fatalf("PutEvents: %v %+v", err, out)
			}
			if err := bus.WaitIdle(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		for _, q := range qs {
			_, _ = q.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(q.URL())})
		}
	})
}
