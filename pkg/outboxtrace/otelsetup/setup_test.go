package otelsetup_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// TestSetup: Setup with Enabled false leaves the no-op provider (spans do
// not record, Enabled false); with an exporter it records spans whose trace
// ids are X-Ray-valid (first 8 hex digits: the epoch seconds); Enabled false
// again puts the no-op provider back.
func TestSetup(t *testing.T) {
	tp, shutdown, err := otelsetup.Setup(context.Background(), otelsetup.Config{})
	if err != nil || tp != nil || shutdown(context.Background()) != nil {
		t.Fatalf("Setup(off) = %v, %v", tp, err)
	}
	if _, s := outboxtrace.Tracer().Start(context.Background(), "x"); s.IsRecording() || outboxtrace.Enabled() {
		t.Fatalf("tracing off but the span records (or Enabled)")
	}
	if _, _, err := otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true}); err == nil {
		t.Fatal("Setup without ServiceName: no error")
	}
	exp := tracetest.NewInMemoryExporter()
	_, shutdown, err = otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true, ServiceName: "t", Exporter: exp, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	_, s := outboxtrace.Tracer().Start(context.Background(), "x")
	s.End()
	spans := exp.GetSpans()
	if len(spans) != 1 || !outboxtrace.Enabled() {
		t.Fatalf("recorded %d spans, Enabled %v", len(spans), outboxtrace.Enabled())
	}
	defer func() {
		_, _, _ = otelsetup.Setup(context.Background(), otelsetup.Config{})
		if _, s := outboxtrace.Tracer().Start(context.Background(), "y"); s.IsRecording() || outboxtrace.Enabled() {
			t.Errorf("Setup(off) after on: the span records (or Enabled)")
		}
	}()
	h := outboxtrace.XRayHeader(spans[0].SpanContext)
	if !strings.HasPrefix(h, "Root=1-") || h[7:15] == "00000000" {
		t.Fatalf("X-Ray header %q: trace id not X-Ray time-based", h)
	}
}
