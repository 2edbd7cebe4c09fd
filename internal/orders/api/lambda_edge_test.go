package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// existingID is the one order edgeOrders holds.
const existingID = "01900f79-ffaa-7bcd-8e01-23456789abcd"

// edgeOrders holds one order (existingID) and records every id the handler
// asks for, so a test can tell which resource a request reached.
type edgeOrders struct {
	mu  sync.Mutex
	ids []string
	now time.Time
}

func (f *edgeOrders) touch(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, id)
}

func (f *edgeOrders) touched() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

func (f *edgeOrders) Get(_ context.Context, id string) (order.Order, error) {
	f.touch(id)
	if id != existingID {
		return order.Order{}, order.ErrNotFound
	}
	o, _, err := order.Place(order.PlaceInput{ID: id, CustomerID: "c-1", AmountMinor: 100, Currency: "EUR"}, f.now)
	return *o, err
}

func (f *edgeOrders) Create(_ context.Context, o *order.Order, _ []outbox.Event, _ order.CreateMeta) (order.Order, bool, error) {
	return *o, true, nil
}

func (f *edgeOrders) Update(ctx context.Context, id string, fn order.UpdateFunc, _ order.UpdateMeta) (order.Order, error) {
	o, err := f.Get(ctx, id)
	if err != nil {
		return order.Order{}, err
	}
	if _, err := fn(&o); err != nil {
		return order.Order{}, err
	}
	return o, nil
}

// lockedBuffer is a concurrency-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// edgeHandler returns LambdaHandler over an edgeOrders with JSON logs
// captured in the returned buffer.
func edgeHandler(t *testing.T) (LambdaFunc, *edgeOrders, *lockedBuffer) {
	t.Helper()
	now := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
	orders := &edgeOrders{now: now}
	logs := &lockedBuffer{}
	h, err := New(Config{Orders: orders, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Now: func() time.Time { return now },
		Callers: CallersOpenDemo})
	if err != nil {
		t.Fatal(err)
	}
	return LambdaHandler(h), orders, logs
}

// edgeEvent is an API Gateway v2 event as API Gateway delivers it: rawPath
// already percent-decoded, domain name set.
func edgeEvent(method, rawPath, rawQuery string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "$default",
		RawPath:        rawPath,
		RawQueryString: rawQuery,
		Headers:        map[string]string{"host": "abcdef1234.execute-api.eu-west-1.amazonaws.com"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			DomainName: "abcdef1234.execute-api.eu-west-1.amazonaws.com",
			RequestID:  "req-edge",
			Stage:      "$default",
			HTTP:       events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: rawPath, Protocol: "HTTP/1.1", SourceIP: "203.0.113.7"},
		},
	}
}

// noErrorLines fails if any captured log record is at ERROR level: a client
// must not be able to raise an operator alarm at will.
func noErrorLines(t *testing.T, logs *lockedBuffer) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == "ERROR" {
			t.Fatalf("client-triggered ERROR log: %s", line)
		}
	}
}

// TestLambdaEdgeEvents: the inputs. API Gateway hands over rawPath
// percent-decoded; an event the adapter used to fail to convert (500 and an
// ERROR line "invalid URL escape") or converted into another resource (the
// decoded "?" read as a query) is a JSON 4xx, and the route is matched on
// the path API Gateway matched.
func TestLambdaEdgeEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ev      events.APIGatewayV2HTTPRequest
		status  int
		code    string
		reached string // the order id the handler asked the store for; "" = none
	}{
		{"GET /orders/100% (client sent %25)", edgeEvent("GET", "/orders/100%", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/%zz", edgeEvent("GET", "/orders/%zz", ""), http.StatusNotFound, CodeNotFound, ""},
		{"POST /orders/<id>%/pay", edgeEvent("POST", "/orders/"+existingID+"%/pay", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/<id>?x=1 (client sent %3F)", edgeEvent("GET", "/orders/"+existingID+"?x=1", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/<id>#frag (client sent %23)", edgeEvent("GET", "/orders/"+existingID+"#x", ""), http.StatusNotFound, CodeNotFound, ""},
		{"POST /orders/<id>?/pay", edgeEvent("POST", "/orders/"+existingID+"?/pay", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/<id>%2F (client sent %252F)", edgeEvent("GET", "/orders/"+existingID+"%2F", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/%", edgeEvent("GET", "/orders/%", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/<id> with NUL", edgeEvent("GET", "/orders/"+existingID+"\x00", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/<id> with a newline", edgeEvent("GET", "/orders/"+existingID+"\n", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /%zz", edgeEvent("GET", "/%zz", ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET orders/<id> without leading slash", edgeEvent("GET", "orders/"+existingID, ""), http.StatusOK, "", existingID},
		{"GET //orders/<id>", edgeEvent("GET", "//orders/"+existingID, ""), http.StatusNotFound, CodeNotFound, ""},
		{"GET /orders/<id>/../<id>", edgeEvent("GET", "/orders/x/../"+existingID, ""), http.StatusNotFound, CodeNotFound, ""},
		{"bad raw query string", edgeEvent("GET", "/orders/"+existingID, "a=%zz&b=\x7f;c"), http.StatusOK, "", existingID},
		{"empty rawPath falls back to http.path", func() events.APIGatewayV2HTTPRequest {
			ev := edgeEvent("GET", "", "")
			ev.RequestContext.HTTP.Path = "/orders/" + existingID
			return ev
		}(), http.StatusOK, "", existingID},
		{"lower-case method", edgeEvent("get", "/orders/"+existingID, ""), http.StatusOK, "", existingID},
		{"method with a space", edgeEvent("GET /orders/x HTTP/1.1\r\n", "/orders/"+existingID, ""), http.StatusBadRequest, CodeBadRequest, ""},
		{"empty method", edgeEvent("", "/orders/"+existingID, ""), http.StatusBadRequest, CodeBadRequest, ""},
		{"body flagged base64 that is not", func() events.APIGatewayV2HTTPRequest {
			ev := edgeEvent("POST", "/orders", "")
			ev.Body, ev.IsBase64Encoded = "%%%", true
			return ev
		}(), http.StatusBadRequest, CodeBadRequest, ""},
		{"domain name with URL syntax", func() events.APIGatewayV2HTTPRequest {
			ev := edgeEvent("GET", "/orders/"+existingID, "")
			ev.RequestContext.DomainName = "evil.example/orders/x?y=#"
			return ev
		}(), http.StatusOK, "", existingID},
		{"empty domain name", func() events.APIGatewayV2HTTPRequest {
			ev := edgeEvent("GET", "/orders/100%", "")
			ev.RequestContext.DomainName = ""
			return ev
		}(), http.StatusNotFound, CodeNotFound, ""},
		{"control: GET /orders/<id>", edgeEvent("GET", "/orders/"+existingID, ""), http.StatusOK, "", existingID},
		{"control: POST /orders/<id>/pay", edgeEvent("POST", "/orders/"+existingID+"/pay", ""), http.StatusOK, "", existingID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			handle, orders, logs := edgeHandler(t)
			resp, err := handle(context.Background(), tt.ev)
			if err != nil {
				t.Fatalf("invocation failed: %v", err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, resp.Body)
			}
			if ct := resp.Headers["Content-Type"]; ct != "application/json" {
				t.Fatalf("Content-Type %q: %s", ct, resp.Body)
			}
			if tt.code != "" {
				var e ErrorBody
				if err := json.Unmarshal([]byte(resp.Body), &e); err != nil || e.Code != tt.code {
					t.Fatalf("body %s, want code %s", resp.Body, tt.code)
				}
			}
			got := orders.touched()
			for _, id := range got {
				if id != tt.reached {
					t.Fatalf("the request reached order %q, want %q", id, tt.reached)
				}
			}
			if tt.reached != "" && len(got) == 0 {
				t.Fatalf("the request never reached order %q", tt.reached)
			}
			noErrorLines(t, logs)
		})
	}
}

// FuzzLambdaEvent: whatever API Gateway event arrives (path, method, query,
// body, base64 flag, header), LambdaHandler answers without failing the
// invocation, never with a 5xx, always with a JSON body, never logs at
// ERROR, and reaches an order only through the exact id in a well-formed
// path.
func FuzzLambdaEvent(f *testing.F) {
	for _, s := range []struct {
		method, path, query, body, header string
		b64                               bool
	}{
		{"GET", "/orders/100%", "", "", "", false},
		{"GET", "/orders/%zz", "", "", "", false},
		{"POST", "/orders/" + existingID + "%/pay", "", "", "", false},
		{"GET", "/orders/" + existingID + "?x=1", "", "", "", false},
		{"GET", "/orders/" + existingID, "x=%zz", "", "", false},
		{"POST", "/orders", "", base64.StdEncoding.EncodeToString([]byte(`{"customer_id":"c","amount_minor":1,"currency":"EUR"}`)), "application/json", true},
		{"POST", "/orders", "", "%%%", "application/json", true},
		{"PATCH", "/orders/" + existingID + "/cancel", "", `{"reason":"x"}`, "text/plain", false},
		{"G ET", "/", "", "", "", false},
	} {
		f.Add(s.method, s.path, s.query, s.body, s.header, s.b64)
	}
	f.Fuzz(func(t *testing.T, method, rawPath, query, body, contentType string, b64 bool) {
		handle, orders, logs := edgeHandler(t)
		ev := edgeEvent(method, rawPath, query)
		ev.Body, ev.IsBase64Encoded = body, b64
		ev.Headers["content-type"] = contentType
		resp, err := handle(context.Background(), ev)
		if err != nil {
			t.Fatalf("invocation failed: %v", err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("status %d for %q %q: %s", resp.StatusCode, method, rawPath, resp.Body)
		}
		if !json.Valid([]byte(resp.Body)) {
			t.Fatalf("body is not JSON: %q", resp.Body)
		}
		for _, id := range orders.touched() {
			p := strings.TrimPrefix(strings.TrimPrefix(rawPath, "/"), "orders/")
			if id != existingID && order.ValidateID(id) == nil && !strings.HasPrefix(p, id) {
				t.Fatalf("path %q reached order %q", rawPath, id)
			}
			if id == existingID && !strings.HasPrefix(p, existingID) {
				t.Fatalf("path %q reached order %q", rawPath, id)
			}
		}
		noErrorLines(t, logs)
	})
}
