package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
	"github.com/ddb-outbox/ddb-outbox/internal/callcount"
	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// benchFlags are the knobs of `outboxdev bench`.
type benchFlags struct {
	reorder     float64
	orders      int
	loads       []string
	concurrency int
	poll        time.Duration
	window      time.Duration
	batchOrders int
	naiveOrders int
	writeN      int
	initRuns    int
	storeConc   int
	out         string
	profile     bool
	skipLambda  bool
	verbose     bool
}

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	var f benchFlags
	loads := fs.String("loads", "25,50,max", "offered loads: orders/s paced open-loop, or \"max\" (closed loop of -concurrency clients)")
	fs.IntVar(&f.orders, "orders", 1500, "orders per load level (each order = create + pay = 2 events); same data size at every level")
	fs.IntVar(&f.concurrency, "concurrency", 16, "HTTP clients of the closed-loop (max) level")
	fs.DurationVar(&f.poll, "poll", 50*time.Millisecond, "local event source mapping poll interval (devstack Options.PollInterval)")
	fs.DurationVar(&f.window, "batching-window", time.Second, "MaximumBatchingWindowInSeconds of the extra full-batch level (closed loop of -concurrency clients, devstack Options.MaxBatchingWindow); 0 skips that level")
	fs.IntVar(&f.batchOrders, "batch-orders", 1500, "orders of the full-batch level")
	fs.IntVar(&f.naiveOrders, "naive-orders", 500, "orders driven through the naive relay")
	fs.IntVar(&f.writeN, "write-samples", 300, "sequential POST /orders and PutItem samples for the write-path latency")
	fs.IntVar(&f.initRuns, "init-runs", 5, "starts per Lambda binary for the init time")
	fs.IntVar(&f.storeConc, "store-concurrency", 16, "clients of the raw TransactWriteItems rate")
	fs.StringVar(&f.out, "out", "results", "directory for the Markdown, JSON and CPU profile")
	fs.BoolVar(&f.profile, "cpuprofile", true, "write a CPU profile of the highest load level (results/bench-<ts>.cpu.pprof)")
	fs.BoolVar(&f.skipLambda, "skip-lambda", false, "skip the Lambda binary sizes and init times")
	fs.BoolVar(&f.verbose, "v", false, "show every component's logs")
	fs.Float64Var(&f.reorder, "reorder", 0.2, "share of bus deliveries made late (100-600 ms) in the extra ordering-cost level at the first load; 0 skips that level")
	traceOverhead := fs.Bool("trace-overhead", false, "only measure tracing on (100% sampled, in-process sink) vs off on the write path and the relay (bench_trace.go), -trace-orders per arm and round")
	traceOrders := fs.Int("trace-orders", 200, "with -trace-overhead: orders per arm and round")
	traceRounds := fs.Int("trace-rounds", 4, "with -trace-overhead: rounds (each runs both arms, alternating which goes first)")
	cloudOpts.register(fs) // issue 16: bench_cloud.go
	registerRounds(fs)     // bench_rounds.go
	_ = fs.Parse(args)
	if *traceOverhead {
		return runTraceOverhead(ctx, f.out, *traceOrders, *traceRounds)
	}
	f.loads = strings.Split(*loads, ",")

	started := time.Now()
	ts := started.UTC().Format("20060102T150405Z")
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	logw := io.Discard
	if f.verbose {
		logw = os.Stderr
	}
	b := &benchRun{f: f, log: slog.New(slog.NewTextHandler(logw, nil)), ts: ts}
	r := &b.rep
	r.Started = started.UTC().Format(time.RFC3339)
	r.Host = fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	r.PollIntervalMs = float64(f.poll) / 1e6
	r.BatchSize = benchBatchSize
	r.Prices = bench.ListPrices

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"lambda binaries", b.lambdas},
		{"raw store rate before the pipeline", b.storeBefore}, // bench_cloud.go
		{"pipeline", b.pipeline},
		{"store ratio rounds", b.ratioRounds}, // bench_rounds.go
		{"cloud latency", b.cloudLevel},       // bench_cloud.go
		{"full batches", b.fullBatches},
		{"ordering cost", b.orderingCost},
		{"naive relay", b.naive},
		{"raw store rate and dual write", b.store},
		{"write path", b.writePath},
	}
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("bench %s: %w", s.name, err)
		}
	}
	b.derive()
	b.deriveCloud() // bench_cloud.go: noise, capacity, summary additions
	b.writePlots()
	r.WallSeconds = time.Since(started).Seconds()

	md := b.markdown()
	if i := strings.LastIndex(md, "\n## Summary"); i >= 0 { // bench_cloud.go sections before the Summary
		md = md[:i+1] + b.cloudMarkdown() + b.doneWhenMarkdown() + md[i+1:]
	}
	js, jerr := json.MarshalIndent(r, "", "  ")
	if jerr != nil {
		// Never an empty .json beside a report: say what failed.
		js = []byte(fmt.Sprintf("{\"error\": %q}\n", "encode the report: "+jerr.Error()))
	}
	for name, data := range map[string][]byte{
		"bench-" + ts + ".md": []byte(md), "bench-" + ts + ".json": js, "latest.md": []byte(md), "latest.json": js,
	} {
		if err := os.WriteFile(filepath.Join(f.out, name), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Print(md)
	fmt.Printf("\nreport: %s (and .json), wall time %.0f s\n", filepath.Join(f.out, "bench-"+ts+".md"), r.WallSeconds)
	fmt.Println(r.Summary)
	if !r.AuditOK {
		return bench.ErrAuditFailed
	}
	if jerr != nil {
		return fmt.Errorf("bench: JSON report: %w", jerr)
	}
	if !r.InitOK {
		return bench.ErrInitFailed
	}
	return nil
}

type benchRun struct {
	f   benchFlags
	log *slog.Logger
	ts  string
	rep benchReport
	// reorder, when set, makes a share (reorderRate) of the bus's deliveries
	// late during a level (the ordering-cost level).
	reorder     *faults.Injector
	reorderRate float64
	// cloud, when set, injects AWS's hop latencies into a level
	// (bench_cloud.go).
	cloud *bench.Cloud
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// benchBatchSize is the event source mapping batch size of every level
// (devstack Options.BatchSize).
const benchBatchSize = 100

// writeOps are the DynamoDB operations that write: the "write calls" of
// pipeline_to_store_ratio.
var writeOps = map[string]bool{
	"TransactWriteItems": true, "PutItem": true, "UpdateItem": true, "DeleteItem": true,
	"BatchWriteItem": true, "BatchExecuteStatement": true, "ExecuteStatement": true, "ExecuteTransaction": true,
}

func writeCalls(t callcount.Table) int64 {
	var n int64
	for _, r := range t {
		if r.Service == "DynamoDB" && writeOps[r.Operation] {
			n += r.Calls
		}
	}
	return n
}

// levelRun is one pipeline run on a fresh Dynoxide.
type levelRun struct {
	Label         string           `json:"label"`
	OfferedPerSec float64          `json:"offered_orders_per_second"` // 0 = closed loop
	Concurrency   int              `json:"concurrency,omitempty"`
	WindowMs      float64          `json:"max_batching_window_ms"` // event source mapping MaximumBatchingWindowInSeconds
	NaiveRelay    bool             `json:"naive_relay,omitempty"`
	Load          bench.LoadResult `json:"load"`
	OrdersPerSec  float64          `json:"orders_per_second"`
	Apply         bench.ApplyStats `json:"apply"`
	// Consumers is commit → applied per consumer (ordered: ledger,
	// notifier; unordered: fulfilment).
	Consumers map[string]bench.Percentiles `json:"consumers"`
	// ReorderRate is the share of bus deliveries made late (0: none).
	ReorderRate   float64 `json:"reorder_rate,omitempty"`
	EventsPerSec  float64 `json:"events_applied_per_second"`
	WindowSeconds float64 `json:"window_seconds"`
	WriteCalls    int64   `json:"write_calls"`
	WritesPerSec  float64 `json:"write_calls_per_second"`
	// WriteItems are the items those calls wrote (callcount.WriteItems),
	// ItemsPerSec per second, ItemRatio ItemsPerSec ÷ the raw run's items
	// per second (2 per transaction): the store's work the pipeline kept
	// it at, where pipeline_to_store_ratio counts calls of any size.
	WriteItems   int64              `json:"write_items"`
	ItemsPerSec  float64            `json:"write_items_per_second"`
	ItemRatio    float64            `json:"pipeline_to_store_items_ratio"`
	StoreCalls   int64              `json:"store_calls"` // every DynamoDB and DynamoDB Streams call, reads included
	StorePerSec  float64            `json:"store_calls_per_second"`
	StoreRatio   float64            `json:"pipeline_to_store_ratio"`
	All          callcount.Table    `json:"all_calls"`
	Relay        callcount.Table    `json:"relay_calls"`
	APITx        bench.SplitRow     `json:"api_transactions"`
	ConsumerTx   bench.SplitRow     `json:"consumer_transactions"`
	RelayInvokes int64              `json:"relay_invocations"`
	RelaySeconds float64            `json:"relay_handler_seconds"`
	Batches      bench.BatchStats   `json:"relay_batch_sizes"` // records per relay invocation
	Audit        devstack.Audit     `json:"audit"`
	AuditOK      bool               `json:"audit_ok"`
	CPU          cpuSplit           `json:"cpu"`
	Poller       localrtPollerStats `json:"poller"`
	samples      []float64          // commit → applied per event, ms (plots)
}

type localrtPollerStats struct {
	Invocations, RecordsDelivered, RecordsFiltered, Retries int64
}

type cpuSplit struct {
	BenchSeconds    float64 `json:"bench_process_cpu_seconds"`
	DynoxideSeconds float64 `json:"dynoxide_cpu_seconds"`
	WallSeconds     float64 `json:"wall_seconds"`
}

func (c cpuSplit) String() string {
	if c.WallSeconds == 0 {
		return "n/a"
	}
	return fmt.Sprintf("Go process %.2f cores, Dynoxide %.2f cores (of %d)", c.BenchSeconds/c.WallSeconds, c.DynoxideSeconds/c.WallSeconds, runtime.NumCPU())
}

// runLevel starts a fresh Dynoxide and stack, drives orders through it,
// drains and audits it.
func (b *benchRun) runLevel(ctx context.Context, label string, rate float64, orders int, naive bool, batchWindow time.Duration, profilePath string) (*levelRun, error) {
	dx, err := dynoxide.Start(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer dx.Stop()
	all, relayC := callcount.New(), callcount.New()
	split := &bench.TransactSplit{}
	rec := bench.NewApplyRecorder()
	var invokes atomic.Int64
	var handlerNs atomic.Int64
	var sizesMu sync.Mutex
	var sizes []int
	var bus relay.EventBridgeAPI
	opts := devstack.Options{
		Endpoint: dx.Endpoint, Prefix: "bench", Logger: b.log, PollInterval: b.f.poll,
		BatchSize: benchBatchSize, MaxBatchingWindow: batchWindow,
		AWSConfig: func(c *aws.Config) {
			// rec.Register: an ordered consumer has applied an event when its
			// dedup marker committed (a buffered event is acknowledged first).
			c.APIOptions = append(c.APIOptions, rec.Register, all.Register, callcount.RequestConsumedCapacity, split.Register)
		},
		RelayAWSConfig: func(c *aws.Config) { c.APIOptions = append(c.APIOptions, relayC.Register) },
		WrapEventBridge: func(eb relay.EventBridgeAPI) relay.EventBridgeAPI {
			bus = eb
			return callcount.CountingPutEvents(relayC, eb)
		},
		ConsumerInterceptor: rec.Interceptor(),
	}
	if b.reorder != nil {
		opts.WrapQueueTarget = b.reorder.Reorder
	}
	var naiveHandler localrt.StreamHandler
	opts.WrapStream = func(h localrt.StreamHandler) localrt.StreamHandler {
		if naive {
			h = func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				return naiveHandler(ctx, ev)
			}
		}
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			t := time.Now()
			resp, err := h(ctx, ev)
			invokes.Add(1)
			handlerNs.Add(int64(time.Since(t)))
			sizesMu.Lock()
			sizes = append(sizes, len(ev.Records))
			sizesMu.Unlock()
			return resp, err
		}
	}
	var s *devstack.Stack
	if naive {
		// The naive relay has its own counted DynamoDB client; it publishes to
		// the stack's bus. It is bound before Start's poller sees a record:
		// no order exists before Load.
		cfg := dynoxide.AWSConfig(dx.Endpoint)
		cfg.APIOptions = append(cfg.APIOptions, relayC.Register, callcount.RequestConsumedCapacity, all.Register)
		ddb := dynamodb.NewFromConfig(cfg)
		var once sync.Once
		var nr *bench.NaiveRelay
		var nerr error
		naiveHandler = func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			once.Do(func() {
				nr, nerr = bench.NewNaiveRelay(callcount.CountingPutEvents(relayC, bus), ddb, s.ParkedQueue,
					s.Settings.EventBus, s.Settings.Source, s.Settings.OutboxTable, s.Settings.ParkedQueueURL, b.log)
			})
			if nerr != nil {
				return events.DynamoDBEventResponse{}, nerr
			}
			return nr.Handle(ctx, ev)
		}
	}
	if b.cloud != nil {
		b.cloud.Apply(&opts) // bench_cloud.go
	}
	s, err = devstack.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	split.OutboxTable, split.ConsumerTables = s.Settings.OutboxTable, []string{s.Settings.LedgerTable, s.Settings.NotificationsTable}
	all.Reset()
	relayC.Reset()

	dxPID, self := bench.ChildPID("dynoxide"), os.Getpid()
	cpu0, dcpu0 := bench.CPUTime(self), bench.CPUTime(dxPID)
	if profilePath != "" {
		pf, err := os.Create(profilePath)
		if err != nil {
			return nil, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return nil, err
		}
	}
	lr := &levelRun{Label: label, OfferedPerSec: rate, NaiveRelay: naive, WindowMs: float64(batchWindow) / 1e6}
	if rate == 0 {
		lr.Concurrency = b.f.concurrency
	}
	start := time.Now()
	lr.Load = bench.Load(ctx, s.URL, bench.LoadOptions{
		Orders: orders, Rate: rate, Concurrency: lr.Concurrency, Prefix: keyPrefix(label) + "-" + b.ts,
		Progress: func(done, failed int64, el time.Duration) {
			ap := rec.Stats()
			progress("  %-10s %4.0fs  orders=%d/%d failed=%d events_applied=%d", label, el.Seconds(), done, orders, failed, ap.Events)
		},
	})
	loadEnd := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err = s.Drain(dctx)
	cancel()
	if profilePath != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	lr.Apply = rec.Stats()
	lr.samples = rec.LatencySamplesMs()
	lr.Consumers = rec.ByConsumer()
	lr.ReorderRate = b.reorderRate
	end := loadEnd
	if lr.Apply.LastApplied.After(end) {
		end = lr.Apply.LastApplied
	}
	window := end.Sub(start)
	lr.CPU = cpuSplit{BenchSeconds: (bench.CPUTime(self) - cpu0).Seconds(), DynoxideSeconds: (bench.CPUTime(dxPID) - dcpu0).Seconds(), WallSeconds: time.Since(start).Seconds()}
	lr.WindowSeconds = window.Seconds()
	lr.OrdersPerSec = lr.Load.OrdersPerSecond()
	lr.All, lr.Relay = all.Snapshot(), relayC.Snapshot()
	lr.WriteCalls = writeCalls(lr.All)
	lr.WritesPerSec = float64(lr.WriteCalls) / window.Seconds()
	lr.WriteItems = lr.All.TotalItems()
	lr.ItemsPerSec = float64(lr.WriteItems) / window.Seconds()
	for _, row := range lr.All {
		if row.Service == "DynamoDB" || row.Service == "DynamoDB Streams" {
			lr.StoreCalls += row.Calls
		}
	}
	lr.StorePerSec = float64(lr.StoreCalls) / window.Seconds()
	if lr.Apply.Events > 0 && !lr.Apply.FirstCommit.IsZero() {
		lr.EventsPerSec = float64(lr.Apply.Events) / lr.Apply.LastApplied.Sub(lr.Apply.FirstCommit).Seconds()
	}
	lr.APITx, lr.ConsumerTx = split.Get("api"), split.Get("consumer")
	lr.RelayInvokes, lr.RelaySeconds = invokes.Load(), float64(handlerNs.Load())/1e9
	sizesMu.Lock()
	lr.Batches = bench.NewBatchStats(sizes, benchBatchSize)
	sizesMu.Unlock()
	ps := s.Poller.Stats()
	lr.Poller = localrtPollerStats{ps.Invocations, ps.RecordsDelivered, ps.RecordsFiltered, ps.Retries}
	a, err := s.Audit(ctx)
	if err != nil {
		return nil, err
	}
	lr.Audit = a
	lr.AuditOK = a.OK() && lr.Load.Failed == 0 && int64(a.Committed) == lr.Load.Commands
	progress("  %-10s done: %.1f orders/s, %d events, p99 commit→applied %.0f ms, %.0f write calls/s, %d relay invocations (mean %.1f records), audit ok=%v (%s)",
		label, lr.OrdersPerSec, a.Events, lr.Apply.Latency.P99, lr.WritesPerSec, lr.RelayInvokes, lr.Batches.Mean, lr.AuditOK, a.Summary())
	for _, p := range a.Problems {
		progress("  problem: %s", p)
	}
	return lr, nil
}

func (b *benchRun) pipeline(ctx context.Context) error {
	for i, l := range b.f.loads {
		l = strings.TrimSpace(l)
		rate := 0.0
		if l != "max" {
			v, err := strconv.ParseFloat(l, 64)
			if err != nil || v <= 0 {
				return fmt.Errorf("bad -loads entry %q", l)
			}
			rate = v
		}
		label := l + "/s"
		if rate == 0 {
			label = fmt.Sprintf("max(c=%d)", b.f.concurrency)
		}
		prof := ""
		if b.f.profile && i == len(b.f.loads)-1 {
			prof = filepath.Join(b.f.out, "bench-"+b.ts+".cpu.pprof")
			b.rep.ProfilePath = prof
		}
		progress("pipeline %s: %d orders on a fresh Dynoxide, poll interval %s", label, b.f.orders, b.f.poll)
		lr, err := b.runLevel(ctx, label, rate, b.f.orders, false, 0, prof)
		if err != nil {
			return err
		}
		b.rep.Levels = append(b.rep.Levels, lr)
	}
	return nil
}

// orderingCost runs the first load level again with a share of the bus's
// deliveries made late, so later events of an order overtake earlier ones:
// the ordered consumers (ledger, notifier) hold them until the gap closes,
// the unordered one (fulfilment) does not. Kept apart from Levels.
func (b *benchRun) orderingCost(ctx context.Context) error {
	if b.f.reorder <= 0 || len(b.f.loads) == 0 {
		return nil
	}
	l := strings.TrimSpace(b.f.loads[0])
	rate, err := strconv.ParseFloat(l, 64)
	if err != nil {
		rate = 0
	}
	inj, err := faults.New(faults.Config{Seed: 1, Rates: map[faults.Kind]float64{faults.Reorder: b.f.reorder}})
	if err != nil {
		return err
	}
	b.reorder, b.reorderRate = inj, b.f.reorder
	defer func() { b.reorder, b.reorderRate = nil, 0 }()
	label := fmt.Sprintf("%s/s, %.0f %% of deliveries late", l, b.f.reorder*100)
	progress("ordering cost %s: %d orders on a fresh Dynoxide", label, b.f.orders)
	lr, err := b.runLevel(ctx, label, rate, b.f.orders, false, 0, "")
	if err != nil {
		return err
	}
	b.rep.Reordered = lr
	return nil
}

// fullBatches runs the closed loop again on a fresh Dynoxide with the event
// source mapping's MaximumBatchingWindowInSeconds set, so the poller gathers
// records across polls until BatchSize are buffered (or the window ends):
// the relay's calls per 1,000 events at full batches of 100. It is kept
// apart from Levels: the store ratio, the profile and p99 of the summary
// stay those of the highest level without a window.
func (b *benchRun) fullBatches(ctx context.Context) error {
	if b.f.window <= 0 {
		return nil
	}
	label := fmt.Sprintf("max(c=%d), batching window %s", b.f.concurrency, b.f.window)
	progress("pipeline %s: %d orders on a fresh Dynoxide, poll interval %s, batch size %d", label, b.f.batchOrders, b.f.poll, benchBatchSize)
	lr, err := b.runLevel(ctx, label, 0, b.f.batchOrders, false, b.f.window, "")
	if err != nil {
		return err
	}
	b.rep.Batched = lr
	return nil
}

func (b *benchRun) naive(ctx context.Context) error {
	progress("naive relay: %d orders (closed loop, c=%d) on a fresh Dynoxide", b.f.naiveOrders, b.f.concurrency)
	lr, err := b.runLevel(ctx, "naive", 0, b.f.naiveOrders, true, 0, "")
	if err != nil {
		return err
	}
	b.rep.Naive = lr
	return nil
}

var errNoLevels = errors.New("bench: no load level ran")
