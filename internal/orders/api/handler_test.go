package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// fixture is an API handler over a fresh orders table and outbox table on
// a real DynamoDB-compatible server.
type fixture struct {
	env    *ddbtest.Env
	orders string
	outbox string
	h      *api.Handler
}

func newFixture(t *testing.T, env *ddbtest.Env, opts ...func(*api.Config)) *fixture {
	t.Helper()
	f := &fixture{env: env, orders: ddbtest.Name("orders"), outbox: ddbtest.Name("outbox")}
	env.CreateTable(t, order.CreateTableInput(f.orders))
	env.CreateTable(t, outbox.CreateTableInput(f.outbox))
	w, err := outbox.NewWriter(env.DDB, outbox.WriterConfig{Source: appenv.EventSource, Table: f.outbox})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repo, err := order.NewRepository(order.RepositoryConfig{Table: f.orders, Client: env.DDB, Writer: w, Logger: logger, MaxAttempts: 8})
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Orders: repo, Logger: logger}
	for _, o := range opts {
		o(&cfg)
	}
	f.h, err = api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) order(t *testing.T) order.Order {
	t.Helper()
	var o order.Order
	if err := json.Unmarshal(r.body, &o); err != nil {
		t.Fatalf("decode order %s: %v", r.body, err)
	}
	return o
}

func (r response) errBody(t *testing.T) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("decode error body %q: %v", r.body, err)
	}
	return e
}

// do sends a request; body "" sends none. Content-Type defaults to
// application/json when there is a body; set it to "-" to omit it.
func (f *fixture) do(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "-" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Add(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (f *fixture) create(t *testing.T) order.Order {
	t.Helper()
	r := f.do(t, "POST", "/orders", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return r.order(t)
}

// count returns the number of items in table (consistent scan).
func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	n := 0
	var start map[string]types.AttributeValue
	for {
		out, err := f.env.DDB.Scan(context.Background(), &dynamodb.ScanInput{
			TableName: aws.String(table), Select: types.SelectCount, ConsistentRead: aws.Bool(true), ExclusiveStartKey: start,
		})
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n
		}
		start = out.LastEvaluatedKey
	}
}

type counts struct{ orders, outbox int }

func (f *fixture) counts(t *testing.T) counts {
	return counts{f.count(t, f.orders), f.count(t, f.outbox)}
}

// records returns the outbox records of order id, in key order.
func (f *fixture) records(t *testing.T, id string) []outbox.Record {
	t.Helper()
	expr, err := expression.NewBuilder().WithKeyCondition(
		expression.Key(outbox.AttrPK).Equal(expression.Value(order.AggregateType + "#" + id))).Build()
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.env.DDB.Query(context.Background(), &dynamodb.QueryInput{
		TableName: aws.String(f.outbox), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]outbox.Record, len(out.Items))
	for i, it := range out.Items {
		if recs[i], err = outbox.RecordFromItem(it); err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

// checkOutbox asserts that order o has exactly one outbox record per
// version 1..o.Version, with sequence = version, and returns their types.
func (f *fixture) checkOutbox(t *testing.T, o order.Order) []string {
	t.Helper()
	recs := f.records(t, o.ID)
	if int64(len(recs)) != o.Version {
		t.Fatalf("order %s at version %d has %d outbox records", o.ID, o.Version, len(recs))
	}
	types := make([]string, len(recs))
	for i, r := range recs {
		if r.Envelope.Sequence != int64(i+1) || r.Envelope.AggregateID != o.ID || r.Envelope.AggregateType != order.AggregateType {
			t.Fatalf("record %d: %+v", i, r.Envelope)
		}
		if r.Status != outbox.StatusPending || r.PendingShard == "" || !r.ExpiresAt.IsZero() {
			t.Fatalf("record %d not a pending record without TTL: %+v", i, r)
		}
		types[i] = r.Envelope.EventType
	}
	return types
}

func TestCreateGetAndLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))

	r := f.do(t, "POST", "/orders", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`, api.HeaderCorrelationID, "corr-1")
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	o := r.order(t)
	if o.ID == "" || o.CustomerID != "c-1" || o.AmountMinor != 1999 || o.Currency != "EUR" || o.Status != order.StatusPlaced || o.Version != 1 {
		t.Fatalf("created %+v", o)
	}
	if got := r.header.Get("Location"); got != "/orders/"+o.ID {
		t.Fatalf("Location %q", got)
	}
	if got := r.header.Get("ETag"); got != `"1"` {
		t.Fatalf("ETag %q", got)
	}
	if got := r.header.Get(api.HeaderCorrelationID); got != "corr-1" {
		t.Fatalf("correlation id %q", got)
	}
	recs := f.records(t, o.ID)
	if len(recs) != 1 || recs[0].Envelope.CorrelationID != "corr-1" || recs[0].Envelope.CausationID == "" {
		t.Fatalf("outbox after create: %+v", recs)
	}
	var placed order.Placed
	if err := json.Unmarshal(recs[0].Envelope.Payload, &placed); err != nil || placed != (order.Placed{OrderID: o.ID, CustomerID: "c-1", AmountMinor: 1999, Currency: "EUR"}) {
		t.Fatalf("placed payload %s (%v)", recs[0].Envelope.Payload, err)
	}

	g := f.do(t, "GET", "/orders/"+o.ID, "")
	if g.status != http.StatusOK || g.order(t) != o {
		t.Fatalf("get: %d %s", g.status, g.body)
	}

	p := f.do(t, "POST", "/orders/"+o.ID+"/pay", "", "If-Match", `"1"`)
	if p.status != http.StatusOK || p.order(t).Status != order.StatusPaid || p.header.Get("ETag") != `"2"` {
		t.Fatalf("pay: %d %s", p.status, p.body)
	}
	s := f.do(t, "POST", "/orders/"+o.ID+"/ship", "{}", "If-Match", "2")
	if s.status != http.StatusOK || s.order(t).Status != order.StatusShipped {
		t.Fatalf("ship: %d %s", s.status, s.body)
	}
	got := f.checkOutbox(t, s.order(t))
	want := []string{order.EventOrderPlaced, order.EventOrderPaid, order.EventOrderShipped}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outbox types %v, want %v", got, want)
	}

	// Cancel after payment refunds.
	o2 := f.create(t)
	if r := f.do(t, "POST", "/orders/"+o2.ID+"/pay", ""); r.status != http.StatusOK {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	c := f.do(t, "POST", "/orders/"+o2.ID+"/cancel", `{"reason":"out of stock"}`)
	if c.status != http.StatusOK || c.order(t).Status != order.StatusCancelled || c.order(t).CancelReason != "out of stock" {
		t.Fatalf("cancel: %d %s", c.status, c.body)
	}
	f.checkOutbox(t, c.order(t))
	recs = f.records(t, o2.ID)
	var cancelled order.Cancelled
	if err := json.Unmarshal(recs[2].Envelope.Payload, &cancelled); err != nil {
		t.Fatal(err)
	}
	if !cancelled.WasPaid || cancelled.RefundMinor != 1999 || cancelled.Reason != "out of stock" || cancelled.Currency != "EUR" {
		t.Fatalf("cancelled payload %+v", cancelled)
	}

	// Cancel without a body, before payment.
	o3 := f.create(t)
	c3 := f.do(t, "POST", "/orders/"+o3.ID+"/cancel", "")
	if c3.status != http.StatusOK || c3.order(t).Status != order.StatusCancelled {
		t.Fatalf("cancel without body: %d %s", c3.status, c3.body)
	}
	f.checkOutbox(t, c3.order(t))
}

func TestInvalidRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	placed := f.create(t)
	paid := f.create(t)
	if r := f.do(t, "POST", "/orders/"+paid.ID+"/pay", ""); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	big := `{"customer_id":"` + strings.Repeat("x", api.DefaultMaxBodyBytes) + `","amount_minor":1,"currency":"EUR"}`
	const ok = `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`
	pid, qid := placed.ID, paid.ID

	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		status  int
		code    string
	}{
		{"malformed json", "POST", "/orders", `{"customer_id":`, nil, 400, api.CodeMalformedJSON},
		{"not an object", "POST", "/orders", `["c-1",1,"EUR"]`, nil, 400, api.CodeMalformedJSON},
		{"null", "POST", "/orders", `null`, nil, 400, api.CodeMalformedJSON},
		{"empty body", "POST", "/orders", ``, []string{"Content-Type", "application/json"}, 400, api.CodeMalformedJSON},
		{"trailing data", "POST", "/orders", ok + ` x`, nil, 400, api.CodeMalformedJSON},
		{"two objects", "POST", "/orders", ok + ok, nil, 400, api.CodeMalformedJSON},
		{"duplicate field", "POST", "/orders", `{"customer_id":"a","customer_id":"b","amount_minor":1,"currency":"EUR"}`, nil, 400, api.CodeMalformedJSON},
		{"unknown field", "POST", "/orders", `{"customer_id":"c","amount_minor":1,"currency":"EUR","discount":5}`, nil, 400, api.CodeUnknownField},
		{"field name case", "POST", "/orders", `{"Customer_ID":"c","amount_minor":1,"currency":"EUR"}`, nil, 400, api.CodeUnknownField},
		{"amount as string", "POST", "/orders", `{"customer_id":"c","amount_minor":"1","currency":"EUR"}`, nil, 400, api.CodeInvalidType},
		{"amount fractional", "POST", "/orders", `{"customer_id":"c","amount_minor":12.5,"currency":"EUR"}`, nil, 400, api.CodeInvalidType},
		{"amount beyond int64", "POST", "/orders", `{"customer_id":"c","amount_minor":99999999999999999999,"currency":"EUR"}`, nil, 400, api.CodeInvalidType},
		{"currency as number", "POST", "/orders", `{"customer_id":"c","amount_minor":1,"currency":978}`, nil, 400, api.CodeInvalidType},
		{"no content type", "POST", "/orders", ok, []string{"Content-Type", "-"}, 415, api.CodeUnsupportedMedia},
		{"text/plain", "POST", "/orders", ok, []string{"Content-Type", "-", "Content-Type", "text/plain"}, 415, api.CodeUnsupportedMedia},
		{"too large", "POST", "/orders", big, nil, 413, api.CodePayloadTooLarge},
		{"amount zero", "POST", "/orders", `{"customer_id":"c","amount_minor":0,"currency":"EUR"}`, nil, 422, api.CodeValidationFailed},
		{"amount negative", "POST", "/orders", `{"customer_id":"c","amount_minor":-1,"currency":"EUR"}`, nil, 422, api.CodeValidationFailed},
		{"amount over max", "POST", "/orders", `{"customer_id":"c","amount_minor":1000000000000001,"currency":"EUR"}`, nil, 422, api.CodeValidationFailed},
		{"currency unknown", "POST", "/orders", `{"customer_id":"c","amount_minor":1,"currency":"EURO"}`, nil, 422, api.CodeValidationFailed},
		{"currency lower case", "POST", "/orders", `{"customer_id":"c","amount_minor":1,"currency":"eur"}`, nil, 422, api.CodeValidationFailed},
		{"customer missing", "POST", "/orders", `{"amount_minor":1,"currency":"EUR"}`, nil, 422, api.CodeValidationFailed},
		{"customer too long", "POST", "/orders", `{"customer_id":"` + strings.Repeat("c", 129) + `","amount_minor":1,"currency":"EUR"}`, nil, 422, api.CodeValidationFailed},
		{"idempotency key with space", "POST", "/orders", ok, []string{"Idempotency-Key", "a b"}, 400, api.CodeInvalidHeader},
		{"idempotency key too long", "POST", "/orders", ok, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, api.CodeInvalidHeader},
		{"idempotency key twice", "POST", "/orders", ok, []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, 400, api.CodeInvalidHeader},
		{"get unknown", "GET", "/orders/does-not-exist", "", nil, 404, api.CodeNotFound},
		{"get invalid id", "GET", "/orders/bad%21id", "", nil, 404, api.CodeNotFound},
		{"pay unknown", "POST", "/orders/does-not-exist/pay", "", nil, 404, api.CodeNotFound},
		{"unknown route", "GET", "/customers", "", nil, 404, api.CodeNotFound},
		{"orders trailing slash", "GET", "/orders/", "", nil, 404, api.CodeNotFound},
		{"GET /orders", "GET", "/orders", "", nil, 405, api.CodeMethodNotAllowed},
		{"DELETE order", "DELETE", "/orders/" + pid, "", nil, 405, api.CodeMethodNotAllowed},
		{"GET pay", "GET", "/orders/" + pid + "/pay", "", nil, 405, api.CodeMethodNotAllowed},
		{"PUT cancel", "PUT", "/orders/" + pid + "/cancel", "", nil, 405, api.CodeMethodNotAllowed},
		{"pay with body field", "POST", "/orders/" + pid + "/pay", `{"amount_minor":1}`, nil, 400, api.CodeUnknownField},
		{"pay with text body", "POST", "/orders/" + pid + "/pay", `{}`, []string{"Content-Type", "-", "Content-Type", "text/plain"}, 415, api.CodeUnsupportedMedia},
		{"cancel unknown field", "POST", "/orders/" + pid + "/cancel", `{"why":"x"}`, nil, 400, api.CodeUnknownField},
		{"cancel reason wrong type", "POST", "/orders/" + pid + "/cancel", `{"reason":5}`, nil, 400, api.CodeInvalidType},
		{"cancel reason too long", "POST", "/orders/" + pid + "/cancel", `{"reason":"` + strings.Repeat("r", order.MaxReasonLen+1) + `"}`, nil, 422, api.CodeValidationFailed},
		{"if-match garbage", "POST", "/orders/" + pid + "/pay", "", []string{"If-Match", "abc"}, 400, api.CodeInvalidHeader},
		{"if-match weak", "POST", "/orders/" + pid + "/pay", "", []string{"If-Match", `W/"1"`}, 400, api.CodeInvalidHeader},
		{"if-match stale", "POST", "/orders/" + qid + "/cancel", "", []string{"If-Match", `"1"`}, 409, api.CodeVersionConflict},
		{"if-match ahead", "POST", "/orders/" + pid + "/pay", "", []string{"If-Match", "7"}, 409, api.CodeVersionConflict},
		{"invalid utf-8 byte", "POST", "/orders", "{\"customer_id\":\"a\xffb\",\"amount_minor\":1,\"currency\":\"EUR\"}", nil, 400, api.CodeMalformedJSON},
		{"lone surrogate escape", "POST", "/orders", `{"customer_id":"a\ud800b","amount_minor":1,"currency":"EUR"}`, nil, 422, api.CodeInvalidText},
		{"cancel reason lone surrogate", "POST", "/orders/" + pid + "/cancel", `{"reason":"\udfff"}`, nil, 422, api.CodeInvalidText},
		{"double slash path", "POST", "//orders", ok, nil, 404, api.CodeNotFound},
		{"dot-dot path", "GET", "/orders/x/../" + pid, "", nil, 404, api.CodeNotFound},
		{"ship placed", "POST", "/orders/" + pid + "/ship", "", nil, 409, api.CodeInvalidTransition},
		{"pay paid", "POST", "/orders/" + qid + "/pay", "", nil, 409, api.CodeInvalidTransition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.counts(t)
			r := f.do(t, tt.method, tt.path, tt.body, tt.headers...)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if e := r.errBody(t); e.Code != tt.code || e.Message == "" {
				t.Fatalf("error %+v, want code %s", e, tt.code)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if tt.status == 405 && r.header.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
			if after := f.counts(t); after != before {
				t.Fatalf("items before %+v, after %+v", before, after)
			}
		})
	}
	// The orders are untouched.
	for _, o := range []order.Order{placed} {
		if g := f.do(t, "GET", "/orders/"+o.ID, ""); g.order(t) != o {
			t.Fatalf("order changed: %s", g.body)
		}
	}
}

// failingOrders makes every repository call fail with an internal error.
type failingOrders struct{}

func (failingOrders) Get(context.Context, string) (order.Order, error) {
	return order.Order{}, fmt.Errorf("dial tcp 10.0.0.1:443: secret detail")
}

func (failingOrders) Create(context.Context, *order.Order, []outbox.Event, order.CreateMeta) (order.Order, bool, error) {
	return order.Order{}, false, fmt.Errorf("secret detail")
}

func (failingOrders) Update(context.Context, string, order.UpdateFunc, order.UpdateMeta) (order.Order, error) {
	return order.Order{}, fmt.Errorf("secret detail")
}

func TestInternalErrorLeaksNothing(t *testing.T) {
	t.Parallel()
	h, err := api.New(api.Config{Orders: failingOrders{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h}
	for _, r := range []response{
		f.do(t, "GET", "/orders/abc", ""),
		f.do(t, "POST", "/orders", `{"customer_id":"c","amount_minor":1,"currency":"EUR"}`),
		f.do(t, "POST", "/orders/abc/pay", ""),
	} {
		if r.status != 500 || r.errBody(t).Code != api.CodeInternal || strings.Contains(string(r.body), "secret") {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	const key = "key-123"
	first := f.do(t, "POST", "/orders", `{"customer_id":"c-1","amount_minor":500,"currency":"USD"}`, "Idempotency-Key", key)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	o := first.order(t)
	if recs := f.records(t, o.ID); len(recs) != 1 || recs[0].Envelope.CausationID != key {
		t.Fatalf("outbox %+v", recs)
	}
	before := f.counts(t)
	if before != (counts{orders: 2, outbox: 1}) {
		t.Fatalf("after first create: %+v", before)
	}

	// Same key, same request (other formatting and member order): the first
	// order, 200, nothing written.
	replay := f.do(t, "POST", "/orders", "{ \"currency\": \"USD\", \"amount_minor\": 500,\n \"customer_id\": \"c-1\" }", "Idempotency-Key", key)
	if replay.status != http.StatusOK || string(replay.body) != string(first.body) {
		t.Fatalf("replay: %d %s, want 200 %s", replay.status, replay.body, first.body)
	}
	if after := f.counts(t); after != before {
		t.Fatalf("replay wrote: %+v -> %+v", before, after)
	}

	// Same key, different body: rejected, nothing written.
	reused := f.do(t, "POST", "/orders", `{"customer_id":"c-1","amount_minor":501,"currency":"USD"}`, "Idempotency-Key", key)
	if reused.status != http.StatusConflict || reused.errBody(t).Code != api.CodeIdempotencyKeyReused {
		t.Fatalf("reused: %d %s", reused.status, reused.body)
	}
	if after := f.counts(t); after != before {
		t.Fatalf("reuse wrote: %+v -> %+v", before, after)
	}

	// After the order moves on, a replay still returns the first result.
	if r := f.do(t, "POST", "/orders/"+o.ID+"/pay", ""); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	again := f.do(t, "POST", "/orders", `{"customer_id":"c-1","amount_minor":500,"currency":"USD"}`, "Idempotency-Key", key)
	if again.status != http.StatusOK || string(again.body) != string(first.body) {
		t.Fatalf("late replay: %d %s", again.status, again.body)
	}

	// Another key creates another order.
	other := f.do(t, "POST", "/orders", `{"customer_id":"c-1","amount_minor":500,"currency":"USD"}`, "Idempotency-Key", "key-456")
	if other.status != http.StatusCreated || other.order(t).ID == o.ID {
		t.Fatalf("other key: %d %s", other.status, other.body)
	}
}

func TestConcurrentIdempotentCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	const n = 10
	results := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = f.do(t, "POST", "/orders", `{"customer_id":"c-9","amount_minor":42,"currency":"JPY"}`, "Idempotency-Key", "same-key")
		}()
	}
	close(start)
	wg.Wait()
	created, ids := 0, map[string]bool{}
	for _, r := range results {
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("status %d %s", r.status, r.body)
		}
		ids[r.order(t).ID] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("created %d, distinct ids %d; want 1 and 1", created, len(ids))
	}
	if c := f.counts(t); c != (counts{orders: 2, outbox: 1}) {
		t.Fatalf("items %+v, want one order, one idempotency record, one outbox record", c)
	}
}

func TestConcurrentCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	o := f.create(t)

	run := func(paths []string, headers ...string) []response {
		out := make([]response, len(paths))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, p := range paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out[i] = f.do(t, "POST", p, "", headers...)
			}()
		}
		close(start)
		wg.Wait()
		return out
	}

	// Round 1: 5 pays and 5 cancels race on a PLACED order.
	var paths []string
	for i := range 10 {
		cmd := "pay"
		if i%2 == 1 {
			cmd = "cancel"
		}
		paths = append(paths, "/orders/"+o.ID+"/"+cmd)
	}
	res := run(paths)
	final := f.do(t, "GET", "/orders/"+o.ID, "").order(t)
	versions := map[int64]bool{}
	for _, r := range res {
		switch r.status {
		case http.StatusOK:
			v := r.order(t).Version
			if versions[v] {
				t.Fatalf("two requests committed version %d", v)
			}
			versions[v] = true
		case http.StatusConflict:
			if c := r.errBody(t).Code; c != api.CodeVersionConflict && c != api.CodeInvalidTransition {
				t.Fatalf("409 code %s", c)
			}
		default:
			t.Fatalf("status %d %s", r.status, r.body)
		}
	}
	// Each state is left at most once: PLACED→(PAID|CANCELLED), then maybe PAID→CANCELLED.
	if len(versions) == 0 || int64(len(versions)) != final.Version-1 {
		t.Fatalf("%d successful commands, final version %d", len(versions), final.Version)
	}
	types := f.checkOutbox(t, final)
	t.Logf("round 1: %d winners, outbox %v", len(versions), types)

	// Round 2: 10 ships race on a fresh PAID order, with If-Match.
	o2 := f.create(t)
	if r := f.do(t, "POST", "/orders/"+o2.ID+"/pay", ""); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	paths = paths[:0]
	for range 10 {
		paths = append(paths, "/orders/"+o2.ID+"/ship")
	}
	res = run(paths, "If-Match", "2")
	wins := 0
	for _, r := range res {
		switch r.status {
		case http.StatusOK:
			wins++
		case http.StatusConflict:
		default:
			t.Fatalf("status %d %s", r.status, r.body)
		}
	}
	final2 := f.do(t, "GET", "/orders/"+o2.ID, "").order(t)
	if wins != 1 || final2.Status != order.StatusShipped || final2.Version != 3 {
		t.Fatalf("ship race: %d wins, final %+v", wins, final2)
	}
	got := f.checkOutbox(t, final2)
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint([]string{order.EventOrderPaid, order.EventOrderPlaced, order.EventOrderShipped}) {
		t.Fatalf("outbox %v", got)
	}
	if c := f.counts(t); c.outbox != int(final.Version+final2.Version) {
		t.Fatalf("outbox holds %d records, committed versions %d", c.outbox, final.Version+final2.Version)
	}
}

func TestRequestIDAndCorrelation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	o := f.create(t)
	r := f.do(t, "POST", "/orders/"+o.ID+"/pay", "", api.HeaderRequestID, "req-77", api.HeaderCorrelationID, "corr-77")
	if r.status != 200 {
		t.Fatal(r.status)
	}
	recs := f.records(t, o.ID)
	if env := recs[1].Envelope; env.CausationID != "req-77" || env.CorrelationID != "corr-77" {
		t.Fatalf("envelope %+v", env)
	}
	// A generated correlation id is echoed.
	if g := f.do(t, "GET", "/orders/"+o.ID, ""); g.header.Get(api.HeaderCorrelationID) == "" {
		t.Fatal("no correlation id")
	}
	_ = time.Now
}
