//go:build !notrace

package app

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	// otelaws is deprecated in contrib (v0.72) in favour of the SDK's own
	// tracing, which is set per service client (Options.TracerProvider,
	// smithyoteltracing), not on aws.Config: moving every client of the
	// functions to it is tracked in the CHANGELOG's Unreleased section.
	"go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws" //nolint:staticcheck // SA1019: see above
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// The OpenTelemetry SDK wiring of the functions. A binary built with the
// tag notrace (make build, the default for Lambda) leaves this file, the
// SDK, the OTLP exporter, otelaws and otelhttp out (tracing_notrace.go):
// about half the binary and 2 ms of init (docs/BENCHMARKS.md, Tracing overhead).

// initTracing installs the OTLP tracer provider when s.Tracing and adds the
// OpenTelemetry AWS SDK middleware (otelaws: one span per SDK call) to cfg.
// Off: nothing is installed and cfg is unchanged.
func initTracing(s Settings, cfg *aws.Config, log *slog.Logger) error {
	if !s.Tracing {
		return nil
	}
	tp, _, err := otelsetup.Setup(context.Background(), otelsetup.Config{
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

// instrumentHTTP wraps the API handler in one server span per request (a
// caller's W3C traceparent or X-Amzn-Trace-Id as its parent, through the
// global propagator): the span whose context the order repository stores
// with the events.
func instrumentHTTP(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "api", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method + " " + routeTemplate(r.URL.Path)
	}))
}

func serviceName() string {
	if n := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); n != "" {
		return n
	}
	return "ddb-outbox"
}
