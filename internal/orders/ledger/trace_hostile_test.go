package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// TestHostileTraceFieldsNeverFailAnEvent: with tracing on, an OrderPaid
// whose envelope carries a hostile traceparent/tracestate (any JSON a
// forger can put there) and whose message carries a hostile AWSTraceHeader
// is still booked once by the ledger behind sqsconsumer: no batch item
// failure, nothing dead-lettered, the entry is written. The trace fields
// are optional metadata a reader ignores when malformed (docs/TRACING.md).
// Real parts: Dynoxide, the local SQS queue as the consumer DLQ. Not
// parallel: it installs the global tracer provider.
func TestHostileTraceFieldsNeverFailAnEvent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	if _, shutdown, err := otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true, ServiceName: "ledger-test", Exporter: exp, Sync: true}); err != nil {
		t.Fatal(err)
	} else {
		defer func() {
			_ = shutdown(context.Background())
			_, _, _ = otelsetup.Setup(context.Background(), otelsetup.Config{})
		}()
	}
	f := newFixture(t)
	dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "ledger-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sqsconsumer.New(f.ledger.Handle, sqsconsumer.Config{Name: "ledger", Logger: quiet, DLQ: dlq, DLQURL: dlq.URL()})
	if err != nil {
		t.Fatal(err)
	}
	const tp = `"00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01"`
	const xr = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	tests := []struct {
		name, traceparent, tracestate, xray string // JSON texts for the two fields ("" = absent)
	}{
		{"valid", tp, `"a=1"`, xr},
		{"garbage string", `"garbage"`, `"x"`, "garbage"},
		{"version ff", `"ff-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01"`, "", ""},
		{"zero ids", `"00-00000000000000000000000000000000-0000000000000000-01"`, "", "Root=1-00000000-000000000000000000000000;Parent=0000000000000000"},
		{"upper case", strings.ToUpper(tp), "", ""},
		{"newline injection", `"00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01\r\nX-Evil: 1"`, `"a=1\nb=2"`, xr + "\r\nX-Evil: 1"},
		{"non-ASCII", `"00-665b7c01a3e2f4b5c6d7e8f9012345é7-53995c3f42cd8ad8-01"`, `"ü=1"`, "Root=1-5759e988-bd862e3fe1be46a99427279é;Parent=53995c3f42cd8ad8"},
		{"huge", `"` + strings.Repeat("0", 100_000) + `"`, `"` + strings.Repeat("a=b,", 20_000) + `"`, "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=" + strings.Repeat("a", 100_000)},
		{"tracestate without traceparent", "", `"a=1"`, ""},
		{"empty strings", `""`, `""`, ""},
		{"null", `null`, `null`, ""},
		{"number", `123`, `456`, xr},
		{"object", `{"a":1}`, `["x"]`, xr},
		{"boolean", `true`, `false`, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "o-trace-" + string(rune('a'+i))
			paid := envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: 100, Currency: "EUR"})
			ev := delivery(t, paid)
			var m map[string]json.RawMessage
			if err := json.Unmarshal(ev.Detail, &m); err != nil {
				t.Fatal(err)
			}
			if tt.traceparent != "" {
				m["traceparent"] = json.RawMessage(tt.traceparent)
			}
			if tt.tracestate != "" {
				m["tracestate"] = json.RawMessage(tt.tracestate)
			}
			if ev.Detail, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
			body, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			msg := events.SQSMessage{MessageId: "m-" + id, ReceiptHandle: "rh", Body: string(body), EventSource: "aws:sqs",
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
			if tt.xray != "" {
				msg.Attributes["AWSTraceHeader"] = tt.xray
			}
			before := dlq.Len()
			resp, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle = %+v, %v: the event failed", resp, err)
			}
			if dlq.Len() != before {
				t.Fatalf("the event was dead-lettered")
			}
			if e, ok, err := f.ledger.Entry(context.Background(), paid.EventID); err != nil || !ok || e.AmountMinor != 100 {
				t.Fatalf("entry = %+v, %v, %v: not booked", e, ok, err)
			}
		})
	}
}
