package faults

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// MiddlewareID is the id of the fault middleware in the SDK stack.
const MiddlewareID = "FaultInjection"

// Middleware returns an AWS SDK for Go v2 stack option that faults the
// eligible operations (Config.Operations) of any client built with it:
//
//	cfg.APIOptions = append(cfg.APIOptions, inj.Middleware())
//	ddb := dynamodb.NewFromConfig(cfg) // or dynamodb.New(o, func(o *dynamodb.Options){ o.APIOptions = ... })
//
// Per call (boundary "<ServiceID>.<Operation>", e.g. "DynamoDB.UpdateItem",
// "DynamoDB Streams.GetRecords") it decides at most one of FailBeforeSend,
// Throttle, ResponseLost, plus an independent Latency:
//
//   - Latency sleeps before sending (honouring the context).
//   - FailBeforeSend returns *Error{Code: "InternalServerError"} without
//     sending.
//   - Throttle returns *Error{Code: "ProvisionedThroughputExceededException"}
//     (DynamoDB), "LimitExceededException" (DynamoDB Streams) or
//     "ThrottlingException" (others) without sending.
//   - ResponseLost sends the request, discards the response (and any error)
//     and returns *Error{Code: "RequestTimeout", Applied: true}.
//   - StatementFailed (BatchExecuteStatement only, per statement, decided
//     before the call's other faults): the statement is removed from the
//     request and answered with Error{Code: ThrottlingError or
//     InternalServerError} at its position in Responses, as DynamoDB
//     answers a partially failed batch with HTTP 200; the SDK does not
//     retry it, the caller must.
//
// Placement and retries. By default the middleware sits in the Finalize step
// right after the SDK's Retry middleware, i.e. inside the retry loop: every
// attempt is faulted separately and *Error is retryable (RetryableError),
// so the SDK's standard retryer (3 attempts by default) retries it the way
// it retries a real 500, throttle or timeout; only faults that outlast the
// SDK's attempts reach our code. This is what production sees. Two
// consequences: a retried ResponseLost re-sends the same request (the SDK
// keeps TransactWriteItems' ClientRequestToken across attempts, so DynamoDB
// answers the retry as already done; a conditional PutItem/UpdateItem sees
// its own first write), and at high rates the retryer's token bucket can run
// dry ("retry quota exceeded"): for chaos runs build clients with
// aws.Config.Retryer = func() aws.Retryer { return retry.NewStandard(func(o
// *retry.StandardOptions) { o.RateLimiter = ratelimit.None }) }.
// With Config.OutsideSDKRetries the middleware sits in the Initialize step,
// before the retry loop: the SDK never retries injected faults, so every
// fault reaches our code's own retries (relay re-send, ESM redelivery, dedup
// backoff) — the harsher setting.
func (in *Injector) Middleware() func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		if err := s.Initialize.Add(middleware.InitializeMiddlewareFunc(MiddlewareID+"Statements", in.statements), middleware.After); err != nil {
			return err
		}
		if in.cfg.OutsideSDKRetries {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc(MiddlewareID,
				func(ctx context.Context, i middleware.InitializeInput, next middleware.InitializeHandler) (out middleware.InitializeOutput, md middleware.Metadata, err error) {
					err = in.around(ctx, func() error {
						var e error
						out, md, e = next.HandleInitialize(ctx, i)
						return e
					})
					if IsInjected(err) {
						return middleware.InitializeOutput{}, md, err
					}
					return out, md, err
				}), middleware.After)
		}
		mw := middleware.FinalizeMiddlewareFunc(MiddlewareID,
			func(ctx context.Context, i middleware.FinalizeInput, next middleware.FinalizeHandler) (out middleware.FinalizeOutput, md middleware.Metadata, err error) {
				err = in.around(ctx, func() error {
					var e error
					out, md, e = next.HandleFinalize(ctx, i)
					return e
				})
				if IsInjected(err) {
					return middleware.FinalizeOutput{}, md, err
				}
				return out, md, err
			})
		if _, ok := s.Finalize.Get("Retry"); ok {
			return s.Finalize.Insert(mw, "Retry", middleware.After)
		}
		return s.Finalize.Add(mw, middleware.Before)
	}
}

// Eligible reports whether the middleware may fault operation op of
// service (its smithy ServiceID, e.g. "DynamoDB").
func (in *Injector) Eligible(service, op string) bool {
	return in.ops[op] || in.ops[service+"."+op]
}

// around runs send under the decision for the current operation.
// A faulted call returns zero output, so the SDK's deserializers never see
// it: the error is all the caller gets.
func (in *Injector) around(ctx context.Context, send func() error) error {
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	if !in.Eligible(service, op) {
		return send()
	}
	boundary := service + "." + op
	d := in.draw(boundary, FailBeforeSend, Throttle, ResponseLost)
	if err := in.wait(ctx, d.latency); err != nil {
		return err
	}
	if (in.slow[op] || in.slow[service+"."+op]) && in.Chance(boundary+".slow", SlowCall) {
		if err := in.wait(ctx, in.cfg.MaxStall); err != nil {
			return err
		}
	}
	switch d.kind {
	case FailBeforeSend, Throttle:
		return &Error{Kind: d.kind, Boundary: boundary, Code: codeFor(d.kind, service)}
	case ResponseLost:
		_ = send() // applied (or failed on its own); either way the caller cannot know
		return &Error{Kind: ResponseLost, Boundary: boundary, Code: codeFor(ResponseLost, service), Applied: true}
	}
	return send()
}

// statements applies StatementFailed to an eligible BatchExecuteStatement.
func (in *Injector) statements(ctx context.Context, i middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	params, ok := i.Parameters.(*dynamodb.BatchExecuteStatementInput)
	service := awsmiddleware.GetServiceID(ctx)
	if !ok || in.RateOf(StatementFailed) == 0 || !in.Eligible(service, "BatchExecuteStatement") {
		return next.HandleInitialize(ctx, i)
	}
	boundary := service + ".BatchExecuteStatement"
	responses := make([]ddbtypes.BatchStatementResponse, len(params.Statements))
	var fwd []ddbtypes.BatchStatementRequest
	var fwdIdx []int
	for j, st := range params.Statements {
		failed, c := in.statementDraw(boundary, j)
		if !failed {
			fwd = append(fwd, st)
			fwdIdx = append(fwdIdx, j)
			continue
		}
		code := []ddbtypes.BatchStatementErrorCodeEnum{ddbtypes.BatchStatementErrorCodeEnumThrottlingError,
			ddbtypes.BatchStatementErrorCodeEnumInternalServerError}[c]
		responses[j] = ddbtypes.BatchStatementResponse{Error: &ddbtypes.BatchStatementError{Code: code,
			Message: aws.String("injected " + string(StatementFailed))}}
	}
	if len(fwd) == len(params.Statements) {
		return next.HandleInitialize(ctx, i)
	}
	out := &dynamodb.BatchExecuteStatementOutput{}
	var md middleware.Metadata
	if len(fwd) > 0 {
		cp := *params
		cp.Statements = fwd
		i.Parameters = &cp
		res, m, err := next.HandleInitialize(ctx, i)
		if err != nil {
			return res, m, err
		}
		md = m
		got, ok := res.Result.(*dynamodb.BatchExecuteStatementOutput)
		if !ok || len(got.Responses) != len(fwd) {
			return res, m, fmt.Errorf("faults: BatchExecuteStatement answered %T for %d statements", res.Result, len(fwd))
		}
		for k, r := range got.Responses {
			responses[fwdIdx[k]] = r
		}
		out.ConsumedCapacity, out.ResultMetadata = got.ConsumedCapacity, got.ResultMetadata
	}
	out.Responses = responses
	return middleware.InitializeOutput{Result: out}, md, nil
}
