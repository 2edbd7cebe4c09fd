//go:build !notrace

package app

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// The OpenTelemetry wiring of the API's HTTP server. The tracer provider
// and the AWS SDK instrumentation are pkg/lambdamain's. A binary built with
// the tag notrace (make build, the default for Lambda) leaves this file and
// otelhttp out (tracing_notrace.go).

// instrumentHTTP wraps the API handler in one server span per request (a
// caller's W3C traceparent or X-Amzn-Trace-Id as its parent, through the
// global propagator): the span whose context the order repository stores
// with the events.
func instrumentHTTP(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "api", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method + " " + routeTemplate(r.URL.Path)
	}))
}
