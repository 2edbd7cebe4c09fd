package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
)

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
