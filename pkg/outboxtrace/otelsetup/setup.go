// Package otelsetup installs the OpenTelemetry SDK for a process: the tracer
// provider (X-Ray ID generator, parent-based always-on sampling), the OTLP/HTTP
// exporter or a given one, and the W3C + X-Ray propagators. It is apart from
// pkg/outboxtrace so that code using only the OpenTelemetry API (the relay,
// the consumers) does not link the SDK and the exporter: a Lambda binary built
// without tracing (make build, tag notrace) leaves this package out.
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"go.opentelemetry.io/contrib/propagators/aws/xray"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// Config configures Setup. The zero value is tracing off.
type Config struct {
	// Enabled installs an SDK tracer provider. False (the default) leaves
	// the global no-op provider: spans cost nothing and nothing is exported.
	Enabled bool
	// ServiceName is the resource's service.name (e.g. "relay"). Required
	// when Enabled.
	ServiceName string
	// Endpoint is the OTLP/HTTP endpoint, "host:port" or an http(s) URL
	// (e.g. "127.0.0.1:4318", Jaeger's or the ADOT collector layer's
	// receiver). Empty: the exporter's own settings apply
	// (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// default https://localhost:4318).
	Endpoint string
	// Exporter, when set, replaces the OTLP exporter (tests: tracetest's
	// in-memory exporter; the bench: a discarding sink).
	Exporter sdktrace.SpanExporter
	// Sync exports each span when it ends (sdktrace.WithSyncer) instead of
	// batching: for tests and for Lambda, where nothing may be left in a
	// batch when the execution environment freezes. Default false (batch).
	Sync bool
}

// Validate reports a configuration error.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	if c.ServiceName == "" {
		return errors.New("otelsetup: ServiceName is required when tracing is enabled")
	}
	if c.Endpoint != "" && c.Exporter == nil {
		if u, err := url.Parse(c.Endpoint); err == nil && u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https" && u.Host != "" {
			return fmt.Errorf("otelsetup: endpoint %q: scheme must be http or https", c.Endpoint)
		}
	}
	return nil
}

// Setup installs the global tracer provider and propagator for a process
// and returns the provider (nil when tracing is off) and a shutdown function
// that flushes and stops it (a no-op when off). With Enabled false nothing is
// installed: otel's default no-op provider stays (or replaces the provider
// an earlier Setup installed).
//
// When enabled: sampling is parent-based, always on for roots (100 %);
// span and trace ids come from the X-Ray ID generator, so every trace id is
// also a valid X-Ray trace id (its first 32 bits are the epoch seconds X-Ray
// expects) and a PutEvents TraceHeader built from it is accepted by X-Ray;
// the global propagator reads and writes both W3C traceparent/tracestate and
// X-Amzn-Trace-Id. Errors: Validate's, or the exporter's construction error.
func Setup(ctx context.Context, cfg Config) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if !cfg.Enabled {
		if outboxtrace.SetEnabled(false) {
			// a provider an earlier Setup installed is replaced by the
			// no-op one (the bench alternates tracing on and off)
			otel.SetTracerProvider(noop.NewTracerProvider())
		}
		return nil, func(context.Context) error { return nil }, nil
	}
	exp := cfg.Exporter
	if exp == nil {
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			u, err := url.Parse(cfg.Endpoint)
			if err == nil && (u.Scheme == "http" || u.Scheme == "https") {
				opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
			} else {
				opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint), otlptracehttp.WithInsecure())
			}
		}
		var err error
		exp, err = otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("otelsetup: OTLP exporter: %w", err)
		}
	}
	res := resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName))
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(xray.NewIDGenerator()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	}
	if cfg.Sync {
		opts = append(opts, sdktrace.WithSyncer(exp))
	} else {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	outboxtrace.SetEnabled(true)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}, xray.Propagator{}))
	return tp, tp.Shutdown, nil
}
