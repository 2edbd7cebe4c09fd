package provider_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
)

type call struct {
	method, path, key, body string
}

type reply struct {
	status   int
	body     string
	replayed bool
	err      error
}

func do(t *testing.T, client *http.Client, base string, c call) reply {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set(provider.HeaderIdempotencyKey, c.key)
	}
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get(provider.HeaderReplayed) == "true"}
}

func shipmentID(t *testing.T, body string) string {
	t.Helper()
	var sh provider.Shipment
	if err := json.Unmarshal([]byte(body), &sh); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return sh.ID
}

const order1 = `{"order_id":"o-1","amount_minor":1999,"currency":"EUR"}`

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		naive         bool
		calls         []call
		wantStatus    []int
		wantShipments int
		wantReplayed  []bool
	}{
		{
			name:          "same key, same body: same shipment, same response",
			calls:         []call{{"POST", "/shipments", "k1", order1}, {"POST", "/shipments", "k1", order1}},
			wantStatus:    []int{201, 201},
			wantReplayed:  []bool{false, true},
			wantShipments: 1,
		},
		{
			name:          "same key, other body: 422",
			calls:         []call{{"POST", "/shipments", "k1", order1}, {"POST", "/shipments", "k1", strings.Replace(order1, "1999", "5", 1)}},
			wantStatus:    []int{201, 422},
			wantReplayed:  []bool{false, false},
			wantShipments: 1,
		},
		{
			name:          "naive provider ignores the key",
			naive:         true,
			calls:         []call{{"POST", "/shipments", "k1", order1}, {"POST", "/shipments", "k1", order1}},
			wantStatus:    []int{201, 201},
			wantReplayed:  []bool{false, false},
			wantShipments: 2,
		},
		{
			name:          "no key: every POST acts",
			calls:         []call{{"POST", "/shipments", "", order1}, {"POST", "/shipments", "", order1}},
			wantStatus:    []int{201, 201},
			wantReplayed:  []bool{false, false},
			wantShipments: 2,
		},
		{
			name:          "bad body: 400, nothing created",
			calls:         []call{{"POST", "/shipments", "k1", `{"order_id":""}`}},
			wantStatus:    []int{400},
			wantReplayed:  []bool{false},
			wantShipments: 0,
		},
		{
			name:          "cancel unknown shipment: 404",
			calls:         []call{{"POST", "/shipments/shp_x/cancel", "k2", ""}},
			wantStatus:    []int{404},
			wantReplayed:  []bool{false},
			wantShipments: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := provider.New(provider.Config{APIKey: "secret", IgnoreIdempotencyKey: tc.naive})
			ts := httptest.NewServer(p.Handler())
			defer ts.Close()
			var bodies []string
			for i, c := range tc.calls {
				r := do(t, ts.Client(), ts.URL, c)
				if r.err != nil || r.status != tc.wantStatus[i] || r.replayed != tc.wantReplayed[i] {
					t.Fatalf("call %d: %+v, want status %d replayed %v", i, r, tc.wantStatus[i], tc.wantReplayed[i])
				}
				bodies = append(bodies, r.body)
			}
			if got := len(p.Shipments()); got != tc.wantShipments {
				t.Fatalf("%d shipments, want %d", got, tc.wantShipments)
			}
			if tc.wantReplayed[len(tc.wantReplayed)-1] && bodies[0] != bodies[1] {
				t.Fatalf("replayed body %q differs from %q", bodies[1], bodies[0])
			}
			if got := len(p.Requests()); got != len(tc.calls) {
				t.Fatalf("%d requests recorded, want %d", got, len(tc.calls))
			}
		})
	}
}

func TestCancelAndRequestLog(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Config{APIKey: "secret"})
	ts := httptest.NewServer(p.Handler())
	defer ts.Close()
	c := ts.Client()
	id := shipmentID(t, do(t, c, ts.URL, call{"POST", "/shipments", "pay-1", order1}).body)
	for i, key := range []string{"cancel-1", "cancel-1", "cancel-2"} {
		r := do(t, c, ts.URL, call{"POST", "/shipments/" + id + "/cancel", key, ""})
		if r.status != 200 || !strings.Contains(r.body, `"status":"cancelled"`) {
			t.Fatalf("cancel %d: %+v", i, r)
		}
	}
	if r := do(t, c, ts.URL, call{"GET", "/shipments/" + id, "", ""}); r.status != 200 || !strings.Contains(r.body, "cancelled") {
		t.Fatalf("get: %+v", r)
	}
	// Unauthenticated requests are refused and recorded.
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/shipments", strings.NewReader(order1))
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %v %v", resp, err)
	}
	resp.Body.Close()

	r := do(t, c, ts.URL, call{"GET", "/_requests", "", ""})
	var log []provider.Request
	if err := json.Unmarshal([]byte(r.body), &log); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, q := range log {
		outcomes = append(outcomes, q.Outcome)
	}
	want := "created cancelled replayed cancelled unauthorized"
	if got := strings.Join(outcomes, " "); got != want {
		t.Fatalf("outcomes %q, want %q", got, want)
	}
	if log[0].IdempotencyKey != "pay-1" || log[0].ShipmentID != id || log[0].Body != order1 || log[0].Time.IsZero() {
		t.Fatalf("first request %+v", log[0])
	}
}

func TestInjectedFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault         provider.Fault
		wantStatus    int // 0: transport error
		wantShipments int
	}{
		{provider.FaultServerError, 500, 0},
		{provider.FaultThrottle, 429, 0},
		{provider.FaultReset, 0, 0},
		{provider.FaultTimeoutAfterAct, 0, 1}, // acted, but the client gave up
		{provider.FaultLatency, 201, 1},
	}
	for _, tc := range tests {
		t.Run(string(tc.fault), func(t *testing.T) {
			t.Parallel()
			p := provider.New(provider.Config{APIKey: "secret", Faults: provider.FaultConfig{LatencyBy: 50 * time.Millisecond}})
			ts := httptest.NewServer(p.Handler())
			defer ts.Close()
			p.Inject(tc.fault)
			client := ts.Client()
			client.Timeout = 300 * time.Millisecond
			r := do(t, client, ts.URL, call{"POST", "/shipments", "k", order1})
			if r.status != tc.wantStatus || (tc.wantStatus == 0) != (r.err != nil) {
				t.Fatalf("%+v, want status %d", r, tc.wantStatus)
			}
			if got := len(p.Shipments()); got != tc.wantShipments {
				t.Fatalf("%d shipments, want %d", got, tc.wantShipments)
			}
			// The next request is clean; after a timeout-after-act it replays the first answer.
			r = do(t, client, ts.URL, call{"POST", "/shipments", "k", order1})
			if r.status != 201 || len(p.Shipments()) != 1 {
				t.Fatalf("retry: %+v, %d shipments", r, len(p.Shipments()))
			}
			if got := p.Requests()[0].Fault; got != tc.fault {
				t.Fatalf("recorded fault %q", got)
			}
		})
	}
}

func TestSeededFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) string {
		p := provider.New(provider.Config{Faults: provider.FaultConfig{Seed: seed, ServerError: 0.3, Throttle: 0.3}})
		ts := httptest.NewServer(p.Handler())
		defer ts.Close()
		var b strings.Builder
		for range 20 {
			r := do(t, ts.Client(), ts.URL, call{"POST", "/shipments", "", order1})
			b.WriteString(http.StatusText(r.status)[:1])
		}
		return b.String()
	}
	a, b, c := run(7), run(7), run(8)
	if a != b {
		t.Fatalf("same seed, different faults: %s vs %s", a, b)
	}
	if a == c {
		t.Fatalf("different seeds gave the same 20 draws: %s", a)
	}
	if !strings.ContainsAny(a, "IT") || !strings.Contains(a, "C") {
		t.Fatalf("expected a mix of faults and successes: %s", a)
	}
}

func TestStartAndInvalidConfig(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Config{})
	base, err := p.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if r := do(t, http.DefaultClient, base, call{"POST", "/shipments", "k", order1}); r.status != 201 {
		t.Fatalf("%+v", r)
	}
	bad := provider.New(provider.Config{Faults: provider.FaultConfig{ServerError: 0.8, Throttle: 0.8}})
	if bad.Err() == nil {
		t.Fatal("rates adding up to 1.6 must be refused")
	}
	if _, err := bad.Start("127.0.0.1:0"); err == nil {
		t.Fatal("Start with an invalid config must fail")
	}
}
