package fulfilment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// HeaderIdempotencyKey is the header that carries the idempotency key to
// the provider (the outbox event_id).
const HeaderIdempotencyKey = "Idempotency-Key"

// ReasonProviderRejected is the dead-letter reason of a provider 4xx that
// retrying cannot fix (400, 404, 422, ...; 401 and 403 once a refreshed
// token is refused too).
const ReasonProviderRejected = "provider_rejected"

// ReasonProviderRedirected is the dead-letter reason of a provider answer
// that redirects (3xx): the client follows no redirect, so the bearer token
// goes only to BaseURL (Go's client would re-send Authorization to the same
// host over plain HTTP). BaseURL is wrong: fix it and redrive.
const ReasonProviderRedirected = "provider_redirected"

// Defaults for ProviderConfig.
const (
	DefaultAttemptTimeout = 5 * time.Second
	DefaultMaxAttempts    = 4
	DefaultInitialBackoff = 200 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
	DefaultMaxRetryAfter  = 5 * time.Second
	// DefaultMaxResponseBytes bounds a provider response body read: 1 MiB.
	DefaultMaxResponseBytes = 1 << 20
)

// Credentials authenticate calls to the provider.
type Credentials struct {
	// Token is sent as "Authorization: Bearer <Token>". Empty: no header.
	Token string
}

// CredentialsSource supplies the provider credentials. In AWS it reads a
// Secrets Manager secret or an SSM SecureString parameter (and caches it:
// it is called once per provider call); locally StaticCredentials. It must
// be safe for concurrent use.
type CredentialsSource interface {
	Credentials(ctx context.Context) (Credentials, error)
}

// CredentialsRefresher is a CredentialsSource that can replace credentials
// the provider refused (a cached token outlived a rotation). The client
// calls Refresh once per call on a 401 or 403 and repeats the request with
// the answer if its token differs; CachedCredentials implements it.
type CredentialsRefresher interface {
	CredentialsSource
	// Refresh returns credentials to use instead of rejected: read from the
	// origin again, unless the cache already holds others (another call
	// refreshed it). Safe for concurrent use.
	Refresh(ctx context.Context, rejected Credentials) (Credentials, error)
}

// StaticCredentials is a CredentialsSource that always returns its token.
type StaticCredentials string

// Credentials returns the static token.
func (s StaticCredentials) Credentials(context.Context) (Credentials, error) {
	return Credentials{Token: string(s)}, nil
}

// ProviderConfig configures the provider client. Zero values take the
// defaults.
type ProviderConfig struct {
	// BaseURL is the provider's API root, e.g. "https://api.shipper.example/v1"
	// (paths /shipments... are appended). Required; https, or http to a
	// loopback host (localhost, 127.0.0.0/8, ::1: the local fake provider)
	// — http to another host only without Credentials, so a token never
	// travels in clear text.
	BaseURL string
	// Credentials supplies the bearer token. Nil: no Authorization header.
	Credentials CredentialsSource
	// HTTPClient sends the requests. Default: a client with no overall
	// timeout (AttemptTimeout bounds each attempt). The client uses a copy
	// whose CheckRedirect follows no redirect (ReasonProviderRedirected).
	HTTPClient *http.Client
	// AttemptTimeout bounds one HTTP attempt. Default 5 s.
	AttemptTimeout time.Duration
	// MaxAttempts bounds attempts per call (retries on 429, 5xx, 409 and
	// network errors). Default 4.
	MaxAttempts int
	// InitialBackoff and MaxBackoff shape the jittered exponential backoff
	// between attempts (cenkalti/backoff). Defaults 200 ms and 2 s.
	InitialBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps the wait a 429's Retry-After asks for. Default 5 s.
	MaxRetryAfter time.Duration
}

func (c *ProviderConfig) setDefaults() {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.InitialBackoff == 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
}

// Validate reports the first invalid setting (after defaults).
func (c ProviderConfig) Validate() error {
	u, err := url.Parse(c.BaseURL)
	switch {
	case c.BaseURL == "":
		return errors.New("fulfilment: ProviderConfig.BaseURL is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("fulfilment: ProviderConfig.BaseURL %q is not an http(s) URL", c.BaseURL)
	case u.Scheme == "http" && c.Credentials != nil && !loopback(u.Hostname()):
		return fmt.Errorf("fulfilment: ProviderConfig.BaseURL %q is plain HTTP to a non-loopback host: the bearer token would travel in clear text (use https)", c.BaseURL)
	case c.AttemptTimeout < 0 || c.InitialBackoff < 0 || c.MaxBackoff < c.InitialBackoff || c.MaxRetryAfter < 0:
		return errors.New("fulfilment: ProviderConfig timeouts and backoff must be positive, MaxBackoff >= InitialBackoff")
	case c.MaxAttempts < 1:
		return fmt.Errorf("fulfilment: ProviderConfig.MaxAttempts %d must be >= 1", c.MaxAttempts)
	}
	return nil
}

// ShipmentRequest is the POST /shipments body.
type ShipmentRequest struct {
	OrderID     string `json:"order_id"`
	AmountMinor int64  `json:"amount_minor"` // minor units
	Currency    string `json:"currency"`     // ISO 4217
}

// ProviderShipment is the provider's answer to a create or a cancel.
type ProviderShipment struct {
	ID      string `json:"shipment_id"`
	OrderID string `json:"order_id"`
	Status  string `json:"status"` // "created" or "cancelled"
}

// ProviderError is a non-2xx answer from the provider.
type ProviderError struct {
	Op     string // "create shipment", "cancel shipment <id>"
	Status int    // HTTP status
	Code   string // the body's "error" member, when JSON
	Body   string // the body, at most 512 bytes
}

// Error returns "provider <op>: HTTP <status> <code>: <body>".
func (e *ProviderError) Error() string {
	return fmt.Sprintf("provider %s: HTTP %d %s: %s", e.Op, e.Status, e.Code, e.Body)
}

// Retryable reports whether retrying can help: 429, 409 (the provider is
// still processing the same key) and 5xx.
func (e *ProviderError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusConflict || e.Status >= 500
}

// ProviderClient calls the provider's shipment API with timeouts, bounded
// retries and the idempotency key on every attempt. Safe for concurrent use.
type ProviderClient struct {
	cfg  ProviderConfig
	base string
}

// NewProviderClient returns a client, or an error if cfg does not validate.
func NewProviderClient(cfg ProviderConfig) (*ProviderClient, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Follow no redirect: a redirect's answer (3xx) comes back as it is.
	// net/http re-sends Authorization on a redirect to the same host or a
	// subdomain whatever the scheme, so following one could send the token
	// to http://<host>/… in clear text; the provider API has no reason to
	// redirect a POST.
	hc := *cfg.HTTPClient
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.HTTPClient = &hc
	return &ProviderClient{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/")}, nil
}

// loopback reports whether host (no port) is localhost or a loopback IP.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CreateShipment sends POST /shipments with "Idempotency-Key: key".
// Errors: a *ProviderError for a non-retryable 4xx wrapped in a
// *sqsconsumer.PermanentError (reason ReasonProviderRejected; a 401 or 403
// only after a refreshed token was refused too, see CredentialsRefresher),
// or for a 3xx (reason ReasonProviderRedirected); otherwise, after
// Config.MaxAttempts attempts or the context's end, the last error
// (retryable: a redelivery repeats the call with the same key). The answer
// is not checked against req: the caller does (Fulfilment refuses an answer
// about another order).
func (c *ProviderClient) CreateShipment(ctx context.Context, key string, req ShipmentRequest) (ProviderShipment, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return ProviderShipment{}, fmt.Errorf("provider create shipment: encode: %w", err)
	}
	return c.call(ctx, "create shipment", "/shipments", key, body)
}

// CancelShipment sends POST /shipments/{id}/cancel with "Idempotency-Key:
// key". Errors as CreateShipment.
func (c *ProviderClient) CancelShipment(ctx context.Context, key, shipmentID string) (ProviderShipment, error) {
	return c.call(ctx, "cancel shipment "+shipmentID, "/shipments/"+url.PathEscape(shipmentID)+"/cancel", key, []byte("{}"))
}

func (c *ProviderClient) call(ctx context.Context, op, path, key string, body []byte) (ProviderShipment, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = c.cfg.InitialBackoff, c.cfg.MaxBackoff
	var last error
	refreshed := false // one token refresh per call
	sh, err := backoff.Retry(ctx, func() (ProviderShipment, error) {
		sh, err := c.attempt(ctx, op, path, key, body, &refreshed)
		if err != nil {
			last = err
		}
		return sh, err
	}, backoff.WithBackOff(b), backoff.WithMaxTries(uint(c.cfg.MaxAttempts)), backoff.WithMaxElapsedTime(0))
	if err == nil {
		return sh, nil
	}
	if _, ok := sqsconsumer.AsPermanent(err); ok {
		return ProviderShipment{}, err
	}
	if last != nil && !errors.Is(err, last) {
		// The context ended while waiting: keep the provider's answer.
		return ProviderShipment{}, fmt.Errorf("provider %s: %w (last attempt: %w)", op, err, last)
	}
	return ProviderShipment{}, fmt.Errorf("provider %s: gave up after %d attempts: %w", op, c.cfg.MaxAttempts, err)
}

// credentials returns the credentials to send (none without a source).
func (c *ProviderClient) credentials(ctx context.Context, op string) (Credentials, error) {
	if c.cfg.Credentials == nil {
		return Credentials{}, nil
	}
	cr, err := c.cfg.Credentials.Credentials(ctx)
	if err != nil {
		return Credentials{}, fmt.Errorf("provider %s: credentials: %w", op, err)
	}
	return cr, nil
}

// attempt sends one request. On a 401 or 403, the first time in a call
// (*refreshed false) with a CredentialsRefresher, it refreshes the token
// and, if that gives another token, sends the request once more at once.
// Non-retryable answers come back wrapped in backoff.Permanent; a 429's
// Retry-After in backoff.RetryAfter.
func (c *ProviderClient) attempt(ctx context.Context, op, path, key string, body []byte, refreshed *bool) (ProviderShipment, error) {
	cr, err := c.credentials(ctx, op)
	if err != nil {
		return ProviderShipment{}, err
	}
	sh, status, err := c.send(ctx, op, path, key, body, cr)
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return sh, err
	}
	r, ok := c.cfg.Credentials.(CredentialsRefresher)
	if !ok || *refreshed {
		return sh, err
	}
	*refreshed = true
	fresh, rerr := r.Refresh(ctx, cr)
	if rerr != nil {
		// The token may have been rotated and could not be read again: a
		// retry (or a redelivery) tries again.
		return ProviderShipment{}, fmt.Errorf("provider %s: HTTP %d, and refreshing the token failed: %w", op, status, rerr)
	}
	if fresh.Token == cr.Token {
		return sh, err // the same token: the provider refuses it
	}
	sh, _, err = c.send(ctx, op, path, key, body, fresh)
	return sh, err
}

// send sends one HTTP request with cr and returns the shipment, the HTTP
// status (0 when no answer came) and the error as attempt classifies it.
func (c *ProviderClient) send(ctx context.Context, op, path, key string, body []byte, cr Credentials) (ProviderShipment, int, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return ProviderShipment{}, 0, backoff.Permanent(fmt.Errorf("provider %s: %w", op, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderIdempotencyKey, key)
	if cr.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cr.Token)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return ProviderShipment{}, 0, fmt.Errorf("provider %s: %w", op, err) // network error or timeout: retry
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, DefaultMaxResponseBytes))
	if err != nil {
		return ProviderShipment{}, resp.StatusCode, fmt.Errorf("provider %s: read answer: %w", op, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		var sh ProviderShipment
		if err := json.Unmarshal(raw, &sh); err != nil || sh.ID == "" {
			return ProviderShipment{}, resp.StatusCode, fmt.Errorf("provider %s: HTTP %d with an unreadable body %q", op, resp.StatusCode, clip(string(raw), 256))
		}
		return sh, resp.StatusCode, nil
	}
	pe := &ProviderError{Op: op, Status: resp.StatusCode, Body: clip(string(raw), 512)}
	var eb struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &eb) == nil {
		pe.Code = eb.Error
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		pe.Code = "redirect to " + clip(resp.Header.Get("Location"), 256)
		return ProviderShipment{}, resp.StatusCode, backoff.Permanent(sqsconsumer.Permanent(ReasonProviderRedirected, pe))
	}
	if !pe.Retryable() {
		return ProviderShipment{}, resp.StatusCode, backoff.Permanent(sqsconsumer.Permanent(ReasonProviderRejected, pe))
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait := min(time.Duration(s)*time.Second, c.cfg.MaxRetryAfter)
			return ProviderShipment{}, resp.StatusCode, fmt.Errorf("%w: %w", pe, &backoff.RetryAfterError{Duration: wait})
		}
	}
	return ProviderShipment{}, resp.StatusCode, pe
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
