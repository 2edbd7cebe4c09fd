package main

// make bench, issue 16: what the pipeline will do on AWS. A cloud-latency
// level (the real local pipeline with AWS's published hop latencies
// injected), a capacity model from AWS's documented limits and the measured
// calls per event, the plots, and the store's raw rate measured before and
// after the pipeline levels (noise). Kept apart from bench.go and
// bench_report.go; the hooks there are one line each.

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// cloudFlags are the knobs of the cloud-latency level, the capacity model
// and the plots.
type cloudFlags struct {
	orders      int
	rate        float64
	seed        uint64
	plots       bool
	storeBefore bool
	region      string
	putEventsMs float64
}

var cloudOpts cloudFlags

// apiOwnMs is the API handler's own time per command assumed on AWS
// (validation, JSON, SDK marshalling; not measured: the handler runs inside
// the local HTTP server).
const apiOwnMs = 2.0

func (c *cloudFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&c.orders, "cloud-orders", 300, "orders of the cloud-latency level (AWS hop latencies injected); 0 skips it")
	fs.Float64Var(&c.rate, "cloud-rate", 10, "offered orders/s of the cloud-latency level")
	fs.Uint64Var(&c.seed, "cloud-seed", 16, "seed of the injected latency draws")
	fs.BoolVar(&c.plots, "plots", true, "write the PNG plots next to the report")
	fs.BoolVar(&c.storeBefore, "store-before", true, "measure the store's raw rate before the pipeline levels too (noise)")
	fs.StringVar(&c.region, "region", "us-east-1", "region whose EventBridge quotas the capacity model uses (us-east-1, eu-west-1, us-east-2, eu-west-2, other)")
	fs.Float64Var(&c.putEventsMs, "putevents-ms", 20, "PutEvents round trip assumed for the relay's duration on AWS (capacity model; no published figure found)")
}

// cloudReport is what the issue-16 steps add to the JSON report.
type cloudReport struct {
	Level       *levelRun             `json:"level,omitempty"`
	Result      bench.CloudResult     `json:"prediction"`
	StoreBefore bench.StoreRateResult `json:"store_with_stream_before"`
	Noise       noise                 `json:"noise"`
	Capacity    capacityReport        `json:"capacity"`
	Plots       []string              `json:"plots,omitempty"`
	PlotErr     string                `json:"plot_error,omitempty"`
}

type noise struct {
	BeforePerSec, AfterPerSec float64
	SpreadPct                 float64 // |after − before| ÷ mean × 100
	RatioLow, RatioHigh       float64 // pipeline_to_store_ratio against each store rate
	Verdict                   string  // pass, fail or inconclusive (target ≥ 0.80)
}

type capacityReport struct {
	Inputs   bench.CapacityInputs `json:"inputs"`
	Limits   []bench.Limit        `json:"limits"`
	Plans    []bench.Plan         `json:"plans"`
	Regions  []regionRow          `json:"regions"`
	RelayPer float64              `json:"relay_events_per_shard"`
	Inflow   float64              `json:"inflow_events_per_shard"`
}

type regionRow struct {
	Region string
	PerSec float64
	First  string
}

// storeBefore measures the raw store rate on a fresh server before any
// pipeline level, as many transactions as a level writes events.
func (b *benchRun) storeBefore(ctx context.Context) error {
	if !cloudOpts.storeBefore {
		return nil
	}
	b.cloudRep()
	dx, err := dynoxide.Start(ctx, nil)
	if err != nil {
		return err
	}
	defer dx.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(dx.Endpoint))
	if err := bench.CreatePlainTable(ctx, ddb, "raw-before", true); err != nil {
		return err
	}
	n := 2 * b.f.orders
	progress("raw store (before the pipeline levels): %d 2-item TransactWriteItems, %d clients, table WITH a stream", n, b.f.storeConc)
	b.rep.Cloud.StoreBefore = bench.StoreRate(ctx, ddb, "raw-before", n, 2, b.f.storeConc, true)
	progress("  %.0f transactions/s", b.rep.Cloud.StoreBefore.PerSecond)
	return nil
}

func (b *benchRun) cloudRep() *cloudReport {
	if b.rep.Cloud == nil {
		b.rep.Cloud = &cloudReport{}
	}
	return b.rep.Cloud
}

// cloudLevel runs the pipeline at -cloud-rate with AWS's hops injected.
func (b *benchRun) cloudLevel(ctx context.Context) error {
	if cloudOpts.orders <= 0 {
		return nil
	}
	hops := bench.DefaultCloudHops()
	hops.Seed = cloudOpts.seed
	b.cloud = bench.NewCloud(hops)
	defer func() { b.cloud = nil }()
	label := fmt.Sprintf("%g/s, AWS hops injected", cloudOpts.rate)
	progress("cloud latency %s: %d orders on a fresh Dynoxide (stream → Lambda p50 %.0f ms, EventBridge → target %.0f ms, SQS → Lambda %.1f ms, DynamoDB %.0f/%.0f ms)",
		label, cloudOpts.orders, hops.Stream.P50Ms, hops.EventBridge.P50Ms, hops.SQS.P50Ms, hops.DynamoDB.P50Ms, hops.DynamoDBTransact.P50Ms)
	lr, err := b.runLevel(ctx, label, cloudOpts.rate, cloudOpts.orders, false, 0, "")
	if err != nil {
		return err
	}
	c := b.cloudRep()
	c.Level = lr
	c.Result = b.cloud.Result()
	progress("  %s", c.Result)
	return nil
}

// deriveCloud computes the noise verdict, the capacity model and the plots,
// and extends the summary line. Call after derive.
func (b *benchRun) deriveCloud() {
	r := &b.rep
	if len(r.Levels) == 0 {
		return
	}
	c := b.cloudRep()
	top := r.Levels[len(r.Levels)-1]
	if c.Level != nil {
		r.AuditOK = r.AuditOK && c.Level.AuditOK
	}

	// Noise: the store's raw rate before and after the pipeline levels.
	if bf, af := c.StoreBefore.PerSecond, r.Store.PerSecond; bf > 0 && af > 0 {
		n := noise{BeforePerSec: bf, AfterPerSec: af, SpreadPct: math.Abs(af-bf) / ((af + bf) / 2) * 100}
		r1, r2 := top.WritesPerSec/bf, top.WritesPerSec/af
		n.RatioLow, n.RatioHigh = math.Min(r1, r2), math.Max(r1, r2)
		switch {
		case n.RatioLow >= 0.80:
			n.Verdict = "pass"
		case n.RatioHigh < 0.80:
			n.Verdict = "fail"
		default:
			n.Verdict = "inconclusive"
		}
		c.Noise = n
	}

	// Capacity model.
	c.Capacity = b.capacity()

	// Summary line.
	if c.Level != nil {
		r.Summary += fmt.Sprintf(" predicted_aws_p99_ms=%.0f our_share_p50_pct=%.1f", c.Result.Predicted.P99, c.Result.OurShareP50Pct)
	}
	if c.Noise.Verdict != "" {
		r.Summary += fmt.Sprintf(" store_ratio_verdict=%s", c.Noise.Verdict)
	}
	r.DoneWhen = b.doneWhen()
	r.Summary += " " + bench.DoneWhenSummary(r.DoneWhen)
}

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

func (b *benchRun) capacity() capacityReport {
	r := &b.rep
	c := r.Cloud
	fb := r.relayLevel()
	q := bench.EventBridgeQuotas[0]
	for _, x := range bench.EventBridgeQuotas {
		if strings.HasPrefix(x.Region, cloudOpts.region) {
			q = x
		}
	}
	in := bench.CapacityInputs{
		Quota: q, PartitionWCU: 1000, PendingShards: config.DefaultPendingShards, MaxPendingShards: config.MaxPendingShards,
		PendingWCUPerEvent: 2, TableWRUQuota: 40000, OutboxWRUPerEvent: 3,
		LambdaConcurrency: 1000, RelayBatch: float64(r.BatchSize), ParallelizationFactor: 1, Utilisation: 0.8,
		TargetsPerEvent: 1,
		// The consumers' SQS event source mapping as the stack deploys it
		// (pkg/config, shared with infra/).
		ConsumerMaxConcurrency: config.DefaultConsumerMaxConcurrency, ConsumerBatchSize: config.DefaultConsumerBatchSize,
		// The consumers' runner (internal/orders/app leaves sqsconsumer.Config.Concurrency
		// at its default): at most this many aggregate groups of a batch at once.
		ConsumerGroupConcurrency: sqsconsumer.DefaultConcurrency,
	}
	if pe := fb.Relay.Calls("EventBridge", "PutEvents"); pe > 0 {
		in.EntriesPerPutEvents = float64(fb.Audit.Events) / float64(pe)
	} else {
		in.EntriesPerPutEvents = 10
	}
	if len(r.Designs) > 0 {
		in.USDPerMillion = r.Designs[0].Cost.Total
	}
	if c.Level != nil && c.Result.Events > 0 {
		// Lambda durations on AWS: our own time measured here (wall − the
		// local store's time − the injected latency) plus the injected
		// DynamoDB latency; the relay adds one PutEvents round trip per
		// invocation (its chunks go in parallel); the API's own time is not
		// measured (its handler runs inside the HTTP server): apiOwnMs.
		res := c.Result
		ev := float64(c.Level.Audit.Events)
		rl, co, api := res.Functions["relay"], res.Functions["consumer"], res.Functions["api"]
		in.TargetsPerEvent = res.TargetsPerEvent
		in.RelaySecondsPerEvent = (rl.OwnMs + rl.InjectedMs + float64(rl.Invocations)*cloudOpts.putEventsMs) / ev / 1000
		in.ConsumerSeconds = (co.OwnMs + co.InjectedMs) / ev / max(in.TargetsPerEvent, 1) / 1000
		in.APISeconds = (api.InjectedMs/ev + apiOwnMs) / 1000
		for name, n := range res.PerConsumer {
			if n > in.BusiestConsumerPerEvent || (n == in.BusiestConsumerPerEvent && name < in.BusiestConsumer) {
				in.BusiestConsumer, in.BusiestConsumerPerEvent = name, n
			}
		}
		// Groups per consumer batch: the worst case for a batch processed
		// by aggregate, every delivery of an order to the busiest consumer
		// in the same batch (events per order × its deliveries per event).
		if orders := c.Level.Load.Orders; orders > 0 && in.BusiestConsumerPerEvent > 0 {
			perAggregate := ev / float64(orders) * in.BusiestConsumerPerEvent
			in.ConsumerGroupsPerBatch = math.Max(float64(in.ConsumerBatchSize)/math.Max(perAggregate, 1), 1)
		}
		// The example ledger updates its per-currency balance in each
		// OrderPaid transaction (2 WCU: transactional); the load uses one
		// currency, and OrderPaid is one of an order's two events. The
		// balance is write-sharded over ledger.BalanceShards items.
		if res.PerConsumer[routing.ConsumerLedger] > 0 {
			in.HotItemPerEvent, in.HotItemShards = 2*0.5, ledger.BalanceShards
		}
		// A full batch: one PutEvents round trip, the marking's
		// BatchExecuteStatement calls of 25 one after the other at the
		// DynamoDB p50, and our own time per record.
		if recs := c.Level.Batches.Records; recs > 0 {
			in.RelayInvocationSeconds = (cloudOpts.putEventsMs + math.Ceil(float64(r.BatchSize)/25)*res.Hops.DynamoDB.P50Ms + rl.OwnMs/float64(recs)*float64(r.BatchSize)) / 1000
		}
	}
	// Each consumer's dedup marker is one transactional put (2 WRU per KB).
	in.DedupWRUPerEvent = 2 * in.TargetsPerEvent
	cr := capacityReport{Inputs: in, Limits: in.Limits()}
	cr.RelayPer, cr.Inflow = in.ShardCheck()
	for _, t := range []float64{100, 1000, 10000, 100000} {
		cr.Plans = append(cr.Plans, in.PlanFor(t))
	}
	for _, x := range bench.EventBridgeQuotas {
		ri := in
		ri.Quota = x
		ls := ri.Limits()
		cr.Regions = append(cr.Regions, regionRow{Region: x.Region, PerSec: ls[0].PerSec, First: ls[0].Name})
	}
	return cr
}

// writePlots draws the PNGs next to the report: bench-<ts>-<name>.png and
// latest-<name>.png.
func (b *benchRun) writePlots() {
	r := &b.rep
	c := b.cloudRep()
	if !cloudOpts.plots || len(r.Levels) == 0 {
		return
	}
	var series []bench.CDFSeries
	levels := append([]*levelRun{}, r.Levels...)
	if r.Batched != nil {
		levels = append(levels, r.Batched)
	}
	for _, l := range levels {
		series = append(series, bench.CDFSeries{Name: "measured here: " + strings.ReplaceAll(plotLabel(l), "\n", ", "), Ms: l.samples})
	}
	if c.Level != nil {
		series = append(series, bench.CDFSeries{Name: fmt.Sprintf("predicted on AWS (%g orders/s paced, AWS hop latencies injected)", c.Level.OfferedPerSec), Ms: c.Result.TotalSamples, Dashed: true})
	}
	pts := loadPoints(levels)
	var cost []bench.CostPoint
	for _, p := range c.Capacity.Plans {
		cost = append(cost, bench.CostPoint{EventsPerSec: p.Target, USDPerMonth: p.USDPerMonth})
	}
	draw := map[string]func(string) error{
		"latency-cdf": func(p string) error {
			return bench.PlotLatencyCDF(p, "Commit → applied: measured locally per level, predicted on AWS", series)
		},
		"throughput-calls": func(p string) error { return bench.PlotThroughputCalls(p, pts) },
		"cost":             func(p string) error { return bench.PlotCost(p, cost) },
	}
	for _, name := range []string{"latency-cdf", "throughput-calls", "cost"} {
		for _, prefix := range []string{"bench-" + b.ts, "latest"} {
			p := filepath.Join(b.f.out, prefix+"-"+name+".png")
			if err := draw[name](p); err != nil {
				c.PlotErr = err.Error()
				progress("plot %s: %v", p, err)
				continue
			}
			if prefix != "latest" {
				c.Plots = append(c.Plots, p)
			}
		}
	}
}

// plotLabel names a level on the plots, by what its load is: orders/s
// paced, or a closed loop of clients ("\n" breaks the line).
func plotLabel(l *levelRun) string {
	var s string
	if l.OfferedPerSec > 0 {
		s = fmt.Sprintf("%g orders/s\npaced", l.OfferedPerSec)
	} else {
		s = fmt.Sprintf("closed loop\n%d clients", l.Concurrency)
	}
	if l.WindowMs > 0 {
		s = strings.ReplaceAll(s, "\n", ", ") + fmt.Sprintf("\nbatching window %s", time.Duration(l.WindowMs*1e6))
	}
	return s
}

// loadPoints are the throughput plot's bars: per level, the events/s the
// load committed (acknowledged commands ÷ the load's duration: one event
// per command, 2 per order) and the events/s the consumers applied, the
// relay's calls per 1,000 events and the p99 commit → applied.
func loadPoints(levels []*levelRun) []bench.LoadPoint {
	var pts []bench.LoadPoint
	for _, l := range levels {
		_, per := per1000(l.Relay, int64(l.Audit.Events))
		committed := 0.0
		if l.Load.Elapsed > 0 {
			committed = float64(l.Load.Commands) / l.Load.Elapsed.Seconds()
		}
		pts = append(pts, bench.LoadPoint{Label: plotLabel(l), Committed: committed, Applied: l.EventsPerSec, RelayCallsPer1000: per, P99Ms: l.Apply.Latency.P99})
	}
	return pts
}

// cloudMarkdown is the issue-16 part of the report, placed before the
// Summary section.
func (b *benchRun) cloudMarkdown() string {
	r := &b.rep
	c := r.Cloud
	if c == nil {
		return ""
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	if c.Level != nil {
		res := c.Result
		h := res.Hops
		p("## g) Predicted on AWS: commit → applied with AWS's hop latencies injected")
		p("")
		p("The real local pipeline (API, relay, bus, consumers, Dynoxide) at %s, with AWS's published hop latencies injected where the local runtime hands over: each drawn from a lognormal fitted to the published p50 and p99 (seed %d). Stream records committed in the same %s poll slot share one draw (Lambda polls a shard 4 times a second, %s); an EventBridge + SQS draw is shared by the events of one PutEvents call and target. DynamoDB calls (not DynamoDB Streams, inside the stream hop) sleep after the local server answers.",
			c.Level.Label, h.Seed, h.PollSlot, bench.SourceStreamPolling)
		p("")
		p("| hop | published p10 / p50 / p90 / p99 ms | fitted p90 ms (σ) | where it is injected | source |")
		p("|---|---|---|---|---|")
		for _, x := range []struct {
			h     bench.Hop
			where string
		}{
			{h.Stream, "stream event source mapping holds the record until commit + draw (localrt DeliverAt)"},
			{h.EventBridge, "bus → consumer queue (with the SQS draw)"},
			{h.SQS, "bus → consumer queue (with the EventBridge draw)"},
			{h.DynamoDB, "SDK middleware, every DynamoDB call"},
			{h.DynamoDBTransact, "SDK middleware, TransactWriteItems"},
		} {
			pub := fmt.Sprintf("%s / %g / %s / %g", optMs(x.h.P10Ms), x.h.P50Ms, optMs(x.h.P90Ms), x.h.P99Ms)
			src := x.h.Source
			if x.h.Assumption != "" {
				src += " (" + x.h.Assumption + ")"
			}
			p("| %s | %s | %.1f (%.3f) | %s | %s |", x.h.Name, pub, x.h.FittedP90Ms, x.h.FittedSigma, x.where, src)
		}
		p("")
		p("Per event (%d events applied by every consumer that took them, %.2f consumers per event), with the last consumer to apply it:", res.Events, res.TargetsPerEvent)
		p("")
		p("| part | p50 ms | p90 ms | p99 ms | mean ms |")
		p("|---|---|---|---|---|")
		for _, x := range []struct {
			name string
			q    bench.Quantiles
		}{
			{"**commit → applied, predicted on AWS** (= injected hops + ours)", res.Predicted},
			{"commit → applied as it ran here (+ rest)", res.Total},
			{"injected AWS hops (stream + EventBridge + SQS)", res.Injected},
			{"**ours**: relay invocation → PutEvents returned, plus the last consumer's first attempt → applied (our code, our DynamoDB calls with their injected latency; an event an ordered consumer buffered waits there for its predecessor)", res.Ours},
			{"rest: waiting behind the shard's previous invocation, the emulator's hand-offs", res.Rest},
			{"rest, stream side: relay invoked − (commit + stream hop)", res.RestStream},
			{"rest, target side: consumer's first attempt − (PutEvents call + EventBridge + SQS hop)", res.RestTarget},
			{"relay invocation → PutEvents returned", res.Relay},
			{"one consumer, first attempt → success (deliveries applied by that one run, not buffered)", res.Consumer},
		} {
			p("| %s | %.1f | %.1f | %.1f | %.1f |", x.name, x.q.P50, x.q.P90, x.q.P99, x.q.Mean)
		}
		p("")
		verdict := "met"
		if res.OurShareP50Pct > 5 {
			verdict = "NOT met"
		}
		p("**Our share = median(ours) ÷ median(predicted) = %.1f %%** (with means: %.1f %%); goal ≤ 5 %% of p50: **%s**. %d events needed more than one attempt of their last consumer; %d were buffered by it (an ordered consumer's resequencer: the event overtook its predecessor, EventBridge does not keep order, and was applied right after it; its apply is its dedup marker's commit).",
			res.OurShareP50Pct, res.OurShareMeanPct, verdict, res.Retried, res.Buffered)
		p("")
		p("What dominates ours: %s", dominates(res))
		p("")
		var ops []string
		for op, n := range res.DynamoDBCalls {
			ops = append(ops, fmt.Sprintf("%s %d (mean %.1f ms)", op, n, res.DynamoDBInjectedMs[op]))
		}
		p("Lambda time (sums over the level): our own time = wall − the local store's time − the injected latency; on AWS a function runs for its own time + the injected latency.")
		p("")
		p("| function | invocations | wall ms | local store ms | injected ms | own ms | own ms per invocation |")
		p("|---|---|---|---|---|---|---|")
		for _, name := range []string{"relay", "consumer", "api"} {
			f := res.Functions[name]
			per := "–"
			if f.Invocations > 0 {
				per = fmt.Sprintf("%.2f", f.OwnMs/float64(f.Invocations))
			}
			label := name
			if name == "api" {
				label = "calls outside relay and consumers (API, reconciler, setup)"
			}
			p("| %s | %d | %.0f | %.0f | %.0f | %.0f | %s |", label, f.Invocations, f.WallMs, f.LocalMs, f.InjectedMs, f.OwnMs, per)
		}
		p("")
		p("The prediction leaves out `rest` (the emulator's hand-offs and the queueing of a run that shares %d cores with the store and, on this machine, with other jobs: load average %s at the end of the run); a run whose rest is larger than its hops was starved and says little about AWS beyond the split.", runtime.NumCPU(), loadAvg())
		p("")
		p("DynamoDB calls with injected latency: %s. The same level's bus-interceptor latency (section a's method) gave p50 / p99 %.0f / %.0f ms.", strings.Join(sortedStrings(ops), ", "), c.Level.Apply.Latency.P50, c.Level.Apply.Latency.P99)
		p("")
		p("What is measured and what is modelled: the code path, its calls and their order are measured (the real pipeline ran); the hop latencies are published figures (eu-west-1, 2022–2023) and assumptions stated above; EventBridge → SQS has no published figure here (the async-Lambda one stands in); PutEvents' own round trip is inside the EventBridge hop, as the source measured it.")
		p("")
	}
	cp := c.Capacity
	in := cp.Inputs
	p("## h) Capacity model: sustained events/s, the first limit, what to change")
	p("")
	p("From AWS's documented limits and this run's measured figures: %.1f entries per PutEvents call (on `%s`), %.2f consumers per event, Lambda time per event on AWS API %.1f ms, consumer %.1f ms per delivery, relay %.2f ms (from the cloud level: our own time measured there + the injected DynamoDB latency; the relay's plus an assumed %.0f ms PutEvents round trip per invocation; the API's own time assumed 2 ms), pending index spread over %d shards (outbox PendingShards: a hash of the event id; pkg/outbox), %.0f WCU per event on the pending index (entry written with the record, removed when marked; projection ALL, records ≤ 1 KB), %.0f WRU per event on the outbox table (transactional put counts twice, %s, + the marking update), %.0f on the dedup table (one transactional marker per consumer). Every limit is planned at ≤ %.0f %% use. EventBridge quotas of %s.",
		in.EntriesPerPutEvents, r.relayLevel().Label, in.TargetsPerEvent, in.APISeconds*1000, in.ConsumerSeconds*1000, in.RelaySecondsPerEvent*1000, cloudOpts.putEventsMs,
		in.PendingShards, in.PendingWCUPerEvent, in.OutboxWRUPerEvent, bench.DocTransactionCost, in.DedupWRUPerEvent, in.Utilisation*100, in.Quota.Region)
	p("")
	p("| limit (default configuration) | events/s | setting | AWS doc |")
	p("|---|---|---|---|")
	for i, l := range cp.Limits {
		name := l.Name
		if i == 0 {
			name = "**" + name + " — first limit hit**"
		}
		p("| %s | %.0f | %s | %s |", name, l.PerSec, l.Setting, l.Doc)
	}
	p("| SQS standard queues (consumer queues), API calls | not a limit | \"a nearly unlimited number of API calls per second, per API action\" | %s |", bench.DocSQSThroughput)
	p("| consumer mapping concurrency, documented ceilings | – | MaximumConcurrency 2..%d (%s); standard mode scales to 1,250 concurrent invokes per mapping, provisioned mode (excludes MaximumConcurrency) to %s (MaximumPollers × %d invokes; %s, %s) | %s |",
		bench.MaxConsumerMaxConcurrency, bench.DocSQSScalingConfig, commas(bench.MaxProvisionedConcurrency), bench.ProvisionedInvokesPerPoller, bench.DocSQSProvisioned, bench.DocSQSProvisionedBlog, bench.DocSQSScaling)
	p("| Lambda scaling rate | not a steady-state limit | 1,000 execution environments every 10 s per function (a ramp to 100,000 events/s takes minutes, not hours) | %s |", bench.DocLambdaScaling)
	p("| stream shard (one per table partition) | relay %.0f events/s per shard at ParallelizationFactor %d vs ≤ %.0f events/s a partition can take (1,000 WCU/s ÷ %.0f) | ParallelizationFactor 1–10, BatchSize 100 | %s |", cp.RelayPer, in.ParallelizationFactor, cp.Inflow, in.OutboxWRUPerEvent, bench.DocESMParams)
	p("")
	if len(cp.Limits) > 0 {
		p("**Sustained events/s of the default configuration (%s): %.0f; the first limit hit: %s.** PutEvents carries ≤ 10 entries and ≤ 256 KB per call (%s); partition ceilings 1,000 WCU/s and 3,000 RCU/s (%s).", in.Quota.Region, cp.Limits[0].PerSec, cp.Limits[0].Name, bench.DocPutEventsEntries, bench.DocPartitionLimit)
	}
	p("")
	p("Consumers (the assumption of this model): each consumer's SQS event source mapping is the stack's, from pkg/config: BatchSize %d (config.DefaultConsumerBatchSize), MaximumConcurrency %d (config.DefaultConsumerMaxConcurrency). An invocation processes its batch's messages grouped by aggregate, each group in sequence and up to %d groups at once (pkg/sqsconsumer, DefaultConcurrency), so a batch of N takes the time of its messages ÷ min(N, groups) rather than their sum: %.1f ms per delivery measured, %s groups per batch of %d assumed (the worst case: every delivery of an order to %s in the same batch, %s deliveries per order), so %s messages at once and %.1f ms per full-batch invocation. The groups' messages are assumed to take equal time and the function's CPU not to bind (a delivery is mostly DynamoDB round trips). Fewer groups per batch, or a bound on the groups run at once, lowers the consumer row in proportion.",
		in.ConsumerBatchSize, in.ConsumerMaxConcurrency, in.ConsumerGroupConcurrency, in.ConsumerSeconds*1000, optNum(in.ConsumerGroupsPerBatch), in.ConsumerBatchSize, in.BusiestConsumer,
		optNum(float64(in.ConsumerBatchSize)/math.Max(in.ConsumerGroupsPerBatch, 1)),
		optNum(in.ConsumerParallel()), in.ConsumerInvocationSeconds()*1000)
	for _, pl := range cp.Plans {
		if pl.Target != bench.CapacityReachTarget {
			continue
		}
		p("")
		if pl.Reachable {
			p("**100,000 events/s: reachable** with documented settings and adjustable quotas (%s): %s. No documented hard limit stops it; the quota increases are requests AWS must grant (the quota pages give no maximum for them).", in.Quota.Region, strings.Join(pl.Changes, "; "))
		} else {
			p("**100,000 events/s: not reachable** with documented limits (%s): %s.", in.Quota.Region, strings.Join(pl.Changes, "; "))
		}
	}
	p("")
	p("By region (EventBridge's default quotas differ; %s):", bench.DocEventBridgeQuota)
	p("")
	p("| region | sustained events/s | first limit |")
	p("|---|---|---|")
	for _, x := range cp.Regions {
		p("| %s | %.0f | %s |", x.Region, x.PerSec, x.First)
	}
	p("")
	p("| target events/s | settings to change (%s) | reachable | USD per month (cost model, section d, 30 days) |", in.Quota.Region)
	p("|---|---|---|---|")
	for _, pl := range cp.Plans {
		p("| %s | %s | %v | %s |", commas(pl.Target), strings.Join(pl.Changes, "; "), pl.Reachable, commas(pl.USDPerMonth))
	}
	p("")
	p("The cost column is section d's producer-side model ($%.3f per million events: writes, EventBridge, relay Lambda) × the rate × 2,592,000 s; consumers, the API function and storage are not in it.", in.USDPerMillion)
	p("")
	p("## i) Noise: the store's raw rate before and after the pipeline levels")
	p("")
	if n := c.Noise; n.Verdict != "" {
		p("| raw store, 2-item TransactWriteItems with a stream | tx/s |")
		p("|---|---|")
		p("| before the pipeline levels (fresh Dynoxide, %d tx) | %.0f |", c.StoreBefore.Transactions, n.BeforePerSec)
		p("| after them (section b) | %.0f |", n.AfterPerSec)
		p("")
		p("Spread %.1f %%. `pipeline_to_store_ratio` at the highest load against either rate: %.2f – %.2f (target ≥ 0.80): **%s**.", n.SpreadPct, n.RatioLow, n.RatioHigh, n.Verdict)
	} else {
		p("(not measured: -store-before=false)")
	}
	if len(c.Plots) > 0 {
		p("")
		p("## j) Plots")
		p("")
		for _, pl := range c.Plots {
			p("![%s](%s)", filepath.Base(pl), filepath.Base(pl))
		}
	}
	p("")
	return w.String()
}

func dominates(res bench.CloudResult) string {
	if res.Retried+res.Buffered > 0 && res.Ours.P99 > 2*res.Ours.P50+100 {
		return fmt.Sprintf("the ordered consumers' waits in the tail (ours p99 %.0f ms: %d events retried, %d buffered until their predecessor was applied); at the median, the relay's part %.1f ms (invocation → PutEvents returned; its marking comes after) and one consumer's %.1f ms (its transaction: side effect + dedup marker, and its reads).",
			res.Ours.P99, res.Retried, res.Buffered, res.Relay.P50, res.Consumer.P50)
	}
	return fmt.Sprintf("the relay's part %.1f ms (p50, invocation → PutEvents returned) and one consumer's %.1f ms (p50): their DynamoDB calls at AWS latency (%v).", res.Relay.P50, res.Consumer.P50, res.DynamoDBInjectedMs)
}

func optMs(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%g", v)
}

func commas(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute figures ("n/a" elsewhere).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " / ")
}

// optNum prints a model input: "2.5", "5".
func optNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
