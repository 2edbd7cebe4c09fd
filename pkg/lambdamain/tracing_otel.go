//go:build !notrace

package lambdamain

import (
	"context"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	// otelaws is deprecated in contrib (v0.72) in favour of the SDK's own
	// tracing, which is set per service client (Options.TracerProvider,
	// smithyoteltracing), not on aws.Config: moving every client of the
	// functions to it is tracked in the CHANGELOG's Unreleased section.
	"go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws" //nolint:staticcheck // SA1019: see above

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// initTracing installs the OTLP tracer provider when rt.Tracing (batched;
// Traced flushes before each answer, because Lambda freezes the
// environment between invocations) and adds the OpenTelemetry AWS SDK
// middleware to rt.AWS. Off: nothing is installed and rt.AWS is unchanged.
func initTracing(ctx context.Context, rt *Runtime) error {
	if !rt.Tracing {
		return nil
	}
	name := os.Getenv(config.EnvLambdaFunctionName)
	if name == "" {
		name = "ddb-outbox"
	}
	tp, _, err := otelsetup.Setup(ctx, otelsetup.Config{Enabled: true, ServiceName: name})
	if err != nil {
		return err
	}
	tracerFlush = tp
	InstrumentAWS(&rt.AWS)
	rt.Logger.Info("tracing on: OTLP export", "service", name)
	return nil
}

// InstrumentAWS adds the OpenTelemetry AWS SDK middleware (otelaws) to cfg:
// one client span per AWS call, under the caller's span, with its
// operation, region and request id. In a binary built with the tag notrace
// it does nothing.
func InstrumentAWS(cfg *aws.Config) {
	otelaws.AppendMiddlewares(&cfg.APIOptions)
}
