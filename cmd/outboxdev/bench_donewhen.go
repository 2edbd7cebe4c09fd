package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
)

// doneWhen puts each Done-when figure of issue 22 beside its target, from
// this run's levels, prediction and capacity model. A figure whose level did
// not run as the target defines it is NOT MEASURED, never guessed.
func (b *benchRun) doneWhen() []bench.Figure {
	r := &b.rep
	c := b.cloudRep()
	p99s := func(l *levelRun) map[string]float64 {
		m := map[string]float64{}
		for name, q := range l.Consumers {
			if q.N > 0 {
				m[name] = q.P99
			}
		}
		return m
	}
	var figs []bench.Figure

	// 25 orders/s: ordered beside unordered, and the 150 ms cap.
	const at = 25.0
	key, name := "ordered_p99_at_25_ms", "25 orders/s: the ordered consumers' p99 commit → applied beside the unordered consumer's"
	target := fmt.Sprintf("≤ max(%.1f × unordered p99, unordered p99 + %d ms) and ≤ %d ms", bench.OrderCostRatio, bench.LocalOrderSlackMs, bench.OrderedP99CapMs)
	var l25 *levelRun
	for _, l := range r.Levels {
		if l.OfferedPerSec == at {
			l25 = l
			break
		}
	}
	if l25 == nil {
		figs = append(figs, bench.Unmeasured(key, name, target, "no 25/s level in -loads"))
	} else {
		figs = append(figs, bench.OrderedLatencyFigure(key, name+" (`"+l25.Label+"`)", p99s(l25), orderedConsumers, bench.LocalOrderSlackMs, bench.OrderedP99CapMs))
	}

	// The closed loop of 16 clients.
	var closed *levelRun
	for _, l := range r.Levels {
		if l.OfferedPerSec == 0 {
			closed = l
		}
	}
	pk, pn := "closed_loop_p99_ms", fmt.Sprintf("closed loop of %d clients: p99 commit → applied", bench.ClosedLoopClients)
	rk, rn := "pipeline_to_store_ratio", fmt.Sprintf("closed loop of %d clients: pipeline_to_store_ratio", bench.ClosedLoopClients)
	switch {
	case closed == nil:
		figs = append(figs, bench.Unmeasured(pk, pn, fmt.Sprintf("≤ %d ms", bench.ClosedLoopP99Ms), "no max level in -loads"),
			bench.Unmeasured(rk, rn, fmt.Sprintf("≥ %.2f", bench.StoreRatioTarget), "no max level in -loads"))
	case closed.Concurrency != bench.ClosedLoopClients:
		why := fmt.Sprintf("the closed loop ran %d clients (-concurrency), not %d", closed.Concurrency, bench.ClosedLoopClients)
		figs = append(figs, bench.Unmeasured(pk, pn, fmt.Sprintf("≤ %d ms", bench.ClosedLoopP99Ms), why),
			bench.Unmeasured(rk, rn, fmt.Sprintf("≥ %.2f", bench.StoreRatioTarget), why))
	default:
		if closed.Apply.Events == 0 {
			figs = append(figs, bench.Unmeasured(pk, pn, fmt.Sprintf("≤ %d ms", bench.ClosedLoopP99Ms), "no event applied"))
		} else {
			figs = append(figs, bench.AtMost(pk, pn+" (`"+closed.Label+"`)", closed.Apply.Latency.P99, bench.ClosedLoopP99Ms, "%.0f"))
		}
		if rr := r.Rounds; rr != nil && len(rr.Rounds) > 0 {
			f := bench.AtLeast(rk, fmt.Sprintf("%s (median of %d closed loops, each ÷ the raw rates right before and after it; section b2)", rn, len(rr.Rounds)), rr.MedianRatio, bench.StoreRatioTarget, "%.2f")
			rs := make([]string, len(rr.Rounds))
			for i, rd := range rr.Rounds {
				rs[i] = fmt.Sprintf("%.2f", rd.Ratio)
			}
			f.Measured += fmt.Sprintf(" (rounds %s; `%s` against the raw run after all levels: %.2f)", strings.Join(rs, ", "), closed.Label, closed.StoreRatio)
			figs = append(figs, f)
			break
		}
		if r.Store.PerSecond <= 0 {
			figs = append(figs, bench.Unmeasured(rk, rn, fmt.Sprintf("≥ %.2f", bench.StoreRatioTarget), "the raw store rate was not measured"))
			break
		}
		f := bench.AtLeast(rk, rn+" (`"+closed.Label+"`, write calls/s ÷ the raw store rate after the levels)", closed.StoreRatio, bench.StoreRatioTarget, "%.2f")
		if n := c.Noise; n.Verdict != "" {
			f.Measured += fmt.Sprintf(" (%.2f – %.2f against the raw rate before and after: %s)", n.RatioLow, n.RatioHigh, n.Verdict)
		}
		figs = append(figs, f)
	}

	// The AWS prediction.
	ak, an := "aws_ordered_p99_ms", "predicted on AWS: the ordered consumers' p99 commit → applied beside the unordered consumer's"
	if c.Level == nil {
		figs = append(figs, bench.Unmeasured(ak, an, fmt.Sprintf("≤ max(%.1f × unordered p99, unordered p99 + %d ms)", bench.OrderCostRatio, bench.AWSOrderSlackMs), "no cloud-latency level (-cloud-orders 0)"))
	} else {
		m := map[string]float64{}
		for name, q := range c.Result.PredictedByConsumer {
			if q.N > 0 {
				m[name] = q.P99
			}
		}
		figs = append(figs, bench.OrderedLatencyFigure(ak, an+" (`"+c.Level.Label+"`, section g)", m, orderedConsumers, bench.AWSOrderSlackMs, 0))
	}

	// The capacity model.
	ck, cn := "capacity_default_events_per_s", "capacity model: events/s the default configuration sustains (section h)"
	hk, hn := "capacity_100k_reachable", "capacity model: 100,000 events/s reachable with documented quotas and settings (section h)"
	cp := c.Capacity
	if len(cp.Limits) == 0 || cp.Inputs.ConsumerSeconds == 0 {
		why := "no cloud-latency level: the consumers' and functions' times are not measured"
		figs = append(figs, bench.Unmeasured(ck, cn, fmt.Sprintf("≥ %d", bench.CapacityDefaultTarget), why), bench.Unmeasured(hk, hn, "reachable", why))
	} else {
		f := bench.AtLeast(ck, cn, cp.Limits[0].PerSec, bench.CapacityDefaultTarget, "%.0f")
		f.Measured += " (first limit: " + cp.Limits[0].Name + ")"
		figs = append(figs, f)
		reach := bench.Figure{Key: hk, Name: hn, Target: "reachable", Verdict: bench.Fail, Short: "unreachable", Measured: "no plan for 100,000 events/s"}
		for _, pl := range cp.Plans {
			if pl.Target != bench.CapacityReachTarget {
				continue
			}
			reach.Measured = strings.Join(pl.Changes, "; ")
			if pl.Reachable {
				reach.Verdict, reach.Short = bench.Pass, "reachable"
			}
		}
		figs = append(figs, reach)
	}

	// Relay calls at full batches.
	lk, ln := "relay_calls_per_1000", "relay calls per 1,000 events at full batches (section c)"
	if r.Batched == nil || len(r.Designs) == 0 {
		figs = append(figs, bench.Unmeasured(lk, ln, fmt.Sprintf("≤ %d", bench.RelayCallsTarget), "no full-batch level (-batching-window 0)"))
	} else {
		f := bench.AtMost(lk, ln+" (`"+r.Batched.Label+"`)", r.Designs[0].Total, bench.RelayCallsTarget, "%.1f")
		bs := r.Batched.Batches
		f.Measured += fmt.Sprintf(" (%d of %d invocations full; PutEvents floor of these batches %.1f per 1,000)", bs.Full, bs.Invocations,
			float64(bs.PutEventsFloor)*1000/float64(max(r.Batched.Audit.Events, 1)))
		figs = append(figs, f)
	}
	return figs
}

// doneWhenMarkdown is the Done-when section, placed before the Summary.
func (b *benchRun) doneWhenMarkdown() string {
	r := &b.rep
	if len(r.DoneWhen) == 0 {
		return ""
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("## Done when (issue 22): each figure beside its target")
	p("")
	p("The targets are for `make bench` at its defaults on a quiet 2-core machine; this run's load average at the end was %s (1 / 5 / 15 min) on %d CPUs. A figure is NOT MEASURED when its level did not run as the target defines it.", loadAvg(), runtime.NumCPU())
	p("")
	p("| figure | measured | target | verdict |")
	p("|---|---|---|---|")
	for _, f := range r.DoneWhen {
		v := string(f.Verdict)
		if f.Verdict != bench.Pass {
			v = "**" + v + "**"
		}
		p("| %s | %s | %s | %s |", f.Name, f.Measured, f.Target, v)
	}
	p("")
	return w.String()
}
