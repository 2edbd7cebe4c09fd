package app

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/pkg/lambdamain"
)

// Traced is lambdamain.Traced with the tracing switch of s: one server span
// per invocation, parented on the invocation's X-Ray header, flushed before
// the answer; h itself when tracing is off.
func Traced[In, Out any](s Settings, name string, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return lambdamain.Traced(lambdamain.Runtime{Tracing: s.Tracing}, name, h)
}

// TracedNoResult is Traced for a handler that answers with an error only.
func TracedNoResult[In any](s Settings, name string, h func(context.Context, In) error) func(context.Context, In) error {
	return lambdamain.TracedNoResult(lambdamain.Runtime{Tracing: s.Tracing}, name, h)
}

// InstrumentAWS is lambdamain.InstrumentAWS: the OpenTelemetry AWS SDK
// middleware on cfg (nothing in a binary built with the tag notrace).
func InstrumentAWS(cfg *aws.Config) { lambdamain.InstrumentAWS(cfg) }
