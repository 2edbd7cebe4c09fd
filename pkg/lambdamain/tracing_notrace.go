//go:build notrace

package lambdamain

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// initTracing, in a binary built with the tag notrace (no OpenTelemetry
// SDK, exporter or instrumentation linked), refuses tracing on: the
// function fails its init with ErrNoTracing rather than run untraced
// silently. Off: nothing to do.
func initTracing(_ context.Context, rt *Runtime) error {
	if rt.Tracing {
		return ErrNoTracing
	}
	return nil
}

// InstrumentAWS does nothing in a binary built with the tag notrace.
func InstrumentAWS(*aws.Config) {}
