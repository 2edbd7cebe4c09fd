package fulfilment_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

var quiet = slog.New(slog.DiscardHandler)

func envelope(t testing.TB, orderID string, seq int64, typ string, payload any) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: orderID, Sequence: seq},
		outbox.Event{Type: typ, Version: order.EventVersion, Payload: payload}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func paid(t testing.TB, orderID string) outbox.Envelope {
	return envelope(t, orderID, 2, order.EventOrderPaid, order.Paid{OrderID: orderID, AmountMinor: 1999, Currency: "EUR"})
}

func cancelled(t testing.TB, orderID string, wasPaid bool) outbox.Envelope {
	c := order.Cancelled{OrderID: orderID, WasPaid: wasPaid, Currency: "EUR"}
	seq := int64(2)
	if wasPaid {
		c.RefundMinor, seq = 1999, 3
	}
	return envelope(t, orderID, seq, order.EventOrderCancelled, c)
}

// delivery wraps env as EventBridge delivers it, with a fresh EventBridge id
// each time (a re-send by the relay or the reconciler gets a new one).
func delivery(t testing.TB, env outbox.Envelope) events.EventBridgeEvent {
	t.Helper()
	detail, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	return events.EventBridgeEvent{Version: "0", ID: uuid.NewString(), DetailType: env.EventType, Source: "com.ddb-outbox.orders",
		AccountID: "123456789012", Time: time.Now().UTC(), Region: "eu-west-1", Detail: detail}
}

type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

type fixture struct {
	f     *fulfilment.Fulfilment
	p     *provider.Server
	clock *clock
	crash atomic.Int64 // BeforeComplete fails this many more times
}

type options struct {
	env      *ddbtest.Env // shared server; nil starts one
	provider provider.Config
	handler  http.Handler // instead of the provider
}

func newFixture(t *testing.T, o options) *fixture {
	t.Helper()
	env := o.env
	if env == nil {
		env = ddbtest.New(t)
	}
	st, it := ddbtest.Name("shipments"), ddbtest.Name("idem")
	env.CreateTable(t, fulfilment.CreateTableInput(st))
	env.CreateTable(t, idempotency.CreateTableInput(it))
	if o.provider.APIKey == "" {
		o.provider.APIKey = "secret"
	}
	fx := &fixture{p: provider.New(o.provider), clock: &clock{}}
	h := o.handler
	if h == nil {
		h = fx.p.Handler()
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	f, err := fulfilment.New(env.DDB, nil, fulfilment.Config{
		Table: st,
		Idempotency: idempotency.Config{Table: it, Now: fx.clock.Now, BeforeComplete: func(context.Context, string) error {
			if fx.crash.Add(-1) >= 0 {
				return errCrash
			}
			return nil
		}},
		Provider: fulfilment.ProviderConfig{BaseURL: ts.URL, Credentials: fulfilment.StaticCredentials("secret"),
			AttemptTimeout: 300 * time.Millisecond, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		Logger: quiet, Now: fx.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	fx.f = f
	return fx
}

var errCrash = errors.New("simulated crash between the provider's answer and COMPLETED")

func (fx *fixture) shipment(t *testing.T, orderID string) *fulfilment.ShipmentRecord {
	t.Helper()
	rec, err := fx.f.Shipment(context.Background(), orderID)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func reason(err error) string {
	if p, ok := sqsconsumer.AsPermanent(err); ok {
		return p.Reason
	}
	return ""
}

func TestDuplicateDeliveriesMakeOneShipment(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, options{})
	env := paid(t, "o-1")
	for i := range 3 {
		if err := fx.f.Handle(context.Background(), delivery(t, env)); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	// Concurrent duplicates: each either replays or is told to come back later.
	env2 := paid(t, "o-2")
	var wg sync.WaitGroup
	var retry atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fx.f.Handle(context.Background(), delivery(t, env2))
			switch {
			case err == nil:
			case errors.Is(err, idempotency.ErrInProgress) && reason(err) == "":
				retry.Add(1)
			default:
				t.Errorf("concurrent delivery: %v", err)
			}
		}()
	}
	wg.Wait()
	for range retry.Load() { // the queue redelivers the ones told to retry
		if err := fx.f.Handle(context.Background(), delivery(t, env2)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"o-1", "o-2"} {
		ships := fx.p.ShipmentsFor(id)
		if len(ships) != 1 {
			t.Fatalf("order %s: %d shipments at the provider, want 1", id, len(ships))
		}
		rec := fx.shipment(t, id)
		if rec == nil || rec.ShipmentID != ships[0].ID || rec.Status != fulfilment.StatusCreated || rec.AmountMinor != 1999 {
			t.Fatalf("order %s: recorded %+v, provider %+v", id, rec, ships[0])
		}
	}
	if got := len(fx.p.Requests()); got != 2 {
		t.Fatalf("provider saw %d requests, want 2 (duplicates are absorbed before the call)", got)
	}
	if m := fx.f.Metrics(); m.Runs != 2 || m.StoreHits+m.InProgress < 2 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestProviderFailuresAreRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		faults       []provider.Fault
		wantRequests int
	}{
		{"500 then OK", []provider.Fault{provider.FaultServerError}, 2},
		{"429 then OK", []provider.Fault{provider.FaultThrottle}, 2},
		{"connection reset then OK", []provider.Fault{provider.FaultReset}, 2},
		{"timeout after acting, then the replay", []provider.Fault{provider.FaultTimeoutAfterAct}, 2},
		{"three failures then OK", []provider.Fault{provider.FaultServerError, provider.FaultReset, provider.FaultThrottle}, 4},
	}
	env := ddbtest.New(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, options{env: env})
			fx.p.Inject(tc.faults...)
			env := paid(t, "o-1")
			if err := fx.f.Handle(context.Background(), delivery(t, env)); err != nil {
				t.Fatal(err)
			}
			if got := len(fx.p.ShipmentsFor("o-1")); got != 1 {
				t.Fatalf("%d shipments, want 1", got)
			}
			reqs := fx.p.Requests()
			if len(reqs) != tc.wantRequests {
				t.Fatalf("%d provider requests, want %d", len(reqs), tc.wantRequests)
			}
			for _, r := range reqs {
				if r.IdempotencyKey != env.EventID {
					t.Fatalf("request with key %q, want the event id %s", r.IdempotencyKey, env.EventID)
				}
			}
		})
	}
}

func TestProviderDownIsRetryableAndARedeliveryShipsOnce(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, options{})
	fx.p.Inject(provider.FaultServerError, provider.FaultServerError, provider.FaultServerError, provider.FaultServerError)
	env := paid(t, "o-1")
	err := fx.f.Handle(context.Background(), delivery(t, env))
	if err == nil || reason(err) != "" {
		t.Fatalf("after MaxAttempts 500s: %v, want a retryable error", err)
	}
	if err := fx.f.Handle(context.Background(), delivery(t, env)); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if got := len(fx.p.ShipmentsFor("o-1")); got != 1 {
		t.Fatalf("%d shipments", got)
	}
}

func TestProviderRejectionIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
	}{
		{"400", http.StatusBadRequest},
		{"401", http.StatusUnauthorized},
		{"422", http.StatusUnprocessableEntity},
	}
	env := ddbtest.New(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(`{"error":"refused","message":"no"}`))
			})
			fx := newFixture(t, options{env: env, handler: h})
			env := paid(t, "o-1")
			err := fx.f.Handle(context.Background(), delivery(t, env))
			if reason(err) != fulfilment.ReasonProviderRejected {
				t.Fatalf("err %v, want permanent %s", err, fulfilment.ReasonProviderRejected)
			}
			var pe *fulfilment.ProviderError
			if !errors.As(err, &pe) || pe.Status != tc.status || pe.Code != "refused" {
				t.Fatalf("provider error %+v", pe)
			}
			if calls.Load() != 1 {
				t.Fatalf("%d calls: a 4xx must not be retried", calls.Load())
			}
			// The failed attempt's record was deleted: a redrive from the DLQ runs again.
			_ = fx.f.Handle(context.Background(), delivery(t, env))
			if calls.Load() != 2 {
				t.Fatalf("redrive made %d calls, want 2", calls.Load())
			}
		})
	}
	// A wrong token at the real provider server is refused the same way.
	fx := newFixture(t, options{env: env, provider: provider.Config{APIKey: "rotated"}})
	if err := fx.f.Handle(context.Background(), delivery(t, paid(t, "o-1"))); reason(err) != fulfilment.ReasonProviderRejected {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestCrashBetweenProviderAnswerAndCompleted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		naive         bool
		wantShipments int
		wantReason    string
	}{
		{"key-honouring provider: the repeat gets the first shipment", false, 1, ""},
		// The crash came after the shipment was recorded: the take-over reads
		// it and does not call the provider (TestRedeliveryAfterTheIdempotencyRecordExpired).
		{"naive provider: the recorded shipment answers the repeat", true, 1, ""},
	}
	env := ddbtest.New(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, options{env: env, provider: provider.Config{IgnoreIdempotencyKey: tc.naive}})
			fx.crash.Store(1)
			env := paid(t, "o-1")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // the dying invocation's deadline
			defer cancel()
			if err := fx.f.Handle(ctx, delivery(t, env)); !errors.Is(err, errCrash) {
				t.Fatalf("first delivery: %v", err)
			}
			// The redelivery before the in-progress expiry is told to retry...
			if err := fx.f.Handle(context.Background(), delivery(t, env)); !errors.Is(err, idempotency.ErrInProgress) {
				t.Fatalf("early redelivery: %v", err)
			}
			// ...and after it takes the record over and calls the provider again.
			fx.clock.Advance(3 * time.Second)
			err := fx.f.Handle(context.Background(), delivery(t, env))
			if reason(err) != tc.wantReason || (tc.wantReason == "" && err != nil) {
				t.Fatalf("redelivery: %v, want reason %q", err, tc.wantReason)
			}
			if got := len(fx.p.ShipmentsFor("o-1")); got != tc.wantShipments {
				t.Fatalf("%d shipments at the provider, want %d", got, tc.wantShipments)
			}
			if m := fx.f.Metrics(); m.TakenOver != 1 {
				t.Fatalf("metrics %+v", m)
			}
			if rec := fx.shipment(t, "o-1"); rec == nil || rec.ShipmentID != fx.p.ShipmentsFor("o-1")[0].ID {
				t.Fatalf("recorded %+v: the first shipment must stay recorded", rec)
			}
		})
	}
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, options{})
	// A paid order's cancellation that overtakes its payment waits for it.
	cancel := cancelled(t, "o-1", true)
	err := fx.f.Handle(context.Background(), delivery(t, cancel))
	if !errors.Is(err, fulfilment.ErrNoShipment) || reason(err) != "" {
		t.Fatalf("cancel before paid: %v, want retryable ErrNoShipment", err)
	}
	if err := fx.f.Handle(context.Background(), delivery(t, paid(t, "o-1"))); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the redelivery, then a duplicate
		if err := fx.f.Handle(context.Background(), delivery(t, cancel)); err != nil {
			t.Fatalf("cancel %d: %v", i, err)
		}
	}
	ships := fx.p.ShipmentsFor("o-1")
	if len(ships) != 1 || ships[0].Status != provider.StatusCancelled {
		t.Fatalf("provider shipments %+v", ships)
	}
	rec := fx.shipment(t, "o-1")
	if rec.Status != fulfilment.StatusCancelled || rec.CancelledEventID != cancel.EventID {
		t.Fatalf("recorded %+v", rec)
	}
	// An unpaid order's cancellation ships nothing and calls nobody.
	before := len(fx.p.Requests())
	if err := fx.f.Handle(context.Background(), delivery(t, cancelled(t, "o-2", false))); err != nil {
		t.Fatal(err)
	}
	if len(fx.p.Requests()) != before {
		t.Fatal("unpaid cancellation called the provider")
	}
}

func TestRefusedAndIgnoredEvents(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, options{})
	forged := delivery(t, paid(t, "o-1"))
	forged.Source = "evil.corp"
	zero := envelope(t, "o-2", 2, order.EventOrderPaid, order.Paid{OrderID: "o-2", AmountMinor: 0, Currency: "EUR"})
	first := paid(t, "o-3")
	reused := envelope(t, "o-3", 2, order.EventOrderPaid, order.Paid{OrderID: "o-3", AmountMinor: 1, Currency: "EUR"})
	reused.EventID = first.EventID
	placed := envelope(t, "o-4", 1, order.EventOrderPlaced, order.Placed{OrderID: "o-4", CustomerID: "c-1", AmountMinor: 5, Currency: "EUR"})
	if err := fx.f.Handle(context.Background(), delivery(t, first)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		ev         events.EventBridgeEvent
		wantReason string
	}{
		{"foreign source", forged, "forged_source"},
		{"contract violation", delivery(t, zero), order.ReasonAmountOutOfRange},
		{"event id reused with another payload", delivery(t, reused), fulfilment.ReasonPayloadMismatch},
		{"ignored event type", delivery(t, placed), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := fx.f.Handle(context.Background(), tc.ev)
			if reason(err) != tc.wantReason || (tc.wantReason == "" && err != nil) {
				t.Fatalf("err %v, want reason %q", err, tc.wantReason)
			}
		})
	}
	if got := len(fx.p.Shipments()); got != 1 {
		t.Fatalf("%d shipments, want only the first order's", got)
	}
}
