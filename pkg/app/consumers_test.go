package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/pkg/routing"
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

// The fulfilment consumer's own name (its idempotency namespace, its logs)
// is the routing consumer name the stack and the local runtime use.
func TestFulfilmentConsumerName(t *testing.T) {
	if fulfilment.ConsumerName != routing.ConsumerFulfilment {
		t.Fatalf("fulfilment.ConsumerName %q != routing.ConsumerFulfilment %q", fulfilment.ConsumerName, routing.ConsumerFulfilment)
	}
	if _, err := NewFulfilment(Settings{}, nil, nil, nil); err == nil ||
		!strings.Contains(err.Error(), config.EnvShipmentsTable) || !strings.Contains(err.Error(), config.EnvProviderURL) {
		t.Fatalf("NewFulfilment without settings = %v, want the missing variables named", err)
	}
}
