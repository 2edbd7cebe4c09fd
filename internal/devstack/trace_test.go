package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// TestTraceOfOneOrder follows one order through the real local stack
// (Dynoxide, emulated stream event source mapping, local bus and SQS
// queues, the three consumers, the reconciler) with tracing on, exported to
// the SDK's in-memory exporter, and asserts the span tree of its trace:
//
//	POST /orders/{id}/pay (API server span)
//	 ├─ DynamoDB.TransactWriteItems            (the write: order + outbox record)
//	 ├─ outbox publish OrderPaid               (relay; the relay "crashes" before marking)
//	 │   └─ consume <c> OrderPaid              outcome=applied, for ledger, notifier, fulfilment
//	 └─ outbox resend OrderPaid                (reconciler, outbox.resend=true)
//	     ├─ outbox mark published
//	     └─ consume <c> OrderPaid              outcome=duplicate (absorbed by the dedup marker)
//
// The forced fault (devstack.Options.LoseAfterPublish): the relay publishes
// the OrderPaid record and loses it before marking (an invocation that died
// after PutEvents), so the record stays pending and the reconciler re-sends
// it.
func TestTraceOfOneOrder(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	_, shutdown, err := otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true, ServiceName: "devstack-test", Exporter: exp, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = shutdown(context.Background())
		_, _, _ = otelsetup.Setup(context.Background(), otelsetup.Config{}) // back to the no-op provider
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var target atomic.Pointer[string] // the order whose OrderPaid the relay loses after publishing
	lose := func(env outbox.Envelope) bool {
		id := target.Load()
		return id != nil && env.AggregateID == *id && env.EventType == "OrderPaid"
	}
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "trace", Logger: quiet, Tracing: true,
		ReconcileEvery: 300 * time.Millisecond, ReconcileAfter: time.Second, LoseAfterPublish: lose})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()

	var created struct {
		ID string `json:"id"`
	}
	post(t, s.URL+"/orders", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`, &created)
	// OrderPlaced applied everywhere first: an OrderPaid that overtakes it
	// (a loaded machine) is held by the ordered consumers and applied from
	// the buffer under OrderPlaced's trace, not under its own publish.
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	target.Store(&created.ID)
	post(t, s.URL+"/orders/"+created.ID+"/pay", "", nil)

	consumers := []string{routing.ConsumerLedger, routing.ConsumerNotifier, routing.ConsumerFulfilment}
	var spans tracetest.SpanStubs
	var pay tracetest.SpanStub
	deadline := time.Now().Add(90 * time.Second)
	for {
		spans = exp.GetSpans()
		var ok bool
		if pay, ok = find(spans, func(s tracetest.SpanStub) bool { return s.Name == "POST /orders/{id}/pay" }); ok {
			n := 0
			for _, sp := range spans {
				if sp.SpanContext.TraceID() == pay.SpanContext.TraceID() && attr(sp, outboxtrace.AttrOutcome) == outboxtrace.OutcomeDuplicate {
					n++
				}
			}
			if n >= len(consumers) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace with a duplicate absorbed by every consumer after 90 s; spans:\n%s", dump(spans))
		}
		time.Sleep(200 * time.Millisecond)
	}
	tr := pay.SpanContext.TraceID()
	var inTrace tracetest.SpanStubs
	for _, sp := range spans {
		if sp.SpanContext.TraceID() == tr {
			inTrace = append(inTrace, sp)
		}
	}
	t.Logf("trace %s:\n%s", tr, dump(inTrace))

	if pay.Parent.IsValid() || pay.SpanKind != trace.SpanKindServer {
		t.Errorf("API span: parent %v kind %v, want a server root", pay.Parent, pay.SpanKind)
	}
	childOf := func(parent tracetest.SpanStub, name string, pred func(tracetest.SpanStub) bool) tracetest.SpanStub {
		t.Helper()
		sp, ok := find(inTrace, func(s tracetest.SpanStub) bool {
			return s.Name == name && s.Parent.SpanID() == parent.SpanContext.SpanID() && (pred == nil || pred(s))
		})
		if !ok {
			t.Fatalf("no span %q under %q", name, parent.Name)
		}
		return sp
	}
	paid := func(s tracetest.SpanStub) bool {
		return attr(s, outboxtrace.AttrAggregateID) == created.ID && attr(s, outboxtrace.AttrEventType) == "OrderPaid"
	}
	childOf(pay, "DynamoDB.TransactWriteItems", nil)
	publish := childOf(pay, "outbox publish OrderPaid", paid)
	resend := childOf(pay, "outbox resend OrderPaid", paid)
	if attr(publish, outboxtrace.AttrPublishStatus) != "Published" || attr(resend, outboxtrace.AttrPublishStatus) != "Published" {
		t.Errorf("publish status: relay %q, reconciler %q; want Published", attr(publish, outboxtrace.AttrPublishStatus), attr(resend, outboxtrace.AttrPublishStatus))
	}
	if !boolAttr(resend, outboxtrace.AttrResend) || boolAttr(publish, outboxtrace.AttrResend) {
		t.Errorf("outbox.resend: relay %v, reconciler %v; want false, true", boolAttr(publish, outboxtrace.AttrResend), boolAttr(resend, outboxtrace.AttrResend))
	}
	if len(resend.Links) == 0 {
		t.Errorf("the re-send span has no link to the reconciler run")
	}
	if !publish.StartTime.After(pay.StartTime) || !resend.StartTime.After(publish.EndTime) {
		t.Errorf("hops out of order: api %v, publish %v, resend %v", pay.StartTime, publish.StartTime, resend.StartTime)
	}
	childOf(resend, "outbox mark published", func(s tracetest.SpanStub) bool { return attr(s, outboxtrace.AttrMarkOutcome) == "published" })
	for _, c := range consumers {
		name := "consume " + c + " OrderPaid"
		childOf(publish, name, func(s tracetest.SpanStub) bool { return attr(s, outboxtrace.AttrOutcome) == outboxtrace.OutcomeApplied })
		childOf(resend, name, func(s tracetest.SpanStub) bool {
			return attr(s, outboxtrace.AttrOutcome) == outboxtrace.OutcomeDuplicate
		})
	}

	// The create's trace: published by the relay, marked, applied by the
	// notifier (every order event) under the publish span.
	create, ok := find(spans, func(s tracetest.SpanStub) bool {
		return s.Name == "POST /orders" && s.SpanContext.TraceID() != tr && hasChild(spans, s, func(c tracetest.SpanStub) bool {
			return c.Name == "outbox publish OrderPlaced" && attr(c, outboxtrace.AttrAggregateID) == created.ID
		})
	})
	if !ok {
		t.Fatalf("no create trace with its OrderPlaced publish")
	}
	placed, _ := find(spans, func(s tracetest.SpanStub) bool {
		return s.Name == "outbox publish OrderPlaced" && s.Parent.SpanID() == create.SpanContext.SpanID()
	})
	if !hasChild(spans, placed, func(c tracetest.SpanStub) bool { return c.Name == "outbox mark published" }) ||
		!hasChild(spans, placed, func(c tracetest.SpanStub) bool {
			return c.Name == "consume notifier OrderPlaced" && attr(c, outboxtrace.AttrOutcome) == outboxtrace.OutcomeApplied
		}) {
		t.Errorf("OrderPlaced publish lacks its mark or the notifier's applied span")
	}
}

func post(t *testing.T, url, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
}

func find(spans tracetest.SpanStubs, pred func(tracetest.SpanStub) bool) (tracetest.SpanStub, bool) {
	for _, s := range spans {
		if pred(s) {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

func hasChild(spans tracetest.SpanStubs, parent tracetest.SpanStub, pred func(tracetest.SpanStub) bool) bool {
	_, ok := find(spans, func(s tracetest.SpanStub) bool {
		return s.Parent.SpanID() == parent.SpanContext.SpanID() && s.SpanContext.TraceID() == parent.SpanContext.TraceID() && pred(s)
	})
	return ok
}

func attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

func boolAttr(s tracetest.SpanStub, k attribute.Key) bool { return attr(s, k) == "true" }

func dump(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s parent=%s span=%s %q outcome=%s resend=%s\n", s.SpanContext.TraceID(), s.Parent.SpanID(), s.SpanContext.SpanID(), s.Name,
			attr(s, outboxtrace.AttrOutcome), attr(s, outboxtrace.AttrResend))
	}
	return b.String()
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)
