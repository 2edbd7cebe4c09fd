package fulfilment_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

// TestRedeliveryAfterTheIdempotencyRecordExpired: a redelivery (or a
// redrive from the DLQ) after the event's idempotency record expired runs
// the effect again. Against a provider whose own key window is shorter (here
// one that ignores Idempotency-Key) calling it first created a second
// shipment; the shipments table already says what was done, so it is read
// first: the recorded shipment is the answer and the provider is not
// called, for the creation and for the cancellation. Another OrderPaid
// event for an order that has a shipment is refused before any call.
func TestRedeliveryAfterTheIdempotencyRecordExpired(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, options{provider: provider.Config{IgnoreIdempotencyKey: true}})
	ctx := context.Background()
	pay := paid(t, "o-1")
	if err := fx.f.Handle(ctx, delivery(t, pay)); err != nil {
		t.Fatal(err)
	}
	calls := len(fx.p.Requests())
	fx.clock.Advance(2 * time.Hour) // past the idempotency record's expiry (1 h)
	if err := fx.f.Handle(ctx, delivery(t, pay)); err != nil {
		t.Fatalf("redelivery after expiry: %v", err)
	}
	if got := len(fx.p.ShipmentsFor("o-1")); got != 1 || len(fx.p.Requests()) != calls {
		t.Fatalf("redelivery after expiry: %d shipments, %d provider calls (was %d); want 1 and no call", got, len(fx.p.Requests()), calls)
	}

	// Another OrderPaid for the shipped order: refused, the provider not called.
	other := paid(t, "o-1")
	if err := fx.f.Handle(ctx, delivery(t, other)); reason(err) != fulfilment.ReasonDuplicateShipment {
		t.Fatalf("another OrderPaid for a shipped order: %v, want %s", err, fulfilment.ReasonDuplicateShipment)
	}
	if len(fx.p.Requests()) != calls || len(fx.p.ShipmentsFor("o-1")) != 1 {
		t.Fatalf("another OrderPaid called the provider: %d calls, %d shipments", len(fx.p.Requests()), len(fx.p.ShipmentsFor("o-1")))
	}

	cancel := cancelled(t, "o-1", true)
	if err := fx.f.Handle(ctx, delivery(t, cancel)); err != nil {
		t.Fatal(err)
	}
	calls = len(fx.p.Requests())
	fx.clock.Advance(2 * time.Hour)
	if err := fx.f.Handle(ctx, delivery(t, cancel)); err != nil {
		t.Fatalf("cancel redelivered after expiry: %v", err)
	}
	if len(fx.p.Requests()) != calls {
		t.Fatalf("cancel redelivered after expiry called the provider (%d calls, was %d)", len(fx.p.Requests()), calls)
	}
	if rec := fx.shipment(t, "o-1"); rec.Status != fulfilment.StatusCancelled || rec.CancelledEventID != cancel.EventID {
		t.Fatalf("recorded %+v", rec)
	}
}

// wrongProvider answers creations and cancellations with what its fields
// say instead of what was asked: another order's id, another shipment's id,
// no order id.
type wrongProvider struct {
	createOrder  func(asked string) string // order_id of a creation's answer
	cancelOrder  string                    // order_id of a cancellation's answer ("" echoes the shipment's)
	cancelID     string                    // shipment_id of a cancellation's answer ("" echoes the path's)
	cancelStatus string
	calls        atomic.Int64
}

func (p *wrongProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.calls.Add(1)
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/shipments" {
		var in fulfilment.ShipmentRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(fulfilment.ProviderShipment{ID: "shp_" + in.OrderID, OrderID: p.createOrder(in.OrderID), Status: "created"})
		return
	}
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/shipments/"), "/cancel")
	order := strings.TrimPrefix(id, "shp_")
	if p.cancelOrder != "" {
		order = p.cancelOrder
	}
	if p.cancelID != "" {
		id = p.cancelID
	}
	_ = json.NewEncoder(w).Encode(fulfilment.ProviderShipment{ID: id, OrderID: order, Status: p.cancelStatus})
}

// TestProviderAnswerAboutAnotherOrder: the provider's answer names the
// order (and, for a cancellation, the shipment) it is about. An answer about
// another order — a provider that restarted empty and numbers shipments
// from the start again answers a cancellation with another order's
// shipment — or about another shipment, or one that does not say, is never
// recorded as a success: it is a permanent failure with reason
// provider_order_mismatch, and the shipments table keeps what it had.
func TestProviderAnswerAboutAnotherOrder(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	ctx := context.Background()
	echo := func(asked string) string { return asked }

	create := []struct {
		name  string
		order func(string) string
	}{
		{"creation answered with another order", func(string) string { return "o-other" }},
		{"creation answered without an order id", func(string) string { return "" }},
	}
	for _, tc := range create {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &wrongProvider{createOrder: tc.order, cancelStatus: "cancelled"}
			fx := newFixture(t, options{env: env, handler: p})
			err := fx.f.Handle(ctx, delivery(t, paid(t, "o-1")))
			if reason(err) != "provider_order_mismatch" {
				t.Fatalf("err %v, want permanent provider_order_mismatch", err)
			}
			if rec := fx.shipment(t, "o-1"); rec != nil {
				t.Fatalf("recorded %+v for an answer about another order", rec)
			}
		})
	}

	cancel := []struct {
		name string
		p    *wrongProvider
	}{
		{"cancellation answered with another order", &wrongProvider{createOrder: echo, cancelOrder: "o-other", cancelStatus: "cancelled"}},
		{"cancellation answered with another shipment", &wrongProvider{createOrder: echo, cancelID: "shp_000001", cancelStatus: "cancelled"}},
		{"cancellation answered as not cancelled", &wrongProvider{createOrder: echo, cancelStatus: "created"}},
	}
	for _, tc := range cancel {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, options{env: env, handler: tc.p})
			if err := fx.f.Handle(ctx, delivery(t, paid(t, "o-1"))); err != nil {
				t.Fatal(err)
			}
			err := fx.f.Handle(ctx, delivery(t, cancelled(t, "o-1", true)))
			if reason(err) != "provider_order_mismatch" {
				t.Fatalf("err %v, want permanent provider_order_mismatch", err)
			}
			if rec := fx.shipment(t, "o-1"); rec == nil || rec.Status != fulfilment.StatusCreated || rec.CancelledEventID != "" {
				t.Fatalf("recorded %+v: a cancellation answered about another order must not be recorded", rec)
			}
		})
	}
}
