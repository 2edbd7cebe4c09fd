package provider_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/localstate"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
)

// TestProviderKeepsStateAcrossRestart: a provider restarted on the same
// state keeps its shipments (cancellations included) and its key answers,
// and numbers new shipments after the kept ones: a restart never hands an
// existing shipment id to another order (it used to restart at shp_000001,
// so two orders shared an id and one's cancellation cancelled the other's
// shipment). Real HTTP requests.
func TestProviderKeepsStateAcrossRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	start := func() (*provider.Server, string, *localstate.Journal) {
		j, err := localstate.Open(path, localstate.Options{Binding: "b"})
		if err != nil {
			t.Fatal(err)
		}
		p := provider.New(provider.Config{APIKey: "secret", Store: j})
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		base, err := p.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return p, base, j
	}
	p, base, j := start()
	first := do(t, http.DefaultClient, base, call{"POST", "/shipments", "k1", order1})
	second := do(t, http.DefaultClient, base, call{"POST", "/shipments", "k2", `{"order_id":"o-2","amount_minor":5,"currency":"EUR"}`})
	id1, id2 := shipmentID(t, first.body), shipmentID(t, second.body)
	if r := do(t, http.DefaultClient, base, call{"POST", "/shipments/" + id2 + "/cancel", "c2", ""}); r.status != 200 {
		t.Fatalf("cancel: %+v", r)
	}
	_ = p.Close(context.Background())
	_ = j.Close()

	p, base, j = start()
	defer j.Close()
	defer p.Close(context.Background())
	third := do(t, http.DefaultClient, base, call{"POST", "/shipments", "k3", `{"order_id":"o-3","amount_minor":7,"currency":"EUR"}`})
	if id3 := shipmentID(t, third.body); id3 == id1 || id3 == id2 || third.status != 201 {
		t.Fatalf("after the restart a new order got shipment %s (status %d); %s and %s exist", id3, third.status, id1, id2)
	}
	replay := do(t, http.DefaultClient, base, call{"POST", "/shipments", "k1", order1})
	if !replay.replayed || replay.body != first.body {
		t.Fatalf("key k1 after the restart: %+v, want the first answer replayed", replay)
	}
	if r := do(t, http.DefaultClient, base, call{"POST", "/shipments", "k1", `{"order_id":"o-9","amount_minor":1,"currency":"EUR"}`}); r.status != 422 {
		t.Fatalf("key k1 with another body after the restart: %d, want 422", r.status)
	}
	got := p.Shipments()
	if len(got) != 3 || got[0].ID != id1 || got[1].ID != id2 || got[1].Status != provider.StatusCancelled || got[1].CancelledAt == nil {
		t.Fatalf("shipments after the restart: %+v", got)
	}
}
