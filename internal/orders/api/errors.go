package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Error codes: the "code" member of every error body. Clients branch on the
// code, never on the message.
//
//	status code                    when
//	400    bad_request             the API Gateway event could not be turned into a request (a method that is not
//	                               an HTTP token, a body flagged base64 that is not base64); API Gateway never sends one
//	400    malformed_json          body is not exactly one JSON object, or is empty where one is required
//	400    unknown_field           the object has a member the endpoint does not define (exact, case-sensitive names)
//	400    invalid_type            a member has the wrong JSON type (e.g. amount_minor 12.5 or "12", or beyond int64)
//	400    invalid_header          malformed Idempotency-Key, If-Match or X-Caller
//	401    unauthenticated         no authenticated caller (no API Gateway IAM principal; see CallerMode)
//	404    not_found               no such order, or no such route
//	405    method_not_allowed      the route exists for other methods (see the Allow header)
//	409    invalid_transition      the command is not allowed in the order's status
//	409    version_conflict        If-Match differs from the order's version, or a concurrent change won
//	409    idempotency_key_reused  the Idempotency-Key was used with a different request body
//	409    request_in_progress     a create kept conflicting with concurrent transactions (e.g. the same
//	                               Idempotency-Key) past the retries; nothing was written; retry
//	409    already_exists          the generated order id is taken (should not happen)
//	413    payload_too_large       body larger than Config.MaxBodyBytes
//	415    unsupported_media_type  a body without Content-Type application/json
//	421    wrong_region            multi-Region mode: the order's home is another Region (ErrorBody.HomeRegion names
//	                               it; send the request to that Region's API), or the order has no home Region item
//	                               yet (HomeRegion empty: an operator claims it, outbox.Writer.ClaimHome); nothing
//	                               was written (outbox.ErrNotHomeRegion)
//	422    validation_failed       well-formed but invalid values (amount, currency, customer id length, reason length)
//	422    invalid_text            a text field holds a forbidden character: customer_id outside [A-Za-z0-9._:@-],
//	                               or a reason with a control (Cc: ESC, CR, LF, TAB, ...), format (Cf: U+202E, ...),
//	                               line/paragraph separator or noncharacter code point (order.CheckText)
//	500    internal                anything else; details are logged, never returned
//	503    unavailable             DynamoDB throttled past the retries, timed out, cancelled the transaction without
//	                               naming a conflict, or an item collection is full; nothing was written; retry later
const (
	CodeBadRequest           = "bad_request"
	CodeMalformedJSON        = "malformed_json"
	CodeUnknownField         = "unknown_field"
	CodeInvalidType          = "invalid_type"
	CodeInvalidHeader        = "invalid_header"
	CodeUnauthenticated      = "unauthenticated"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeInvalidTransition    = "invalid_transition"
	CodeVersionConflict      = "version_conflict"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeRequestInProgress    = "request_in_progress"
	CodeAlreadyExists        = "already_exists"
	CodePayloadTooLarge      = "payload_too_large"
	CodeUnsupportedMedia     = "unsupported_media_type"
	CodeWrongRegion          = "wrong_region"
	CodeValidationFailed     = "validation_failed"
	CodeInvalidText          = "invalid_text"
	CodeInternal             = "internal"
	CodeUnavailable          = "unavailable"
)

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	// Code is a stable, machine-readable code (see the Code* constants).
	Code string `json:"code"`
	// Message is a human-readable explanation; it never carries internals.
	Message string `json:"message"`
	// HomeRegion is set with CodeWrongRegion: the Region (e.g.
	// "eu-west-1") whose API writes the order; omitted when the order has
	// no home Region yet, and with every other code.
	HomeRegion string `json:"home_region,omitempty"`
}

// apiError is an error with its HTTP status and code.
type apiError struct {
	status     int
	code       string
	message    string
	homeRegion string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func newError(status int, code, message string) *apiError {
	return &apiError{status: status, code: code, message: message}
}

// classify maps an error from the order package (or the SDK) to a response.
// internal is true when the error is unexpected and must be logged in full.
func classify(err error) (e *apiError, internal bool) {
	var ae *apiError
	var nh *outbox.NotHomeError
	switch {
	case errors.As(err, &ae):
		return ae, false
	case errors.As(err, &nh):
		e := newError(http.StatusMisdirectedRequest, CodeWrongRegion, "the order is written in Region "+nh.Home+", not here; send the request to that Region")
		if nh.Home == "" {
			e.message = "the order has no home Region yet, so no Region accepts its changes; an operator claims it for one Region"
		}
		e.homeRegion = nh.Home
		return e, false
	case errors.Is(err, outbox.ErrNotHomeRegion):
		return newError(http.StatusMisdirectedRequest, CodeWrongRegion, "the order is written in another Region"), false
	case errors.Is(err, order.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "order not found"), false
	case errors.Is(err, order.ErrInvalidTransition):
		return newError(http.StatusConflict, CodeInvalidTransition, err.Error()), false
	case errors.Is(err, order.ErrVersionConflict):
		return newError(http.StatusConflict, CodeVersionConflict, "the order was changed by another request; read it again and retry"), false
	case errors.Is(err, order.ErrIdempotencyKeyReused):
		return newError(http.StatusConflict, CodeIdempotencyKeyReused, "the Idempotency-Key was already used with a different request body"), false
	case errors.Is(err, order.ErrConcurrentRequest):
		return newError(http.StatusConflict, CodeRequestInProgress, "a request with the same Idempotency-Key is in progress; retry"), false
	case errors.Is(err, order.ErrAlreadyExists):
		return newError(http.StatusConflict, CodeAlreadyExists, "order already exists"), false
	case errors.Is(err, order.ErrInvalidText) || errors.Is(err, outbox.ErrUndeliverableText):
		return newError(http.StatusUnprocessableEntity, CodeInvalidText, err.Error()), false
	case errors.Is(err, order.ErrValidation):
		return newError(http.StatusUnprocessableEntity, CodeValidationFailed, err.Error()), false
	case errors.Is(err, order.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || isThrottle(err):
		return newError(http.StatusServiceUnavailable, CodeUnavailable, "the service is busy; retry later"), true
	}
	return newError(http.StatusInternalServerError, CodeInternal, "internal error"), true
}

func isThrottle(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded":
		return true
	}
	return false
}
