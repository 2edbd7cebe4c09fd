package relay_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
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

// TestTraceHeaderFromHostileStoredContext: a record stored by something
// other than the Writer may carry any trace strings. Each is still
// published; its entry gets either no TraceHeader or a well-formed X-Ray
// header within PutEventsRequestEntry.TraceHeader's 1..500 characters
// (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsRequestEntry.html),
// never the stored bytes.
func TestTraceHeaderFromHostileStoredContext(t *testing.T) {
	eb := &fakeEventBridge{}
	pub, err := relay.NewPublisher(eb, testConfig().Publisher)
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01"
	hostile := []struct{ tp, ts string }{
		{"ff" + tp[2:], ""},
		{strings.ToUpper(tp), ""},
		{tp + "-extra", ""},
		{"cc" + tp[2:] + "-" + strings.Repeat("x", 5000), strings.Repeat("a=b,", 5000)},
		{tp[:53] + "ff", "a=1\r\nX-Evil: 1"},
		{tp + "\r\nX-Evil: 1", ""},
		{"00-00000000000000000000000000000000-53995c3f42cd8ad8-01", ""},
		{strings.Repeat("0", 10_000), "é=ü"},
		{"", strings.Repeat("z", 10_000)},
	}
	var envs []outbox.Envelope
	for i, h := range hostile {
		e := envelope(t, "o-"+strconv.Itoa(i), 1, 10)
		e.TraceParent, e.TraceState = h.tp, h.ts
		envs = append(envs, e)
	}
	res := pub.Publish(context.Background(), envs)
	xr := regexp.MustCompile(`^Root=1-[0-9a-f]{8}-[0-9a-f]{24};Parent=[0-9a-f]{16};Sampled=[01]$`)
	n := 0
	for _, c := range eb.calls {
		for _, e := range c {
			n++
			if e.TraceHeader != nil && (!xr.MatchString(*e.TraceHeader) || len(*e.TraceHeader) > 500) {
				t.Errorf("TraceHeader %q", *e.TraceHeader)
			}
		}
	}
	for i, r := range res {
		if r.Status != relay.Published {
			t.Errorf("envelope %d (%.40q): %+v", i, hostile[i].tp, r)
		}
	}
	if n != len(hostile) {
		t.Fatalf("%d entries sent, want %d", n, len(hostile))
	}
}
