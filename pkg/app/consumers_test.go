package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/notifier"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// fakeDLQ records SendMessage calls.
type fakeDLQ struct{ sent []*sqs.SendMessageInput }

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

// The consumers' sentinel errors for events retrying cannot fix are
// dead-lettered at once with a reason; other errors stay retryable.
func TestNewConsumerHandlerClassifiesConsumerErrors(t *testing.T) {
	cases := []struct {
		err        error
		deadLetter string // reason, "" for a retry
	}{
		{fmt.Errorf("book: %w", ledger.ErrUnsupportedVersion), ReasonUnsupportedVersion},
		{fmt.Errorf("note: %w", notifier.ErrInvalidPayload), ReasonInvalidPayload},
		{fmt.Errorf("decode: %w", dedup.ErrMalformedEvent), sqsconsumer.ReasonMalformedEvent},
		{sqsconsumer.Permanent("sequence_gap", ledger.ErrInvalidPayload), "sequence_gap"},
		{errors.New("TransactionConflict"), ""},
	}
	for _, c := range cases {
		dlq := &fakeDLQ{}
		h := func(context.Context, events.EventBridgeEvent) error { return c.err }
		ch, err := NewConsumerHandler(Settings{ConsumerDLQURL: "u"}, "ledger", h, dlq, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ch.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
			{MessageId: "m1", Body: `{"version":"0","id":"a","detail-type":"OrderPaid","source":"s","detail":{}}`},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if c.deadLetter == "" {
			if len(dlq.sent) != 0 || len(resp.BatchItemFailures) != 1 {
				t.Errorf("%v: sent %d, failures %v; want a retry", c.err, len(dlq.sent), resp.BatchItemFailures)
			}
			continue
		}
		if len(dlq.sent) != 1 || len(resp.BatchItemFailures) != 0 {
			t.Errorf("%v: sent %d, failures %v; want dead-lettered", c.err, len(dlq.sent), resp.BatchItemFailures)
			continue
		}
		if got := aws.ToString(dlq.sent[0].MessageAttributes[sqsconsumer.AttrReason].StringValue); got != c.deadLetter {
			t.Errorf("%v: reason %q, want %q", c.err, got, c.deadLetter)
		}
	}
}
