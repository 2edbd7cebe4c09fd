package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// ConsumerPath is one consumer's delivery path, as the CDK stack deploys it:
// the rule's SQS queue (redrive policy to DLQ after MaxReceiveCount
// receives), the SQS event source mapping, and the consumer behind
// sqsconsumer (which also dead-letters permanent failures to DLQ at once):
// the published local stack's (localstack.ConsumerPath).
type ConsumerPath = localstack.ConsumerPath

// DLQRetention is the consumer DLQs' retention: 14 days, the SQS maximum
// (localstack.DLQRetention).
const DLQRetention = localstack.DLQRetention

// newConsumerPath builds one consumer's path (localstack.NewConsumerPath)
// with the handler the Lambda main builds (app.NewConsumerHandler); store
// (nil: in memory) keeps its queue's and DLQ's messages across restarts.
func newConsumerPath(name string, h localrt.EventHandler, settings app.Settings, opts Options, store localrt.StateStore, log *slog.Logger) (*ConsumerPath, error) {
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
	cfg := localstack.PathConfig{
		Name: name, QueueName: opts.Prefix + "-" + name,
		FunctionTimeout: opts.ConsumerFunctionTimeout, VisibilityTimeout: opts.ConsumerVisibilityTimeout,
		MaxReceiveCount: opts.ConsumerMaxReceiveCount, MaxConcurrency: opts.ConsumerMaxConcurrency,
		Store: store, Logger: log,
		Handler: func(q localstack.ConsumerQueues, dlqURL string) (localrt.SQSHandler, *sqsconsumer.Handler, error) {
			// The handler the Lambda main builds, with this consumer's DLQ
			// URL as CONSUMER_DLQ_URL; retries come back after
			// ConsumerRetryBase doubling, capped at the queue's visibility
			// timeout, as on AWS.
			settings.ConsumerDLQURL = dlqURL
			settings.ConsumerRetryMax = opts.ConsumerVisibilityTimeout
			handler, err := app.NewConsumerHandler(settings, name, sqsconsumer.EventHandler(h), q, log.With("fn", name))
			if err != nil {
				return nil, nil, err
			}
			return handler.Handle, handler, nil
		},
	}
	if opts.WrapConsumerDLQ != nil {
		cfg.WrapDLQ = func(d sqsconsumer.MessageSender) sqsconsumer.MessageSender { return opts.WrapConsumerDLQ(name, d) }
	}
	if opts.WrapConsumer != nil {
		cfg.WrapHandler = func(sh localrt.SQSHandler) localrt.SQSHandler { return opts.WrapConsumer(name, sh) }
	}
	c, err := localstack.NewConsumerPath(cfg)
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	return c, nil
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
	sw, err := localstack.NewSweep(name, c.Queue, opts.SweepEvery, log)
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	s.Sweeps[name] = sw
	if s.runCtx != nil {
		s.goRun(func() { _ = sw.Run(s.runCtx) })
	}
	return nil
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
