package faults

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is a class of injected fault.
type Kind string

// Fault kinds. Each is drawn independently per boundary with its own rate
// (Config.Rate unless Config.Rates overrides it).
const (
	// FailBeforeSend: the call fails without reaching the service; nothing
	// was applied. The error is retryable (*Error, Code InternalServerError
	// for AWS calls).
	FailBeforeSend Kind = "fail_before_send"
	// ResponseLost: the call reached the service and was applied, then the
	// response was dropped and a retryable error returned (the ambiguous
	// timeout). A caller that retries applies the request twice unless it is
	// idempotent.
	ResponseLost Kind = "response_lost"
	// Throttle: the call fails without reaching the service with a throttling
	// error (ThrottlingException for EventBridge and SQS,
	// ProvisionedThroughputExceededException for DynamoDB,
	// LimitExceededException for DynamoDB Streams).
	Throttle Kind = "throttle"
	// Latency: the call is delayed by a uniform random duration in
	// [0, Config.MaxLatency) before it is sent (or failed). It combines with
	// the other kinds.
	Latency Kind = "latency"
	// EntryRetryable: one PutEvents entry is answered with a retryable
	// ErrorCode (ThrottlingException or InternalFailure) in an HTTP 200
	// response and is NOT forwarded to the bus.
	EntryRetryable Kind = "entry_retryable"
	// EntryPermanent: one PutEvents entry is answered with a permanent
	// ErrorCode (InvalidArgument or MalformedDetail) and is NOT forwarded. The
	// relay parks such an event (I5): the chaos audit must count it as
	// parked, not lost. Its rate defaults to Config.Rate/100.
	EntryPermanent Kind = "entry_permanent"
	// StatementFailed: one statement of a PartiQL BatchExecuteStatement call
	// is answered, in an HTTP 200 response, with a retryable per-statement
	// error (ThrottlingError or InternalServerError) and is NOT executed;
	// the other statements run (see Middleware).
	StatementFailed Kind = "statement_failed"
	// CrashAfterHandle: a stream handler ran (published and marked) and then
	// the "process died": the invocation returns an error, so the event
	// source mapping redelivers the whole batch and the events are published
	// again (absorbed by consumer dedup, I3).
	CrashAfterHandle Kind = "crash_after_handle"
	// CrashBeforeEffect: a consumer computed its side effect and died before
	// its transaction: nothing was written, the delivery fails and the bus
	// redelivers.
	CrashBeforeEffect Kind = "crash_before_effect"
	// CrashAfterEffect: a consumer committed its transaction (effect + dedup
	// marker) and died before acknowledging: the delivery fails and the bus
	// redelivers; the dedup marker absorbs it.
	CrashAfterEffect Kind = "crash_after_effect"
	// PollerRestart: the stream poller is stopped and restarted from its
	// checkpoint (see RestartablePoller.Chaos).
	PollerRestart Kind = "poller_restart"
	// ConsumerOutage: one event fails at a consumer on every delivery until
	// EndOutages is called (an outage longer than the whole retry window):
	// the queue's redrive policy moves it to the consumer DLQ after
	// maxReceiveCount receives, and only a redrive gets it applied. Decided
	// once per event and consumer; its rate defaults to Config.Rate/10.
	ConsumerOutage Kind = "consumer_outage"
	// ConsumerRejected: a consumer refuses one event as permanent
	// (sqsconsumer.Permanent, reason "injected_rejection") until EndOutages
	// is called: it goes to the consumer DLQ at once, with its reason.
	// Decided once per event and consumer; rate defaults to Config.Rate/10.
	ConsumerRejected Kind = "consumer_rejected"
	// TimeoutAfterHandle: an invocation (relay or consumer) ran to the end
	// and then overran its function timeout: its answer arrives after the
	// deadline and is discarded, as Lambda discards a timed-out invocation's
	// response; the whole batch is delivered again. Rate defaults to
	// Config.Rate/5.
	TimeoutAfterHandle Kind = "timeout_after_handle"
	// RelayTimeout: TimeoutAfterHandle at the relay (the stream handler): it
	// stalls the shard for a whole function timeout, so its rate defaults to
	// Config.Rate/50.
	RelayTimeout Kind = "relay_timeout"
	// CrashBeforeComplete: a consumer with an effect outside DynamoDB (the
	// fulfilment consumer) got the provider's answer and died before its
	// idempotency record was marked COMPLETED — the one window no library
	// can close (pkg/idempotency): the record expires and the event runs
	// again; only the provider's own Idempotency-Key prevents a second
	// effect. Rate defaults to Config.Rate/5.
	CrashBeforeComplete Kind = "crash_before_complete"
	// Reorder: the bus delivers an event to a consumer's queue late (100 to
	// 600 ms), so later events of the same aggregate overtake it, as
	// EventBridge, which does not order deliveries, can. Rate defaults to
	// Config.Rate.
	Reorder Kind = "reorder"
	// SlowCall: a call of SlowOperations (the relay's marking: UpdateItem,
	// BatchExecuteStatement) is delayed by Config.MaxStall before it is
	// sent, to push the relay against its deadline. Rate defaults to
	// Config.Rate/5.
	SlowCall Kind = "slow_call"
)

// AllKinds lists every Kind, in the order Summary prints them.
var AllKinds = []Kind{FailBeforeSend, ResponseLost, Throttle, Latency, EntryRetryable, EntryPermanent,
	StatementFailed, CrashAfterHandle, CrashBeforeEffect, CrashAfterEffect, PollerRestart,
	ConsumerOutage, ConsumerRejected, TimeoutAfterHandle, RelayTimeout, SlowCall, CrashBeforeComplete, Reorder}

// Config configures an Injector. The zero value injects nothing.
type Config struct {
	// Seed seeds every decision. The same Seed and the same sequence of
	// calls at a boundary give the same decisions at that boundary.
	Seed int64
	// Rate is the probability (0..1) of each fault kind at every boundary,
	// unless Rates overrides the kind.
	Rate float64
	// Rates overrides Rate per kind (0 included: Rates[Latency] = 0 turns
	// latency off).
	Rates map[Kind]float64
	// MaxLatency bounds an injected Latency fault. Default 20 ms.
	MaxLatency time.Duration
	// MaxStall is the delay of a SlowCall. Default 1 s.
	MaxStall time.Duration
	// SlowOperations lists the operations SlowCall may delay (as in
	// Operations). nil means UpdateItem and BatchExecuteStatement.
	SlowOperations []string
	// Operations lists the AWS SDK operations the middleware may fault, as
	// "Operation" or "ServiceID.Operation" (e.g. "DynamoDB.UpdateItem").
	// nil means DefaultOperations.
	Operations []string
	// OutsideSDKRetries places the SDK middleware before the SDK's retry loop
	// (Initialize step) instead of inside it (Finalize step, after Retry).
	// See Middleware.
	OutsideSDKRetries bool
	// MaxLog bounds the kept injection log (counts stay exact). Default 10,000.
	MaxLog int
}

// DefaultOperations are the SDK operations the middleware faults by default:
// the writes and reads of the outbox path. Table administration
// (CreateTable, DescribeTable), Scan (audit reads), DescribeStream and
// GetShardIterator are left alone.
var DefaultOperations = []string{
	"TransactWriteItems", "UpdateItem", "BatchExecuteStatement", "PutItem", "GetItem", "Query", "GetRecords",
}

// Validate reports an invalid rate.
func (c Config) Validate() error {
	if c.Rate < 0 || c.Rate > 1 {
		return fmt.Errorf("faults: Rate %v outside 0..1", c.Rate)
	}
	for k, r := range c.Rates {
		if r < 0 || r > 1 {
			return fmt.Errorf("faults: rate of %s %v outside 0..1", k, r)
		}
	}
	if c.MaxLatency < 0 {
		return errors.New("faults: MaxLatency must not be negative")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.MaxLatency == 0 {
		c.MaxLatency = 20 * time.Millisecond
	}
	if c.MaxStall == 0 {
		c.MaxStall = time.Second
	}
	if c.SlowOperations == nil {
		c.SlowOperations = []string{"UpdateItem", "BatchExecuteStatement"}
	}
	if c.Operations == nil {
		c.Operations = DefaultOperations
	}
	if c.MaxLog == 0 {
		c.MaxLog = 10000
	}
}

// Injection is one injected fault, as kept in the log.
type Injection struct {
	// N numbers injections in the order they were decided (1-based).
	N int64
	// Boundary is where it was injected, e.g. "DynamoDB.TransactWriteItems",
	// "EventBridge.PutEvents", "relay.Handle", "consumer.ledger".
	Boundary string
	Kind     Kind
	// Detail says more: the error code, the entry index, the delay.
	Detail string
}

// Injector decides and records faults. It is safe for concurrent use.
//
// Reproducibility: each boundary has its own random stream (PCG seeded with
// Seed and a hash of the boundary name), and every call at a boundary
// consumes a fixed number of draws whatever the outcome. So a seed gives the
// same decisions for the same sequence of calls at each boundary, however
// calls at different boundaries interleave. Concurrent calls at one boundary
// can take decisions in a different order from run to run; run that
// boundary with concurrency 1 for an exact replay.
type Injector struct {
	cfg  Config
	ops  map[string]bool
	slow map[string]bool
	// outages maps consumer + "/" + event_id to the outage kind decided at
	// the event's first delivery ("" = none); outagesOver ends them all.
	outages     map[string]Kind
	outagesOver bool
	mu          sync.Mutex
	rngs        map[string]*rand.Rand
	n           int64
	log         []Injection
	// calls counts decisions per boundary; counts injections per boundary and kind.
	calls  map[string]int64
	counts map[string]map[Kind]int64
	sleep  func(context.Context, time.Duration) error
}

// New returns an Injector, or an error if cfg does not validate.
func New(cfg Config) (*Injector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	ops := map[string]bool{}
	for _, o := range cfg.Operations {
		ops[o] = true
	}
	slow := map[string]bool{}
	for _, o := range cfg.SlowOperations {
		slow[o] = true
	}
	return &Injector{cfg: cfg, ops: ops, slow: slow, outages: map[string]Kind{}, rngs: map[string]*rand.Rand{}, calls: map[string]int64{},
		counts: map[string]map[Kind]int64{}, sleep: sleepCtx}, nil
}

// Config returns the injector's effective configuration.
func (in *Injector) Config() Config { return in.cfg }

// RateOf returns the probability of kind at every boundary.
func (in *Injector) RateOf(k Kind) float64 {
	if r, ok := in.cfg.Rates[k]; ok {
		return r
	}
	switch k {
	case EntryPermanent:
		return in.cfg.Rate / 100
	case ConsumerOutage, ConsumerRejected:
		return in.cfg.Rate / 10
	case TimeoutAfterHandle, SlowCall, CrashBeforeComplete:
		return in.cfg.Rate / 5
	case RelayTimeout:
		return in.cfg.Rate / 50
	}
	return in.cfg.Rate
}

// rng returns the boundary's random stream; in.mu must be held.
func (in *Injector) rng(boundary string) *rand.Rand {
	r, ok := in.rngs[boundary]
	if !ok {
		h := fnv.New64a()
		_, _ = h.Write([]byte(boundary))
		r = rand.New(rand.NewPCG(uint64(in.cfg.Seed), h.Sum64())) //nolint:gosec // G115: the seed's bits, reinterpreted on purpose
		in.rngs[boundary] = r
	}
	return r
}

// decision is what draw decided for one call.
type decision struct {
	kind    Kind // "" or the first exclusive kind that hit
	latency time.Duration
}

// draw decides one call at boundary among the exclusive kinds (at most one
// of them, tried in order) plus an independent Latency. It always consumes
// len(kinds)+1 draws. It records the call and the injections.
func (in *Injector) draw(boundary string, kinds ...Kind) decision {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.rng(boundary)
	in.calls[boundary]++
	var d decision
	for _, k := range kinds {
		u := r.Float64()
		if d.kind == "" && u < in.RateOf(k) {
			d.kind = k
		}
	}
	u, v := r.Float64(), r.Float64()
	if in.cfg.MaxLatency > 0 && u < in.RateOf(Latency) {
		d.latency = time.Duration(v * float64(in.cfg.MaxLatency))
		in.recordLocked(boundary, Latency, d.latency.String())
	}
	if d.kind != "" {
		in.recordLocked(boundary, d.kind, "")
	}
	return d
}

// Chance decides one custom fault of kind at boundary with the kind's rate
// (one draw), records it when it hits, and reports whether it hit. Use it
// for faults this package does not wire itself (e.g. a scripted restart).
func (in *Injector) Chance(boundary string, k Kind) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.calls[boundary]++
	if in.rng(boundary).Float64() < in.RateOf(k) {
		in.recordLocked(boundary, k, "")
		return true
	}
	return false
}

// pick returns a deterministic choice among n values at boundary (one draw).
func (in *Injector) pick(boundary string, n int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng(boundary).IntN(n)
}

// entryDraw decides one PutEvents entry: "", EntryRetryable or
// EntryPermanent, and which code (always 3 draws).
func (in *Injector) entryDraw(boundary string, idx int) (Kind, string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.rng(boundary)
	u1, u2, u3 := r.Float64(), r.Float64(), r.IntN(2)
	switch {
	case u1 < in.RateOf(EntryPermanent):
		code := []string{"InvalidArgument", "MalformedDetail"}[u3]
		in.recordLocked(boundary, EntryPermanent, fmt.Sprintf("entry %d: %s", idx, code))
		return EntryPermanent, code
	case u2 < in.RateOf(EntryRetryable):
		code := []string{"ThrottlingException", "InternalFailure"}[u3]
		in.recordLocked(boundary, EntryRetryable, fmt.Sprintf("entry %d: %s", idx, code))
		return EntryRetryable, code
	}
	return "", ""
}

// statementDraw decides one BatchExecuteStatement statement (2 draws).
func (in *Injector) statementDraw(boundary string, idx int) (bool, int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.rng(boundary)
	u, c := r.Float64(), r.IntN(2)
	if u < in.RateOf(StatementFailed) {
		in.recordLocked(boundary, StatementFailed, fmt.Sprintf("statement %d", idx))
		return true, c
	}
	return false, c
}

// Record logs an injection decided elsewhere (e.g. by a test) so it shows in
// Stats and Summary.
func (in *Injector) Record(boundary string, k Kind, detail string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recordLocked(boundary, k, detail)
}

func (in *Injector) recordLocked(boundary string, k Kind, detail string) {
	in.n++
	m := in.counts[boundary]
	if m == nil {
		m = map[Kind]int64{}
		in.counts[boundary] = m
	}
	m[k]++
	if len(in.log) < in.cfg.MaxLog {
		in.log = append(in.log, Injection{N: in.n, Boundary: boundary, Kind: k, Detail: detail})
	}
}

// Stats is a snapshot of what an Injector did.
type Stats struct {
	Seed int64
	// Calls is the number of decisions taken per boundary.
	Calls map[string]int64
	// Injected counts injected faults per boundary and kind.
	Injected map[string]map[Kind]int64
	// Total is the number of injected faults.
	Total int64
}

// ByKind sums Injected over boundaries.
func (s Stats) ByKind() map[Kind]int64 {
	m := map[Kind]int64{}
	for _, ks := range s.Injected {
		for k, n := range ks {
			m[k] += n
		}
	}
	return m
}

// Count returns the injections of kind k at boundary (any boundary when
// boundary is "").
func (s Stats) Count(boundary string, k Kind) int64 {
	if boundary == "" {
		return s.ByKind()[k]
	}
	return s.Injected[boundary][k]
}

// Stats returns a snapshot of the counts.
func (in *Injector) Stats() Stats {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := Stats{Seed: in.cfg.Seed, Calls: map[string]int64{}, Injected: map[string]map[Kind]int64{}, Total: in.n}
	for b, n := range in.calls {
		s.Calls[b] = n
	}
	for b, ks := range in.counts {
		m := map[Kind]int64{}
		for k, n := range ks {
			m[k] = n
		}
		s.Injected[b] = m
	}
	return s
}

// Log returns the kept injections (the first Config.MaxLog), in order.
func (in *Injector) Log() []Injection {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Injection(nil), in.log...)
}

// Summary renders Stats as a plain-text table for the chaos audit: one row
// per boundary and kind with the count, plus the calls per boundary.
func (in *Injector) Summary() string {
	s := in.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "faults: seed %d, rate %g, %d injected\n", s.Seed, in.cfg.Rate, s.Total)
	fmt.Fprintf(&b, "%-34s %-20s %8s %8s\n", "boundary", "kind", "count", "calls")
	bounds := make([]string, 0, len(s.Calls))
	for bd := range s.Calls {
		bounds = append(bounds, bd)
	}
	for bd := range s.Injected {
		if _, ok := s.Calls[bd]; !ok {
			bounds = append(bounds, bd)
		}
	}
	sort.Strings(bounds)
	for _, bd := range bounds {
		hit := false
		for _, k := range AllKinds {
			if n := s.Injected[bd][k]; n > 0 {
				fmt.Fprintf(&b, "%-34s %-20s %8d %8d\n", bd, k, n, s.Calls[bd])
				hit = true
			}
		}
		if !hit {
			fmt.Fprintf(&b, "%-34s %-20s %8d %8d\n", bd, "-", 0, s.Calls[bd])
		}
	}
	return b.String()
}

// wait applies an injected latency.
func (in *Injector) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return in.sleep(ctx, d)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
