package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"
)

// LambdaFunc is a Lambda handler for API Gateway HTTP API (payload format
// 2.0) events, as accepted by lambda.Start.
type LambdaFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// errBadEvent marks an API Gateway event LambdaHandler cannot turn into an
// HTTP request.
var errBadEvent = errors.New("api: API Gateway event cannot be converted to an HTTP request")

// LambdaHandler adapts h to API Gateway HTTP API payload 2.0 events. Usage:
//
//	lambda.Start(api.LambdaHandler(h))
//
// The event becomes an *http.Request without ever being re-parsed as a URL:
//
//   - The path is rawPath exactly as API Gateway hands it over, which is
//     already percent-decoded (AWS-SEMANTICS §13: a client's %25 arrives as
//     "%", %3F as "?"), falling back to requestContext.http.path when rawPath
//     is empty. It is set as URL.Path and never decoded again, so the route
//     is matched on the path API Gateway matched: "/orders/100%" and
//     "/orders/%zz" are order ids that do not exist (404 not_found), and
//     "/orders/<id>?x=1" is the order id "<id>?x=1" (404), never order <id>
//     with a query. The API mapping prefix is already excluded from rawPath;
//     use the $default stage so no stage name is prepended.
//   - The query is rawQueryString (else queryStringParameters, encoded);
//     the handler does not read it.
//   - The method is requestContext.http.method, upper-cased; a base64 body
//     (isBase64Encoded) is decoded.
//   - Headers are copied as aws-lambda-go-api-proxy's v2 adapter copies them
//     (API Gateway joins repeated headers with commas; those are split again
//     except for single-value headers such as Content-Type, Authorization,
//     User-Agent), cookies become Cookie headers, the source IP is
//     RemoteAddr, the domain name is Host.
//   - The API Gateway request context is put on the request context (see
//     CallerMode for the caller; requestContext.requestId becomes the request
//     id and causation id of commands).
//
// An event that cannot be turned into a request (a method that is not an
// HTTP token, a body flagged base64 that is not valid base64: neither comes
// through API Gateway) is answered 400 {"code":"bad_request"} and logged at
// INFO (to Config.Logger when h is a *Handler, else slog.Default()), never
// 500 and never an ERROR line. LambdaHandler itself never
// returns an error: only a handler that writes no response at all (a bug in
// h) gives 500 internal, logged at ERROR.
func LambdaHandler(h http.Handler) LambdaFunc {
	logger := slog.Default()
	if hh, ok := h.(*Handler); ok {
		logger = hh.cfg.Logger
	}
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		r, err := eventRequest(ctx, ev)
		if err != nil {
			logger.InfoContext(ctx, "http request", "status", http.StatusBadRequest, "code", CodeBadRequest,
				"request_id", ev.RequestContext.RequestID, "error", err.Error())
			return gatewayError(http.StatusBadRequest, CodeBadRequest, "the request could not be read"), nil
		}
		w := core.NewProxyResponseWriterV2()
		h.ServeHTTP(w, r)
		resp, err := w.GetProxyResponse()
		if err != nil {
			logger.ErrorContext(ctx, "api gateway response", "error", err.Error(), "request_id", ev.RequestContext.RequestID)
			return gatewayError(http.StatusInternalServerError, CodeInternal, "internal error"), nil
		}
		return resp, nil
	}
}

// gatewayError is an error response built without the handler.
func gatewayError(status int, code, message string) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers: map[string]string{
			"Content-Type":           "application/json",
			"Cache-Control":          "no-store",
			"X-Content-Type-Options": "nosniff",
		},
		Body: fmt.Sprintf(`{"code":%q,"message":%q}`+"\n", code, message),
	}
}

// gatewayKey is the context key of the API Gateway request context
// (events.APIGatewayV2HTTPRequestContext) LambdaHandler puts on a request.
type gatewayKey struct{}

// gatewayContext returns the API Gateway request context of a request that
// came through LambdaHandler, or through another aws-lambda-go-api-proxy v2
// adapter; ok is false for a plain net/http request. Only context values are
// read: a client cannot set them.
func gatewayContext(ctx context.Context) (events.APIGatewayV2HTTPRequestContext, bool) {
	if rc, ok := ctx.Value(gatewayKey{}).(events.APIGatewayV2HTTPRequestContext); ok {
		return rc, true
	}
	return core.GetAPIGatewayV2ContextFromContext(ctx)
}

// eventRequest turns ev into an *http.Request (see LambdaHandler). Errors
// wrap errBadEvent.
func eventRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	method := strings.ToUpper(ev.RequestContext.HTTP.Method)
	if !httpToken(method) {
		return nil, fmt.Errorf("%w: method %q is not an HTTP token", errBadEvent, truncate(method, 32))
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: body is not valid base64: %v", errBadEvent, err)
		}
		body = b
	}
	p := ev.RawPath
	if p == "" {
		p = ev.RequestContext.HTTP.Path
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	query := ev.RawQueryString
	if query == "" && len(ev.QueryStringParameters) > 0 {
		v := url.Values{}
		for k, val := range ev.QueryStringParameters {
			v.Add(k, val)
		}
		query = v.Encode()
	}
	// URL.Path holds the decoded path as is; URL.RawPath stays empty, so
	// EscapedPath (what ServeMux matches on) escapes "%", "?" and "#" and
	// every segment decodes back to exactly what API Gateway matched.
	u := &url.URL{Scheme: "https", Host: ev.RequestContext.DomainName, Path: p, RawQuery: query}
	host := ev.RequestContext.DomainName
	r := &http.Request{
		Method:        method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header),
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Host:          host,
		RemoteAddr:    ev.RequestContext.HTTP.SourceIP,
		RequestURI:    u.RequestURI(),
	}
	for _, c := range ev.Cookies {
		r.Header.Add("Cookie", c)
	}
	for k, v := range ev.Headers {
		if singleValueHeaders[textproto.CanonicalMIMEHeaderKey(k)] {
			r.Header.Add(k, v)
			continue
		}
		for _, part := range strings.Split(v, ",") {
			r.Header.Add(k, strings.TrimSpace(part))
		}
	}
	if r.Host == "" {
		r.Host = r.Header.Get("Host")
	}
	ctx = context.WithValue(ctx, gatewayKey{}, ev.RequestContext)
	return r.WithContext(ctx), nil
}

// singleValueHeaders are the headers whose commas are part of one value
// (RFC 9110), as aws-lambda-go-api-proxy's v2 adapter lists them.
var singleValueHeaders = map[string]bool{
	"Content-Type":        true,
	"Content-Disposition": true,
	"Content-Length":      true,
	"User-Agent":          true,
	"Referer":             true,
	"Host":                true,
	"Authorization":       true,
	"Proxy-Authorization": true,
	"If-Modified-Since":   true,
	"If-Unmodified-Since": true,
	"From":                true,
	"Location":            true,
	"Max-Forwards":        true,
}

// httpToken reports whether s is an RFC 9110 token (a valid method).
func httpToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
