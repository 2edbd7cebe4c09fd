package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkHandleTracing: the relay's CPU and allocations for a stream
// batch of 100 records (fake EventBridge and DynamoDB), side by side:
// off = no tracer provider, records without trace context (the default);
// off+context = no provider, records carrying a writer's traceparent (only
// the TraceHeader is forwarded); on = every span sampled and batch-exported
// to an in-process sink.
func BenchmarkHandleTracing(b *testing.B) {
	batch := func(withContext bool) events.DynamoDBEvent {
		var ev events.DynamoDBEvent
		for i, e := range benchEnvelopes(b, 100) {
			if withContext {
				e.TraceParent = fmt.Sprintf("00-665b7c01a3e2f4b5c6d7e8f9%06x-53995c3f42cd8ad8-01", i)
			}
			ev.Records = append(ev.Records, insertRecord(b, e, fmt.Sprint(1000+i)))
		}
		return ev
	}
	cfg := testConfig()
	r, err := relay.New(noopEventBridge{}, noopBatch{}, &fakeSQS{}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, ev events.DynamoDBEvent) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if resp, err := r.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
					b.Fatalf("%v %v", resp, err)
				}
			}
		})
	}
	run("off", batch(false))
	run("off+context", batch(true))
	_, shutdown, err := otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true, ServiceName: "bench", Exporter: dropSpans{}})
	if err != nil {
		b.Fatal(err)
	}
	run("on", batch(true))
	_ = shutdown(context.Background())
	_, _, _ = otelsetup.Setup(context.Background(), otelsetup.Config{})
}
