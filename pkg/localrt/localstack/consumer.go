package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// DLQRetention is the retention of every DLQ the stack makes: 14 days, the
// SQS maximum (a DLQ keeps a message's first send time, so it must outlive
// the source queue's retention; SQS developer guide, dead-letter queues).
const DLQRetention = 14 * 24 * time.Hour

// ConsumerPath is one consumer's delivery path, as the consumer construct
// deploys it on AWS: the rule's SQS queue (redrive policy to DLQ after
// MaxReceiveCount receives), the Lambda SQS event source mapping (Poller,
// partial batch responses), and the handler behind it. Handler is the
// *sqsconsumer.Handler the path built around an event handler; nil when
// the caller gave its own SQS handler.
type ConsumerPath struct {
	Name    string
	Queue   *localrt.SQSQueue
	DLQ     *localrt.SQSQueue
	Poller  *localrt.SQSPoller
	Handler *sqsconsumer.Handler
}

// ConsumerQueues is what a consumer's handler calls on SQS: SendMessage on
// its DLQ (sqsconsumer's dead letters) and ChangeMessageVisibility on its
// queue (sqsconsumer's RetryDelay); one SQS client does both on AWS.
type ConsumerQueues struct {
	// DLQ receives the handler's dead letters (the DLQ, possibly wrapped
	// by the caller for fault injection).
	DLQ sqsconsumer.MessageSender
	// Queue is the consumer's queue.
	Queue *localrt.SQSQueue
}

// SendMessage sends to the DLQ.
func (c ConsumerQueues) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return c.DLQ.SendMessage(ctx, in, opts...)
}

// ChangeMessageVisibility changes a message's visibility on the queue.
func (c ConsumerQueues) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return c.Queue.ChangeMessageVisibility(ctx, in, opts...)
}

// PathConfig configures NewConsumerPath. Zero values take the defaults
// stated per field.
type PathConfig struct {
	// Name is the consumer's name (function name in logs and events).
	// Required.
	Name string
	// QueueName and DLQName name the queue and its DLQ (default Name and
	// Name + "-dlq").
	QueueName, DLQName string
	// FunctionTimeout is the consumer function's timeout, the handler's
	// context deadline (default config.DefaultConsumerTimeout, 30 s).
	FunctionTimeout time.Duration
	// VisibilityTimeout is the queue's visibility timeout (default
	// config.ConsumerVisibilityTimeoutFactor x FunctionTimeout, as the
	// construct sets it; never below FunctionTimeout, which Lambda refuses).
	VisibilityTimeout time.Duration
	// MaxReceiveCount is the queue's redrive maxReceiveCount (default
	// config.DefaultConsumerMaxReceiveCount).
	MaxReceiveCount int
	// MaxConcurrency is the event source mapping's MaximumConcurrency
	// (default config.DefaultConsumerMaxConcurrency).
	MaxConcurrency int
	// BatchSize is the event source mapping's batch size (default
	// config.DefaultConsumerBatchSize).
	BatchSize int
	// PollWait is each ReceiveMessage's long-poll wait (default 200 ms).
	PollWait time.Duration
	// Store, when set, keeps the queue's and the DLQ's messages across
	// restarts (localrt.SQSQueueConfig.Store).
	Store localrt.StateStore
	// Handler builds the SQS handler the event source mapping invokes,
	// given the path's queues (the DLQ through WrapDLQ). It returns the
	// handler and, when it built one, the *sqsconsumer.Handler behind it
	// (ConsumerPath.Handler). Required. EventHandler builds one around an
	// event handler.
	Handler func(q ConsumerQueues, dlqURL string) (localrt.SQSHandler, *sqsconsumer.Handler, error)
	// WrapDLQ, when set, wraps the DLQ the handler dead-letters to (fault
	// injection: a failing send). The queue's own redrive moves messages
	// without it, as SQS does.
	WrapDLQ func(sqsconsumer.MessageSender) sqsconsumer.MessageSender
	// WrapHandler, when set, wraps the SQS handler as the event source
	// mapping invokes it.
	WrapHandler func(localrt.SQSHandler) localrt.SQSHandler
	// Logger receives the path's logs (default: discarded).
	Logger *slog.Logger
}

// EventHandler returns a PathConfig.Handler running h behind
// sqsconsumer.New with the path's DLQ (permanent failures dead-lettered at
// once with their reason) and retries sooner than the visibility timeout
// (sqsconsumer.RetryDelays from retryBase, capped at maxDelay; zero values:
// 1 s and the queue's visibility timeout as the caller passes it).
func EventHandler(name string, h sqsconsumer.EventHandler, retryBase, maxDelay time.Duration, log *slog.Logger) func(ConsumerQueues, string) (localrt.SQSHandler, *sqsconsumer.Handler, error) {
	return func(q ConsumerQueues, dlqURL string) (localrt.SQSHandler, *sqsconsumer.Handler, error) {
		if retryBase <= 0 {
			retryBase = time.Second
		}
		if maxDelay <= 0 {
			maxDelay = q.Queue.VisibilityTimeout()
		}
		sh, err := sqsconsumer.New(h, sqsconsumer.Config{
			Name: name, DLQ: q, DLQURL: dlqURL, MaxMessageBytes: sqsconsumer.MaxQueueMessageBytes,
			RetryDelay: sqsconsumer.RetryDelays(retryBase, max(maxDelay, retryBase)), Queue: q, Logger: log,
		})
		if err != nil {
			return nil, nil, err
		}
		return sh.Handle, sh, nil
	}
}

// NewConsumerPath builds one consumer's queue, DLQ, handler and SQS event
// source mapping (not started: run ConsumerPath.Poller.Run). Every queue
// has a MaximumMessageSize of sqsconsumer.MaxQueueMessageBytes (1 MiB: an
// EventBridge event wrapping a 256 KB entry is larger than 256 KiB) and
// the DLQ a retention of DLQRetention. It returns an error for a missing
// Name or Handler, or what a queue, the handler or the poller refuses.
func NewConsumerPath(cfg PathConfig) (*ConsumerPath, error) {
	if cfg.Name == "" || cfg.Handler == nil {
		return nil, errors.New("localstack: consumer path needs a Name and a Handler")
	}
	if cfg.QueueName == "" {
		cfg.QueueName = cfg.Name
	}
	if cfg.DLQName == "" {
		cfg.DLQName = cfg.QueueName + "-dlq"
	}
	if cfg.FunctionTimeout <= 0 {
		cfg.FunctionTimeout = config.DefaultConsumerTimeout
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = config.ConsumerVisibilityTimeoutFactor * cfg.FunctionTimeout
	}
	cfg.VisibilityTimeout = max(cfg.VisibilityTimeout, cfg.FunctionTimeout)
	if cfg.MaxReceiveCount <= 0 {
		cfg.MaxReceiveCount = config.DefaultConsumerMaxReceiveCount
	}
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = config.DefaultConsumerMaxConcurrency
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = config.DefaultConsumerBatchSize
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 200 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: cfg.DLQName, RetentionPeriod: DLQRetention,
		MaximumMessageSize: sqsconsumer.MaxQueueMessageBytes, Store: cfg.Store})
	if err != nil {
		return nil, fmt.Errorf("localstack: consumer %s: %w", cfg.Name, err)
	}
	q, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{
		Name:               cfg.QueueName,
		VisibilityTimeout:  cfg.VisibilityTimeout,
		MaximumMessageSize: sqsconsumer.MaxQueueMessageBytes,
		Redrive:            &localrt.RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: cfg.MaxReceiveCount},
		Store:              cfg.Store,
	})
	if err != nil {
		return nil, fmt.Errorf("localstack: consumer %s: %w", cfg.Name, err)
	}
	var dlqSend sqsconsumer.MessageSender = dlq
	if cfg.WrapDLQ != nil {
		dlqSend = cfg.WrapDLQ(dlqSend)
	}
	sh, handler, err := cfg.Handler(ConsumerQueues{DLQ: dlqSend, Queue: q}, dlq.URL())
	if err != nil {
		return nil, fmt.Errorf("localstack: consumer %s: %w", cfg.Name, err)
	}
	if sh == nil {
		return nil, fmt.Errorf("localstack: consumer %s: the handler builder returned no handler", cfg.Name)
	}
	if cfg.WrapHandler != nil {
		sh = cfg.WrapHandler(sh)
	}
	p, err := localrt.NewSQSPoller(localrt.SQSPollerConfig{
		Queue: q, FunctionName: cfg.Name, FunctionTimeout: cfg.FunctionTimeout,
		BatchSize: cfg.BatchSize, MaximumConcurrency: cfg.MaxConcurrency,
		PollWait: cfg.PollWait, Logger: log.With("fn", "sqs-event-source-mapping", "consumer", cfg.Name),
	}, sh)
	if err != nil {
		return nil, fmt.Errorf("localstack: consumer %s: %w", cfg.Name, err)
	}
	return &ConsumerPath{Name: cfg.Name, Queue: q, DLQ: dlq, Poller: p, Handler: handler}, nil
}

// NewSweep returns the resequencer sweep schedule of an ordered consumer
// (not started: run it): every interval it sends the scheduled event
// (events.EventBridgeEvent, detail-type "Scheduled Event") to the
// consumer's queue, as the consumer construct's schedule rule with an SQS
// target does; the consumer sweeps its buffer on it (dedup.IsSweepTick).
// interval 0 takes config.ResequencerSweepInterval.
func NewSweep(consumer string, q *localrt.SQSQueue, interval time.Duration, log *slog.Logger) (*localrt.Scheduler, error) {
	if interval <= 0 {
		interval = config.ResequencerSweepInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sw, err := localrt.NewScheduler(localrt.SchedulerConfig{
		Interval: interval, RuleName: consumer + "-resequencer-sweep", Logger: log.With("fn", "schedule", "consumer", consumer),
	}, func(ctx context.Context, ev events.EventBridgeEvent) error {
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(string(body))})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("localstack: sweep schedule of %s: %w", consumer, err)
	}
	return sw, nil
}

// Quiet waits until the pipeline is quiet: the stream poller poller
// returns has read the stream to its end, every bus delivery has finished,
// every consumer queue is empty with no invocation running (messages that
// keep failing reach their DLQ after MaxReceiveCount visibility timeouts),
// twice in a row with no new record, event or deletion in between. poller
// is called on each round (a restarted poller is followed). It returns
// ctx's error, wrapped, on timeout.
func Quiet(ctx context.Context, poller func() *localrt.StreamPoller, bus *localrt.Bus, consumers func() []*ConsumerPath) error {
	last := int64(-1)
	for {
		p := poller()
		if err := p.WaitCaughtUp(ctx); err != nil {
			return fmt.Errorf("localstack: drain stream: %w", err)
		}
		if err := bus.WaitIdle(ctx); err != nil {
			return fmt.Errorf("localstack: drain bus: %w", err)
		}
		if err := waitConsumers(ctx, consumers()); err != nil {
			return err
		}
		st := p.Stats()
		seen := st.RecordsDelivered + st.RecordsFiltered + bus.Stats().Accepted
		for _, c := range consumers() {
			seen += c.Poller.Stats().Deleted + c.DLQ.Sent()
		}
		if seen == last {
			return nil
		}
		last = seen
	}
}

func waitConsumers(ctx context.Context, cs []*ConsumerPath) error {
	for {
		busy := false
		for _, c := range cs {
			if c.Queue.Len() > 0 || c.Poller.Busy() {
				busy = true
			}
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localstack: drain consumer queues: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
