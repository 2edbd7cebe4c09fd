package faults

import (
	"errors"
	"fmt"

	"github.com/aws/smithy-go"
)

// Error is an injected failure. It satisfies smithy.APIError (so code that
// classifies AWS errors with errors.As sees its Code, e.g.
// ThrottlingException) and the SDK retryer's RetryableError interface (so
// the standard retryer retries it like a transient service error).
type Error struct {
	// Kind is the injected fault.
	Kind Kind
	// Boundary is where it was injected.
	Boundary string
	// Code is the AWS error code it imitates: InternalServerError,
	// ThrottlingException, ProvisionedThroughputExceededException,
	// LimitExceededException (DynamoDB Streams),
	// RequestTimeout (response lost), or InjectedCrash.
	Code string
	// Applied is true when the request reached the service and took effect
	// (ResponseLost, CrashAfterHandle, CrashAfterEffect).
	Applied bool
}

// Error implements error.
func (e *Error) Error() string {
	applied := "not applied"
	if e.Applied {
		applied = "applied, response lost"
	}
	return fmt.Sprintf("faults: injected %s at %s (%s; %s)", e.Kind, e.Boundary, e.Code, applied)
}

// ErrorCode implements smithy.APIError.
func (e *Error) ErrorCode() string { return e.Code }

// ErrorMessage implements smithy.APIError.
func (e *Error) ErrorMessage() string { return "injected fault: " + string(e.Kind) }

// ErrorFault implements smithy.APIError: a server fault.
func (e *Error) ErrorFault() smithy.ErrorFault { return smithy.FaultServer }

// RetryableError tells the AWS SDK retryer (aws/retry) that the error is
// transient.
func (e *Error) RetryableError() bool { return true }

// Timeout marks a lost response as a timeout, like a read deadline.
func (e *Error) Timeout() bool { return e.Kind == ResponseLost }

// IsInjected reports whether err is (or wraps) an injected fault.
func IsInjected(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// codeFor returns the AWS error code an injected kind imitates at a service.
func codeFor(k Kind, service string) string {
	switch k {
	case Throttle:
		switch service {
		case "DynamoDB":
			return "ProvisionedThroughputExceededException"
		case "DynamoDB Streams":
			return "LimitExceededException"
		}
		return "ThrottlingException"
	case ResponseLost:
		return "RequestTimeout"
	case CrashAfterHandle, CrashBeforeEffect, CrashAfterEffect:
		return "InjectedCrash"
	}
	return "InternalServerError"
}

var _ smithy.APIError = (*Error)(nil)
