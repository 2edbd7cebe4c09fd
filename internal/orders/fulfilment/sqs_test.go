package fulfilment_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

type memDLQ struct {
	mu      sync.Mutex
	reasons []string
}

func (d *memDLQ) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reasons = append(d.reasons, aws.ToString(in.MessageAttributes[sqsconsumer.AttrReason].StringValue))
	return &sqs.SendMessageOutput{MessageId: aws.String("dlq")}, nil
}

// Behind the consumer queue (as in AWS): a provider 4xx goes to the DLQ at
// once, a provider outage is left for redelivery, a success is acknowledged.
func TestBehindTheConsumerQueue(t *testing.T) {
	t.Parallel()
	reject := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(fulfilment.HeaderIdempotencyKey) == "" {
			t.Error("no Idempotency-Key")
		}
		w.WriteHeader(http.StatusBadRequest)
	})
	env := ddbtest.New(t)
	rejecting := newFixture(t, options{env: env, handler: reject})
	ok := newFixture(t, options{env: env})
	down := newFixture(t, options{env: env})
	down.p.Inject(provider.FaultServerError, provider.FaultServerError, provider.FaultServerError, provider.FaultServerError)
	tests := []struct {
		name        string
		fx          *fixture
		wantFailed  int
		wantReasons []string
	}{
		{"provider 400: dead-lettered", rejecting, 0, []string{fulfilment.ReasonProviderRejected}},
		{"provider OK: acknowledged", ok, 0, nil},
		{"provider down: left for redelivery", down, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dlq := &memDLQ{}
			h, err := sqsconsumer.New(tc.fx.f.Handle, sqsconsumer.Config{Name: fulfilment.ConsumerName, DLQ: dlq, DLQURL: "https://sqs.example/dlq", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			ev := delivery(t, paid(t, "o-1"))
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: string(raw)}}})
			if err != nil || len(resp.BatchItemFailures) != tc.wantFailed {
				t.Fatalf("%+v %v, want %d failed", resp, err, tc.wantFailed)
			}
			if len(dlq.reasons) != len(tc.wantReasons) || (len(tc.wantReasons) > 0 && dlq.reasons[0] != tc.wantReasons[0]) {
				t.Fatalf("DLQ reasons %v, want %v", dlq.reasons, tc.wantReasons)
			}
		})
	}
}
