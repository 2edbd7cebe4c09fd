package outboxtrace

import (
	"context"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/propagators/aws/xray"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span this library starts.
const ScopeName = "github.com/ddb-outbox/ddb-outbox"

// Span attribute keys set by the relay, the reconciler and the consumers.
const (
	AttrEventID       = attribute.Key("outbox.event_id")
	AttrEventType     = attribute.Key("outbox.event_type")
	AttrAggregateID   = attribute.Key("outbox.aggregate_id")
	AttrSequence      = attribute.Key("outbox.sequence")
	AttrBusEventID    = attribute.Key("outbox.bus_event_id")   // EventBridge EventId of an accepted entry
	AttrPublishStatus = attribute.Key("outbox.publish.status") // published | retryable_failure | permanent_failure
	AttrErrorCode     = attribute.Key("outbox.error_code")     // PutEvents entry error code, CodeHeldBack, ...
	AttrAttempts      = attribute.Key("outbox.publish.attempts")
	AttrResend        = attribute.Key("outbox.resend")           // true on the reconciler's re-sends
	AttrMarkOutcome   = attribute.Key("outbox.mark.outcome")     // published | parked | failed
	AttrConsumer      = attribute.Key("outbox.consumer")         // consumer name (dedup marker prefix)
	AttrOutcome       = attribute.Key("outbox.consumer.outcome") // see the Outcome* constants
	AttrReason        = attribute.Key("outbox.consumer.reason")  // dead-letter reason
	AttrBatchSize     = attribute.Key("outbox.batch.size")
	AttrReceiveCount  = attribute.Key("messaging.sqs.receive_count")
)

// Consumer outcomes (AttrOutcome): what one delivery of an event did.
const (
	OutcomeApplied      = "applied"       // side effect and dedup marker committed
	OutcomeDuplicate    = "duplicate"     // the dedup marker existed: absorbed, nothing written
	OutcomeHeld         = "held"          // an earlier sequence is missing: nothing written, redelivered
	OutcomeDeadLettered = "dead_lettered" // refused for good: sent to the consumer DLQ
	OutcomeRetry        = "retry"         // failed for now: left for redelivery
	OutcomeIgnored      = "ignored"       // an event type this consumer does not act on
)

// XRayHeaderName is the HTTP header and, as AWSTraceHeader, the SQS message
// system attribute carrying an X-Ray trace header.
const XRayHeaderName = "X-Amzn-Trace-Id"

// AWSTraceHeader is the SQS message system attribute that carries the X-Ray
// header of a message (https://docs.aws.amazon.com/xray/latest/devguide/xray-services-sqs.html).
const AWSTraceHeader = "AWSTraceHeader"

var (
	w3c   = propagation.TraceContext{}
	xrayP = xray.Propagator{}
)

var enabled atomic.Bool

// Enabled reports whether a tracer provider was installed in this process
// (otelsetup.Setup). Code that would pay for tracing before it can start a
// span (parsing a trace context out of a message) asks it first.
func Enabled() bool { return enabled.Load() }

// SetEnabled records whether an SDK tracer provider is installed; for the
// package that installs it (otelsetup). It returns the previous value.
func SetEnabled(on bool) bool { return enabled.Swap(on) }

// Tracer returns the library's tracer from the global tracer provider
// (otel.SetTracerProvider; a no-op until one is set). It is looked up on
// every call, so a provider installed later (otelsetup.Setup, a test) takes effect.
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(ScopeName) }

// LambdaTraceKey is the context key under which aws-lambda-go stores the
// invocation's X-Ray trace header (lambda/invoke_loop.go).
const LambdaTraceKey = "x-amzn-trace-id"

// Capture returns the W3C Trace Context of ctx's current span:
// traceparent ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>") and
// tracestate (possibly empty). Without a valid span (OpenTelemetry off) on
// Lambda with X-Ray active tracing, it returns the invocation's X-Ray
// context instead (ctx value LambdaTraceKey: Root becomes the trace id,
// Parent the parent id), so the relay's TraceHeader still continues the
// X-Ray trace at no cost. Both are empty otherwise: nothing is stored.
func Capture(ctx context.Context) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		h, _ := ctx.Value(LambdaTraceKey).(string)
		if sc = FromXRayHeader(h); !sc.IsValid() {
			return "", ""
		}
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c["traceparent"], boundTraceState(sc.TraceState())
}

// MaxTraceStateLen is the longest tracestate Capture returns, in bytes:
// 512, what W3C Trace Context asks every vendor to propagate
// (https://www.w3.org/TR/trace-context/#tracestate-limits) and the most an
// outbox envelope stores (outbox.MaxTraceStateLen).
const MaxTraceStateLen = 512

// boundTraceState returns ts as a header value of at most MaxTraceStateLen
// bytes, truncated as W3C Trace Context section 3.3.1.5 (tracestate
// limits) says: list members longer than 128 characters are removed
// first (from the left, only as many as needed), then members from the
// end. A caller's tracestate can be longer
// (OpenTelemetry's parser accepts 32 members of up to 513 characters each):
// trimming it here keeps a client's header from ever making the outbox
// write refuse the envelope.
func boundTraceState(ts trace.TraceState) string {
	s := ts.String()
	if len(s) <= MaxTraceStateLen {
		return s
	}
	var members []string
	ts.Walk(func(k, v string) bool {
		members = append(members, k+"="+v)
		return true
	})
	size := func(ms []string) int {
		n := 0
		for _, m := range ms {
			n += len(m) + 1
		}
		return n - 1
	}
	kept := members[:0:0]
	for i, m := range members {
		if len(m) > 128 && size(append(kept, members[i:]...)) > MaxTraceStateLen {
			continue
		}
		kept = append(kept, m)
	}
	for len(kept) > 0 && size(kept) > MaxTraceStateLen {
		kept = kept[:len(kept)-1]
	}
	return strings.Join(kept, ",")
}

// Remote returns the span context a stored traceparent/tracestate pair
// names, marked remote, or an invalid SpanContext when traceparent is empty
// or malformed (a tolerant reader: a bad trace field never fails an event).
func Remote(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), c))
}

// XRayHeader returns sc as an X-Ray trace header,
// "Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>", or "" when sc is
// invalid. It is the value of PutEventsRequestEntry.TraceHeader and of the
// SQS AWSTraceHeader attribute. Format:
// https://docs.aws.amazon.com/xray/latest/devguide/xray-concepts.html#xray-concepts-tracingheader
// (the first 8 hex digits of the trace id are X-Ray's epoch seconds: trace
// ids from otelsetup's X-Ray ID generator are valid X-Ray ids; others are
// dropped by X-Ray, which still delivers the event).
func XRayHeader(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	xrayP.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c[XRayHeaderName]
}

// FromXRayHeader parses an X-Ray trace header; an invalid SpanContext when
// h is empty or malformed.
func FromXRayHeader(h string) trace.SpanContext {
	if h == "" {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{XRayHeaderName: h}
	return trace.SpanContextFromContext(xrayP.Extract(context.Background(), c))
}

// SetOutcome records a consumer's outcome (one of the Outcome* constants) on
// ctx's span; a no-op when tracing is off.
func SetOutcome(ctx context.Context, outcome string) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
	}
}

// ParentOrNew returns ctx with sc as its remote parent when sc is valid,
// else ctx unchanged (the span started from it is then a new root).
func ParentOrNew(ctx context.Context, sc trace.SpanContext) context.Context {
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
