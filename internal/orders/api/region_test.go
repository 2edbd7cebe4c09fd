package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// inRegion returns a fixture on f's tables whose outbox writer belongs to
// region ("" = single-Region mode): another Region's API on the same
// (already replicated) global tables.
func (f *fixture) inRegion(t *testing.T, region string) *fixture {
	t.Helper()
	w, err := outbox.NewWriter(f.env.DDB, outbox.WriterConfig{Source: appenv.EventSource, Table: f.outbox, Region: region})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repo, err := order.NewRepository(order.RepositoryConfig{Table: f.orders, Client: f.env.DDB, Writer: w, Logger: logger, MaxAttempts: 8})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Orders: repo, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{env: f.env, orders: f.orders, outbox: f.outbox, h: h}
}

// TestWrongRegion (issue 34 item 5): an order created through eu-west-1's
// API is homed there; a command through eu-central-1's API answers 421
// wrong_region naming eu-west-1 and writes nothing, and the home Region's
// API still serves it. An order from before multi-Region mode (no home)
// answers 421 without a home_region.
func TestWrongRegion(t *testing.T) {
	t.Parallel()
	base := newFixture(t, ddbtest.New(t))
	a, b := base.inRegion(t, "eu-west-1"), base.inRegion(t, "eu-central-1")
	o := a.create(t)
	before := base.counts(t)

	r := b.do(t, "POST", "/orders/"+o.ID+"/pay", "")
	e := r.errBody(t)
	if r.status != http.StatusMisdirectedRequest || e.Code != api.CodeWrongRegion || e.HomeRegion != "eu-west-1" || e.Message == "" {
		t.Fatalf("pay in the other Region: %d %s", r.status, r.body)
	}
	if after := base.counts(t); after != before {
		t.Fatalf("the refused command wrote: counts %+v, were %+v", after, before)
	}
	if got := a.do(t, "GET", "/orders/"+o.ID, "").order(t); got.Version != 1 || got.Status != order.StatusPlaced {
		t.Fatalf("order after the refusal: %+v", got)
	}
	if r := a.do(t, "POST", "/orders/"+o.ID+"/pay", ""); r.status != http.StatusOK {
		t.Fatalf("pay in the home Region: %d %s", r.status, r.body)
	}

	old := base.create(t) // single-Region mode: no home item
	r = a.do(t, "POST", "/orders/"+old.ID+"/pay", "")
	e = r.errBody(t)
	if r.status != http.StatusMisdirectedRequest || e.Code != api.CodeWrongRegion || e.HomeRegion != "" || strings.Contains(string(r.body), "home_region") {
		t.Fatalf("pay of an order without a home: %d %s", r.status, r.body)
	}
}
