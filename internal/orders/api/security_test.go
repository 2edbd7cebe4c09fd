package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

const (
	bodyA = `{"customer_id":"alice","amount_minor":500,"currency":"USD"}`
	bodyB = `{"customer_id":"bob","amount_minor":700,"currency":"EUR"}`
)

// TestIdempotencyKeysAreScopedToTheCaller: caller B using caller A's
// Idempotency-Key learns nothing about A's key, never receives A's order, and
// cannot take the key from A. Callers are told apart by the local stand-in
// X-Caller (the IAM principal on AWS; see TestLambdaCallerIsTheIAMPrincipal).
func TestIdempotencyKeysAreScopedToTheCaller(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	// One key per case: the cases share one DynamoDB endpoint, whose
	// ClientRequestToken window is endpoint-wide (as it is account-wide on
	// AWS), and their fixtures have their own tables.
	tests := []struct {
		name string
		run  func(t *testing.T, f *fixture, key string)
	}{
		{"oracle: another body under A's key is not a 409 for B", func(t *testing.T, f *fixture, key string) {
			a := f.do(t, "POST", "/orders", bodyA, api.HeaderCaller, "a", "Idempotency-Key", key)
			if a.status != http.StatusCreated {
				t.Fatalf("A: %d %s", a.status, a.body)
			}
			b := f.do(t, "POST", "/orders", bodyB, api.HeaderCaller, "b", "Idempotency-Key", key)
			if b.status != http.StatusCreated || b.order(t).CustomerID != "bob" {
				t.Fatalf("B: %d %s, want 201 with B's own order", b.status, b.body)
			}
			// A's own reuse is still refused: the scope does not weaken A's key.
			if r := f.do(t, "POST", "/orders", bodyB, api.HeaderCaller, "a", "Idempotency-Key", key); r.status != http.StatusConflict {
				t.Fatalf("A reusing its key: %d %s", r.status, r.body)
			}
		}},
		{"replay: A's body and key give B a new order, not A's", func(t *testing.T, f *fixture, key string) {
			a := f.do(t, "POST", "/orders", bodyA, api.HeaderCaller, "a", "Idempotency-Key", key)
			if a.status != http.StatusCreated {
				t.Fatalf("A: %d %s", a.status, a.body)
			}
			b := f.do(t, "POST", "/orders", bodyA, api.HeaderCaller, "b", "Idempotency-Key", key)
			if b.status != http.StatusCreated || b.order(t).ID == a.order(t).ID {
				t.Fatalf("B replaying A: %d %s (A's order %s)", b.status, b.body, a.order(t).ID)
			}
			// A's replay still returns A's order.
			if r := f.do(t, "POST", "/orders", bodyA, api.HeaderCaller, "a", "Idempotency-Key", key); r.status != http.StatusOK || r.order(t).ID != a.order(t).ID {
				t.Fatalf("A replay: %d %s", r.status, r.body)
			}
		}},
		{"squatting: B using the key first does not block A", func(t *testing.T, f *fixture, key string) {
			b := f.do(t, "POST", "/orders", bodyB, api.HeaderCaller, "b", "Idempotency-Key", key)
			if b.status != http.StatusCreated {
				t.Fatalf("B: %d %s", b.status, b.body)
			}
			a := f.do(t, "POST", "/orders", bodyA, api.HeaderCaller, "a", "Idempotency-Key", key)
			if a.status != http.StatusCreated || a.order(t).CustomerID != "alice" || a.order(t).ID == b.order(t).ID {
				t.Fatalf("A after B squatted: %d %s", a.status, a.body)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newFixture(t, env), fmt.Sprintf("shared-key-%d", i))
		})
	}
}

// TestTextRulesRefuseEachInput sends every free-text field the API accepts
// (customer_id on create, reason on cancel) with each forbidden input: 422
// with the code invalid_text, nothing written, the order unchanged.
func TestTextRulesRefuseEachInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	target := f.create(t)
	create := func(customer string) string {
		b, _ := json.Marshal(map[string]any{"customer_id": customer, "amount_minor": 1, "currency": "EUR"})
		return string(b)
	}
	cancel := func(reason string) string {
		b, _ := json.Marshal(map[string]any{"reason": reason})
		return string(b)
	}
	tests := []struct {
		name, path, body string
	}{
		{"reason ESC", "cancel", cancel("late \x1b[2J")},
		{"reason CR", "cancel", cancel("a\rb")},
		{"reason LF", "cancel", cancel("first line\nSecond: refund approved")},
		{"reason CRLF", "cancel", cancel("a\r\nb")},
		{"reason TAB", "cancel", cancel("a\tb")},
		{"reason NEL U+0085", "cancel", cancel("a\u0085b")},
		{"reason RLO U+202E", "cancel", cancel("refund \u202Egnp.exe")},
		{"reason zero-width space U+200B", "cancel", cancel("a\u200bb")},
		{"reason BOM U+FEFF", "cancel", cancel("\ufeffa")},
		{"reason line separator U+2028", "cancel", cancel("a\u2028b")},
		{"reason paragraph separator U+2029", "cancel", cancel("a\u2029b")},
		{"reason noncharacter U+FDD0", "cancel", cancel("a\ufdd0b")},
		{"reason noncharacter U+FFFE", "cancel", `{"reason":"a\ufffeb"}`},
		{"reason noncharacter U+FFFF", "cancel", `{"reason":"a\uffffb"}`},
		{"reason noncharacter U+1FFFE", "cancel", cancel("a\U0001FFFEb")},
		{"reason NUL", "cancel", `{"reason":"a\u0000b"}`},
		{"customer_id RLO U+202E", "create", create("cust\u202Eomer")},
		{"customer_id ESC", "create", create("c\x1b1")},
		{"customer_id LF", "create", create("c\n1")},
		{"customer_id space", "create", create("c 1")},
		{"customer_id non-ASCII letter", "create", create("jos\u00e9")},
		{"customer_id markup", "create", create("<script>")},
		{"customer_id U+FFFF", "create", `{"customer_id":"c\uffff","amount_minor":1,"currency":"EUR"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.counts(t)
			path := "/orders"
			if tt.path == "cancel" {
				path = "/orders/" + target.ID + "/cancel"
			}
			r := f.do(t, "POST", path, tt.body)
			if r.status != http.StatusUnprocessableEntity || r.errBody(t).Code != api.CodeInvalidText {
				t.Fatalf("%s: %d %s, want 422 %s", tt.body, r.status, r.body, api.CodeInvalidText)
			}
			if after := f.counts(t); after != before {
				t.Fatalf("refused request wrote: %+v -> %+v", before, after)
			}
		})
	}
	if got := f.do(t, "GET", "/orders/"+target.ID, "").order(t); got.Status != order.StatusPlaced || got.Version != 1 {
		t.Fatalf("order changed: %+v", got)
	}

	// What the rules still accept.
	for _, c := range []string{"crm:4711", "a.b@example.com", "C_1-x"} {
		if r := f.do(t, "POST", "/orders", create(c)); r.status != http.StatusCreated {
			t.Errorf("customer_id %q: %d %s", c, r.status, r.body)
		}
	}
	if r := f.do(t, "POST", "/orders/"+target.ID+"/cancel", cancel("Kunde: zu spät — ¡lo siento! 注文取消")); r.status != http.StatusOK {
		t.Errorf("plain Unicode reason: %d %s", r.status, r.body)
	}
}

// gatewayRequest is an API Gateway HTTP API (payload 2.0) request for method
// and path, signed by arn (no authorizer when arn is "").
func gatewayRequest(t *testing.T, method, path, body, arn string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	req := loadEvent(t, "testdata/apigw_v2_create_order.json")
	req.RouteKey = method + " " + path
	req.RawPath = path
	req.RequestContext.HTTP.Method = method
	req.RequestContext.HTTP.Path = path
	req.Headers = map[string]string{"content-type": "application/json"}
	req.Body, req.IsBase64Encoded = body, false
	if arn == "" {
		req.RequestContext.Authorizer = nil
	} else {
		req.RequestContext.Authorizer.IAM.UserARN = arn
	}
	return req
}

// TestLambdaCallerIsTheIAMPrincipal: behind API Gateway the actor is the IAM
// principal; no principal is 401; X-Caller and a forged proxy context header
// cannot change it. The actor is stored on the order item and in the event.
func TestLambdaCallerIsTheIAMPrincipal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	handle := api.LambdaHandler(f.h)
	ctx := context.Background()
	const arnA = "arn:aws:sts::123456789012:assumed-role/checkout/session-1"

	unsigned := gatewayRequest(t, "POST", "/orders", bodyA, "")
	if r, err := handle(ctx, unsigned); err != nil || r.StatusCode != http.StatusUnauthorized || !strings.Contains(r.Body, api.CodeUnauthenticated) {
		t.Fatalf("no principal: %v %d %s", err, r.StatusCode, r.Body)
	}
	if n := f.counts(t); n != (counts{}) {
		t.Fatalf("unauthenticated request wrote %+v", n)
	}
	// The demo mode serves it as the anonymous caller instead.
	demo := newFixture(t, f.env, func(c *api.Config) { c.Callers = api.CallersOpenDemo })
	if r, err := api.LambdaHandler(demo.h)(ctx, unsigned); err != nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("demo mode: %v %d %s", err, r.StatusCode, r.Body)
	} else {
		var o order.Order
		_ = json.Unmarshal([]byte(r.Body), &o)
		if recs := demo.records(t, o.ID); len(recs) != 1 || recs[0].Envelope.Actor != api.AnonymousCaller {
			t.Fatalf("demo outbox %+v", recs)
		}
	}

	spoof := gatewayRequest(t, "POST", "/orders", bodyA, arnA)
	spoof.Headers["x-caller"] = "admin"
	forged, _ := json.Marshal(events.APIGatewayV2HTTPRequestContext{Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:iam::123456789012:root"}}})
	spoof.Headers["x-golambdaproxy-apigatewaycontext"] = string(forged)
	spoof.Headers["idempotency-key"] = "k-1"
	r, err := handle(ctx, spoof)
	if err != nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %d %s", err, r.StatusCode, r.Body)
	}
	var o order.Order
	if err := json.Unmarshal([]byte(r.Body), &o); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Body, arnA) {
		t.Fatalf("the response exposes the actor: %s", r.Body)
	}
	item, err := f.env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.orders), Key: order.OrderKey(o.ID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, attr := range []string{order.AttrCreatedBy, order.AttrUpdatedBy} {
		if v, _ := item.Item[attr].(*types.AttributeValueMemberS); v == nil || v.Value != arnA {
			t.Fatalf("%s = %v, want %s", attr, item.Item[attr], arnA)
		}
	}
	if recs := f.records(t, o.ID); len(recs) != 1 || recs[0].Envelope.Actor != arnA {
		t.Fatalf("outbox %+v, want actor %s", recs, arnA)
	}

	// Another principal paying the order is the actor of that change.
	const arnB = "arn:aws:iam::123456789012:user/ops"
	pay := gatewayRequest(t, "POST", "/orders/"+o.ID+"/pay", "", arnB)
	if r, err := handle(ctx, pay); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("pay: %v %d %s", err, r.StatusCode, r.Body)
	}
	recs := f.records(t, o.ID)
	if len(recs) != 2 || recs[1].Envelope.Actor != arnB {
		t.Fatalf("pay envelope %+v, want actor %s", recs, arnB)
	}
	item, _ = f.env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.orders), Key: order.OrderKey(o.ID), ConsistentRead: aws.Bool(true)})
	if v := item.Item[order.AttrUpdatedBy].(*types.AttributeValueMemberS).Value; v != arnB {
		t.Fatalf("updated_by %q, want %s", v, arnB)
	}
	if v := item.Item[order.AttrCreatedBy].(*types.AttributeValueMemberS).Value; v != arnA {
		t.Fatalf("created_by %q, want %s", v, arnA)
	}
}

func TestLocalCallerStandIn(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	auto := newFixture(t, env)
	iamOnly := newFixture(t, env, func(c *api.Config) { c.Callers = api.CallersIAMOnly })
	tests := []struct {
		name    string
		f       *fixture
		headers []string
		status  int
		actor   string
	}{
		{"no X-Caller is the fixed local caller", auto, nil, http.StatusCreated, api.LocalCaller},
		{"X-Caller names the local caller", auto, []string{api.HeaderCaller, "alice"}, http.StatusCreated, "local:alice"},
		{"X-Caller with a space", auto, []string{api.HeaderCaller, "a b"}, http.StatusBadRequest, ""},
		{"X-Caller twice", auto, []string{api.HeaderCaller, "a", api.HeaderCaller, "b"}, http.StatusBadRequest, ""},
		{"X-Caller too long", auto, []string{api.HeaderCaller, strings.Repeat("a", api.MaxLocalCallerLen+1)}, http.StatusBadRequest, ""},
		{"IAM-only refuses plain HTTP", iamOnly, nil, http.StatusUnauthorized, ""},
		{"IAM-only ignores X-Caller", iamOnly, []string{api.HeaderCaller, "alice"}, http.StatusUnauthorized, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.f.do(t, "POST", "/orders", bodyA, tt.headers...)
			if r.status != tt.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, tt.status)
			}
			if tt.actor == "" {
				return
			}
			if recs := tt.f.records(t, r.order(t).ID); len(recs) != 1 || recs[0].Envelope.Actor != tt.actor {
				t.Fatalf("outbox %+v, want actor %q", recs, tt.actor)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the handler's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogsCarryCallerAndRequestID: every request log record has the actor
// and request_id keys.
func TestLogsCarryCallerAndRequestID(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	f := newFixture(t, ddbtest.New(t), func(c *api.Config) { c.Logger = logger })
	handle := api.LambdaHandler(f.h)
	req := gatewayRequest(t, "POST", "/orders", bodyA, "arn:aws:iam::123456789012:user/logger")
	req.RequestContext.RequestID = "req-log-1"
	if r, err := handle(context.Background(), req); err != nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %d %s", err, r.StatusCode, r.Body)
	}
	f.do(t, "GET", "/orders/nope", "", api.HeaderCaller, "bob", api.HeaderRequestID, "req-log-2")
	var found int
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "http request" {
			continue
		}
		found++
		switch rec["request_id"] {
		case "req-log-1":
			if rec["actor"] != "arn:aws:iam::123456789012:user/logger" {
				t.Errorf("record %v: actor", rec)
			}
		case "req-log-2":
			if rec["actor"] != "local:bob" {
				t.Errorf("record %v: actor", rec)
			}
		default:
			t.Errorf("record without the request id: %v", rec)
		}
	}
	if found != 2 {
		t.Fatalf("%d request records, want 2:\n%s", found, buf.String())
	}
}
