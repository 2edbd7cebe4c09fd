package bench

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// The cloud-latency level's result: each event's commit → applied split
// into AWS's injected hops, our share and the emulator's rest.

// CloudResult is the prediction of one cloud-latency level.
type CloudResult struct {
	Hops CloudHops `json:"hops"`
	// Events is the number of events applied by every consumer that took
	// them (the ones measured).
	Events int `json:"events"`
	// Total is commit → applied by the last consumer as it ran here (ms
	// quantiles), the local queueing included.
	Total Quantiles `json:"commit_to_applied_as_run"`
	// Predicted is the AWS prediction per event: the injected hops plus
	// ours (Total without Rest, which is the emulator's and this machine's:
	// hand-offs, and queueing on a CPU shared with the store).
	Predicted Quantiles `json:"predicted_commit_to_applied"`
	// Injected is the AWS hops injected on that path: the stream hop plus
	// the EventBridge + SQS hop of the last consumer.
	Injected Quantiles `json:"injected_hops"`
	// Ours is the time in our code and our own calls: relay invocation →
	// its PutEvents returned, plus the last consumer's first attempt → its
	// success (holds for order included).
	Ours Quantiles `json:"ours"`
	// Rest is total − injected − ours: waiting for the shard's previous
	// invocation, the emulator's hand-offs (poll cadence after a hold, the
	// local queue's receive).
	Rest Quantiles `json:"queueing_and_emulator"`
	// RestStream is relay invocation − (commit + stream hop): waiting
	// behind the shard's previous invocation and the poll after a hold;
	// RestTarget is the last consumer's first attempt − (PutEvents call +
	// its hop): the local queue's receive and the consumer's own queue.
	RestStream Quantiles `json:"rest_stream_side"`
	RestTarget Quantiles `json:"rest_target_side"`
	// OurShareP50Pct is median(ours) / median(predicted) × 100, and
	// OurShareMeanPct the same with means.
	OurShareP50Pct  float64 `json:"our_share_p50_pct"`
	OurShareMeanPct float64 `json:"our_share_mean_pct"`
	// Retried counts events whose last consumer needed more than one
	// attempt (an ordered consumer holding an event that overtook its
	// predecessor, for one).
	Retried int `json:"events_retried_by_last_consumer"`
	// Buffered counts events whose last consumer acknowledged the
	// delivery before its dedup marker committed: an ordered consumer's
	// resequencer buffered it (it arrived before its predecessor) and
	// applied it after the predecessor.
	Buffered int `json:"events_buffered_by_last_consumer"`
	// DynamoDBInjectedMs is the mean injected latency per call by
	// operation, and DynamoDBCalls the calls.
	DynamoDBInjectedMs map[string]float64 `json:"dynamodb_injected_mean_ms"`
	DynamoDBCalls      map[string]int64   `json:"dynamodb_calls"`
	// Functions is the time of the relay, the consumers (every attempt)
	// and the DynamoDB calls made outside both (the API's, the
	// reconciler's), for the capacity model's Lambda durations.
	Functions map[string]FunctionTime `json:"functions"`
	// TargetsPerEvent is the mean number of consumers that applied an
	// event; Consumer is one consumer's first attempt → success of the
	// deliveries applied on their first attempt (a Lambda's duration), and
	// Relay is relay invocation → PutEvents returned.
	TargetsPerEvent float64 `json:"targets_per_event"`
	// PerConsumer is each consumer's deliveries per event.
	PerConsumer map[string]float64 `json:"deliveries_per_event_by_consumer"`
	// PredictedByConsumer is the AWS prediction per consumer: for every
	// event the consumer applied, the stream hop + the relay's part + that
	// consumer's EventBridge + SQS hop + its first attempt → applied (its
	// dedup marker's commit for a consumer that writes markers: a wait in
	// an ordered consumer's buffer included), in ms. Predicted is the same
	// for the last consumer of each event.
	PredictedByConsumer map[string]Quantiles `json:"predicted_commit_to_applied_by_consumer"`
	Consumer            Quantiles            `json:"consumer_first_attempt"`
	Relay               Quantiles            `json:"relay_to_published"`
	// TotalSamples are the per-event predicted commit → applied latencies
	// in ms (sorted), for the CDF plot.
	TotalSamples []float64 `json:"-"`
}

// Quantiles are p50/p90/p99/max and the mean of a sample, in ms.
type Quantiles struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// NewQuantiles computes nearest-rank quantiles of ms (sorted in place).
func NewQuantiles(ms []float64) Quantiles {
	if len(ms) == 0 {
		return Quantiles{}
	}
	sort.Float64s(ms)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ms)))) - 1
		return round2(ms[max(i, 0)])
	}
	var sum float64
	for _, v := range ms {
		sum += v
	}
	return Quantiles{N: len(ms), P50: rank(0.5), P90: rank(0.9), P99: rank(0.99), Max: round2(ms[len(ms)-1]), Mean: round2(sum / float64(len(ms)))}
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// Result splits every fully recorded event's commit → applied.
func (c *Cloud) Result() CloudResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := CloudResult{Hops: c.hops, DynamoDBInjectedMs: map[string]float64{}, DynamoDBCalls: map[string]int64{}}
	var total, inj, ours, rest, cons, rel, rs, rt, pred []float64
	targets := 0
	perCons := map[string]float64{}
	predBy := map[string][]float64{}
	for id, s := range c.ev {
		if s.commit.IsZero() || s.relayStart.IsZero() || s.published.IsZero() || len(s.consumers) == 0 {
			continue
		}
		var last *consumerSpan
		var lastAt time.Time
		complete := true
		for name, cs := range s.consumers {
			at := c.appliedAt(name, cs)
			if at.IsZero() || cs.start.IsZero() {
				complete = false
				break
			}
			if last == nil || at.After(lastAt) {
				last, lastAt = cs, at
			}
		}
		if !complete {
			continue
		}
		t := msOf(lastAt.Sub(s.commit))
		// The injected stream hop counts only as far as the relay was
		// invoked (a record seen late by the emulator waited less).
		sh := min(msOf(s.streamHop), msOf(s.relayStart.Sub(s.commit)))
		i := max(sh, 0) + msOf(last.targetHop)
		o := msOf(s.published.Sub(s.relayStart)) + msOf(lastAt.Sub(last.start))
		total, inj, ours, rest = append(total, t), append(inj, i), append(ours, o), append(rest, t-i-o)
		pred = append(pred, i+o)
		rs = append(rs, msOf(s.relayStart.Sub(s.commit))-max(sh, 0))
		if ref, ok := c.callOf[id]; ok {
			rt = append(rt, msOf(last.start.Sub(ref.start))-msOf(last.targetHop))
		}
		if last.attempts > 1 {
			r.Retried++
		}
		if !last.committed.IsZero() && !last.applied.IsZero() && last.committed.After(last.applied) {
			r.Buffered++
		}
		targets += len(s.consumers)
		relayPart := msOf(s.published.Sub(s.relayStart))
		for name, cs := range s.consumers {
			perCons[name]++
			predBy[name] = append(predBy[name], max(sh, 0)+msOf(cs.targetHop)+relayPart+msOf(c.appliedAt(name, cs).Sub(cs.start)))
		}
		rel = append(rel, msOf(s.published.Sub(s.relayStart)))
		for _, cs := range s.consumers {
			// One handler run (a Lambda's duration): first attempt →
			// acknowledged, for deliveries applied then (not buffered).
			if cs.attempts == 1 && (cs.committed.IsZero() || !cs.committed.After(cs.applied)) {
				cons = append(cons, msOf(cs.applied.Sub(cs.start)))
			}
		}
	}
	r.Events = len(total)
	if r.Events > 0 {
		r.TargetsPerEvent = round2(float64(targets) / float64(r.Events))
	}
	r.PerConsumer = map[string]float64{}
	for name, n := range perCons {
		r.PerConsumer[name] = round2(n / float64(max(r.Events, 1)))
	}
	r.PredictedByConsumer = map[string]Quantiles{}
	for name, ms := range predBy {
		r.PredictedByConsumer[name] = NewQuantiles(ms)
	}
	r.Consumer, r.Relay = NewQuantiles(cons), NewQuantiles(rel)
	r.RestStream, r.RestTarget = NewQuantiles(rs), NewQuantiles(rt)
	r.TotalSamples = append([]float64(nil), pred...)
	r.Total, r.Injected, r.Ours, r.Rest = NewQuantiles(total), NewQuantiles(inj), NewQuantiles(ours), NewQuantiles(rest)
	r.Predicted = NewQuantiles(pred)
	sort.Float64s(r.TotalSamples)
	if r.Predicted.P50 > 0 {
		r.OurShareP50Pct = round2(r.Ours.P50 / r.Predicted.P50 * 100)
	}
	if r.Predicted.Mean > 0 {
		r.OurShareMeanPct = round2(r.Ours.Mean / r.Predicted.Mean * 100)
	}
	r.Functions = map[string]FunctionTime{}
	for name, f := range c.fns {
		ft := FunctionTime{Invocations: f.invocations, WallMs: round2(float64(f.wall) / 1e6), LocalMs: round2(float64(f.local) / 1e6), InjectedMs: round2(float64(f.injected) / 1e6)}
		if f.wall > 0 {
			ft.OwnMs = round2(max(float64(f.wall-f.local-f.injected), 0) / 1e6)
		}
		r.Functions[name] = ft
	}
	for op, d := range c.ddb {
		r.DynamoDBCalls[op] = c.ddbN[op]
		r.DynamoDBInjectedMs[op] = round2(msOf(d) / float64(c.ddbN[op]))
	}
	return r
}

// String is a one-line summary.
func (r CloudResult) String() string {
	return fmt.Sprintf("%d events, predicted commit→applied p50/p90/p99 %.0f/%.0f/%.0f ms (as run here %.0f/%.0f/%.0f), ours p50 %.1f ms (%.1f %% of p50)",
		r.Events, r.Predicted.P50, r.Predicted.P90, r.Predicted.P99, r.Total.P50, r.Total.P90, r.Total.P99, r.Ours.P50, r.OurShareP50Pct)
}
