package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

func loadEvent(t *testing.T, path string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var req events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	return req
}

func TestLambdaHandlerHTTPAPIv2(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	handle := api.LambdaHandler(f.h)
	ctx := context.Background()

	req := loadEvent(t, "testdata/apigw_v2_create_order.json")
	resp, err := handle(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Headers["Content-Type"] != "application/json" {
		t.Fatalf("create: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	}
	var o order.Order
	if err := json.Unmarshal([]byte(resp.Body), &o); err != nil {
		t.Fatal(err)
	}
	if o.CustomerID != "c-lambda" || o.AmountMinor != 2500 || o.Currency != "GBP" || o.Version != 1 {
		t.Fatalf("order %+v", o)
	}
	if resp.Headers[api.HeaderCorrelationID] != "corr-lambda-1" || resp.Headers["Location"] != "/orders/"+o.ID {
		t.Fatalf("headers %v", resp.Headers)
	}

	// The same event again is an idempotent replay.
	again, err := handle(ctx, req)
	if err != nil || again.StatusCode != http.StatusOK || again.Body != resp.Body {
		t.Fatalf("replay: %v %d %s", err, again.StatusCode, again.Body)
	}

	// A command through the adapter: the API Gateway request id becomes the
	// causation id.
	pay := req
	pay.RouteKey = "POST /orders/{id}/pay"
	pay.RawPath = "/orders/" + o.ID + "/pay"
	pay.RequestContext.HTTP.Path = pay.RawPath
	pay.RequestContext.RequestID = "pay-request-1"
	pay.Headers = map[string]string{"if-match": `"1"`}
	pay.Body, pay.IsBase64Encoded = "", false
	pr, err := handle(ctx, pay)
	if err != nil || pr.StatusCode != http.StatusOK || pr.Headers["Etag"] != `"2"` && pr.Headers["ETag"] != `"2"` {
		t.Fatalf("pay: %v %d %v %s", err, pr.StatusCode, pr.Headers, pr.Body)
	}
	recs := f.records(t, o.ID)
	if len(recs) != 2 || recs[1].Envelope.CausationID != "pay-request-1" || recs[0].Envelope.CausationID != "lambda-key-1" {
		t.Fatalf("outbox %+v", recs)
	}

	// Errors keep their JSON shape through the adapter.
	get := pay
	get.RawPath = "/orders/nope"
	get.RequestContext.HTTP.Method = "GET"
	get.RequestContext.HTTP.Path = get.RawPath
	gr, err := handle(ctx, get)
	if err != nil || gr.StatusCode != http.StatusNotFound {
		t.Fatalf("get: %v %d %s", err, gr.StatusCode, gr.Body)
	}
	var e api.ErrorBody
	if err := json.Unmarshal([]byte(gr.Body), &e); err != nil || e.Code != api.CodeNotFound {
		t.Fatalf("error body %s", gr.Body)
	}

	// An undecodable base64 body is answered 400 bad_request, not failed
	// and not 500.
	bad := req
	bad.Body = "%%%"
	br, err := handle(ctx, bad)
	if err != nil || br.StatusCode != http.StatusBadRequest || !strings.Contains(br.Body, api.CodeBadRequest) {
		t.Fatalf("bad event: %v %d %s", err, br.StatusCode, br.Body)
	}
}
