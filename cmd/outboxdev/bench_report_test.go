package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
)

// reportFixture is a bench run's report with three load levels, the
// consumers' latencies of issue 22's 25/s run, and two Lambda rows.
func reportFixture() *benchRun {
	cons := func(ordered, unordered float64) map[string]bench.Percentiles {
		return map[string]bench.Percentiles{
			"ledger":     {N: 100, P50: 45, P95: 900, P99: ordered, Max: ordered + 10},
			"notifier":   {N: 200, P50: 45, P95: 80, P99: ordered - 2, Max: ordered},
			"fulfilment": {N: 100, P50: 40, P95: 60, P99: unordered, Max: unordered + 5},
		}
	}
	b := &benchRun{f: benchFlags{orders: 300, concurrency: 16, initRuns: 5}}
	b.rep.BatchSize = 100
	b.rep.Levels = []*levelRun{
		{Label: "25/s", OfferedPerSec: 25, Consumers: cons(1064, 74)},
		{Label: "50/s", OfferedPerSec: 50, Consumers: cons(1100, 80)},
		{Label: "max(c=16)", Concurrency: 16, Consumers: cons(20583, 900), Apply: bench.ApplyStats{Events: 600, Latency: bench.Percentiles{N: 600, P99: 20583}}},
	}
	b.rep.Lambdas = []lambdaRow{
		{Name: "api", Init: bench.InitResult{Name: "api", Attempts: 2, Runs: []time.Duration{9e6, 11e6}, MedianMs: 11}},
		{Name: "ledger", Init: bench.InitResult{Name: "ledger", Error: "ledger exited during init: exit status 1: config: environment variable CONSUMER_DLQ_URL is required"}},
	}
	return b
}

func line(t *testing.T, md, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting %q in the report", prefix)
	return ""
}

// Section f reports a function whose init could not be measured as a
// failure, never as 0.0 ms, and the summary line says so (the ledger and
// the notifier used to show 0.0 ms after "exited during init").
func TestBenchReportInitFailureIsNotATime(t *testing.T) {
	t.Parallel()
	b := reportFixture()
	b.derive()
	md := b.markdown()
	row := line(t, md, "| ledger |")
	if strings.Contains(row, "| 0.0 |") || !strings.Contains(row, "FAILED") || !strings.Contains(row, "CONSUMER_DLQ_URL") {
		t.Errorf("ledger's init row %q: want FAILED with the cause, never 0.0", row)
	}
	if row := line(t, md, "| api |"); !strings.Contains(row, "| 11.0 |") {
		t.Errorf("api's init row %q: want its median 11.0", row)
	}
	if !strings.Contains(b.rep.Summary, "lambda_init=FAILED(ledger)") {
		t.Errorf("summary %q does not name the failed init", b.rep.Summary)
	}
}

// Section a2 shows the ordered consumers beside the unordered one at every
// level, not only the first.
func TestBenchReportOrderCostAtEveryLevel(t *testing.T) {
	t.Parallel()
	b := reportFixture()
	b.derive()
	md := b.markdown()
	i := strings.Index(md, "## a2)")
	j := strings.Index(md, "## b)")
	if i < 0 || j < i {
		t.Fatal("no section a2 before b")
	}
	a2 := md[i:j]
	for _, l := range []string{"25/s", "50/s", "max(c=16)"} {
		for _, c := range []string{"ledger", "notifier", "fulfilment"} {
			if !strings.Contains(a2, "| "+l+" | "+c+" |") {
				t.Errorf("a2 lacks %s at %s", c, l)
			}
		}
	}
	// 25/s: the ledger's 1,064 ms against fulfilment's 74 ms (bound 124).
	if row := line(t, a2, "| 25/s | ledger |"); !strings.Contains(row, "| +990 | 14.38 | **no** |") {
		t.Errorf("25/s ledger row %q: want +990 ms, 14.38 ×, outside the bound", row)
	}
}

// The summary line and the Done-when section put every figure of issue 22
// beside its target with a verdict; figures this run did not measure say
// so instead of passing.
func TestBenchReportDoneWhen(t *testing.T) {
	t.Parallel()
	b := reportFixture()
	b.derive()
	b.deriveCloud()
	for _, want := range []string{
		"done_when=0/7",
		"ordered_p99_at_25_ms=FAIL(1064>124)",
		"closed_loop_p99_ms=FAIL(20583>1000)",
		"pipeline_to_store_ratio=NOT_MEASURED(n/a)",
		"aws_ordered_p99_ms=NOT_MEASURED(n/a)",
		"capacity_default_events_per_s=NOT_MEASURED(n/a)",
		"capacity_100k_reachable=NOT_MEASURED(n/a)",
		"relay_calls_per_1000=NOT_MEASURED(n/a)",
	} {
		if !strings.Contains(b.rep.Summary, want) {
			t.Errorf("summary %q lacks %q", b.rep.Summary, want)
		}
	}
	md := b.doneWhenMarkdown()
	if row := line(t, md, "| 25 orders/s"); !strings.Contains(row, "ledger 1064") || !strings.Contains(row, "fulfilment 74") || !strings.HasSuffix(row, "| **FAIL** |") {
		t.Errorf("Done-when row %q", row)
	}
}

// The throughput plot names levels by their load (orders/s paced, or a
// closed loop of clients) and draws events/s: committed = acknowledged
// commands ÷ the load's duration (never the applied rate standing in for
// it), applied = the consumers' rate.
func TestLoadPointsLabelOrdersAndEvents(t *testing.T) {
	t.Parallel()
	pts := loadPoints([]*levelRun{
		{OfferedPerSec: 25, Load: bench.LoadResult{Commands: 600, Elapsed: 12 * time.Second}, EventsPerSec: 48},
		{Concurrency: 16, Load: bench.LoadResult{Commands: 3000, Elapsed: 10 * time.Second}, EventsPerSec: 52},
		{Concurrency: 16, WindowMs: 1000, Load: bench.LoadResult{Commands: 3000, Elapsed: 12 * time.Second}, EventsPerSec: 60},
	})
	want := []bench.LoadPoint{
		{Label: "25 orders/s\npaced", Committed: 50, Applied: 48},
		{Label: "closed loop\n16 clients", Committed: 300, Applied: 52},
		{Label: "closed loop, 16 clients\nbatching window 1s", Committed: 250, Applied: 60},
	}
	for i, w := range want {
		if g := pts[i]; g.Label != w.Label || g.Committed != w.Committed || g.Applied != w.Applied {
			t.Errorf("point %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestShapeFinding: the shape table's finding reads the 3- and 4-item
// rates and the read rate it was given, and says so when one is missing.
func TestShapeFinding(t *testing.T) {
	shape := func(items int, rate float64) storeShape {
		return storeShape{Items: items, Rate: bench.StoreRateResult{PerSecond: rate}}
	}
	shapes := []storeShape{shape(1, 1400), shape(2, 1200), shape(3, 1000), shape(4, 500),
		{Read: true, Rate: bench.StoreRateResult{PerSecond: 4800}}}
	got := shapeFinding(shapes)
	for _, want := range []string{"4-item transaction takes 2.00× the time of a 3-item one", "and 2.40× a 2-item one's", "takes 0.25× a 2-item transaction's time"} {
		if !strings.Contains(got, want) {
			t.Errorf("finding lacks %q:\n%s", want, got)
		}
	}
	if got := shapeFinding(shapes[:3]); !strings.Contains(got, "failed to measure") {
		t.Errorf("finding without the 4-item and read rates = %q, want the failure sentence", got)
	}
}

// With section b2's rounds, the store-ratio figure is their median (each
// round against the raw rates right before and after it), the summary
// lists every round beside the single figure, and a round whose audit
// failed fails the run's audit.
func TestBenchReportRatioRounds(t *testing.T) {
	t.Parallel()
	b := reportFixture()
	b.rep.Store = bench.StoreRateResult{PerSecond: 500}
	top := b.rep.Levels[len(b.rep.Levels)-1]
	top.WritesPerSec, top.AuditOK = 450, true
	for _, l := range b.rep.Levels {
		l.AuditOK = true
	}
	b.rep.Rounds = &roundsReport{Rounds: []ratioRound{
		{Ratio: 0.62, AuditOK: true}, {Ratio: 0.91, AuditOK: true}, {Ratio: 0.70, AuditOK: true},
	}}
	b.rep.Rounds.MedianRatio = median(b.rep.Rounds.Rounds, func(r ratioRound) float64 { return r.Ratio })
	b.derive()
	b.deriveCloud()
	for _, want := range []string{
		"pipeline_to_store_ratio=0.70 ",
		"pipeline_to_store_ratio_rounds=0.62/0.91/0.70 pipeline_to_store_ratio_after_levels=0.90",
		"pipeline_to_store_ratio=FAIL(0.70<0.80)",
	} {
		if !strings.Contains(b.rep.Summary, want) {
			t.Errorf("summary %q lacks %q", b.rep.Summary, want)
		}
	}
	if !b.rep.AuditOK {
		t.Fatal("every level and round audited ok, but the run's audit failed")
	}
	b.rep.Rounds.Rounds[1].AuditOK = false
	b.rep.Designs = nil
	b.derive()
	if b.rep.AuditOK {
		t.Error("a round's failed audit did not fail the run's")
	}
	if got := median([]ratioRound{{Ratio: 0.9}, {Ratio: 0.5}}, func(r ratioRound) float64 { return r.Ratio }); got != 0.7 {
		t.Errorf("median of two = %v, want 0.7", got)
	}
}
