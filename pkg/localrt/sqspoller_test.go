package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// startSQSPoller runs a poller on q until the test ends.
func startSQSPoller(t *testing.T, cfg SQSPollerConfig, h SQSHandler) *SQSPoller {
	t.Helper()
	if cfg.PollWait == 0 {
		cfg.PollWait = 200 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := NewSQSPoller(cfg, h)
	if err != nil {
		t.Fatalf("NewSQSPoller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("SQSPoller.Run did not return after cancel")
		}
	})
	return p
}

// eventually polls cond every 10 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// invocationLog records what a handler received.
type invocationLog struct {
	mu    sync.Mutex
	calls [][]events.SQSMessage
	at    []time.Time
}

func (l *invocationLog) add(ev events.SQSEvent) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, ev.Records)
	l.at = append(l.at, time.Now())
	return len(l.calls)
}

func (l *invocationLog) snapshot() ([][]events.SQSMessage, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]events.SQSMessage(nil), l.calls...), append([]time.Time(nil), l.at...)
}

// On success Lambda deletes every message of the batch (Lambda developer
// guide, with-sqs: "When your function successfully processes a batch,
// Lambda deletes its messages from the queue").
func TestSQSPollerSuccessDeletesAll(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 5 * time.Second})
	for range 5 {
		sendBody(t, q, "m")
	}
	var log invocationLog
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: time.Second}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		log.add(ev)
		return events.SQSEventResponse{}, nil
	})
	eventually(t, 5*time.Second, "5 deletes", func() bool { return p.Stats().Deleted == 5 })
	if q.Len() != 0 {
		t.Fatalf("queue Len = %d after success", q.Len())
	}
	if st := p.Stats(); st.Messages != 5 || st.FunctionErrors != 0 || st.Timeouts != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A function error fails the whole batch: nothing is deleted and the
// messages come back after the visibility timeout with ApproximateReceiveCount
// 2 (Lambda developer guide, with-sqs, "If your function returns an error …
// the messages become visible again after the visibility timeout").
func TestSQSPollerFunctionErrorKeepsBatch(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: time.Second})
	sendBody(t, q, "a")
	sendBody(t, q, "b")
	var log invocationLog
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: 500 * time.Millisecond}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		n := log.add(ev)
		if n == 1 {
			return events.SQSEventResponse{}, errors.New("boom")
		}
		return events.SQSEventResponse{}, nil
	})
	eventually(t, 5*time.Second, "the function error", func() bool { return p.Stats().FunctionErrors == 1 })
	if v, i := q.Counts(); v+i != 2 || p.Stats().Deleted != 0 {
		t.Fatalf("after the error: %d visible %d in flight, %d deleted; want both kept", v, i, p.Stats().Deleted)
	}
	eventually(t, 5*time.Second, "redelivery and deletes", func() bool { return p.Stats().Deleted == 2 })
	calls, at := log.snapshot()
	if len(calls[0]) != 2 {
		t.Fatalf("first batch had %d messages, want 2", len(calls[0]))
	}
	redelivered := 0
	for i, c := range calls[1:] {
		for _, m := range c {
			redelivered++
			if m.Attributes["ApproximateReceiveCount"] != "2" {
				t.Errorf("redelivered %s with ApproximateReceiveCount %s, want 2", m.Body, m.Attributes["ApproximateReceiveCount"])
			}
			if d := at[i+1].Sub(at[0]); d < 900*time.Millisecond {
				t.Errorf("redelivered %s after %s, before the 1 s visibility timeout", m.Body, d)
			}
		}
	}
	if redelivered != 2 {
		t.Errorf("%d redeliveries, want 2", redelivered)
	}
}

// With ReportBatchItemFailures only the messages named by messageId stay on
// the queue; the rest are deleted (Lambda developer guide,
// services-sqs-errorhandling, "Implementing partial batch responses").
func TestSQSPollerPartialBatchResponse(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: time.Second})
	for _, b := range []string{"a", "b", "c"} {
		sendBody(t, q, b)
	}
	var log invocationLog
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: 500 * time.Millisecond}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		if log.add(ev) == 1 {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}}, nil
		}
		return events.SQSEventResponse{}, nil
	})
	eventually(t, 5*time.Second, "2 deletes", func() bool { return p.Stats().Deleted == 2 })
	if st := p.Stats(); st.PartialResponses != 1 || st.ReportedFailures != 1 || st.InvalidResponses != 0 {
		t.Errorf("stats %+v", st)
	}
	if q.Len() != 1 {
		t.Fatalf("queue Len = %d, want only the reported message", q.Len())
	}
	eventually(t, 5*time.Second, "the reported message back and deleted", func() bool { return p.Stats().Deleted == 3 })
	calls, _ := log.snapshot()
	if len(calls[0]) != 3 {
		t.Fatalf("first batch had %d messages, want 3", len(calls[0]))
	}
	failedID := calls[0][0].MessageId
	var again []string
	for _, c := range calls[1:] {
		for _, m := range c {
			again = append(again, m.MessageId+"/"+m.Attributes["ApproximateReceiveCount"])
		}
	}
	if len(again) != 1 || again[0] != failedID+"/2" {
		t.Fatalf("redelivered %v, want only %s/2", again, failedID)
	}
}

// An invalid partial batch response (empty itemIdentifier, or one naming no
// message of the batch) is a complete failure: nothing is deleted (Lambda
// developer guide, services-sqs-errorhandling: "Lambda treats a batch as a
// complete failure if your function returns … An empty string
// itemIdentifier; A null itemIdentifier; … An itemIdentifier value with a
// message ID that doesn't exist"). A null itemIdentifier cannot be written
// through events.SQSBatchItemFailure (a string), so it is not covered here.
func TestSQSPollerInvalidPartialResponseFailsBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, id string }{{"empty", ""}, {"unknown", "not-a-message-id"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 5 * time.Second})
			sendBody(t, q, "a")
			sendBody(t, q, "b")
			var log invocationLog
			p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: time.Second}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				log.add(ev)
				// One valid id and one invalid: still the whole batch fails.
				return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}, {ItemIdentifier: tc.id}}}, nil
			})
			eventually(t, 5*time.Second, "the invalid response", func() bool { return p.Stats().InvalidResponses >= 1 })
			if st := p.Stats(); st.Deleted != 0 {
				t.Fatalf("deleted %d messages after an invalid partial batch response", st.Deleted)
			}
			if _, i := q.Counts(); i != 2 {
				t.Fatalf("%d messages in flight, want 2 (none deleted)", i)
			}
		})
	}
}

// A response after the function timeout is discarded (the invocation is a
// timeout error) and nothing is deleted (AWS-SEMANTICS §12; Lambda developer
// guide, golang-context and with-sqs).
func TestSQSPollerTimeoutDiscardsAnswer(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 5 * time.Second})
	sendBody(t, q, "slow")
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: 300 * time.Millisecond}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		time.Sleep(600 * time.Millisecond) // ignores its context, answers success too late
		return events.SQSEventResponse{}, nil
	})
	eventually(t, 5*time.Second, "the timeout", func() bool { return p.Stats().Timeouts == 1 })
	if st := p.Stats(); st.Deleted != 0 {
		t.Fatalf("a late answer deleted %d messages", st.Deleted)
	}
	if q.Len() != 1 {
		t.Fatalf("queue Len = %d, want 1", q.Len())
	}
}

// NewSQSPoller refuses what CreateEventSourceMapping refuses (Lambda
// developer guide, with-sqs and services-sqs-parameters; API
// CreateEventSourceMapping, ScalingConfig): a function timeout over the
// queue's visibility timeout, BatchSize over 10 without a batching window of
// at least 1 s, MaximumConcurrency outside 2..1000.
func TestNewSQSPollerRefuses(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 30 * time.Second})
	h := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	tests := []struct {
		name string
		cfg  SQSPollerConfig
		ok   bool
	}{
		{"defaults", SQSPollerConfig{Queue: q}, true},
		{"function timeout = visibility timeout", SQSPollerConfig{Queue: q, FunctionTimeout: 30 * time.Second}, true},
		{"function timeout > visibility timeout", SQSPollerConfig{Queue: q, FunctionTimeout: 31 * time.Second}, false},
		{"BatchSize 10", SQSPollerConfig{Queue: q, BatchSize: 10}, true},
		{"BatchSize 11 without window", SQSPollerConfig{Queue: q, BatchSize: 11}, false},
		{"BatchSize 11 with 1 s window", SQSPollerConfig{Queue: q, BatchSize: 11, MaxBatchingWindow: time.Second}, true},
		{"BatchSize 10001", SQSPollerConfig{Queue: q, BatchSize: 10001, MaxBatchingWindow: time.Second}, false},
		{"MaximumConcurrency 1", SQSPollerConfig{Queue: q, MaximumConcurrency: 1}, false},
		{"MaximumConcurrency 1000", SQSPollerConfig{Queue: q, MaximumConcurrency: 1000}, true},
		{"MaximumConcurrency 1001", SQSPollerConfig{Queue: q, MaximumConcurrency: 1001}, false},
		{"no queue", SQSPollerConfig{}, false},
	}
	for _, tc := range tests {
		_, err := NewSQSPoller(tc.cfg, h)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if _, err := NewSQSPoller(SQSPollerConfig{Queue: q}, nil); err == nil {
		t.Error("nil handler accepted")
	}
}

// The event JSON is the one Lambda sends (Lambda developer guide, with-sqs,
// "Example Amazon SQS message event (standard queue)"): Records[] of
// messageId, receiptHandle, body, attributes (ApproximateReceiveCount,
// SentTimestamp, SenderId, ApproximateFirstReceiveTimestamp),
// messageAttributes ({stringValue, stringListValues, binaryListValues,
// dataType}), md5OfBody, eventSource "aws:sqs", eventSourceARN, awsRegion.
func TestSQSPollerEventShape(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "my-queue", Region: "us-east-2", Account: "123456789012", VisibilityTimeout: 5 * time.Second})
	out, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(q.URL()), MessageBody: aws.String("test"),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"myAttribute": {DataType: aws.String("String"), StringValue: aws.String("myValue")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan events.SQSEvent, 1)
	startSQSPoller(t, SQSPollerConfig{Queue: q, Region: "us-east-2", FunctionTimeout: time.Second}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		select {
		case got <- ev:
		default:
		}
		return events.SQSEventResponse{}, nil
	})
	var ev events.SQSEvent
	select {
	case ev = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no invocation")
	}
	if len(ev.Records) != 1 {
		t.Fatalf("%d records", len(ev.Records))
	}
	r := ev.Records[0]
	if r.MessageId != aws.ToString(out.MessageId) || r.ReceiptHandle == "" || r.Body != "test" ||
		r.Md5OfBody != "098f6bcd4621d373cade4e832627b4f6" || // the documented example's md5 of "test"
		r.EventSource != "aws:sqs" || r.EventSourceARN != "arn:aws:sqs:us-east-2:123456789012:my-queue" || r.AWSRegion != "us-east-2" {
		t.Errorf("record %+v", r)
	}
	for _, k := range []string{"ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} {
		if r.Attributes[k] == "" {
			t.Errorf("attributes lack %s: %v", k, r.Attributes)
		}
	}
	if r.Attributes["ApproximateReceiveCount"] != "1" {
		t.Errorf("ApproximateReceiveCount %q", r.Attributes["ApproximateReceiveCount"])
	}
	if a := r.MessageAttributes["myAttribute"]; aws.ToString(a.StringValue) != "myValue" || a.DataType != "String" {
		t.Errorf("messageAttributes %+v", r.MessageAttributes)
	}

	// The raw JSON uses Lambda's key names and empty lists, not nulls.
	msgs := []sqstypes.Message{{MessageId: aws.String("059f36b4"), ReceiptHandle: aws.String("AQEB"), Body: aws.String("test"),
		MD5OfBody:         aws.String("098f6bcd4621d373cade4e832627b4f6"),
		Attributes:        map[string]string{"ApproximateReceiveCount": "1"},
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"myAttribute": {DataType: aws.String("String"), StringValue: aws.String("myValue")}}}}
	raw, err := SQSEventJSON(msgs, "arn:aws:sqs:us-east-2:123456789012:my-queue", "us-east-2")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Records []map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Records) != 1 {
		t.Fatalf("%s: %v", raw, err)
	}
	want := map[string]string{
		"messageId": `"059f36b4"`, "receiptHandle": `"AQEB"`, "body": `"test"`, "md5OfBody": `"098f6bcd4621d373cade4e832627b4f6"`,
		"eventSource": `"aws:sqs"`, "eventSourceARN": `"arn:aws:sqs:us-east-2:123456789012:my-queue"`, "awsRegion": `"us-east-2"`,
		"attributes":        `{"ApproximateReceiveCount":"1"}`,
		"messageAttributes": `{"myAttribute":{"stringValue":"myValue","stringListValues":[],"binaryListValues":[],"dataType":"String"}}`,
	}
	for k, v := range want {
		if string(doc.Records[0][k]) != v {
			t.Errorf("%s = %s, want %s", k, doc.Records[0][k], v)
		}
	}
}

// End to end of the retry path: an always-failing function and
// maxReceiveCount 2: two deliveries, then the queue's redrive policy moves
// the message to the DLQ (Lambda developer guide, with-sqs, "Backoff
// strategy for failed invocations" and DLQ; SQS sqs-dead-letter-queues).
func TestSQSPollerFailingMessageReachesDLQ(t *testing.T) {
	t.Parallel()
	dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "e2e-dlq"})
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "e2e", VisibilityTimeout: time.Second, Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 2}})
	id := sendBody(t, q, "poison")
	var log invocationLog
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: 500 * time.Millisecond}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		log.add(ev)
		return events.SQSEventResponse{}, errors.New("always fails")
	})
	eventually(t, 8*time.Second, "the message on the DLQ", func() bool { return dlq.Len() == 1 })
	if q.Len() != 0 {
		t.Fatalf("source queue Len = %d", q.Len())
	}
	calls, _ := log.snapshot()
	if len(calls) != 2 || p.Stats().FunctionErrors != 2 {
		t.Fatalf("%d invocations, %d function errors; want 2 and 2", len(calls), p.Stats().FunctionErrors)
	}
	m := receiveN(t, dlq, 1)
	if len(m) != 1 || aws.ToString(m[0].MessageId) != id || aws.ToString(m[0].Body) != "poison" || m[0].Attributes[AttrDeadLetterQueueSourceArn] != q.ARN() {
		t.Fatalf("DLQ message %+v", m)
	}
}

// Without ReportBatchItemFailures Lambda ignores the response's
// batchItemFailures: a returned response is success and every message is
// deleted (Lambda developer guide, services-sqs-errorhandling: the function
// must include ReportBatchItemFailures in FunctionResponseTypes).
func TestSQSPollerWithoutReportBatchItemFailuresDeletesAll(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 5 * time.Second})
	sendBody(t, q, "a")
	sendBody(t, q, "b")
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: time.Second, ReportBatchItemFailures: aws.Bool(false)},
		func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}}, nil
		})
	eventually(t, 5*time.Second, "2 deletes", func() bool { return p.Stats().Deleted == 2 })
	if st := p.Stats(); st.PartialResponses != 0 || q.Len() != 0 {
		t.Fatalf("stats %+v, queue Len %d", st, q.Len())
	}
}

// A panic is a function error (the runtime reports it as such): nothing is
// deleted and the poller keeps running.
func TestSQSPollerPanicIsFunctionError(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: time.Second})
	sendBody(t, q, "a")
	var log invocationLog
	p := startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionTimeout: 500 * time.Millisecond}, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		if log.add(ev) == 1 {
			panic("nil map")
		}
		return events.SQSEventResponse{}, nil
	})
	eventually(t, 5*time.Second, "the panic", func() bool { return p.Stats().FunctionErrors == 1 })
	if p.Stats().Deleted != 0 || q.Len() != 1 {
		t.Fatalf("after a panic: %d deleted, Len %d", p.Stats().Deleted, q.Len())
	}
	eventually(t, 5*time.Second, "the redelivery", func() bool { return p.Stats().Deleted == 1 })
}

// RunUntil's stop ends the polling but lets the running invocation finish
// and its messages be deleted (a disabled event source mapping); nothing
// more is received after it, and a second run takes up the rest.
func TestSQSPollerRunUntilFinishesRunningInvocation(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 30 * time.Second})
	sendBody(t, q, "first")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var log invocationLog
	p, err := NewSQSPoller(SQSPollerConfig{Queue: q, FunctionTimeout: 10 * time.Second, PollWait: 100 * time.Millisecond, MaximumConcurrency: 2,
		Logger: slog.New(slog.DiscardHandler)}, func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		log.add(ev)
		once.Do(func() { close(entered); <-release })
		return events.SQSEventResponse{}, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	stop, cancelStop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.RunUntil(stop, context.Background()) }()
	<-entered
	cancelStop()
	sendBody(t, q, "second")
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunUntil did not return after stop")
	}
	if calls, _ := log.snapshot(); len(calls) != 1 || p.Stats().Deleted != 1 || q.Len() != 1 {
		t.Fatalf("after stop: %d invocations (want 1), %d deleted (want the running one's), %d left (want the one sent after stop)", len(calls), p.Stats().Deleted, q.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	eventually(t, 5*time.Second, "the second message after a new run", func() bool { return p.Stats().Deleted == 2 })
}
