package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSHandler is a Lambda handler for an SQS event source mapping with
// ReportBatchItemFailures: the shape of sqsconsumer.Handler.Handle.
type SQSHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// SQSReceiveAPI is what the SQS event source mapping calls on its queue, with
// the SDK's exact signatures; *SQSQueue and *sqs.Client satisfy it.
type SQSReceiveAPI interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, params *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// SQS event source mapping limits (Lambda developer guide, with-sqs and
// services-sqs-parameters).
const (
	// DefaultSQSBatchSize is the default BatchSize, 10.
	DefaultSQSBatchSize = 10
	// MaxSQSBatchSizeNoWindow is the BatchSize limit without a batching
	// window: 10. With MaximumBatchingWindowInSeconds >= 1, up to 10,000.
	MaxSQSBatchSizeNoWindow = 10
	MaxSQSBatchSize         = 10000
	// MinSQSMaximumConcurrency and MaxSQSMaximumConcurrency bound
	// ScalingConfig.MaximumConcurrency (2..1000).
	MinSQSMaximumConcurrency = 2
	MaxSQSMaximumConcurrency = 1000
)

// SQSPollerConfig configures an SQSPoller, mirroring a Lambda SQS event
// source mapping. Zero values take the defaults stated per field.
type SQSPollerConfig struct {
	// Queue is the source queue. Required. QueueURL and QueueARN name it
	// (taken from Queue when it is an *SQSQueue).
	Queue    SQSReceiveAPI
	QueueURL string
	QueueARN string
	// QueueVisibilityTimeout is the queue's visibility timeout; Lambda
	// refuses a mapping whose function timeout exceeds it (taken from Queue
	// when it is an *SQSQueue).
	QueueVisibilityTimeout time.Duration
	// BatchSize is the most messages per invocation: default 10, 1..10
	// without a batching window, up to 10,000 with one.
	BatchSize int
	// MaxBatchingWindow gathers messages up to this long before invoking
	// (default 0; at most 300 s).
	MaxBatchingWindow time.Duration
	// MaximumConcurrency bounds concurrent invocations (default 2, 2..1000).
	MaximumConcurrency int
	// ReportBatchItemFailures enables partial batch responses (nil = true).
	ReportBatchItemFailures *bool
	// FunctionTimeout is the function's timeout: the handler's context
	// deadline; a response after it is discarded and the batch fails
	// (default config.DefaultConsumerTimeout's 30 s).
	FunctionTimeout time.Duration
	// PollWait is the long-poll wait of each ReceiveMessage (default 1 s;
	// Lambda uses 20 s, shortened locally so Close is quick).
	PollWait time.Duration
	// Region and FunctionName fill the event and logs (defaults us-east-1,
	// "consumer").
	Region       string
	FunctionName string
	// Logger receives the poller's logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *SQSPollerConfig) setDefaults() {
	if q, ok := c.Queue.(*SQSQueue); ok {
		if c.QueueURL == "" {
			c.QueueURL = q.URL()
		}
		if c.QueueARN == "" {
			c.QueueARN = q.ARN()
		}
		if c.QueueVisibilityTimeout == 0 {
			c.QueueVisibilityTimeout = q.VisibilityTimeout()
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultSQSBatchSize
	}
	if c.MaximumConcurrency == 0 {
		c.MaximumConcurrency = MinSQSMaximumConcurrency
	}
	if c.ReportBatchItemFailures == nil {
		c.ReportBatchItemFailures = aws.Bool(true)
	}
	if c.FunctionTimeout == 0 {
		c.FunctionTimeout = DefaultFunctionTimeout
	}
	if c.PollWait == 0 {
		c.PollWait = time.Second
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.FunctionName == "" {
		c.FunctionName = "consumer"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first setting Lambda would refuse.
func (c *SQSPollerConfig) Validate() error {
	switch {
	case c.Queue == nil || c.QueueURL == "":
		return errors.New("localrt: SQSPollerConfig needs Queue and QueueURL")
	case c.BatchSize < 1 || c.BatchSize > MaxSQSBatchSize || c.MaxBatchingWindow < time.Second && c.BatchSize > MaxSQSBatchSizeNoWindow:
		return fmt.Errorf("localrt: SQS BatchSize %d: 1..10 without a batching window, up to 10,000 with one of at least 1 s", c.BatchSize)
	case c.MaxBatchingWindow < 0 || c.MaxBatchingWindow > 300*time.Second:
		return fmt.Errorf("localrt: MaxBatchingWindow %s is outside 0..300s", c.MaxBatchingWindow)
	case c.MaximumConcurrency < MinSQSMaximumConcurrency || c.MaximumConcurrency > MaxSQSMaximumConcurrency:
		return fmt.Errorf("localrt: MaximumConcurrency %d is outside %d..%d", c.MaximumConcurrency, MinSQSMaximumConcurrency, MaxSQSMaximumConcurrency)
	case c.FunctionTimeout < time.Millisecond:
		return errors.New("localrt: FunctionTimeout must be positive")
	case c.QueueVisibilityTimeout > 0 && c.FunctionTimeout > c.QueueVisibilityTimeout:
		// Lambda: "Queue visibility timeout: N seconds is less than Function timeout: M seconds".
		return fmt.Errorf("localrt: InvalidParameterValueException: queue visibility timeout %s is less than function timeout %s", c.QueueVisibilityTimeout, c.FunctionTimeout)
	}
	return nil
}

// SQSPollerStats counts what an SQSPoller did.
type SQSPollerStats struct {
	Invocations      int64
	Messages         int64 // messages delivered (a redelivery counts again)
	Deleted          int64 // messages acknowledged (deleted after the invocation)
	FunctionErrors   int64 // invocations that returned an error or panicked
	Timeouts         int64 // invocations whose answer came after the deadline
	PartialResponses int64 // invocations that reported some failures
	InvalidResponses int64 // partial responses with an empty, null or unknown id
	ReportedFailures int64 // messages named in valid partial responses
}

// SQSPoller emulates a Lambda SQS event source mapping:
//
//   - up to MaximumConcurrency concurrent invocations, each of a batch of
//     up to BatchSize messages received from the queue (long polling);
//   - the handler gets the events.SQSEvent decoded from the JSON Lambda
//     sends ({"Records":[{"messageId","receiptHandle","body","attributes",
//     "messageAttributes","md5OfBody","eventSource":"aws:sqs",
//     "eventSourceARN","awsRegion"}]}) and a context whose deadline is the
//     function timeout;
//   - success deletes every message; a returned error, a panic, or an answer
//     after the deadline (a timeout: Lambda discards it) deletes none — the
//     messages return after the queue's visibility timeout;
//   - with ReportBatchItemFailures, the messages named by messageId in
//     batchItemFailures stay and the rest are deleted; an empty, null or
//     unknown itemIdentifier fails the whole batch (Lambda developer guide,
//     "Handling errors for an SQS event source": an invalid response is a
//     complete failure);
//   - the queue's own redrive policy moves a message to its DLQ after
//     maxReceiveCount receives.
//
// Not modelled: Lambda's scaling of pollers (concurrency is at
// MaximumConcurrency from the start), throttled invocations, the 6 MB
// payload limit, and FIFO queues.
type SQSPoller struct {
	cfg     SQSPollerConfig
	h       SQSHandler
	log     *slog.Logger
	mu      sync.Mutex
	stats   SQSPollerStats
	running int
	idle    chan struct{}
}

// NewSQSPoller returns a poller invoking h, or an error for a configuration
// Lambda would refuse.
func NewSQSPoller(cfg SQSPollerConfig, h SQSHandler) (*SQSPoller, error) {
	cfg.setDefaults()
	if h == nil {
		return nil, errors.New("localrt: nil SQS handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &SQSPoller{cfg: cfg, h: h, log: cfg.Logger.With("component", "sqs-event-source-mapping", "function", cfg.FunctionName)}, nil
}

// Run polls until ctx ends; it returns nil then. The invocations running
// when ctx ends are cut short: their messages come back after their
// visibility timeout.
func (p *SQSPoller) Run(ctx context.Context) error { return p.RunUntil(ctx, ctx) }

// RunUntil polls until stop ends and invokes the handler under ctx; once
// stop ends it lets the running invocations finish (their messages are
// deleted or returned as their responses say), as a disabled event source
// mapping does, and returns nil. ctx ending cuts them short, as Run does.
func (p *SQSPoller) RunUntil(stop, ctx context.Context) error {
	var wg sync.WaitGroup
	for range p.cfg.MaximumConcurrency {
		wg.Add(1)
		go func() { defer wg.Done(); p.worker(stop, ctx) }()
	}
	wg.Wait()
	return nil
}

func (p *SQSPoller) worker(stop, ctx context.Context) {
	for stop.Err() == nil && ctx.Err() == nil {
		batch := p.gather(stop)
		if len(batch) == 0 {
			continue
		}
		p.setRunning(+1)
		p.invoke(ctx, batch)
		p.setRunning(-1)
	}
}

// gather receives up to BatchSize messages: one long poll, then, with a
// batching window, more receives until the window ends or the batch is full.
func (p *SQSPoller) gather(ctx context.Context) []sqstypes.Message {
	var batch []sqstypes.Message
	var windowEnd time.Time
	for {
		n := min(p.cfg.BatchSize-len(batch), MaxReceiveBatch)
		wait := p.cfg.PollWait
		if !windowEnd.IsZero() {
			wait = time.Until(windowEnd)
			if wait <= 0 {
				return batch
			}
		}
		out, err := p.cfg.Queue.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(p.cfg.QueueURL),
			MaxNumberOfMessages:         int32(n), //nolint:gosec // G115: n <= MaxReceiveBatch (10)
			WaitTimeSeconds:             int32(max(1, min(20, int(wait.Round(time.Second)/time.Second)))),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("ReceiveMessage failed", "error", err)
				sleepCtx(ctx, 100*time.Millisecond)
			}
			return batch
		}
		batch = append(batch, out.Messages...)
		if len(batch) >= p.cfg.BatchSize || p.cfg.MaxBatchingWindow == 0 {
			return batch
		}
		if windowEnd.IsZero() {
			if len(batch) == 0 {
				return nil
			}
			windowEnd = time.Now().Add(p.cfg.MaxBatchingWindow)
		}
	}
}

// sqsRecord is one record of the SQS event as Lambda sends it.
type sqsRecord struct {
	MessageID         string                        `json:"messageId"`
	ReceiptHandle     string                        `json:"receiptHandle"`
	Body              string                        `json:"body"`
	Attributes        map[string]string             `json:"attributes"`
	MessageAttributes map[string]sqsRecordAttribute `json:"messageAttributes"`
	MD5OfBody         string                        `json:"md5OfBody"`
	EventSource       string                        `json:"eventSource"`
	EventSourceARN    string                        `json:"eventSourceARN"`
	AWSRegion         string                        `json:"awsRegion"`
}

type sqsRecordAttribute struct {
	StringValue      *string  `json:"stringValue,omitempty"`
	BinaryValue      []byte   `json:"binaryValue,omitempty"`
	StringListValues []string `json:"stringListValues"`
	BinaryListValues [][]byte `json:"binaryListValues"`
	DataType         string   `json:"dataType"`
}

// SQSEventJSON returns the Lambda event JSON for msgs received from the
// queue queueARN in region.
func SQSEventJSON(msgs []sqstypes.Message, queueARN, region string) ([]byte, error) {
	recs := make([]sqsRecord, len(msgs))
	for i, m := range msgs {
		attrs := map[string]sqsRecordAttribute{}
		for k, v := range m.MessageAttributes {
			attrs[k] = sqsRecordAttribute{StringValue: v.StringValue, BinaryValue: v.BinaryValue,
				StringListValues: nonNil(v.StringListValues), BinaryListValues: nonNilBytes(v.BinaryListValues), DataType: aws.ToString(v.DataType)}
		}
		sys := map[string]string{}
		for k, v := range m.Attributes {
			sys[k] = v
		}
		recs[i] = sqsRecord{
			MessageID: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Attributes: sys, MessageAttributes: attrs, MD5OfBody: aws.ToString(m.MD5OfBody),
			EventSource: "aws:sqs", EventSourceARN: queueARN, AWSRegion: region,
		}
	}
	return json.Marshal(map[string]any{"Records": recs})
}

func nonNilBytes(b [][]byte) [][]byte {
	if b == nil {
		return [][]byte{}
	}
	return b
}

func (p *SQSPoller) count(f func(*SQSPollerStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// invoke runs one invocation and acknowledges what it may.
func (p *SQSPoller) invoke(ctx context.Context, batch []sqstypes.Message) {
	p.count(func(s *SQSPollerStats) { s.Invocations++; s.Messages += int64(len(batch)) })
	raw, err := SQSEventJSON(batch, p.cfg.QueueARN, p.cfg.Region)
	if err != nil {
		p.log.Error("encode SQS event", "error", err)
		return
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		p.log.Error("decode SQS event", "error", err)
		return
	}
	ictx, cancel := context.WithTimeout(ctx, p.cfg.FunctionTimeout)
	// The function runs as its execution role's session: what it sends to
	// a queue (a dead-letter) carries that SenderId.
	resp, err := p.call(WithSenderID(ictx, FunctionSenderID(p.cfg.FunctionName)), ev)
	late := errors.Is(ictx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	if ctx.Err() != nil {
		return // shutting down: the messages come back after their visibility timeout
	}
	switch {
	case late:
		p.count(func(s *SQSPollerStats) { s.Timeouts++ })
		p.log.Warn("invocation timed out; its response is discarded and the batch returns after the visibility timeout",
			"timeout", p.cfg.FunctionTimeout, "messages", len(batch))
		return
	case err != nil:
		p.count(func(s *SQSPollerStats) { s.FunctionErrors++ })
		p.log.Warn("function error; the batch returns after the visibility timeout", "error", err, "messages", len(batch))
		return
	}
	keep := map[string]bool{}
	if *p.cfg.ReportBatchItemFailures {
		b, _ := json.Marshal(resp)
		var r struct {
			BatchItemFailures []struct {
				ItemIdentifier *string `json:"itemIdentifier"`
			} `json:"batchItemFailures"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			p.count(func(s *SQSPollerStats) { s.InvalidResponses++ })
			return
		}
		inBatch := map[string]bool{}
		for _, m := range batch {
			inBatch[aws.ToString(m.MessageId)] = true
		}
		for _, f := range r.BatchItemFailures {
			id := aws.ToString(f.ItemIdentifier)
			if id == "" || !inBatch[id] {
				p.count(func(s *SQSPollerStats) { s.InvalidResponses++ })
				p.log.Warn("invalid partial batch response: the whole batch fails", "item_identifier", id)
				return
			}
			keep[id] = true
		}
		if len(keep) > 0 {
			p.count(func(s *SQSPollerStats) { s.PartialResponses++; s.ReportedFailures += int64(len(keep)) })
		}
	}
	for _, m := range batch {
		if keep[aws.ToString(m.MessageId)] {
			continue
		}
		if _, err := p.cfg.Queue.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(p.cfg.QueueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			p.log.Warn("DeleteMessage failed; the message will be delivered again", "message_id", aws.ToString(m.MessageId), "error", err)
			continue
		}
		p.count(func(s *SQSPollerStats) { s.Deleted++ })
	}
}

func (p *SQSPoller) call(ctx context.Context, ev events.SQSEvent) (resp events.SQSEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return p.h(ctx, ev)
}

func (p *SQSPoller) setRunning(d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running += d
	if p.running == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
}

// Busy reports whether an invocation is running.
func (p *SQSPoller) Busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running > 0
}

// Stats returns a snapshot of the counters.
func (p *SQSPoller) Stats() SQSPollerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// String names the poller's function and queue.
func (p *SQSPoller) String() string {
	return p.cfg.FunctionName + " <- " + p.cfg.QueueURL[strings.LastIndex(p.cfg.QueueURL, "/")+1:]
}
