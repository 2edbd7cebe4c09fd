package sqsconsumer

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// traceFields are the envelope's trace context and names, read from an
// EventBridge detail.
type traceFields struct {
	EventID     string `json:"event_id"`
	EventType   string `json:"event_type"`
	AggregateID string `json:"aggregate_id"`
	Sequence    int64  `json:"sequence"`
	TraceParent string `json:"traceparent"`
	TraceState  string `json:"tracestate"`
}

// startMessageSpan starts the span of one message's handling when tracing
// is on (outboxtrace.Enabled), else returns ctx and a no-op span at no cost.
//
// Parent, not link: the span's parent is the X-Ray header the bus sent with
// the message (SQS system attribute AWSTraceHeader: the relay's or the
// reconciler's publish span) or, without one, the envelope's traceparent
// (the writer): so the consumer's work is a hop of the order's one trace,
// under the very publish that delivered it (a duplicate from a re-send sits
// under the reconciler's "outbox resend" span). The writer's context is also
// a link, and the invocation's span (the Lambda invocation, which serves a
// batch of many orders) is linked, not the parent.
func (h *Handler) startMessageSpan(ctx context.Context, m events.SQSMessage, ev *events.EventBridgeEvent) (context.Context, trace.Span) {
	if !outboxtrace.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	var f traceFields
	if ev != nil {
		_ = json.Unmarshal(ev.Detail, &f) // tolerant: the handler judges the detail
	}
	writer := outboxtrace.Remote(f.TraceParent, f.TraceState)
	parent := outboxtrace.FromXRayHeader(m.Attributes[outboxtrace.AWSTraceHeader])
	var links []trace.Link
	if inv := trace.SpanContextFromContext(ctx); inv.IsValid() {
		links = append(links, trace.Link{SpanContext: inv})
	}
	if !parent.IsValid() {
		parent = writer
	} else if writer.IsValid() && !writer.Equal(parent) {
		links = append(links, trace.Link{SpanContext: writer})
	}
	pctx := outboxtrace.ParentOrNew(ctx, parent)
	name := "consume " + h.cfg.Name
	if f.EventType != "" {
		name += " " + f.EventType
	}
	return outboxtrace.Tracer().Start(pctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(
			outboxtrace.AttrConsumer.String(h.cfg.Name),
			outboxtrace.AttrEventID.String(f.EventID),
			outboxtrace.AttrEventType.String(f.EventType),
			outboxtrace.AttrAggregateID.String(f.AggregateID),
			outboxtrace.AttrSequence.Int64(f.Sequence),
			outboxtrace.AttrReceiveCount.Int(ReceiveCount(m)),
		))
}

// handlerOutcome returns the outcome the handler recorded on span
// (outboxtrace.SetOutcome), "" if none or tracing is off.
func handlerOutcome(span trace.Span) string {
	ro, ok := span.(interface{ Attributes() []attribute.KeyValue })
	if !ok || !span.IsRecording() {
		return ""
	}
	for _, kv := range ro.Attributes() {
		if kv.Key == outboxtrace.AttrOutcome {
			return kv.Value.AsString()
		}
	}
	return ""
}

// endMessageSpan records the delivery's final outcome when the handler set
// none (dead-lettered and retry override: they decide what happens to the
// message) and ends the span.
func endMessageSpan(span trace.Span, outcome, reason string, err error) {
	if !span.IsRecording() {
		return
	}
	if outcome != "" {
		span.SetAttributes(outboxtrace.AttrOutcome.String(outcome))
	}
	if reason != "" {
		span.SetAttributes(outboxtrace.AttrReason.String(reason))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
