package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
)

// CallerMode selects where the handler takes the caller identity from. The
// identity becomes the actor of every change (order.CreateMeta.Actor,
// order.UpdateMeta.Actor: stored on the order and in each event envelope)
// and scopes Idempotency-Key values, so it must never come from something a
// client can set on AWS.
type CallerMode int

const (
	// CallersAuto (the default) decides per request:
	//
	//   - A request that came through API Gateway (LambdaHandler, or any
	//     aws-lambda-go-api-proxy v2 adapter: the API Gateway request context
	//     is in the request's context) is identified by the most specific
	//     identity API Gateway's IAM authorizer authenticated (see
	//     gatewayCaller): the Cognito identity
	//     (requestContext.authorizer.iam.cognitoIdentity) of a caller signing
	//     with identity pool credentials, whose userArn is the pool role's
	//     session that every user of the pool shares; otherwise the IAM
	//     principal that signed with SigV4,
	//     requestContext.authorizer.iam.userArn. Without one, or for a pool
	//     role session without its identity, the request is refused 401
	//     unauthenticated. X-Caller is ignored, so a client on AWS cannot
	//     choose its identity with a header.
	//   - A request served directly over net/http (the local dev stack,
	//     tests; nothing on AWS) is identified by the local stand-in: the
	//     X-Caller header as "local:<value>", or LocalCaller when absent.
	CallersAuto CallerMode = iota
	// CallersIAMOnly is CallersAuto without the local stand-in: a request
	// without an API Gateway IAM principal is refused 401. Use it for any
	// deployment that serves the handler over plain HTTP outside a developer
	// machine (such a deployment needs its own authentication in front).
	CallersIAMOnly
	// CallersOpenDemo is CallersAuto for an API deployed without
	// authorization (the infra auth mode NONE, demos only): a request through
	// API Gateway without an IAM principal is served as AnonymousCaller
	// instead of 401. Every anonymous client then shares one idempotency
	// scope, so the key oracle, replay and squatting between clients are
	// back: never use it for real traffic.
	CallersOpenDemo
)

// AnonymousCaller is the actor of an unauthenticated API Gateway request
// under CallersOpenDemo.
const AnonymousCaller = "anonymous"

// HeaderCaller is the local stand-in for the caller identity (CallersAuto,
// plain net/http requests only): 1..MaxLocalCallerLen characters of
// [A-Za-z0-9._:@-]. The actor recorded is "local:" + the value.
const HeaderCaller = "X-Caller"

// LocalCaller is the actor of a plain net/http request without X-Caller
// (CallersAuto).
const LocalCaller = "local"

// MaxLocalCallerLen is the maximum X-Caller length in bytes.
const MaxLocalCallerLen = 128

// callerKey and requestKey are the context keys of a request's caller and
// request id, set once in ServeHTTP.
type (
	callerKey  struct{}
	requestKey struct{}
)

// Caller returns the caller identity ServeHTTP established for the request
// whose context is ctx (an IAM principal ARN such as
// "arn:aws:sts::123456789012:assumed-role/checkout/i-0abc", a Cognito
// identity "cognito-identity:<identityPoolId>/<identityId>", or "local" /
// "local:<X-Caller>"), and whether there is one. It is for code running
// below the Handler (e.g. a wrapped order repository).
func Caller(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(callerKey{}).(string)
	return c, ok && c != ""
}

// resolveCaller returns the caller of r (see CallerMode) or a 401
// unauthenticated / 400 invalid_header error.
//
// Only the request context is read, never the X-GoLambdaProxy-ApiGatewayContext
// header that aws-lambda-go-api-proxy's header accessors
// (RequestAccessorV2.GetAPIGatewayContextV2) trust: a client can send that
// header (ServeHTTP deletes it).
func (h *Handler) resolveCaller(r *http.Request) (string, error) {
	unauthenticated := newError(http.StatusUnauthorized, CodeUnauthenticated, "the request carries no authenticated IAM principal; sign it with SigV4")
	if rc, ok := gatewayContext(r.Context()); ok {
		if rc.Authorizer == nil || rc.Authorizer.IAM == nil || rc.Authorizer.IAM.UserARN == "" {
			if h.cfg.Callers == CallersOpenDemo {
				return AnonymousCaller, nil
			}
			return "", unauthenticated
		}
		actor, err := gatewayCaller(rc.Authorizer.IAM)
		if err != nil {
			return "", newError(http.StatusUnauthorized, CodeUnauthenticated, err.Error())
		}
		if err := order.ValidateActor(actor); err != nil {
			return "", unauthenticated
		}
		return actor, nil
	}
	if h.cfg.Callers == CallersIAMOnly {
		return "", unauthenticated
	}
	vals := r.Header.Values(HeaderCaller)
	switch {
	case len(vals) == 0:
		return LocalCaller, nil
	case len(vals) > 1 || !localCallerValue(vals[0]):
		return "", newError(http.StatusBadRequest, CodeInvalidHeader, fmt.Sprintf("%s must be given once, 1..%d characters of A-Z a-z 0-9 . _ : @ -", HeaderCaller, MaxLocalCallerLen))
	}
	return LocalCaller + ":" + vals[0], nil
}

// CognitoActorPrefix starts the actor of a Cognito identity pool caller:
// "cognito-identity:<identityPoolId>/<identityId>", e.g.
// "cognito-identity:eu-west-1:9f8e…/eu-west-1:0a1b…". It is not an ARN, so
// order.IdempotencyScope keeps it whole: each identity is its own
// idempotency scope.
const CognitoActorPrefix = "cognito-identity:"

// CognitoSessionName is the role session name of identity pool credentials
// (userArn "arn:aws:sts::<account>:assumed-role/<pool role>/CognitoIdentityCredentials",
// callerId "<role id>:CognitoIdentityCredentials"): one name for every user
// of the pool.
const CognitoSessionName = "CognitoIdentityCredentials"

// cognitoID is the form Amazon Cognito gives identity ids and identity pool
// ids, "REGION:GUID": pattern [\w-]+:[0-9a-f-]+, 1..55 characters (Cognito
// Identity API reference, IdentityId and IdentityPoolId).
var cognitoID = regexp.MustCompile(`^[\w-]+:[0-9a-f-]+$`)

func validCognitoID(s string) bool { return len(s) <= 55 && cognitoID.MatchString(s) }

// gatewayCaller returns the caller of an API Gateway HTTP API request
// authorized with IAM (payload 2.0 requestContext.authorizer.iam; aws-lambda-go
// APIGatewayV2HTTPRequestContextAuthorizerIAMDescription): the most specific
// identity it gives.
//
//   - cognitoIdentity with an identityId: a caller signing with Cognito
//     identity pool credentials. Every user of the pool signs as the same
//     role session (userArn …/assumed-role/<pool role>/CognitoIdentityCredentials),
//     so the role tells them apart no better than it would tell apart the
//     pool's users: the caller is CognitoActorPrefix + identityPoolId + "/" +
//     identityId. Both must have Cognito's form.
//   - otherwise userArn: an IAM user, or a role session (whose idempotency
//     scope is the role, order.IdempotencyScope: the role is one caller).
//
// It returns an error (a 401 for the client) when there is no userArn, when
// a cognitoIdentity is present but incomplete or malformed, and when the
// userArn is an identity pool session (role session CognitoSessionName)
// without its cognitoIdentity: such callers cannot be told apart.
func gatewayCaller(iam *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription) (string, error) {
	if iam.UserARN == "" {
		return "", errors.New("the request carries no authenticated IAM principal; sign it with SigV4")
	}
	ci := iam.CognitoIdentity
	if ci.IdentityID != "" || ci.IdentityPoolID != "" {
		if !validCognitoID(ci.IdentityID) || !validCognitoID(ci.IdentityPoolID) {
			return "", errors.New("the request's Cognito identity is incomplete or malformed")
		}
		return CognitoActorPrefix + ci.IdentityPoolID + "/" + ci.IdentityID, nil
	}
	if strings.HasSuffix(iam.UserARN, "/"+CognitoSessionName) || strings.HasSuffix(iam.CallerID, ":"+CognitoSessionName) {
		return "", errors.New("the request is signed with Cognito identity pool credentials but carries no Cognito identity: its caller cannot be told apart from the pool's other users")
	}
	return iam.UserARN, nil
}

func localCallerValue(v string) bool {
	if v == "" || len(v) > MaxLocalCallerLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// resolveRequestID returns the API Gateway request id when running behind
// the Lambda adapter, else a valid X-Request-Id header, else a new UUID.
func resolveRequestID(r *http.Request) string {
	if rc, ok := gatewayContext(r.Context()); ok && rc.RequestID != "" {
		return rc.RequestID
	}
	if id := r.Header.Get(HeaderRequestID); validToken(id, 128) {
		return id
	}
	return uuid.NewString()
}

// requestID returns the request id ServeHTTP established.
func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestKey{}).(string)
	return id
}

// callerOf returns the caller ServeHTTP established.
func callerOf(r *http.Request) string {
	c, _ := Caller(r.Context())
	return c
}
