package app

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// flusher is what Traced needs of the tracer provider: ForceFlush before
// the invocation answers, because Lambda may freeze the execution
// environment right after.
type flusher interface {
	ForceFlush(ctx context.Context) error
}

var tracerFlush flusher

// initTracing installs the OTLP tracer provider when s.Tracing and adds the
// OpenTelemetry AWS SDK middleware (otelaws: one span per SDK call) to cfg.
// Off: nothing is installed and cfg is unchanged.
func initTracing(s Settings, cfg *aws.Config, log *slog.Logger) error {
	if !s.Tracing {
		return nil
	}
	tp, _, err := outboxtrace.Setup(context.Background(), outboxtrace.Config{
		Enabled:     true,
		ServiceName: serviceName(),
		// batched; Traced flushes before each answer, because Lambda
		// freezes the environment between invocations
	})
	if err != nil {
		return err
	}
	tracerFlush = tp
	InstrumentAWS(cfg)
	log.Info("tracing on: OTLP export", "service", serviceName())
	return nil
}

// InstrumentAWS adds the OpenTelemetry AWS SDK middleware (otelaws) to cfg:
// one client span per AWS call, under the caller's span, with its
// operation, region and request id. Used when tracing is on only: the
// middleware is never installed otherwise.
func InstrumentAWS(cfg *aws.Config) {
	otelaws.AppendMiddlewares(&cfg.APIOptions)
}

func serviceName() string {
	if n := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); n != "" {
		return n
	}
	return "ddb-outbox"
}

// Traced wraps a Lambda handler in one server span per invocation, named
// name, whose parent is the invocation's X-Ray trace header (the Lambda
// service's segment when the function has active tracing), and flushes the
// tracer provider before answering. It stands in for the contrib otellambda
// instrumentation (go.opentelemetry.io/contrib/.../otellambda), which the
// module proxy reachable here does not serve. With tracing off it returns h
// itself: no wrapper, no cost.
func Traced[In, Out any](s Settings, name string, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	if !s.Tracing {
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
// (the reconciler's scheduled event).
func TracedNoResult[In any](s Settings, name string, h func(context.Context, In) error) func(context.Context, In) error {
	if !s.Tracing {
		return h
	}
	t := Traced(s, name, func(ctx context.Context, in In) (struct{}, error) { return struct{}{}, h(ctx, in) })
	return func(ctx context.Context, in In) error {
		_, err := t(ctx, in)
		return err
	}
}
