package fulfilment_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
)

// seen records the requests a test server received.
type seen struct {
	mu   sync.Mutex
	auth []string
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
}

func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

func quickClient(t *testing.T, base string, hc *http.Client, creds fulfilment.CredentialsSource) *fulfilment.ProviderClient {
	t.Helper()
	c, err := fulfilment.NewProviderClient(fulfilment.ProviderConfig{BaseURL: base, HTTPClient: hc, Credentials: creds,
		AttemptTimeout: time.Second, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProviderRedirectNeverCarriesTheToken: the provider (https) answers
// with a redirect. Go's client follows redirects and re-sends Authorization
// to the same host (net/http: sensitive headers are kept when the host is
// the same or a subdomain, whatever the scheme or port), so a 307 to
// http://<same host>/… would carry the bearer token in clear text. The
// client follows no redirect at all: the token reaches only the configured
// BaseURL, and a redirect is a permanent failure (provider_redirected)
// naming where it pointed, for an operator to fix BaseURL.
func TestProviderRedirectNeverCarriesTheToken(t *testing.T) {
	t.Parallel()
	var plain, secure seen
	plainHTTP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plain.add(r)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"shipment_id":"shp_1","order_id":"o-1","status":"created"}`))
	}))
	t.Cleanup(plainHTTP.Close)
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound, http.StatusMovedPermanently} {
		tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secure.add(r)
			// same host (127.0.0.1), another port, plain HTTP
			http.Redirect(w, r, plainHTTP.URL+r.URL.Path, status)
		}))
		t.Cleanup(tls.Close)
		c := quickClient(t, tls.URL, tls.Client(), fulfilment.StaticCredentials("secret"))
		_, err := c.CreateShipment(context.Background(), "k-1", fulfilment.ShipmentRequest{OrderID: "o-1", AmountMinor: 1, Currency: "EUR"})
		if got := plain.all(); len(got) != 0 {
			t.Fatalf("%d: the redirect was followed to plain HTTP with Authorization %q", status, got)
		}
		if reason(err) != "provider_redirected" || !strings.Contains(err.Error(), plainHTTP.URL) {
			t.Fatalf("%d: err = %v, want permanent provider_redirected naming the target", status, err)
		}
	}
	if got := secure.all(); len(got) != 4 || got[0] != "Bearer secret" {
		t.Fatalf("the provider saw %q, want one request per status with the token", got)
	}
}

// A token is never sent over plain HTTP to a host other than loopback (the
// local fake provider): NewProviderClient refuses that BaseURL when
// Credentials are set.
func TestProviderClientRefusesATokenOverPlainHTTP(t *testing.T) {
	t.Parallel()
	creds := fulfilment.StaticCredentials("secret")
	for _, tc := range []struct {
		base  string
		creds fulfilment.CredentialsSource
		ok    bool
	}{
		{"http://provider.example/v1", creds, false},
		{"http://10.0.0.7:8080", creds, false},
		{"https://provider.example/v1", creds, true},
		{"http://127.0.0.1:8080", creds, true},
		{"http://localhost:8080", creds, true},
		{"http://[::1]:8080", creds, true},
		{"http://provider.example/v1", nil, true},
	} {
		_, err := fulfilment.NewProviderClient(fulfilment.ProviderConfig{BaseURL: tc.base, Credentials: tc.creds})
		if (err == nil) != tc.ok {
			t.Errorf("BaseURL %s (credentials %v): err = %v", tc.base, tc.creds != nil, err)
		}
	}
}

// rotatingSource is the token's origin (Secrets Manager): it answers the
// current token.
type rotatingSource struct {
	mu    sync.Mutex
	token string
	reads int
}

func (s *rotatingSource) Credentials(context.Context) (fulfilment.Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return fulfilment.Credentials{Token: s.token}, nil
}

func (s *rotatingSource) set(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = tok
}

// TestProviderTokenRotation: the token is cached (CachedCredentials, 5
// minutes) and the secret is rotated: the provider answers the cached token
// 401 (or 403). The client reads the token again once and repeats the call
// with the new one, instead of dead-lettering every shipment until the
// cache expires. A token still refused after the refresh is a permanent
// provider_rejected, after exactly one refresh.
func TestProviderTokenRotation(t *testing.T) {
	t.Parallel()
	for _, refuse := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		var current atomic.Value
		current.Store("old")
		var calls atomic.Int64
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if r.Header.Get("Authorization") != "Bearer "+current.Load().(string) {
				w.WriteHeader(refuse)
				_, _ = w.Write([]byte(`{"error":"unauthorized"}`))
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"shipment_id":"shp_1","order_id":"o-1","status":"created"}`))
		}))
		t.Cleanup(ts.Close)
		src := &rotatingSource{token: "old"}
		cached := &fulfilment.CachedCredentials{Source: src}
		c := quickClient(t, ts.URL, nil, cached)
		req := fulfilment.ShipmentRequest{OrderID: "o-1", AmountMinor: 1, Currency: "EUR"}
		if _, err := c.CreateShipment(context.Background(), "k-1", req); err != nil {
			t.Fatalf("%d: before the rotation: %v", refuse, err)
		}
		// Rotation: the provider takes only the new token; the cache still
		// holds the old one.
		src.set("new")
		current.Store("new")
		calls.Store(0)
		sh, err := c.CreateShipment(context.Background(), "k-2", req)
		if err != nil || sh.ID != "shp_1" {
			t.Fatalf("%d: after the rotation: %+v %v; want the call repeated with the new token", refuse, sh, err)
		}
		if calls.Load() != 2 || src.reads != 2 {
			t.Fatalf("%d: %d provider calls, %d token reads; want 2 and 2 (one refresh)", refuse, calls.Load(), src.reads)
		}
		// The refreshed token is cached: the next call needs no refresh.
		calls.Store(0)
		if _, err := c.CreateShipment(context.Background(), "k-3", req); err != nil || calls.Load() != 1 || src.reads != 2 {
			t.Fatalf("%d: next call: %v, %d calls, %d reads", refuse, err, calls.Load(), src.reads)
		}
		// A token the provider refuses whatever the refresh reads (the
		// stack's placeholder secret): permanent after one refresh and one
		// repeat.
		current.Store("neither")
		src.set("placeholder")
		calls.Store(0)
		_, err = c.CreateShipment(context.Background(), "k-4", req)
		if reason(err) != fulfilment.ReasonProviderRejected || calls.Load() != 2 || src.reads != 3 {
			t.Fatalf("%d: refused token: %v, %d calls, %d reads; want provider_rejected after one refresh", refuse, err, calls.Load(), src.reads)
		}
		// A refresh that reads the same token again repeats nothing.
		calls.Store(0)
		_, err = c.CreateShipment(context.Background(), "k-5", req)
		if reason(err) != fulfilment.ReasonProviderRejected || calls.Load() != 1 || src.reads != 4 {
			t.Fatalf("%d: unchanged token: %v, %d calls, %d reads; want provider_rejected, 1 call", refuse, err, calls.Load(), src.reads)
		}
	}
}
