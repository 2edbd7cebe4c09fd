package relay_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestTraceHeaderCarriesTheStoredContext: with tracing off (no tracer
// provider in this test binary) the PutEvents entry of an envelope that
// carries the writer's traceparent gets TraceHeader = that context in X-Ray
// format (Root=1-<8>-<24>;Parent=<16>;Sampled=<0|1>, the field EventBridge
// hands its targets), and an envelope without one gets no TraceHeader.
func TestTraceHeaderCarriesTheStoredContext(t *testing.T) {
	eb := &fakeEventBridge{}
	pub, err := relay.NewPublisher(eb, testConfig().Publisher)
	if err != nil {
		t.Fatal(err)
	}
	traced := envelope(t, "o-1", 1, 10)
	traced.TraceParent = "00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01"
	plain := envelope(t, "o-2", 1, 10)
	res := pub.Publish(context.Background(), []outbox.Envelope{traced, plain})
	if res[0].Status != relay.Published || res[1].Status != relay.Published {
		t.Fatalf("results %+v", res)
	}
	if len(eb.calls) != 1 || len(eb.calls[0]) != 2 {
		t.Fatalf("calls %v", eb.calls)
	}
	if got := aws.ToString(eb.calls[0][0].TraceHeader); got != "Root=1-665b7c01-a3e2f4b5c6d7e8f901234567;Parent=53995c3f42cd8ad8;Sampled=1" {
		t.Errorf("TraceHeader of the traced entry = %q", got)
	}
	if eb.calls[0][1].TraceHeader != nil {
		t.Errorf("TraceHeader of an entry without trace context = %q, want none", *eb.calls[0][1].TraceHeader)
	}
	if !res[0].Trace.IsValid() || res[1].Trace.IsValid() {
		t.Errorf("Result.Trace: traced %v, plain %v", res[0].Trace, res[1].Trace)
	}
}
