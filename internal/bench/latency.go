package bench

import (
	"context"
	"encoding/json"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// ApplyRecorder records, for every event and consumer, when the consumer's
// handler first returned success: the moment its TransactWriteItems (side
// effect + dedup marker) had committed, observed in the same process that
// stamped the envelope's occurred_at (same wall clock, nanosecond
// resolution). It is safe for concurrent use; the zero value is not ready,
// use NewApplyRecorder.
//
// For a consumer that writes dedup markers (Register on the stack's
// DynamoDB clients), applied is when its transaction holding the event's
// marker committed; a delivery its handler acknowledged without that (an
// ordered consumer buffering an early event) is not applied until the
// marker commits, in the predecessor's invocation. For a consumer without
// markers (fulfilment: its effect is outside DynamoDB), applied is when its
// handler first returned success.
type ApplyRecorder struct {
	mu              sync.Mutex
	events          map[string]*applied // event_id -> timings
	markerConsumers map[string]bool     // consumers seen committing a dedup marker
}

type applied struct {
	committed       time.Time            // envelope occurred_at (zero until delivered)
	consumers       map[string]time.Time // consumer -> first successful handler return
	committedMarker map[string]time.Time // consumer -> its marker's commit
}

// NewApplyRecorder returns an empty recorder.
func NewApplyRecorder() *ApplyRecorder {
	return &ApplyRecorder{events: map[string]*applied{}, markerConsumers: map[string]bool{}}
}

// appliedAt returns, per consumer, when a was applied; r.mu must be held.
// A consumer that writes markers counts only once its marker committed.
func (r *ApplyRecorder) appliedAt(a *applied) map[string]time.Time {
	out := make(map[string]time.Time, len(a.consumers))
	for c, t := range a.consumers {
		if r.markerConsumers[c] {
			if m, ok := a.committedMarker[c]; ok {
				out[c] = m
			}
			continue
		}
		out[c] = t
	}
	for c, m := range a.committedMarker {
		if _, ok := out[c]; !ok {
			out[c] = m // applied (drained) without a delivery of its own seen as a success
		}
	}
	return out
}

// Interceptor returns a localrt.Interceptor (devstack Options.ConsumerInterceptor)
// that calls next once and, when it succeeds, records the time.
func (r *ApplyRecorder) Interceptor() localrt.Interceptor {
	return func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next localrt.EventHandler) error {
		err := next(ctx, ev)
		if err != nil {
			return err
		}
		now := time.Now()
		var env struct {
			EventID    string    `json:"event_id"`
			OccurredAt time.Time `json:"occurred_at"`
		}
		if json.Unmarshal(ev.Detail, &env) != nil || env.EventID == "" {
			return nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		a := r.events[env.EventID]
		if a == nil {
			a = &applied{consumers: map[string]time.Time{}, committedMarker: map[string]time.Time{}}
			r.events[env.EventID] = a
		}
		if a.committed.IsZero() {
			a.committed = env.OccurredAt
		}
		if _, seen := a.consumers[consumer]; !seen {
			a.consumers[consumer] = now
		}
		return nil
	}
}

// ApplyStats summarise an ApplyRecorder.
type ApplyStats struct {
	// Events is the number of events applied by at least one consumer.
	Events int
	// NotApplied counts deliveries a consumer that writes markers
	// acknowledged whose marker never committed (buffered and not yet
	// drained when the stats were taken); they are not in Latency.
	NotApplied int `json:"not_applied"`
	// Latency is commit (occurred_at) → applied by the last consumer that
	// took the event, over every event.
	Latency Percentiles
	// FirstCommit and LastApplied bound the run: the first envelope's
	// occurred_at and the last consumer commit.
	FirstCommit, LastApplied time.Time
}

// Stats computes the per-event latencies recorded so far.
func (r *ApplyRecorder) Stats() ApplyStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st ApplyStats
	lat := make([]time.Duration, 0, len(r.events))
	for _, a := range r.events {
		at := r.appliedAt(a)
		st.NotApplied += len(a.consumers) - countIn(a.consumers, at)
		if len(at) == 0 || a.committed.IsZero() {
			continue
		}
		var last time.Time
		for _, t := range at {
			if t.After(last) {
				last = t
			}
		}
		lat = append(lat, last.Sub(a.committed))
		if st.FirstCommit.IsZero() || a.committed.Before(st.FirstCommit) {
			st.FirstCommit = a.committed
		}
		if last.After(st.LastApplied) {
			st.LastApplied = last
		}
	}
	st.Events = len(lat)
	st.Latency = NewPercentiles(lat)
	return st
}

// Percentiles of a latency sample, in milliseconds (float, for reports).
type Percentiles struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// NewPercentiles computes nearest-rank percentiles of d (d is sorted in
// place). An empty sample gives zeros.
func NewPercentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(d)))) - 1
		if i < 0 {
			i = 0
		}
		return ms(d[i])
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Percentiles{N: len(d), P50: rank(0.50), P95: rank(0.95), P99: rank(0.99), Max: ms(d[len(d)-1]), Mean: ms(sum / time.Duration(len(d)))}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// BatchStats summarise the records per relay invocation of one run.
type BatchStats struct {
	Invocations int     `json:"invocations"`
	Records     int64   `json:"records"`
	Mean        float64 `json:"mean"`
	Median      float64 `json:"median"`
	Min         int     `json:"min"`
	Max         int     `json:"max"`
	// Full counts invocations that carried at least FullAt records.
	Full   int `json:"full"`
	FullAt int `json:"full_at"`
	// PutEventsFloor is the fewest PutEvents calls these invocations can
	// make: Σ ⌈records ÷ 10⌉ (relay.MaxEntriesPerRequest), one partly
	// filled call per invocation at most.
	PutEventsFloor int64 `json:"putevents_floor"`
}

// NewBatchStats summarises sizes (records per invocation; sorted in place);
// an invocation with at least fullAt records counts as full.
func NewBatchStats(sizes []int, fullAt int) BatchStats {
	st := BatchStats{Invocations: len(sizes), FullAt: fullAt}
	if len(sizes) == 0 {
		return st
	}
	sort.Ints(sizes)
	for _, n := range sizes {
		st.Records += int64(n)
		st.PutEventsFloor += int64((n + relay.MaxEntriesPerRequest - 1) / relay.MaxEntriesPerRequest)
		if n >= fullAt {
			st.Full++
		}
	}
	st.Mean = float64(st.Records) / float64(len(sizes))
	if m := len(sizes) / 2; len(sizes)%2 == 1 {
		st.Median = float64(sizes[m])
	} else {
		st.Median = float64(sizes[m-1]+sizes[m]) / 2
	}
	st.Min, st.Max = sizes[0], sizes[len(sizes)-1]
	return st
}

// ByConsumer returns, per consumer, commit (occurred_at) → that consumer's
// first successful apply, over the events it applied: an ordered consumer
// (which holds an event until the ones before it are applied) beside an
// unordered one at the same load.
func (r *ApplyRecorder) ByConsumer() map[string]Percentiles {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat := map[string][]time.Duration{}
	for _, a := range r.events {
		if a.committed.IsZero() {
			continue
		}
		for c, t := range r.appliedAt(a) {
			lat[c] = append(lat[c], t.Sub(a.committed))
		}
	}
	out := make(map[string]Percentiles, len(lat))
	for c, d := range lat {
		out[c] = NewPercentiles(d)
	}
	return out
}

// countIn counts the keys of a that are in b.
func countIn(a, b map[string]time.Time) int {
	n := 0
	for k := range a {
		if _, ok := b[k]; ok {
			n++
		}
	}
	return n
}
