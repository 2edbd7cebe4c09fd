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
	"path/filepath"
	"strings"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
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
	n := 2 * b.f.orders
	progress("raw store (before the pipeline levels): %d 2-item TransactWriteItems, %d clients, table WITH a stream", n, b.f.storeConc)
	r, err := b.freshStoreRate(ctx, "raw-before", n)
	if err != nil {
		return err
	}
	b.rep.Cloud.StoreBefore = r
	progress("  %.0f transactions/s", r.PerSecond)
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
