package lambdamain

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// TestTracedContinuesTheLambdaXRayTrace: with tracing on, Traced runs the
// handler inside one server span whose parent is the invocation's X-Ray
// header (aws-lambda-go's context value), records the handler's error, and
// passes the answer through; with tracing off it adds no span.
func TestTracedContinuesTheLambdaXRayTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	_, shutdown, err := otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true, ServiceName: "t", Exporter: exp, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = shutdown(context.Background())
		_, _, _ = otelsetup.Setup(context.Background(), otelsetup.Config{})
	}()
	boom := errors.New("boom")
	var inner trace.SpanContext
	h := func(ctx context.Context, in int) (int, error) {
		inner = trace.SpanContextFromContext(ctx)
		return in * 2, boom
	}
	//nolint:staticcheck // SA1029: aws-lambda-go stores the header under this plain string key (lambda/invoke_loop.go), so the test must too
	ctx := context.WithValue(context.Background(), outboxtrace.LambdaTraceKey, "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")

	out, err := Traced(Runtime{}, "relay", h)(ctx, 2)
	if out != 4 || !errors.Is(err, boom) || len(exp.GetSpans()) != 0 || inner.IsValid() {
		t.Fatalf("tracing off: %d %v, %d spans, span in ctx %v", out, err, len(exp.GetSpans()), inner.IsValid())
	}
	out, err = Traced(Runtime{Tracing: true}, "relay", h)(ctx, 3)
	if out != 6 || !errors.Is(err, boom) {
		t.Fatalf("tracing on: %d %v", out, err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != "relay" || s.SpanKind != trace.SpanKindServer || s.Parent.TraceID().String() != "5759e988bd862e3fe1be46a994272793" ||
		s.Parent.SpanID().String() != "53995c3f42cd8ad8" || len(s.Events) == 0 || s.SpanContext.SpanID() != inner.SpanID() {
		t.Fatalf("span %q kind %v parent %v events %d; handler saw %v", s.Name, s.SpanKind, s.Parent, len(s.Events), inner)
	}
}
