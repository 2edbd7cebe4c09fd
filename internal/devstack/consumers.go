package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
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
		MaximumMessageSize: sqsconsumer.MaxQueueMessageBytes, Store: store})
	if err != nil {
		return nil, err
	}
	q, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{
		Name:               opts.Prefix + "-" + name,
		VisibilityTimeout:  opts.ConsumerVisibilityTimeout,
		MaximumMessageSize: sqsconsumer.MaxQueueMessageBytes,
		Redrive:            &localrt.RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: opts.ConsumerMaxReceiveCount},
		Store:              store,
	})
	if err != nil {
		return nil, err
	}
	if types := opts.DeadLetterTypes[name]; len(types) > 0 {
		h = deadLetterTypes(name, types, h)
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
	var dlqSend sqsconsumer.MessageSender = dlq
	if opts.WrapConsumerDLQ != nil {
		dlqSend = opts.WrapConsumerDLQ(name, dlqSend)
	}
	handler, err := app.NewConsumerHandler(settings, name, sqsconsumer.EventHandler(h), consumerQueues{dlq: dlqSend, queue: q}, log.With("fn", name))
	if err != nil {
		return nil, fmt.Errorf("devstack: consumer %s: %w", name, err)
	}
	var sh localrt.SQSHandler = handler.Handle
	if opts.WrapConsumer != nil {
		sh = opts.WrapConsumer(name, sh)
	}
	p, err := localrt.NewSQSPoller(localrt.SQSPollerConfig{
		Queue: q, FunctionName: name, FunctionTimeout: opts.ConsumerFunctionTimeout,
		BatchSize: config.DefaultConsumerBatchSize, MaximumConcurrency: opts.ConsumerMaxConcurrency,
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
	dlq   sqsconsumer.MessageSender // the DLQ, through Options.WrapConsumerDLQ
	queue *localrt.SQSQueue
}

func (c consumerQueues) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return c.dlq.SendMessage(ctx, in, opts...)
}

func (c consumerQueues) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return c.queue.ChangeMessageVisibility(ctx, in, opts...)
}

// addSweeps creates the resequencer sweep schedule of every ordered
// consumer (a routing rule to it has Ordered): every Options.SweepEvery it
// sends the scheduled event to the consumer's queue, as the CDK stack's
// schedule rule with an SQS target does; the consumer sweeps its buffer on
// it (dedup.IsSweepTick).
func (s *Stack) addSweeps(opts Options, log *slog.Logger) error {
	s.Sweeps = map[string]*localrt.Scheduler{}
	s.stateConsumers = map[string]string{}
	s.StateTables = map[string]string{
		routing.ConsumerLedger:   s.Settings.LedgerTable,
		routing.ConsumerNotifier: s.Settings.NotificationsTable,
	}
	for _, r := range routing.Rules() {
		c, ok := s.Consumers[r.Consumer]
		if !r.Ordered || !ok || s.Sweeps[r.Consumer] != nil {
			continue
		}
		if err := s.addSweep(r.Consumer, c, opts, log); err != nil {
			return err
		}
	}
	return nil
}

// addSweep creates one ordered consumer's sweep schedule (started by
// Start, or at once when the stack runs: AddConsumer).
func (s *Stack) addSweep(name string, c *ConsumerPath, opts Options, log *slog.Logger) error {
	q := c.Queue
	sw, err := localrt.NewScheduler(localrt.SchedulerConfig{
		Interval: opts.SweepEvery, RuleName: name + "-resequencer-sweep", Logger: log.With("fn", "schedule", "consumer", name),
	}, func(ctx context.Context, ev events.EventBridgeEvent) error {
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(string(body))})
		return err
	})
	if err != nil {
		return fmt.Errorf("devstack: sweep schedule of %s: %w", name, err)
	}
	s.Sweeps[name] = sw
	if s.runCtx != nil {
		s.goRun(func() { _ = sw.Run(s.runCtx) })
	}
	return nil
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

// SweepNow sends every ordered consumer's queue a sweep tick at once (what
// its schedule does every Options.SweepEvery) and drains the stack, so
// what a crash left in a resequencer buffer is applied. It returns the
// first trigger or drain error.
func (s *Stack) SweepNow(ctx context.Context) error {
	for name, sw := range s.Sweeps {
		if err := sw.Trigger(ctx); err != nil {
			return fmt.Errorf("devstack: sweep tick for %s: %w", name, err)
		}
	}
	return s.Drain(ctx)
}

// StateConsumer is the consumer name consumer name's dedup state is keyed
// by: its own, or a lost consumer's it was restored from (LedgerSpec).
func (s *Stack) StateConsumer(name string) string {
	if c, ok := s.stateConsumers[name]; ok {
		return c
	}
	return name
}

// Buffered returns the events waiting in each ordered consumer's
// resequencer buffer (dedup.ListBuffered), by consumer name.
func (s *Stack) Buffered(ctx context.Context) (map[string][]dedup.BufferedEvent, error) {
	out := map[string][]dedup.BufferedEvent{}
	for name := range s.Sweeps {
		b, err := dedup.ListBuffered(ctx, s.DDB, s.StateTables[name], s.StateConsumer(name))
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

// deadLetterTypes refuses events of types for good (Options.DeadLetterTypes):
// sqsconsumer sends them to the consumer's DLQ at once with reason
// ReasonLocalFault; other events go to next.
func deadLetterTypes(consumer string, types []string, next localrt.EventHandler) localrt.EventHandler {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		if slices.Contains(types, ev.DetailType) {
			return sqsconsumer.Permanent(ReasonLocalFault, fmt.Errorf("%s refuses %s: the local stack's fault switch (outboxdev dev -dead-letter %s:%s)", consumer, ev.DetailType, consumer, ev.DetailType))
		}
		return next(ctx, ev)
	}
}
