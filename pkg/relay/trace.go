package relay

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

type resendKey struct{}

// WithResend marks ctx as the reconciler's: the publish spans Publish starts
// under it are named "outbox resend <type>" and carry outbox.resend=true,
// so a re-send is visible as such in the order's trace.
func WithResend(ctx context.Context) context.Context {
	return context.WithValue(ctx, resendKey{}, true)
}

func isResend(ctx context.Context) bool { v, _ := ctx.Value(resendKey{}).(bool); return v }

// eventAttrs are the attributes naming an envelope on a span.
func eventAttrs(e outbox.Envelope) []attribute.KeyValue {
	return []attribute.KeyValue{
		outboxtrace.AttrEventID.String(e.EventID),
		outboxtrace.AttrEventType.String(e.EventType),
		outboxtrace.AttrAggregateID.String(e.AggregateID),
		outboxtrace.AttrSequence.Int64(e.Sequence),
	}
}

// publishTrace holds the publish spans of one Publish call.
type publishTrace struct {
	spans  []trace.Span // nil when tracing is off
	stored []trace.SpanContext
}

// startPublishSpans starts one publish span per envelope when ctx's span is
// recording (tracing on); otherwise it only reads the stored contexts.
func startPublishSpans(ctx context.Context, envs []outbox.Envelope) publishTrace {
	var pt publishTrace
	batch := trace.SpanFromContext(ctx)
	recording := batch.IsRecording()
	for i, e := range envs {
		if e.TraceParent == "" && !recording {
			continue
		}
		if pt.stored == nil {
			pt.stored = make([]trace.SpanContext, len(envs))
		}
		pt.stored[i] = outboxtrace.Remote(e.TraceParent, e.TraceState)
	}
	if !recording {
		return pt
	}
	name, resend := "outbox publish ", isResend(ctx)
	if resend {
		name = "outbox resend "
	}
	pt.spans = make([]trace.Span, len(envs))
	link := trace.Link{SpanContext: batch.SpanContext()}
	for i, e := range envs {
		pctx := outboxtrace.ParentOrNew(ctx, pt.stored[i])
		_, pt.spans[i] = outboxtrace.Tracer().Start(pctx, name+e.EventType,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithLinks(link),
			trace.WithAttributes(append(eventAttrs(e), outboxtrace.AttrResend.Bool(resend))...))
	}
	return pt
}

// header returns the TraceHeader of envelope i: its publish span, or with
// tracing off the stored context, in X-Ray format; "" when there is none.
func (pt publishTrace) header(i int) string {
	if pt.spans != nil {
		return outboxtrace.XRayHeader(pt.spans[i].SpanContext())
	}
	if pt.stored != nil {
		return outboxtrace.XRayHeader(pt.stored[i])
	}
	return ""
}

// end records each result on its span, ends it and sets Result.Trace.
func (pt publishTrace) end(results []Result) {
	for i := range results {
		switch {
		case pt.spans != nil:
			s, r := pt.spans[i], results[i]
			s.SetAttributes(outboxtrace.AttrPublishStatus.String(r.Status.String()), outboxtrace.AttrAttempts.Int(r.Attempts))
			if r.EventID != "" {
				s.SetAttributes(outboxtrace.AttrBusEventID.String(r.EventID))
			}
			if r.Status != Published {
				s.SetAttributes(outboxtrace.AttrErrorCode.String(r.ErrorCode))
				s.SetStatus(codes.Error, r.ErrorCode+": "+r.ErrorMessage)
			}
			results[i].Trace = s.SpanContext()
			s.End()
		case pt.stored != nil:
			results[i].Trace = pt.stored[i]
		}
	}
}

// traceMarks records one span per published or parked mark, under its
// publish span (Result.Trace), from start to now, with the outcome:
// published, parked, or failed (the record stays pending). Only when ctx's
// span is recording.
func traceMarks(ctx context.Context, start time.Time, marks []Mark, errs []error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	link := trace.Link{SpanContext: trace.SpanFromContext(ctx).SpanContext()}
	for i, mk := range marks {
		var name, outcome string
		switch mk.Result.Status {
		case Published:
			name, outcome = "outbox mark published", "published"
		case PermanentFailure:
			name, outcome = "outbox park", "parked"
		default:
			continue
		}
		pctx := outboxtrace.ParentOrNew(ctx, mk.Result.Trace)
		attrs := append(eventAttrs(mk.Envelope), outboxtrace.AttrMarkOutcome.String(outcome))
		if mk.Result.Status == PermanentFailure {
			attrs = append(attrs, outboxtrace.AttrErrorCode.String(mk.Result.ErrorCode))
		}
		_, s := outboxtrace.Tracer().Start(pctx, name, trace.WithTimestamp(start), trace.WithLinks(link), trace.WithAttributes(attrs...))
		if errs[i] != nil {
			s.SetAttributes(outboxtrace.AttrMarkOutcome.String("failed"))
			s.RecordError(errs[i])
			s.SetStatus(codes.Error, errs[i].Error())
		}
		s.End()
	}
}
