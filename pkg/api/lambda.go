package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
)

// LambdaFunc is a Lambda handler for API Gateway HTTP API (payload format
// 2.0) events, as accepted by lambda.Start.
type LambdaFunc func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// LambdaHandler adapts h to API Gateway HTTP API payload 2.0 events through
// aws-lambda-go-api-proxy's httpadapter.NewV2: the request path is RawPath
// (API mapping prefix excluded; use the $default stage so no stage name is
// prepended), a base64 body is decoded, the API Gateway request context is
// put on the request context (requestContext.requestId becomes the causation
// id of commands). If the event cannot be converted, it logs the error and
// answers 500 {"code":"internal"} instead of failing the invocation. Usage:
//
//	lambda.Start(api.LambdaHandler(h))
func LambdaHandler(h http.Handler) LambdaFunc {
	adapter := httpadapter.NewV2(h)
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resp, err := adapter.ProxyWithContext(ctx, req)
		if err != nil {
			slog.ErrorContext(ctx, "api gateway adapter", "error", err.Error(), "request_id", req.RequestContext.RequestID)
			return events.APIGatewayV2HTTPResponse{
				StatusCode: http.StatusInternalServerError,
				Headers:    map[string]string{"Content-Type": "application/json"},
				Body:       `{"code":"internal","message":"internal error"}`,
			}, nil
		}
		return resp, nil
	}
}
