package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// recordingOrders is an Orders fake that records every write. Update runs
// the command's closure on a freshly placed order and records a write only
// when the closure succeeds, like the real repository (a failed closure
// writes nothing). It never fails on its own, so any 5xx is a handler bug.
type recordingOrders struct {
	mu      sync.Mutex
	creates []createCall
	updates int
	now     time.Time
}

type createCall struct {
	o    order.Order
	evs  []outbox.Event
	meta order.CreateMeta
}

func (f *recordingOrders) writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.creates) + f.updates
}

func (f *recordingOrders) placed(id string) *order.Order {
	o, _, err := order.Place(order.PlaceInput{ID: id, CustomerID: "c-1", AmountMinor: 100, Currency: "EUR"}, f.now)
	if err != nil {
		panic(err)
	}
	return o
}

func (f *recordingOrders) Get(_ context.Context, id string) (order.Order, error) {
	return *f.placed(id), nil
}

func (f *recordingOrders) Create(_ context.Context, o *order.Order, evs []outbox.Event, meta order.CreateMeta) (order.Order, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, createCall{o: *o, evs: evs, meta: meta})
	return *o, true, nil
}

func (f *recordingOrders) Update(_ context.Context, id string, fn order.UpdateFunc, meta order.UpdateMeta) (order.Order, error) {
	o := f.placed(id)
	if meta.ExpectedVersion != 0 && meta.ExpectedVersion != o.Version {
		return order.Order{}, order.ErrVersionConflict
	}
	evs, err := fn(o)
	if err != nil {
		return order.Order{}, err
	}
	if len(evs) == 0 {
		return *o, nil
	}
	f.mu.Lock()
	f.updates++
	f.mu.Unlock()
	return *o, nil
}

var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/orders"},
	{"POST", "/orders/01900f79-ffaa-7bcd-8e01-23456789abcd/pay"},
	{"POST", "/orders/01900f79-ffaa-7bcd-8e01-23456789abcd/ship"},
	{"POST", "/orders/01900f79-ffaa-7bcd-8e01-23456789abcd/cancel"},
	{"GET", "/orders/01900f79-ffaa-7bcd-8e01-23456789abcd"},
	{"PUT", "/orders"},
}

// FuzzAPIRequest drives the real HTTP handler (decoding, validation, error
// mapping) with arbitrary bodies and headers against a recording Orders fake.
// Properties: never a panic or a 5xx; every 4xx has a JSON {code,message}
// body with both members set and wrote nothing; a 2xx create carries exactly
// the values of the body; decodeStrict fails only with a 4xx apiError.
func FuzzAPIRequest(f *testing.F) {
	seeds := []struct {
		route                     uint8
		ctype, key, ifMatch, body string
	}{
		{0, "application/json", "5f0c2a9e-8d2b-4a53-9c61-0f7e4d3b2a10", "", `{"customer_id": "c-42", "amount_minor": 1250, "currency": "EUR"}`},
		{0, "application/json; charset=utf-8", "", "", `{"customer_id":"c-1","amount_minor":9223372036854775807,"currency":"USD"}`},
		{0, "application/json", "", "", `{"customer_id":"c-1","amount_minor":9223372036854775808,"currency":"USD"}`},
		{0, "application/json", "", "", `{"customer_id":"c-1","amount_minor":12.5,"currency":"USD"}`},
		{0, "application/json", "", "", `{"customer_id":"c-1","amount_minor":"12","currency":"USD"}`},
		{0, "application/json", "", "", `{"Customer_ID":"c-1","amount_minor":1,"currency":"USD"}`},
		{0, "application/json", "", "", `{"customer_id":"c-1","customer_id":"c-2","amount_minor":1,"currency":"USD"}`},
		{0, "application/json", "", "", `{"customer_id":"c-1","amount_minor":1,"currency":"USD"} {}`},
		{0, "application/json", "", "", `[]`},
		{0, "application/json", "", "", ``},
		{0, "application/json", "", "", `{"customer_id":"\u0000","amount_minor":-1,"currency":"usd"}`},
		{0, "application/json; charset=latin1", "", "", `{}`},
		{0, "text/plain", "", "", `{}`},
		{0, "application/json", "a b", "", `{}`},
		{1, "", "", `"1"`, ``},
		{1, "application/json", "", `W/"1"`, `{}`},
		{2, "application/json", "", "1", `{"x":1}`},
		{3, "application/json", "", "", `{"reason":"changed my mind"}`},
		{3, "application/json", "", "*", `{"reason":` + `"` + strings.Repeat("r", 600) + `"}`},
		{4, "", "", "", ``},
		{5, "", "", "", ``},
	}
	for _, s := range seeds {
		f.Add(s.route, s.ctype, s.key, s.ifMatch, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route uint8, ctype, key, ifMatch string, body []byte) {
		now := time.Date(2024, 6, 1, 10, 0, 0, 0, time.UTC)
		orders := &recordingOrders{now: now}
		h, err := New(Config{Orders: orders, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			MaxBodyBytes: 1024, Now: func() time.Time { return now },
			NewID: func() (string, error) { return "01900f79-ffaa-7bcd-8e01-23456789abcd", nil }})
		if err != nil {
			t.Fatal(err)
		}
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		req := httptest.NewRequest(rt.method, rt.path, bytes.NewReader(body))
		setHeader := func(name, v string) {
			// net/http would refuse such values on the wire; skip them.
			if v != "" && !strings.ContainsAny(v, "\r\n\x00") {
				req.Header.Set(name, v)
			}
		}
		setHeader("Content-Type", ctype)
		setHeader(HeaderIdempotencyKey, key)
		setHeader(HeaderIfMatch, ifMatch)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		status := rec.Code
		switch {
		case status >= 500:
			t.Fatalf("%s %s: status %d body %s (the fake never fails: a 5xx is a handler bug or a recovered panic)", rt.method, rt.path, status, rec.Body)
		case status >= 400:
			var eb ErrorBody
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&eb); err != nil || eb.Code == "" || eb.Message == "" {
				t.Fatalf("status %d: error body %q is not {code,message}: %v", status, rec.Body, err)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("status %d: Content-Type %q", status, ct)
			}
			if n := orders.writes(); n != 0 {
				t.Fatalf("status %d (%s) but %d writes", status, eb.Code, n)
			}
		case status >= 200 && status < 300:
			if rt.path == "/orders" {
				if len(orders.creates) != 1 {
					t.Fatalf("2xx create with %d Create calls", len(orders.creates))
				}
				var want createRequest
				if err := json.Unmarshal(body, &want); err != nil {
					t.Fatalf("accepted body %q does not decode: %v", body, err)
				}
				got := orders.creates[0].o
				if got.CustomerID != want.CustomerID || got.AmountMinor != want.AmountMinor || got.Currency != want.Currency {
					t.Fatalf("created %+v from body %q", got, body)
				}
				if len(orders.creates[0].evs) == 0 {
					t.Fatal("create without an event")
				}
			}
		default:
			t.Fatalf("unexpected status %d", status)
		}

		// The decoding entry point on its own: an error is always a 4xx apiError.
		var cr createRequest
		if err := decodeStrict(body, &cr, "customer_id", "amount_minor", "currency"); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status < 400 || ae.status >= 500 || ae.code == "" || ae.message == "" {
				t.Fatalf("decodeStrict(%q) = %v, want a 4xx apiError", body, err)
			}
		}
		if err := emptyObject(body); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status >= 500 {
				t.Fatalf("emptyObject(%q) = %v", body, err)
			}
		}
		_ = http.StatusOK
	})
}
