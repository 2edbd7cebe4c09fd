package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/awslabs/aws-lambda-go-api-proxy/core"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// HTTP header names the API reads or writes.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderIfMatch        = "If-Match"
	HeaderETag           = "ETag"
	HeaderCorrelationID  = "X-Correlation-Id"
	HeaderRequestID      = "X-Request-Id"
)

// DefaultMaxBodyBytes is the default request body limit (16 KiB).
const DefaultMaxBodyBytes = 16 << 10

// Orders is what the handler needs from the order repository;
// *order.Repository satisfies it. Implementations must be safe for
// concurrent use.
type Orders interface {
	Get(ctx context.Context, id string) (order.Order, error)
	Create(ctx context.Context, o *order.Order, events []outbox.Event, meta order.CreateMeta) (order.Order, bool, error)
	Update(ctx context.Context, id string, fn order.UpdateFunc, meta order.UpdateMeta) (order.Order, error)
}

// Config configures the HTTP handler. Zero values take the defaults.
type Config struct {
	// Orders stores orders. Required.
	Orders Orders
	// Logger receives one record per request. Default slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes limits request bodies, in bytes; larger ones get 413.
	// Default DefaultMaxBodyBytes (16 KiB).
	MaxBodyBytes int64
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// NewID returns a new order id. Default: a UUIDv7 string.
	NewID func() (string, error)
	// Callers selects where the caller identity comes from (see
	// CallerMode). Default CallersAuto: the API Gateway IAM principal for
	// requests through LambdaHandler, the X-Caller stand-in for plain
	// net/http requests.
	Callers CallerMode
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = func() (string, error) {
			id, err := uuid.NewV7()
			return id.String(), err
		}
	}
}

// Validate reports a configuration error.
func (c Config) Validate() error {
	switch {
	case c.Orders == nil:
		return errors.New("api: Config.Orders is required")
	case c.MaxBodyBytes < 256:
		return fmt.Errorf("api: MaxBodyBytes %d is too small", c.MaxBodyBytes)
	case c.Callers != CallersAuto && c.Callers != CallersIAMOnly && c.Callers != CallersOpenDemo:
		return fmt.Errorf("api: Callers %d is not a CallerMode", c.Callers)
	}
	return nil
}

// Handler serves the orders HTTP API:
//
//	POST /orders               {"customer_id","amount_minor","currency"}; Idempotency-Key optional
//	                           → 201 order (Location, ETag), 200 same order on an idempotent replay
//	GET  /orders/{id}          → 200 order
//	POST /orders/{id}/pay      empty body or {}            → 200 order
//	POST /orders/{id}/ship     empty body or {}            → 200 order
//	POST /orders/{id}/cancel   empty body or {"reason"}    → 200 order
//
// Every request is first authenticated (see CallerMode): 401
// unauthenticated without a caller identity. The caller is the actor of the
// change (stored on the order, carried in each event envelope, logged as
// "actor") and scopes Idempotency-Key values: the same key from two callers
// is two independent requests.
//
// Commands honour If-Match: <version> (or "<version>"). Responses are JSON;
// orders are shaped like order.Order and carry ETag: "<version>". Errors are
// ErrorBody with the codes listed with the Code* constants. Every response
// echoes X-Correlation-Id (taken from the request or generated). It is safe
// for concurrent use.
type Handler struct {
	cfg Config
	mux *http.ServeMux
}

// New returns the API handler, or an error if cfg does not validate.
func New(cfg Config) (*Handler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /orders", h.create)
	h.mux.HandleFunc("GET /orders/{id}", h.get)
	h.mux.HandleFunc("POST /orders/{id}/pay", h.command("pay", h.pay))
	h.mux.HandleFunc("POST /orders/{id}/ship", h.command("ship", h.ship))
	h.mux.HandleFunc("POST /orders/{id}/cancel", h.command("cancel", h.cancel))
	// Method-less patterns are less specific than the ones above, so they
	// only see the other methods: answer 405 in JSON instead of ServeMux's
	// plain-text reply.
	h.mux.HandleFunc("/orders", h.methodNotAllowed("POST"))
	h.mux.HandleFunc("/orders/{id}", h.methodNotAllowed("GET, HEAD"))
	for _, cmd := range []string{"pay", "ship", "cancel"} {
		h.mux.HandleFunc("/orders/{id}/"+cmd, h.methodNotAllowed("POST"))
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, reqInfo{}, newError(http.StatusNotFound, CodeNotFound, "no such route"))
	})
	return h, nil
}

// ServeHTTP routes the request. A panic below it becomes a 500 internal
// response; it is never propagated.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			h.cfg.Logger.ErrorContext(r.Context(), "panic in handler", "panic", fmt.Sprint(p), "method", r.Method, "path", r.URL.Path)
			writeJSON(w, http.StatusInternalServerError, ErrorBody{Code: CodeInternal, Message: "internal error"})
		}
	}()
	// aws-lambda-go-api-proxy's header accessors trust these headers; a
	// client can send them. Nothing here reads them; drop them so nothing
	// below can.
	r.Header.Del(core.APIGwContextHeader)
	r.Header.Del(core.APIGwStageVarsHeader)
	corr := r.Header.Get(HeaderCorrelationID)
	if !validToken(corr, 128) {
		corr = uuid.NewString()
		r.Header.Set(HeaderCorrelationID, corr)
	}
	w.Header().Set(HeaderCorrelationID, corr)
	ctx := context.WithValue(r.Context(), requestKey{}, resolveRequestID(r))
	caller, err := h.resolveCaller(r)
	if err != nil {
		h.fail(w, r.WithContext(ctx), reqInfo{}, err)
		return
	}
	r = r.WithContext(context.WithValue(ctx, callerKey{}, caller))
	// ServeMux would answer an unclean path (//orders, /orders/x/../y) with
	// a 301/307 HTML redirect; this API answers JSON only.
	if p := r.URL.Path; p == "" || path.Clean(p) != p {
		writeJSON(w, http.StatusNotFound, ErrorBody{Code: CodeNotFound, Message: "no such resource"})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// createRequest is the POST /orders body.
type createRequest struct {
	CustomerID  string `json:"customer_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
}

// cancelRequest is the optional POST /orders/{id}/cancel body.
type cancelRequest struct {
	Reason string `json:"reason"`
}

// reqInfo is what a request's log record carries.
type reqInfo struct {
	aggregateID    string
	idempotencyKey string
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var info reqInfo
	key, err := idempotencyKey(r)
	if err != nil {
		h.fail(w, r, info, err)
		return
	}
	info.idempotencyKey = key
	if err := requireJSON(r); err != nil {
		h.fail(w, r, info, err)
		return
	}
	body, err := readBody(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		h.fail(w, r, info, err)
		return
	}
	var req createRequest
	if err := decodeStrict(body, &req, "customer_id", "amount_minor", "currency"); err != nil {
		h.fail(w, r, info, err)
		return
	}
	id, err := h.cfg.NewID()
	if err != nil {
		h.fail(w, r, info, fmt.Errorf("new order id: %w", err))
		return
	}
	o, events, err := order.Place(order.PlaceInput{ID: id, CustomerID: req.CustomerID, AmountMinor: req.AmountMinor, Currency: req.Currency}, h.cfg.Now())
	if err != nil {
		h.fail(w, r, info, err)
		return
	}
	causation := key
	if causation == "" {
		causation = requestID(r)
	}
	got, created, err := h.cfg.Orders.Create(r.Context(), o, events, order.CreateMeta{
		Actor:          callerOf(r),
		IdempotencyKey: key,
		RequestHash:    RequestHash(req.CustomerID, req.AmountMinor, req.Currency),
		CorrelationID:  r.Header.Get(HeaderCorrelationID),
		CausationID:    causation,
	})
	if err != nil {
		h.fail(w, r, info, err)
		return
	}
	info.aggregateID = got.ID
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/orders/"+got.ID)
	}
	h.ok(w, r, info, status, got)
}

// RequestHash returns the hash stored with an idempotency key: hex SHA-256 of
// the canonical JSON of a create request (members in a fixed order, no
// whitespace), so bodies that differ only in formatting or member order
// count as the same request.
func RequestHash(customerID string, amountMinor int64, currency string) string {
	b, _ := json.Marshal(createRequest{CustomerID: customerID, AmountMinor: amountMinor, Currency: currency})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	info := reqInfo{aggregateID: r.PathValue("id")}
	if order.ValidateID(info.aggregateID) != nil {
		h.fail(w, r, info, order.ErrNotFound)
		return
	}
	o, err := h.cfg.Orders.Get(r.Context(), info.aggregateID)
	if err != nil {
		h.fail(w, r, info, err)
		return
	}
	h.ok(w, r, info, http.StatusOK, o)
}

// commandFunc turns a command's body into the update to apply.
type commandFunc func(body []byte, now time.Time) (order.UpdateFunc, error)

func (h *Handler) command(name string, parse commandFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		info := reqInfo{aggregateID: r.PathValue("id")}
		expected, err := ifMatch(r)
		if err != nil {
			h.fail(w, r, info, err)
			return
		}
		body, err := readBody(w, r, h.cfg.MaxBodyBytes)
		if err != nil {
			h.fail(w, r, info, err)
			return
		}
		if len(body) > 0 {
			if err := requireJSON(r); err != nil {
				h.fail(w, r, info, err)
				return
			}
		}
		fn, err := parse(body, h.cfg.Now())
		if err != nil {
			h.fail(w, r, info, err)
			return
		}
		if order.ValidateID(info.aggregateID) != nil {
			h.fail(w, r, info, order.ErrNotFound)
			return
		}
		o, err := h.cfg.Orders.Update(r.Context(), info.aggregateID, fn, order.UpdateMeta{
			Actor:           callerOf(r),
			ExpectedVersion: expected,
			CorrelationID:   r.Header.Get(HeaderCorrelationID),
			CausationID:     requestID(r),
		})
		if err != nil {
			h.fail(w, r, info, fmt.Errorf("%s: %w", name, err))
			return
		}
		h.ok(w, r, info, http.StatusOK, o)
	}
}

func (h *Handler) pay(body []byte, now time.Time) (order.UpdateFunc, error) {
	if err := emptyObject(body); err != nil {
		return nil, err
	}
	return func(o *order.Order) ([]outbox.Event, error) { return o.Pay(now) }, nil
}

func (h *Handler) ship(body []byte, now time.Time) (order.UpdateFunc, error) {
	if err := emptyObject(body); err != nil {
		return nil, err
	}
	return func(o *order.Order) ([]outbox.Event, error) { return o.Ship(now) }, nil
}

func (h *Handler) cancel(body []byte, now time.Time) (order.UpdateFunc, error) {
	var req cancelRequest
	if len(body) > 0 {
		if err := decodeStrict(body, &req, "reason"); err != nil {
			return nil, err
		}
	}
	// Checked here too, so an invalid reason is refused before the order is
	// read (I6); Cancel checks it again.
	if err := order.ValidateReason(req.Reason); err != nil {
		return nil, err
	}
	return func(o *order.Order) ([]outbox.Event, error) { return o.Cancel(req.Reason, now) }, nil
}

// emptyObject accepts an empty body or an empty JSON object.
func emptyObject(body []byte) error {
	if len(body) == 0 {
		return nil
	}
	var v struct{}
	return decodeStrict(body, &v)
}

func (h *Handler) methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		h.fail(w, r, reqInfo{aggregateID: r.PathValue("id")}, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" is not allowed here; allowed: "+allow))
	}
}

// idempotencyKey returns the Idempotency-Key header ("" when absent) or a
// 400 invalid_header error when it is present but invalid or repeated.
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values(HeaderIdempotencyKey)
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", newError(http.StatusBadRequest, CodeInvalidHeader, "Idempotency-Key must be given once")
	}
	if err := order.ValidateIdempotencyKey(vals[0]); err != nil {
		return "", newError(http.StatusBadRequest, CodeInvalidHeader, fmt.Sprintf("Idempotency-Key must be 1..%d printable ASCII characters without spaces or commas", order.MaxIdempotencyKeyLen))
	}
	return vals[0], nil
}

// ifMatch returns the version in If-Match (0 when absent or "*"). It accepts
// a bare positive integer or a strong entity tag holding one ("3"); anything
// else, weak tags and lists included, is 400 invalid_header.
func ifMatch(r *http.Request) (int64, error) {
	vals := r.Header.Values(HeaderIfMatch)
	if len(vals) == 0 {
		return 0, nil
	}
	bad := newError(http.StatusBadRequest, CodeInvalidHeader, `If-Match must be one order version, e.g. "3"`)
	if len(vals) > 1 {
		return 0, bad
	}
	v := strings.TrimSpace(vals[0])
	if v == "*" {
		return 0, nil
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || v[0] == '+' {
		return 0, bad
	}
	return n, nil
}

// validToken reports whether s is 1..limit bytes of printable ASCII.
func validToken(s string, limit int) bool {
	if s == "" || len(s) > limit {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (h *Handler) ok(w http.ResponseWriter, r *http.Request, info reqInfo, status int, o order.Order) {
	w.Header().Set(HeaderETag, strconv.Quote(strconv.FormatInt(o.Version, 10)))
	writeJSON(w, status, o)
	h.log(r, info, slog.LevelInfo, status, "", nil)
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, info reqInfo, err error) {
	e, internal := classify(err)
	writeJSON(w, e.status, ErrorBody{Code: e.code, Message: e.message, HomeRegion: e.homeRegion})
	level := slog.LevelInfo
	if internal {
		level = slog.LevelError
	}
	h.log(r, info, level, e.status, e.code, err)
}

func (h *Handler) log(r *http.Request, info reqInfo, level slog.Level, status int, code string, err error) {
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.String("correlation_id", r.Header.Get(HeaderCorrelationID)),
		slog.String("request_id", requestID(r)),
	}
	if c := callerOf(r); c != "" {
		attrs = append(attrs, slog.String("actor", c))
	}
	if info.aggregateID != "" {
		attrs = append(attrs, slog.String("aggregate_id", truncate(info.aggregateID, 128)))
	}
	if info.idempotencyKey != "" {
		attrs = append(attrs, slog.String("idempotency_key", info.idempotencyKey))
	}
	if code != "" {
		attrs = append(attrs, slog.String("code", code))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	h.cfg.Logger.LogAttrs(r.Context(), level, "http request", attrs...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
