package outboxtrace_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// TestCaptureRemoteXRayRoundTrip: a span context captured as W3C
// traceparent/tracestate reads back as the same (remote) context, and its
// X-Ray header has the documented shape Root=1-<8>-<24>;Parent=<16>;Sampled=1
// and parses back to the same trace and parent ids.
func TestCaptureRemoteXRayRoundTrip(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("665b7c01a3e2f4b5c6d7e8f901234567")
	sid, _ := trace.SpanIDFromHex("53995c3f42cd8ad8")
	ts, _ := trace.ParseTraceState("vendor=opaque")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	tp, tst := outboxtrace.Capture(trace.ContextWithSpanContext(context.Background(), sc))
	if tp != "00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01" || tst != "vendor=opaque" {
		t.Fatalf("Capture = %q, %q", tp, tst)
	}
	back := outboxtrace.Remote(tp, tst)
	if !back.IsRemote() || back.TraceID() != tid || back.SpanID() != sid || !back.IsSampled() || back.TraceState().String() != "vendor=opaque" {
		t.Fatalf("Remote = %+v", back)
	}
	h := outboxtrace.XRayHeader(back)
	if h != "Root=1-665b7c01-a3e2f4b5c6d7e8f901234567;Parent=53995c3f42cd8ad8;Sampled=1" {
		t.Fatalf("XRayHeader = %q", h)
	}
	x := outboxtrace.FromXRayHeader(h)
	if x.TraceID() != tid || x.SpanID() != sid {
		t.Fatalf("FromXRayHeader = %+v", x)
	}
}

// TestCaptureNothingWhenOff: with no span and no Lambda trace header
// nothing is captured; malformed stored values read as no context (a
// tolerant reader) and give no TraceHeader.
func TestCaptureNothingWhenOff(t *testing.T) {
	if tp, ts := outboxtrace.Capture(context.Background()); tp != "" || ts != "" {
		t.Fatalf("Capture without a span = %q, %q", tp, ts)
	}
	for _, bad := range []string{"", "garbage", "00-" + strings.Repeat("0", 32) + "-53995c3f42cd8ad8-01", "00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8"} {
		if sc := outboxtrace.Remote(bad, ""); sc.IsValid() {
			t.Errorf("Remote(%q) is valid", bad)
		}
		if h := outboxtrace.XRayHeader(outboxtrace.Remote(bad, "")); h != "" {
			t.Errorf("XRayHeader of %q = %q", bad, h)
		}
	}
	if sc := outboxtrace.FromXRayHeader("Root=1-bad"); sc.IsValid() {
		t.Errorf("FromXRayHeader of a bad header is valid")
	}
}

// TestCaptureLambdaXRayWithoutOpenTelemetry: on Lambda with X-Ray active
// tracing and OpenTelemetry off, the invocation's X-Ray header (context
// value LambdaTraceKey) is what gets stored.
func TestCaptureLambdaXRayWithoutOpenTelemetry(t *testing.T) {
	//nolint:staticcheck // SA1029: aws-lambda-go stores the header under this plain string key (lambda/invoke_loop.go), so the test must too
	ctx := context.WithValue(context.Background(), outboxtrace.LambdaTraceKey, "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
	tp, _ := outboxtrace.Capture(ctx)
	if tp != "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01" {
		t.Fatalf("Capture = %q", tp)
	}
}

// TestCaptureBoundsTraceState: a caller's tracestate longer than 512
// characters (OpenTelemetry's parser accepts up to 32 members of any
// length) is truncated as W3C Trace Context's tracestate limits say:
// members over 128 characters go first, then members from the end; what
// is left is at most MaxTraceStateLen and a valid tracestate.
func TestCaptureBoundsTraceState(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("665b7c01a3e2f4b5c6d7e8f901234567")
	sid, _ := trace.SpanIDFromHex("53995c3f42cd8ad8")
	var members []string
	for i := 0; i < 32; i++ {
		members = append(members, fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 26))) // 30 chars each
	}
	thirty := strings.Join(members, ",")
	big := "big" + strings.Repeat("b", 197) + "=" + strings.Repeat("y", 100) // 301 chars
	tests := []struct{ name, in, want string }{
		{"short kept", "a=1,b=2", "a=1,b=2"},
		{"exactly 512 kept", strings.Repeat("k", 256) + "=" + strings.Repeat("v", 255), strings.Repeat("k", 256) + "=" + strings.Repeat("v", 255)},
		{"from the end", thirty, strings.Join(members[:16], ",")},                                                             // 16*31-1 = 495
		{"long member first", "a=1," + big + "," + strings.Join(members[:12], ","), "a=1," + strings.Join(members[:12], ",")}, // 4+372 fits without big
		{"long members as needed", big + "," + big[:3] + "z" + big[3:] + ",c=3", big[:3] + "z" + big[3:] + ",c=3"},            // 304+1+305+4 > 512: the first goes
	}
	for _, tt := range tests {
		ts, err := trace.ParseTraceState(tt.in)
		if err != nil {
			t.Fatalf("%s: parse: %v", tt.name, err)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceState: ts})
		_, got := outboxtrace.Capture(trace.ContextWithSpanContext(context.Background(), sc))
		if got != tt.want {
			t.Errorf("%s: Capture tracestate = %q (%d bytes), want %q", tt.name, got, len(got), tt.want)
		}
		if len(got) > outboxtrace.MaxTraceStateLen {
			t.Errorf("%s: %d bytes", tt.name, len(got))
		}
		if _, err := trace.ParseTraceState(got); err != nil {
			t.Errorf("%s: result does not parse: %v", tt.name, err)
		}
	}
}

// TestCaptureHostileLambdaXRayHeader: whatever X-Ray header the Lambda
// runtime hands the invocation (a caller's Root can reach it), Capture
// stores nothing or a traceparent the write side accepts
// (outbox.Envelope.CheckTrace), never the header's bytes.
func TestCaptureHostileLambdaXRayHeader(t *testing.T) {
	const ok = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	for _, h := range []string{
		ok,
		ok + ";Lineage=a87bd80c:1|68fd508a:5;Self=1-abc",
		"Root=1-5759E988-BD862E3FE1BE46A994272793;Parent=53995C3F42CD8AD8;Sampled=1",
		"Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000",
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=" + strings.Repeat("a", 10_000),
		"Root=1-5759e988-bd862e3fe1be46a994272793;Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8\r\nX-Evil: 1",
		"Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
		"Root=1-5759e988-bd862e3fe1be46a99427279é;Parent=53995c3f42cd8ad8",
		";;;==;Root=;Parent",
		"Sampled=1",
	} {
		//nolint:staticcheck // SA1029: aws-lambda-go's plain string key
		ctx := context.WithValue(context.Background(), outboxtrace.LambdaTraceKey, h)
		tp, ts := outboxtrace.Capture(ctx)
		env := outbox.Envelope{TraceParent: tp, TraceState: ts}
		if err := env.CheckTrace(); err != nil {
			t.Errorf("Capture(%.60q) = %q, %q: %v", h, tp, ts, err)
		}
		if h == ok && tp != "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01" {
			t.Errorf("Capture of a valid header = %q", tp)
		}
	}
}
