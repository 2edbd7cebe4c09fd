//go:build notrace

package app

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// errNoTracing is returned when config.EnvTracing asks for tracing in a
// binary built without it.
var errNoTracing = errors.New("app: " + config.EnvTracing + "=" + config.TracingOn + " but this binary was built with the tag notrace: build it with `make build TRACING=1`")

// initTracing, in a binary built with the tag notrace (no OpenTelemetry
// SDK, exporter or instrumentation linked), refuses tracing on: the
// function fails its init with errNoTracing rather than run untraced
// silently. Off: nothing to do.
func initTracing(s Settings, _ *aws.Config, _ *slog.Logger) error {
	if s.Tracing {
		return errNoTracing
	}
	return nil
}

// InstrumentAWS does nothing in a binary built with the tag notrace.
func InstrumentAWS(*aws.Config) {}

// instrumentHTTP returns h in a binary built with the tag notrace.
func instrumentHTTP(h http.Handler) http.Handler { return h }
