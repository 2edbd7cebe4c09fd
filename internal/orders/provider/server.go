package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// HeaderIdempotencyKey is the request header carrying the idempotency key.
const HeaderIdempotencyKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on a response replayed for a repeated key.
const HeaderReplayed = "Idempotent-Replayed"

// Shipment statuses.
const (
	StatusCreated   = "created"
	StatusCancelled = "cancelled"
)

// Error codes of the {"error": ...} bodies.
const (
	CodeBadRequest   = "bad_request"
	CodeUnauthorized = "unauthorized"
	CodeNotFound     = "not_found"
	CodeKeyInUse     = "idempotency_key_in_use"
	CodeKeyReused    = "idempotency_key_reused"
	CodeThrottled    = "throttled"
	CodeServerError  = "server_error"
)

// Request outcomes (Request.Outcome).
const (
	OutcomeCreated      = "created"
	OutcomeCancelled    = "cancelled"
	OutcomeReplayed     = "replayed"
	OutcomeKeyReused    = "key_reused"
	OutcomeKeyInUse     = "key_in_use"
	OutcomeNotFound     = "not_found"
	OutcomeBadRequest   = "bad_request"
	OutcomeUnauthorized = "unauthorized"
	OutcomeFault        = "fault" // an injected fault answered instead (Request.Fault says which)
	OutcomeRead         = "read"
)

// Fault is an injected failure of one request.
type Fault string

// Faults.
const (
	FaultNone            Fault = ""
	FaultServerError     Fault = "server_error"      // 500, nothing done
	FaultThrottle        Fault = "throttle"          // 429 + Retry-After, nothing done
	FaultReset           Fault = "reset"             // connection closed with RST, nothing done
	FaultTimeoutAfterAct Fault = "timeout_after_act" // acted on, answer held past the client's timeout
	FaultLatency         Fault = "latency"           // Faults.Latency added, normal answer
)

// FaultConfig sets random fault rates per request (each 0..1; their sum at
// most 1) for chaos runs.
type FaultConfig struct {
	// Seed seeds the generator, so that a run can be replayed.
	Seed uint64
	// Rates of FaultServerError, FaultThrottle, FaultReset,
	// FaultTimeoutAfterAct and FaultLatency.
	ServerError, Throttle, Reset, TimeoutAfterAct, Latency float64
	// LatencyBy is the delay FaultLatency adds. Default 200 ms.
	LatencyBy time.Duration
	// RetryAfter is the Retry-After of FaultThrottle, whole seconds.
	// Default 1.
	RetryAfter int
}

// Config configures a Server. Zero values take the defaults.
type Config struct {
	// APIKey, when set, is required as "Authorization: Bearer <APIKey>";
	// other requests get 401.
	APIKey string
	// IgnoreIdempotencyKey makes a naive provider that acts on every POST.
	IgnoreIdempotencyKey bool
	// Faults sets random fault rates (default none).
	Faults FaultConfig
	// HoldFor is how long FaultTimeoutAfterAct holds the answer (it stops
	// early when the client goes away). Default 30 s.
	HoldFor time.Duration
	// MaxBodyBytes bounds a request body. Default 64 KiB.
	MaxBodyBytes int64
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Store, when set, keeps the provider's state across restarts (the
	// local stack passes its state journal): every shipment as created or
	// cancelled, with the Idempotency-Key answer that created it, and every
	// stored key answer, each written before the request is answered. New
	// restores them, and shipment numbers continue after the highest kept,
	// so a restarted provider never hands an existing shipment id to
	// another order. The request log (Requests) is not kept. nil: in
	// memory.
	Store Store
}

// Store keeps the provider's state durably; localstate.Journal implements
// it. Records returns a copy of every record under a key prefix; Put and
// Delete return once the change survives the process being killed. Safe
// for concurrent use.
type Store interface {
	Records(prefix string) map[string][]byte
	Put(key string, value []byte) error
	Delete(keys ...string) error
}

func (c *Config) setDefaults() {
	if c.Faults.LatencyBy == 0 {
		c.Faults.LatencyBy = 200 * time.Millisecond
	}
	if c.Faults.RetryAfter == 0 {
		c.Faults.RetryAfter = 1
	}
	if c.HoldFor == 0 {
		c.HoldFor = 30 * time.Second
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first invalid setting (after defaults).
func (c Config) Validate() error {
	f := c.Faults
	for _, r := range []float64{f.ServerError, f.Throttle, f.Reset, f.TimeoutAfterAct, f.Latency} {
		if r < 0 || r > 1 {
			return fmt.Errorf("provider: fault rate %v is outside 0..1", r)
		}
	}
	if sum := f.ServerError + f.Throttle + f.Reset + f.TimeoutAfterAct + f.Latency; sum > 1 {
		return fmt.Errorf("provider: fault rates add up to %v > 1", sum)
	}
	if c.HoldFor < 0 || c.MaxBodyBytes < 0 || f.LatencyBy < 0 || f.RetryAfter < 0 {
		return errors.New("provider: durations and sizes must not be negative")
	}
	return nil
}

// ShipmentRequest is the POST /shipments body.
type ShipmentRequest struct {
	OrderID     string `json:"order_id"`
	AmountMinor int64  `json:"amount_minor"` // minor units, > 0
	Currency    string `json:"currency"`     // ISO 4217 alphabetic code (3 letters)
}

// Shipment is a shipment as the provider answers it.
type Shipment struct {
	ID          string     `json:"shipment_id"`
	OrderID     string     `json:"order_id"`
	AmountMinor int64      `json:"amount_minor"`
	Currency    string     `json:"currency"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"created_at"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
}

// Request is one request the server received, as recorded.
type Request struct {
	Time           time.Time `json:"time"`
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Body           string    `json:"body,omitempty"`
	Status         int       `json:"status"` // 0 when the connection was reset
	Outcome        string    `json:"outcome"`
	Fault          Fault     `json:"fault,omitempty"`
	ShipmentID     string    `json:"shipment_id,omitempty"`
	// ClientGone: the client had gone (its request context was cancelled:
	// a timeout, a dead caller) when the answer was written, so it never
	// learned the outcome, whatever the server did.
	ClientGone bool `json:"client_gone,omitempty"`
}

// keyed is a stored answer for an idempotency key.
type keyed struct {
	fingerprint [32]byte
	done        bool
	status      int
	body        []byte
}

// Server is the provider. It is safe for concurrent use.
type Server struct {
	cfg Config

	mu        sync.Mutex
	rng       *rand.Rand
	queue     []Fault
	shipments map[string]*Shipment
	order     []string // shipment ids in creation order
	keys      map[string]*keyed
	requests  []Request
	nextID    int
	// createdBy is the Idempotency-Key answer that created each shipment
	// (kept with the shipment in Store).
	createdBy map[string]storedKey

	srv *http.Server
	err error // configuration error
}

// New returns a Server for cfg (defaults applied), holding what cfg.Store
// kept. An invalid cfg (see Validate) or an unreadable stored record does
// not panic: Err reports it, Start returns it and every request is
// answered 500 "invalid_config".
func New(cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{cfg: cfg, err: cfg.Validate()}
	s.init()
	if s.err == nil && cfg.Store != nil {
		s.err = s.restore()
	}
	return s
}

// Err returns the configuration error, if any.
func (s *Server) Err() error { return s.err }

func (s *Server) init() {
	s.rng = rand.New(rand.NewPCG(s.cfg.Faults.Seed, 0x5eed))
	s.shipments = map[string]*Shipment{}
	s.keys = map[string]*keyed{}
	s.createdBy = map[string]storedKey{}
}

// Handler returns the server's http.Handler (for httptest.NewServer).
func (s *Server) Handler() http.Handler {
	if s.err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(errBody("invalid_config", s.err.Error()))
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /shipments", s.create)
	mux.HandleFunc("POST /shipments/{id}/cancel", s.cancel)
	mux.HandleFunc("GET /shipments/{id}", s.get)
	mux.HandleFunc("GET /_shipments", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Shipments()) })
	mux.HandleFunc("GET /_requests", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Requests()) })
	return mux
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves in
// the background. It returns the base URL ("http://host:port").
func (s *Server) Start(addr string) (string, error) {
	if s.err != nil {
		return "", s.err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("provider: listen %s: %w", addr, err)
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// Close stops a server started with Start, waiting for requests in flight
// until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

// Inject queues faults for the next /shipments requests, one each, before
// any random fault.
func (s *Server) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, faults...)
}

// Requests returns a copy of every request received, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Shipments returns a copy of every shipment, in creation order.
func (s *Server) Shipments() []Shipment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Shipment, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, *s.shipments[id])
	}
	return out
}

// ShipmentsFor returns the shipments created for orderID (more than one is
// a duplicate effect).
func (s *Server) ShipmentsFor(orderID string) []Shipment {
	var out []Shipment
	for _, sh := range s.Shipments() {
		if sh.OrderID == orderID {
			out = append(out, sh)
		}
	}
	return out
}

// nextFault returns the fault for the next request.
func (s *Server) nextFault() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		f := s.queue[0]
		s.queue = s.queue[1:]
		return f
	}
	f := s.cfg.Faults
	if f.ServerError+f.Throttle+f.Reset+f.TimeoutAfterAct+f.Latency == 0 {
		return FaultNone
	}
	x := s.rng.Float64()
	for _, c := range []struct {
		rate  float64
		fault Fault
	}{{f.ServerError, FaultServerError}, {f.Throttle, FaultThrottle}, {f.Reset, FaultReset}, {f.TimeoutAfterAct, FaultTimeoutAfterAct}, {f.Latency, FaultLatency}} {
		if x < c.rate {
			return c.fault
		}
		x -= c.rate
	}
	return FaultNone
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

// exchange is one POST being served.
type exchange struct {
	w     http.ResponseWriter
	r     *http.Request
	rec   Request
	body  []byte
	fault Fault
}

// begin reads the body, checks auth and applies the pre-action faults. It
// returns nil when the request has been answered already.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) *exchange {
	x := &exchange{w: w, r: r, rec: Request{Time: s.cfg.Now().UTC(), Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get(HeaderIdempotencyKey)}}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
	x.body, x.rec.Body = body, string(body)
	if err != nil || int64(len(body)) > s.cfg.MaxBodyBytes {
		s.answer(x, http.StatusBadRequest, OutcomeBadRequest, errBody(CodeBadRequest, "body unreadable or too large"))
		return nil
	}
	if s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey {
		s.answer(x, http.StatusUnauthorized, OutcomeUnauthorized, errBody(CodeUnauthorized, "missing or wrong bearer token"))
		return nil
	}
	x.fault = s.nextFault()
	x.rec.Fault = x.fault
	switch x.fault {
	case FaultServerError:
		s.answer(x, http.StatusInternalServerError, OutcomeFault, errBody(CodeServerError, "injected"))
		return nil
	case FaultThrottle:
		w.Header().Set("Retry-After", strconv.Itoa(s.cfg.Faults.RetryAfter))
		s.answer(x, http.StatusTooManyRequests, OutcomeFault, errBody(CodeThrottled, "injected"))
		return nil
	case FaultReset:
		x.rec.Outcome = OutcomeFault
		s.record(x.rec)
		reset(w)
		return nil
	case FaultLatency:
		wait(r.Context(), s.cfg.Faults.LatencyBy)
	}
	return x
}

// reset hijacks the connection and closes it with a TCP RST.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // HTTP/2: abort the stream
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// answer records and writes a response (after holding it for
// FaultTimeoutAfterAct).
func (s *Server) answer(x *exchange, status int, outcome string, body []byte) {
	x.rec.Status, x.rec.Outcome = status, outcome
	if x.fault == FaultTimeoutAfterAct {
		wait(x.r.Context(), s.cfg.HoldFor)
	}
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body)
	x.rec.ClientGone = x.r.Context().Err() != nil
	s.record(x.rec)
}

// idempotent runs act once per idempotency key (see the package doc).
// act returns the status, body, outcome and shipment id of the first answer.
func (s *Server) idempotent(x *exchange, act func() (int, []byte, string, string)) {
	key := x.rec.IdempotencyKey
	if key == "" || s.cfg.IgnoreIdempotencyKey {
		status, body, outcome, id := act()
		x.rec.ShipmentID = id
		s.answer(x, status, outcome, body)
		return
	}
	fp := x.fingerprint()
	s.mu.Lock()
	k, seen := s.keys[key]
	if !seen {
		k = &keyed{fingerprint: fp}
		s.keys[key] = k
	}
	s.mu.Unlock()
	if seen {
		s.mu.Lock()
		same, done, status, body := k.fingerprint == fp, k.done, k.status, k.body
		s.mu.Unlock()
		switch {
		case !same:
			s.answer(x, http.StatusUnprocessableEntity, OutcomeKeyReused, errBody(CodeKeyReused, "this Idempotency-Key was used with another request"))
		case !done:
			s.answer(x, http.StatusConflict, OutcomeKeyInUse, errBody(CodeKeyInUse, "a request with this Idempotency-Key is being processed"))
		default:
			var sh Shipment
			_ = json.Unmarshal(body, &sh)
			x.rec.ShipmentID = sh.ID
			x.w.Header().Set(HeaderReplayed, "true")
			s.answer(x, status, OutcomeReplayed, body)
		}
		return
	}
	status, body, outcome, id := act()
	if status < 500 {
		if err := s.keepKey(key, storedKey{Key: key, Fingerprint: hexFP(fp), Status: status, Body: body}); err != nil {
			// The effect is kept with its shipment (create) or is a no-op
			// to repeat (cancel): answering 500 lets the caller retry.
			status, body, outcome = http.StatusInternalServerError, errBody(CodeServerError, err.Error()), OutcomeFault
		}
	}
	s.mu.Lock()
	if status >= 500 {
		delete(s.keys, key) // a server failure is not stored: retry acts
	} else {
		k.done, k.status, k.body = true, status, body
	}
	s.mu.Unlock()
	x.rec.ShipmentID = id
	s.answer(x, status, outcome, body)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	x := s.begin(w, r)
	if x == nil {
		return
	}
	s.idempotent(x, func() (int, []byte, string, string) {
		var in ShipmentRequest
		dec := json.NewDecoder(bytes.NewReader(x.body))
		if err := dec.Decode(&in); err != nil {
			return http.StatusBadRequest, errBody(CodeBadRequest, "body is not a shipment request: "+err.Error()), OutcomeBadRequest, ""
		}
		if in.OrderID == "" || in.AmountMinor <= 0 || len(in.Currency) != 3 {
			return http.StatusBadRequest, errBody(CodeBadRequest, "order_id, a positive amount_minor and a 3-letter currency are required"), OutcomeBadRequest, ""
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		sh := &Shipment{ID: fmt.Sprintf("shp_%06d", s.nextID+1), OrderID: in.OrderID, AmountMinor: in.AmountMinor,
			Currency: in.Currency, Status: StatusCreated, CreatedAt: s.cfg.Now().UTC()}
		body := mustJSON(*sh)
		var by storedKey
		if key := x.rec.IdempotencyKey; key != "" && !s.cfg.IgnoreIdempotencyKey {
			by = storedKey{Key: key, Fingerprint: hexFP(x.fingerprint()), Status: http.StatusCreated, Body: body}
		}
		// Kept before it is answered, with the answer its key replays.
		if err := s.keepShipment(*sh, by); err != nil {
			return http.StatusInternalServerError, errBody(CodeServerError, err.Error()), OutcomeFault, ""
		}
		s.nextID++
		s.shipments[sh.ID] = sh
		s.order = append(s.order, sh.ID)
		s.createdBy[sh.ID] = by
		return http.StatusCreated, body, OutcomeCreated, sh.ID
	})
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	x := s.begin(w, r)
	if x == nil {
		return
	}
	id := r.PathValue("id")
	s.idempotent(x, func() (int, []byte, string, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sh, ok := s.shipments[id]
		if !ok {
			return http.StatusNotFound, errBody(CodeNotFound, "no shipment "+id), OutcomeNotFound, ""
		}
		if sh.Status != StatusCancelled {
			now := s.cfg.Now().UTC()
			next := *sh
			next.Status, next.CancelledAt = StatusCancelled, &now
			if err := s.keepShipment(next, s.createdBy[id]); err != nil {
				return http.StatusInternalServerError, errBody(CodeServerError, err.Error()), OutcomeFault, ""
			}
			*sh = next
		}
		return http.StatusOK, mustJSON(*sh), OutcomeCancelled, sh.ID
	})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	sh, ok := s.shipments[id]
	var out Shipment
	if ok {
		out = *sh
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": CodeNotFound, "message": "no shipment " + id})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func errBody(code, msg string) []byte {
	return mustJSON(map[string]string{"error": code, "message": msg})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"error":"server_error"}`)
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(v))
}
