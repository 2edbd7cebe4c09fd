package lambdamain

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// flusher is what Traced needs of the tracer provider: ForceFlush before
// the invocation answers, because Lambda may freeze the execution
// environment right after.
type flusher interface {
	ForceFlush(ctx context.Context) error
}

// tracerFlush is the provider Init installed (nil when tracing is off).
var tracerFlush flusher

// Traced wraps a Lambda handler in one server span per invocation, named
// name, whose parent is the invocation's X-Ray trace header (the Lambda
// service's segment when the function has active tracing), records the
// handler's error on it, and flushes the tracer provider before answering.
// It stands in for the contrib otellambda instrumentation. With rt.Tracing
// false it returns h itself: no wrapper, no cost.
func Traced[In, Out any](rt Runtime, name string, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	if !rt.Tracing {
		return h
	}
	return func(ctx context.Context, in In) (Out, error) {
		header, _ := ctx.Value(outboxtrace.LambdaTraceKey).(string)
		if header == "" {
			header = os.Getenv("_X_AMZN_TRACE_ID")
		}
		ctx = outboxtrace.ParentOrNew(ctx, outboxtrace.FromXRayHeader(header))
		ctx, span := outboxtrace.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		out, err := h(ctx, in)
		if err != nil {
			span.RecordError(err)
		}
		span.End()
		if tracerFlush != nil {
			_ = tracerFlush.ForceFlush(ctx)
		}
		return out, err
	}
}

// TracedNoResult is Traced for a handler that answers with an error only
// (the reconciler's scheduled event, a resequencer sweep).
func TracedNoResult[In any](rt Runtime, name string, h func(context.Context, In) error) func(context.Context, In) error {
	if !rt.Tracing {
		return h
	}
	t := Traced(rt, name, func(ctx context.Context, in In) (struct{}, error) { return struct{}{}, h(ctx, in) })
	return func(ctx context.Context, in In) error {
		_, err := t(ctx, in)
		return err
	}
}
