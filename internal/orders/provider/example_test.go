package provider_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
)

// A key-honouring provider behind httptest: a first attempt hits an injected
// 500, the retry with the same Idempotency-Key creates the shipment, and a
// duplicate delivery gets the same shipment back.
func ExampleNew() {
	p := provider.New(provider.Config{})
	ts := httptest.NewServer(p.Handler())
	defer ts.Close()
	p.Inject(provider.FaultServerError)

	post := func() {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/shipments", strings.NewReader(`{"order_id":"o-1","amount_minor":1999,"currency":"EUR"}`))
		req.Header.Set(provider.HeaderIdempotencyKey, "evt-1")
		resp, err := ts.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%d replayed=%q\n", resp.StatusCode, resp.Header.Get(provider.HeaderReplayed))
	}
	post()
	post()
	post()
	for _, r := range p.Requests() {
		fmt.Printf("%s fault=%q shipment=%q\n", r.Outcome, r.Fault, r.ShipmentID)
	}
	fmt.Println("shipments:", len(p.Shipments()))
	// Output:
	// 500 replayed=""
	// 201 replayed=""
	// 201 replayed="true"
	// fault fault="server_error" shipment=""
	// created fault="" shipment="shp_000001"
	// replayed fault="" shipment="shp_000001"
	// shipments: 1
}
