package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// ratioRoundsFlag is -ratio-rounds (registered by registerRounds).
var ratioRoundsFlag int

func registerRounds(fs *flag.FlagSet) {
	fs.IntVar(&ratioRoundsFlag, "ratio-rounds", 3, "closed-loop runs for pipeline_to_store_ratio, each bracketed by raw store runs on fresh servers right before and after it (section b2); 0: the ratio against the raw run after the levels only")
}

// ratioRound is one closed-loop run of section b2 with the raw store rates
// measured right before and right after it.
type ratioRound struct {
	RawBefore    float64 `json:"raw_before_tx_per_second"`
	RawAfter     float64 `json:"raw_after_tx_per_second"`
	WritesPerSec float64 `json:"pipeline_write_calls_per_second"`
	ItemsPerSec  float64 `json:"pipeline_write_items_per_second"`
	OrdersPerSec float64 `json:"orders_per_second"`
	P99Ms        float64 `json:"p99_commit_to_applied_ms"`
	// Ratio is WritesPerSec ÷ the mean of RawBefore and RawAfter;
	// ItemRatio the same in items (the raw run writes 2 per call).
	Ratio     float64  `json:"pipeline_to_store_ratio"`
	ItemRatio float64  `json:"pipeline_to_store_items_ratio"`
	AuditOK   bool     `json:"audit_ok"`
	CPU       cpuSplit `json:"cpu"`
}

// roundsReport is section b2: the rounds and their median ratio.
type roundsReport struct {
	Rounds      []ratioRound `json:"rounds"`
	MedianRatio float64      `json:"median_pipeline_to_store_ratio"`
	MedianItems float64      `json:"median_pipeline_to_store_items_ratio"`
}

// ratioRounds measures pipeline_to_store_ratio the way the bench's other
// ratios are measured, side by side: the machine's speed drifts by tens of
// percent within minutes (the raw rate of the same 3,000 transactions has
// read 393 and 631 tx/s ten minutes apart), so a closed-loop run is
// compared with raw runs made right before and right after it, not with
// one raw run minutes later. Each run is on a fresh Dynoxide; each raw run
// writes as many 2-item transactions as the closed loop wrote events
// (equal stream size). The closed loop is the highest level's: 16 clients,
// -orders orders.
func (b *benchRun) ratioRounds(ctx context.Context) error {
	if ratioRoundsFlag <= 0 || len(b.rep.Levels) == 0 {
		return nil
	}
	top := b.rep.Levels[len(b.rep.Levels)-1]
	if top.OfferedPerSec != 0 {
		return nil // no closed loop in -loads
	}
	n := top.Audit.Events
	raw := func(i int) (float64, error) {
		r, err := b.freshStoreRate(ctx, fmt.Sprintf("raw-round-%d", i), n)
		progress("  raw store %d: %.0f transactions/s", i, r.PerSecond)
		return r.PerSecond, err
	}
	rr := &roundsReport{}
	progress("store ratio rounds: %d closed loops of %d orders, each between raw runs of %d 2-item transactions with a stream (fresh servers)", ratioRoundsFlag, b.f.orders, n)
	before, err := raw(0)
	if err != nil {
		return err
	}
	for i := 1; i <= ratioRoundsFlag; i++ {
		label := fmt.Sprintf("%s round %d", top.Label, i)
		progress("  %s: %d orders on a fresh Dynoxide", label, b.f.orders)
		l, err := b.runLevel(ctx, label, 0, b.f.orders, false, 0, "")
		if err != nil {
			return err
		}
		after, err := raw(i)
		if err != nil {
			return err
		}
		mean := (before + after) / 2
		rd := ratioRound{RawBefore: before, RawAfter: after, WritesPerSec: l.WritesPerSec, ItemsPerSec: l.ItemsPerSec,
			OrdersPerSec: l.OrdersPerSec, P99Ms: l.Apply.Latency.P99, AuditOK: l.AuditOK, CPU: l.CPU}
		if mean > 0 {
			rd.Ratio = l.WritesPerSec / mean
			rd.ItemRatio = l.ItemsPerSec / (rawItemsPerTx * mean)
		}
		progress("  round %d: %.0f write calls/s between %.0f and %.0f raw tx/s: ratio %.2f", i, l.WritesPerSec, before, after, rd.Ratio)
		rr.Rounds = append(rr.Rounds, rd)
		before = after
	}
	rr.MedianRatio = median(rr.Rounds, func(r ratioRound) float64 { return r.Ratio })
	rr.MedianItems = median(rr.Rounds, func(r ratioRound) float64 { return r.ItemRatio })
	b.rep.Rounds = rr
	return nil
}

// freshStoreRate is the raw store rate on a fresh Dynoxide: n 2-item
// TransactWriteItems into a new table with a stream, from -store-concurrency
// clients.
func (b *benchRun) freshStoreRate(ctx context.Context, table string, n int) (bench.StoreRateResult, error) {
	dx, err := dynoxide.Start(ctx, nil)
	if err != nil {
		return bench.StoreRateResult{}, err
	}
	defer dx.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(dx.Endpoint))
	if err := bench.CreatePlainTable(ctx, ddb, table, true); err != nil {
		return bench.StoreRateResult{}, err
	}
	return bench.StoreRate(ctx, ddb, table, n, 2, b.f.storeConc, true), nil
}

// median of f over rounds (the mean of the middle two for an even count).
func median(rounds []ratioRound, f func(ratioRound) float64) float64 {
	if len(rounds) == 0 {
		return 0
	}
	v := make([]float64, len(rounds))
	for i, r := range rounds {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// roundsMarkdown is section b2.
func (b *benchRun) roundsMarkdown() string {
	rr := b.rep.Rounds
	if rr == nil || len(rr.Rounds) == 0 {
		return ""
	}
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	p("## b2) pipeline_to_store_ratio, each closed loop between raw runs")
	p("")
	p("The machine's speed drifts by tens of percent within minutes, so a closed loop compared with one raw run made minutes later measures the drift as much as the pipeline. Here each closed loop (%d clients, %d orders, fresh Dynoxide) runs between two raw runs (%d 2-item transactions with a stream, fresh Dynoxide each, as many as the closed loop wrote events); its ratio is its write calls per second ÷ the mean of the two raw rates.", b.f.concurrency, b.f.orders, b.rep.Levels[len(b.rep.Levels)-1].Audit.Events)
	p("")
	p("| round | raw before tx/s | pipeline orders/s | write calls/s | write items/s | raw after tx/s | ratio | items ratio | p99 commit → applied ms | CPU | audit |")
	p("|---|---|---|---|---|---|---|---|---|---|---|")
	for i, r := range rr.Rounds {
		p("| %d | %.0f | %.1f | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f | %s | %s |", i+1, r.RawBefore, r.OrdersPerSec, r.WritesPerSec, r.ItemsPerSec, r.RawAfter, r.Ratio, r.ItemRatio, r.P99Ms, r.CPU, map[bool]string{true: "ok", false: "FAILED"}[r.AuditOK])
	}
	p("")
	p("**Median pipeline_to_store_ratio over %d rounds = %.2f** (items: %.2f; target ≥ %.2f).", len(rr.Rounds), rr.MedianRatio, rr.MedianItems, bench.StoreRatioTarget)
	p("")
	return sb.String()
}
