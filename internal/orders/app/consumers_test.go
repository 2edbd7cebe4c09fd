package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// fakeDLQ records SendMessage calls.
type fakeDLQ struct {
	sent    []*sqs.SendMessageInput
	changed []*sqs.ChangeMessageVisibilityInput
}

func (f *fakeDLQ) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	f.changed = append(f.changed, in)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func (f *fakeDLQ) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.sent = append(f.sent, in)
	return &sqs.SendMessageOutput{}, nil
}

func TestSettingsFromEnvReadsConsumerDLQURL(t *testing.T) {
	t.Setenv(config.EnvConsumerDLQURL, "https://sqs.example/123/ledger-dlq")
	s, err := SettingsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if s.ConsumerDLQURL != "https://sqs.example/123/ledger-dlq" {
		t.Errorf("ConsumerDLQURL = %q", s.ConsumerDLQURL)
	}
}

func TestNewConsumerHandlerRequiresDLQURL(t *testing.T) {
	h := func(context.Context, events.EventBridgeEvent) error { return nil }
	_, err := NewConsumerHandler(Settings{}, "ledger", h, &fakeDLQ{}, nil)
	if err == nil || !strings.Contains(err.Error(), config.EnvConsumerDLQURL) {
		t.Errorf("err = %v, want one naming %s", err, config.EnvConsumerDLQURL)
	}
	if _, err := NewConsumerHandler(Settings{ConsumerDLQURL: "u"}, "ledger", h, nil, nil); err == nil {
		t.Error("nil DLQ client: want an error")
	}
}

// A permanent failure goes to the configured DLQ URL and is acknowledged; a
// transient one is reported in the partial batch response.
func TestNewConsumerHandlerDeadLettersPermanentFailures(t *testing.T) {
	dlq := &fakeDLQ{}
	h := func(_ context.Context, ev events.EventBridgeEvent) error {
		if ev.DetailType == "Bad" {
			return sqsconsumer.Permanent("unsupported_version", errors.New("v9"))
		}
		return errors.New("throttled")
	}
	c, err := NewConsumerHandler(Settings{ConsumerDLQURL: "https://sqs.example/dlq"}, "ledger", h, dlq, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: `{"version":"0","id":"a","detail-type":"Bad","source":"s","detail":{}}`},
		{MessageId: "m2", Body: `{"version":"0","id":"b","detail-type":"Good","source":"s","detail":{}}`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m2" {
		t.Errorf("failures = %+v, want only m2", resp.BatchItemFailures)
	}
	if len(dlq.sent) != 1 || aws.ToString(dlq.sent[0].QueueUrl) != "https://sqs.example/dlq" {
		t.Errorf("dead letters = %+v, want one to the configured URL", dlq.sent)
	}
}

// The fulfilment consumer's own name (its idempotency namespace, its logs)
// is the routing consumer name the stack and the local runtime use.
func TestFulfilmentConsumerName(t *testing.T) {
	if fulfilment.ConsumerName != routing.ConsumerFulfilment {
		t.Fatalf("fulfilment.ConsumerName %q != routing.ConsumerFulfilment %q", fulfilment.ConsumerName, routing.ConsumerFulfilment)
	}
	if _, err := NewFulfilment(Settings{}, nil, nil, nil); err == nil ||
		!strings.Contains(err.Error(), appenv.EnvShipmentsTable) || !strings.Contains(err.Error(), appenv.EnvProviderURL) {
		t.Fatalf("NewFulfilment without settings = %v, want the missing variables named", err)
	}
}

// A message that failed comes back after ConsumerRetryBase doubling per
// receive, capped at ConsumerRetryMax, not after the whole visibility
// timeout: the handler changes its visibility on the queue its
// eventSourceARN names.
func TestNewConsumerHandlerShortensRetries(t *testing.T) {
	q := &fakeDLQ{}
	h := func(context.Context, events.EventBridgeEvent) error { return errors.New("TransactionConflict") }
	c, err := NewConsumerHandler(Settings{ConsumerDLQURL: "u", ConsumerRetryBase: 3 * time.Second, ConsumerRetryMax: 20 * time.Second}, "ledger", h, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		receives string
		want     int32
	}{{"1", 3}, {"2", 6}, {"3", 12}, {"4", 20}, {"9", 20}} {
		q.changed = nil
		_, err := c.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{
			MessageId: "m1", ReceiptHandle: "rh", EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:ledger",
			Attributes: map[string]string{"ApproximateReceiveCount": n.receives},
			Body:       `{"version":"0","id":"a","detail-type":"OrderPaid","source":"s","detail":{}}`,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.changed) != 1 || q.changed[0].VisibilityTimeout != n.want ||
			aws.ToString(q.changed[0].QueueUrl) != "https://sqs.eu-west-1.amazonaws.com/123456789012/ledger" || aws.ToString(q.changed[0].ReceiptHandle) != "rh" {
			t.Errorf("receive %s: changes %+v, want one to %d s on the ledger queue", n.receives, q.changed, n.want)
		}
	}
}

// TestRetryDelayHeldEventsComeBackSooner: an event the ordering gate held
// (a wrapped *dedup.GapError) on its first receive waits HeldRetryBase;
// later receives and any other failure wait the failure base doubling;
// both are capped.
func TestRetryDelayHeldEventsComeBackSooner(t *testing.T) {
	// The stack's defaults: base 10 s, cap 180 s (6 × the 30 s function
	// timeout), gap bound on receive 5.
	d := retryDelay(10*time.Second, 180*time.Second, 5)
	held := fmt.Errorf("ledger: hold: %w", &dedup.GapError{Consumer: "ledger", AggregateType: "order", AggregateID: "o-1", Last: 1, Sequence: 3})
	failed := errors.New("throttled")
	for _, tc := range []struct {
		n    int
		err  error
		want time.Duration
	}{
		// 1 s first, then growing by the ratio r (≈ 6.47) with
		// 1 + r + r² + r³ = 320 s, rounded up to the second
		{1, held, time.Second}, {2, held, 7 * time.Second}, {3, held, 42 * time.Second}, {4, held, 271 * time.Second},
		{1, failed, 10 * time.Second}, {2, failed, 20 * time.Second}, {4, failed, 80 * time.Second}, {5, failed, 160 * time.Second}, {9, failed, 180 * time.Second},
	} {
		if got := d(tc.n, tc.err); got != tc.want {
			t.Errorf("retryDelay(receive %d, %v) = %v, want %v", tc.n, tc.err, got, tc.want)
		}
	}
	if got := retryDelay(10*time.Second, 500*time.Millisecond, 5)(1, held); got != 500*time.Millisecond {
		t.Errorf("held delay above the cap on the first receive: got %v, want 500ms", got)
	}
	if got := retryDelay(10*time.Hour, 12*time.Hour, 5)(4, held); got != MaxVisibilityTimeout {
		t.Errorf("held delay beyond SQS's 12 h visibility limit: got %v", got)
	}
}

// TestRetryDelayHoldOutlastsTheMissingEventsRetries checks the bound the gap
// dead letter relies on: an event held from its first receive to receive
// gapMax waits at least as long as the event it waits for can spend being
// retried on the same queue (receives 1..gapMax, moved to the DLQ on the
// next), plus one base delay.
func TestRetryDelayHoldOutlastsTheMissingEventsRetries(t *testing.T) {
	held := &dedup.GapError{Consumer: "notifier", AggregateType: "order", AggregateID: "o-1", Last: 0, Sequence: 2}
	for _, tc := range []struct {
		base, most time.Duration
		gapMax     int
	}{
		{10 * time.Second, 180 * time.Second, 5}, {2 * time.Second, 2 * time.Second, 3}, {time.Second, time.Minute, 10},
		{10 * time.Second, 180 * time.Second, 2}, {500 * time.Millisecond, 2 * time.Second, 4},
	} {
		d := retryDelay(tc.base, tc.most, tc.gapMax)
		var hold, window time.Duration
		for n := 1; n < tc.gapMax; n++ {
			hold += d(n, held)
		}
		for n := 1; n <= tc.gapMax; n++ {
			window += d(n, errors.New("failed"))
		}
		if want := window + d(1, errors.New("failed")); hold < want {
			t.Errorf("base %v cap %v gapMax %d: hold %v < the missing event's retry window %v + one base delay", tc.base, tc.most, tc.gapMax, hold, window)
		}
	}
}
