// Package lambdamain is what the main function of an outbox Lambda does
// once per execution environment, for the relay and the reconciler this
// module ships (functions/relay, functions/reconciler) and for a team's own
// functions: a JSON slog logger carrying the Lambda request id, the default
// AWS SDK configuration, OpenTelemetry tracing when config.EnvTracing asks
// for it, and the relay's and reconciler's handlers built from the
// environment variables the CDK module's outboxcdk.Outbox construct sets.
//
// A main is three calls:
//
//	func main() {
//		rt := lambdamain.MustInit()
//		h, err := lambdamain.RelayHandler(rt)
//		lambdamain.Check(rt.Logger, err)
//		lambda.Start(h)
//	}
//
// The package imports nothing of the example application. Build the
// functions as `make build` does (infra/README.md):
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -tags lambda.norpc,notrace -trimpath -ldflags='-s -w' -o dist/relay/bootstrap ./functions/relay
//
// With the build tag notrace the OpenTelemetry SDK, its OTLP exporter and
// the AWS SDK instrumentation are not linked (about half the binary); such a
// binary refuses config.EnvTracing=otlp at init (ErrNoTracing) rather than
// run untraced. Without the tag, tracing follows config.EnvTracing.
package lambdamain

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Runtime is what a function's init phase builds once per execution
// environment and its handlers share.
type Runtime struct {
	// AWS is the default SDK configuration (environment, shared config,
	// the function's role; endpoints follow AWS_ENDPOINT_URL and
	// AWS_ENDPOINT_URL_<SERVICE>), with the OpenTelemetry AWS SDK
	// middleware when Tracing. Build every client from it.
	AWS aws.Config
	// Logger is lambdacontext.NewLogger(): JSON lines with the request id,
	// also installed as slog.Default.
	Logger *slog.Logger
	// Tracing is config.EnvTracing = config.TracingOn: Init installed the
	// OTLP tracer provider and Traced wraps handlers in a span.
	Tracing bool
}

// TracingFromEnv reads config.EnvTracing (OUTBOX_TRACING): config.TracingOff
// ("off", the default when unset) or config.TracingOn ("otlp"). Any other
// value is an error naming the variable.
func TracingFromEnv() (bool, error) {
	switch v := config.String(config.EnvTracing, config.TracingOff); v {
	case config.TracingOff:
		return false, nil
	case config.TracingOn:
		return true, nil
	default:
		return false, fmt.Errorf("config: %s=%q is not %q or %q", config.EnvTracing, v, config.TracingOff, config.TracingOn)
	}
}

// Init builds the Runtime: the logger (installed as slog.Default), tracing
// from config.EnvTracing (TracingFromEnv) and the default SDK
// configuration. With tracing on it installs the OTLP tracer provider
// (otelsetup.Setup, service name AWS_LAMBDA_FUNCTION_NAME) and the AWS SDK
// instrumentation. Errors: an invalid config.EnvTracing, an SDK
// configuration that does not load, tracing asked of a binary built with
// the tag notrace (ErrNoTracing), or the exporter's construction error.
// The Logger is set even when an error is returned.
func Init(ctx context.Context) (Runtime, error) {
	rt := Runtime{Logger: lambdacontext.NewLogger()}
	slog.SetDefault(rt.Logger)
	var err error
	if rt.Tracing, err = TracingFromEnv(); err != nil {
		return rt, err
	}
	if rt.AWS, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
		return rt, fmt.Errorf("load AWS config: %w", err)
	}
	return rt, initTracing(ctx, &rt)
}

// MustInit is Init for a main function: on an error it logs "init failed"
// and exits the process (Check), which Lambda reports as an init error.
func MustInit() Runtime {
	rt, err := Init(context.Background())
	Check(rt.Logger, err)
	return rt
}

// Check logs "init failed" with err and exits the process with status 1
// when err is not nil; Lambda reports it as the function's init error. For
// main functions during init only, never for handlers.
func Check(log *slog.Logger, err error) {
	if err == nil {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	log.Error("init failed", "error", err)
	os.Exit(1)
}

// NewRelay builds the outbox relay from the environment (relay.ConfigFromEnv)
// with clients from rt.AWS, logging to rt.Logger. Errors: a missing or
// invalid variable (named), or the relay's own Validate error.
func NewRelay(rt Runtime) (*relay.Relay, error) {
	cfg, err := relay.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	cfg.Logger = rt.Logger
	return relay.New(eventbridge.NewFromConfig(rt.AWS), dynamodb.NewFromConfig(rt.AWS), sqs.NewFromConfig(rt.AWS), cfg)
}

// RelayHandler returns the handler of the relay function (the DynamoDB
// Streams event source mapping of the outbox table, with
// ReportBatchItemFailures): NewRelay's Handle, in a span named "relay" when
// rt.Tracing. Errors: NewRelay's.
func RelayHandler(rt Runtime) (func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error), error) {
	r, err := NewRelay(rt)
	if err != nil {
		return nil, err
	}
	return Traced(rt, "relay", r.Handle), nil
}

// NewReconciler builds the reconciler from the environment
// (reconciler.ConfigFromEnv), publishing and marking through a relay built
// by NewRelay (the same publisher and marker as the stream path), with
// clients from rt.AWS. Errors: a missing or invalid variable (named), or a
// Validate error of the relay or the reconciler.
func NewReconciler(rt Runtime) (*reconciler.Reconciler, error) {
	r, err := NewRelay(rt)
	if err != nil {
		return nil, err
	}
	cfg, err := reconciler.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	cfg.Logger = rt.Logger
	return reconciler.New(dynamodb.NewFromConfig(rt.AWS), r.Publisher(), r.Marker(), cfg)
}

// ReconcilerHandler returns the handler of the reconciler function (invoked
// by its EventBridge schedule): NewReconciler's Handle, in a span named
// "reconciler" when rt.Tracing. Errors: NewReconciler's.
func ReconcilerHandler(rt Runtime) (func(context.Context, events.EventBridgeEvent) error, error) {
	r, err := NewReconciler(rt)
	if err != nil {
		return nil, err
	}
	return TracedNoResult(rt, "reconciler", r.Handle), nil
}
