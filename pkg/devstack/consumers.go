package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/app"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsmsg"
)

// ConsumerPath is one consumer's delivery path, as the CDK stack deploys it:
// the rule's SQS queue (redrive policy to DLQ after MaxReceiveCount
// receives), the SQS event source mapping, and the consumer behind
// sqsconsumer (which also dead-letters permanent failures to DLQ at once).
type ConsumerPath struct {
	Name    string
	Queue   *localrt.SQSQueue
	DLQ     *localrt.SQSQueue
	Poller  *localrt.SQSPoller
	Handler *sqsconsumer.Handler
}

// DLQRetention is the consumer DLQs' retention: 14 days, the SQS maximum
// (a DLQ keeps a message's first send time, so it must outlive the source
// queue's retention).
const DLQRetention = 14 * 24 * time.Hour

// newConsumerPath builds one consumer's path; store (nil: in memory) keeps
// its queue's and DLQ's messages across restarts.
func newConsumerPath(name string, h localrt.EventHandler, settings app.Settings, opts Options, store localrt.StateStore, log *slog.Logger) (*ConsumerPath, error) {
	// Every queue of the CDK stack has a MaximumMessageSize of 1 MiB (an
	// EventBridge event wrapping a 256 KB entry is larger than 256 KiB).
	dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: opts.Prefix + "-" + name + "-dlq", RetentionPeriod: DLQRetention,
		MaximumMessageSize: sqsmsg.MaxMaxBytes, Store: store})
	if err != nil {
		return nil, err
	}
	q, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{
		Name:               opts.Prefix + "-" + name,
		VisibilityTimeout:  opts.ConsumerVisibilityTimeout,
		MaximumMessageSize: sqsmsg.MaxMaxBytes,
		Redrive:            &localrt.RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: opts.ConsumerMaxReceiveCount},
		Store:              store,
	})
	if err != nil {
		return nil, err
	}
	if opts.HopLog {
		h = hopConsumer(log.With("fn", name), name, h)
	}
	if ic := opts.ConsumerInterceptor; ic != nil {
		next := h
		h = func(ctx context.Context, ev events.EventBridgeEvent) error {
			attempt := 1
			if m, ok := sqsconsumer.MessageFromContext(ctx); ok {
				attempt = sqsconsumer.ReceiveCount(m)
			}
			return ic(ctx, name, ev, attempt, next)
		}
	}
	// The handler the Lambda main builds (app.NewConsumerHandler), with
	// this consumer's DLQ URL as CONSUMER_DLQ_URL.
	settings.ConsumerDLQURL = dlq.URL()
	// Retries come back after ConsumerRetryBase doubling, capped at the
	// queue's visibility timeout, as on AWS.
	settings.ConsumerRetryMax = opts.ConsumerVisibilityTimeout
	handler, err := app.NewConsumerHandler(settings, name, sqsconsumer.EventHandler(h), consumerQueues{dlq: dlq, queue: q}, log.With("fn", name))
	if err != nil {
		return nil, fmt.Errorf("devstack: consumer %s: %w", name, err)
	}
	var sh localrt.SQSHandler = handler.Handle
	if opts.WrapConsumer != nil {
		sh = opts.WrapConsumer(name, sh)
	}
	p, err := localrt.NewSQSPoller(localrt.SQSPollerConfig{
		Queue: q, FunctionName: name, FunctionTimeout: opts.ConsumerFunctionTimeout,
		PollWait: 200 * time.Millisecond, Logger: log.With("fn", "sqs-event-source-mapping", "consumer", name),
	}, sh)
	if err != nil {
		return nil, fmt.Errorf("devstack: consumer %s: %w", name, err)
	}
	return &ConsumerPath{Name: name, Queue: q, DLQ: dlq, Poller: p, Handler: handler}, nil
}

// consumerQueues is what a consumer's handler calls: SendMessage on its DLQ,
// ChangeMessageVisibility on its queue (one SQS client does both on AWS).
type consumerQueues struct {
	dlq, queue *localrt.SQSQueue
}

func (c consumerQueues) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return c.dlq.SendMessage(ctx, in, opts...)
}

func (c consumerQueues) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return c.queue.ChangeMessageVisibility(ctx, in, opts...)
}

// waitConsumers waits until every consumer queue is empty (messages that
// keep failing reach their DLQ after MaxReceiveCount visibility timeouts)
// and no consumer invocation runs.
func (s *Stack) waitConsumers(ctx context.Context) error {
	for {
		busy := false
		for _, c := range s.Consumers {
			if c.Queue.Len() > 0 || c.Poller.Busy() {
				busy = true
			}
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstack: drain consumer queues: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Stack) consumerDeletes() int64 {
	var n int64
	for _, c := range s.Consumers {
		n += c.Poller.Stats().Deleted + c.DLQ.Sent()
	}
	return n
}
