package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The worked example, by hand:
//
//	pending index   16 shards × 1,000 WCU/s ÷ 2 WCU/event      =   8,000 events/s  ← first limit
//	dedup table     40,000 WRU/s ÷ 4 WRU/event                  =  10,000
//	Lambda          1,000 ÷ (0.03 + 1.5 × 0.04 + 0.001 = 0.091 s) ≈ 10,989.01
//	invocations     18,750/s ÷ 1.5 targets                      =  12,500
//	outbox table    40,000 ÷ 3                                  ≈  13,333.33
//	PutEvents       10,000 calls/s × 10 entries                 = 100,000
//
// Plan for 10,000 events/s at 80 % utilisation (plan for 12,500):
// shards ⌈12,500 × 2 ÷ 1,000⌉ = 25; PutEvents 1,250 calls/s ≤ 10,000 (no
// change); invocations 18,750 ≤ 18,750 (no change); Lambda ⌈12,500 × 0.091⌉
// = 1,138 > 1,000; outbox 37,500 ≤ 40,000; dedup 50,000 > 40,000; relay per
// shard 100 ÷ 0.05 s = 2,000/s × 0.8 = 1,600 ≥ 1,000 ÷ 3 ≈ 333 (no
// ParallelizationFactor change). Cost 10,000 × 2,592,000 s × $6 ÷ 10⁶ =
// $155,520 per month.
//
// Plan for 100,000 (plan for 125,000): shards 250 (≤ 256); PutEvents
// 12,500 calls/s; invocations 187,500; Lambda 11,375; outbox 375,000; dedup
// 500,000. Cost $1,555,200 per month.
func workedExample() CapacityInputs {
	return CapacityInputs{
		Quota: RegionQuota{"us-east-1", 10000, 18750}, PartitionWCU: 1000, PendingShards: 16, MaxPendingShards: 256,
		PendingWCUPerEvent: 2, TableWRUQuota: 40000, OutboxWRUPerEvent: 3, DedupWRUPerEvent: 4,
		EntriesPerPutEvents: 10, TargetsPerEvent: 1.5, LambdaConcurrency: 1000,
		APISeconds: 0.03, ConsumerSeconds: 0.04, RelaySecondsPerEvent: 0.001,
		RelayBatch: 100, RelayInvocationSeconds: 0.05, ParallelizationFactor: 1,
		USDPerMillion: 6, Utilisation: 0.8,
	}
}

func TestCapacityLimitsWorkedExample(t *testing.T) {
	t.Parallel()
	ls := workedExample().Limits()
	want := []struct {
		prefix string
		v      float64
	}{
		{"pending index", 8000}, {"DynamoDB on-demand table quota, dedup", 10000}, {"Lambda concurrent", 10989.01},
		{"EventBridge target invocations", 12500}, {"DynamoDB on-demand table quota, outbox", 13333.33}, {"EventBridge PutEvents", 100000},
	}
	if len(ls) != len(want) {
		t.Fatalf("%d limits, want %d: %+v", len(ls), len(want), ls)
	}
	for i, w := range want {
		if !strings.HasPrefix(ls[i].Name, w.prefix) || math.Abs(ls[i].PerSec-w.v) > 0.01 {
			t.Errorf("limit %d = %q %.2f/s, want %q %.2f/s", i, ls[i].Name, ls[i].PerSec, w.prefix, w.v)
		}
		if !strings.HasPrefix(ls[i].Doc, "https://docs.aws.amazon.com/") {
			t.Errorf("limit %q cites %q, not an AWS doc", ls[i].Name, ls[i].Doc)
		}
	}
}

func TestCapacityPlanWorkedExample(t *testing.T) {
	t.Parallel()
	in := workedExample()
	for _, tc := range []struct {
		target float64
		want   string
		usd    float64
	}{
		{10000, "PENDING_SHARDS=25; Lambda concurrency ≥ 1138; dedup table WRU quota ≥ 50000/s", 155520},
		{100000, "PENDING_SHARDS=250; PutEvents quota ≥ 12500/s; invocations quota ≥ 187500/s; Lambda concurrency ≥ 11375; outbox table WRU quota ≥ 375000/s; dedup table WRU quota ≥ 500000/s", 1555200},
		{100, "none (defaults)", 1555.2},
	} {
		p := in.PlanFor(tc.target)
		if got := strings.Join(p.Changes, "; "); got != tc.want || !p.Reachable {
			t.Errorf("plan %.0f/s = %q (reachable %v), want %q", tc.target, got, p.Reachable, tc.want)
		}
		if math.Abs(p.USDPerMonth-tc.usd) > 0.01 {
			t.Errorf("plan %.0f/s costs $%.2f/month, want $%.2f", tc.target, p.USDPerMonth, tc.usd)
		}
	}
	// Past 256 shards the pending index cannot be spread further.
	if p := in.PlanFor(200000); p.Reachable {
		t.Errorf("200,000/s reachable with %v; needs 500 pending shards > 256", p.Changes)
	}
	// A slow relay needs a higher ParallelizationFactor: 100 ÷ 1 s × 0.8 =
	// 80/s per batch at a time against 333/s per shard → ⌈333.3 ÷ 80⌉ = 5.
	in.RelayInvocationSeconds = 1
	if got := strings.Join(in.PlanFor(1000).Changes, "; "); !strings.Contains(got, "ParallelizationFactor=5") {
		t.Errorf("slow relay plan %q, want ParallelizationFactor=5", got)
	}
}

// The consumer and hot-item rows, by hand, one message per invocation
// (batch size 0): MaximumConcurrency 2 ÷ (0.02 s × 1 delivery per event) =
// 100 events/s, the first limit; the ledger's balance item 1,000 WCU/s ÷ 1
// WCU per event = 1,000. For 1,000 events/s (plan for 1,250): concurrency
// ⌈1,250 × 0.02 × 1⌉ = 25; ⌈1,250 ÷ 1,000⌉ = 2 balance shards. For 100,000
// (125,000): ⌈2,500⌉ > 1,000 = MaximumConcurrency's ceiling → provisioned
// mode, ⌈2,500 ÷ 10⌉ = 250 pollers; 125 balance shards. A consumer of 0.2 s
// per delivery needs 25,000 > 20,000 (provisioned mode's ceiling):
// unreachable.
func TestCapacityConsumerConcurrencyAndHotItem(t *testing.T) {
	t.Parallel()
	in := workedExample()
	in.ConsumerMaxConcurrency, in.ConsumerSeconds, in.BusiestConsumer, in.BusiestConsumerPerEvent = 2, 0.02, "notifier", 1
	in.HotItemPerEvent = 1
	ls := in.Limits()
	if !strings.HasPrefix(ls[0].Name, "consumer SQS event source mapping MaximumConcurrency 2, 1 messages at once") || math.Abs(ls[0].PerSec-100) > 0.01 {
		t.Fatalf("first limit %q %.2f/s, want the consumer concurrency at 100/s", ls[0].Name, ls[0].PerSec)
	}
	if !strings.HasPrefix(ls[1].Name, "example app: the ledger") || math.Abs(ls[1].PerSec-1000) > 0.01 {
		t.Fatalf("second limit %q %.2f/s, want the ledger balance at 1,000/s", ls[1].Name, ls[1].PerSec)
	}
	p := in.PlanFor(1000)
	if got := strings.Join(p.Changes, "; "); got != "consumer MaximumConcurrency=25; example app: the ledger's balance in ≥ 2 write shards" || !p.Reachable {
		t.Errorf("plan 1,000/s = %q (reachable %v)", got, p.Reachable)
	}
	p = in.PlanFor(100000)
	if got := strings.Join(p.Changes, "; "); !strings.Contains(got, "consumer mappings in provisioned mode, MaximumPollers=250") || !strings.Contains(got, "≥ 125 write shards") || !p.Reachable {
		t.Errorf("plan 100,000/s = %q (reachable %v), want provisioned mode with 250 pollers and 125 balance shards", got, p.Reachable)
	}
	in.ConsumerSeconds = 0.2
	if p := in.PlanFor(100000); p.Reachable || !strings.Contains(strings.Join(p.Changes, "; "), "consumer concurrency 25000: beyond provisioned mode's 20000") {
		t.Errorf("100,000/s at 0.2 s per delivery: reachable %v with %v; needs 25,000 concurrent invokes > 20,000", p.Reachable, p.Changes)
	}
}

// A batch's messages run at once, one group per aggregate, by hand: batch
// 10, 5 aggregates per batch (each order's two events in one batch),
// 16 ms per delivery: an invocation takes 10 × 16 ÷ 5 = 32 ms, so
// MaximumConcurrency 2 applies 2 × 5 ÷ 0.016 = 625 events/s (one message at
// a time: 125). Lambda: 1,000 ÷ (0.03 + 1.5 × 0.016 ÷ 5 + 0.001 = 0.0358 s)
// ≈ 27,932.96. In flight: 120,000 ÷ 0.032 s = 3,750,000. A bound of 2
// groups at once: 2 × 2 ÷ 0.016 = 250. 4 balance shards: 4,000. Plan for
// 1,000 (1,250): concurrency ⌈1,250 × 0.016 ÷ 5⌉ = 4.
func TestCapacityConsumerProcessesBatchConcurrently(t *testing.T) {
	t.Parallel()
	in := workedExample()
	in.ConsumerMaxConcurrency, in.ConsumerSeconds, in.BusiestConsumer, in.BusiestConsumerPerEvent = 2, 0.016, "ledger", 1
	in.ConsumerBatchSize, in.ConsumerGroupsPerBatch = 10, 5
	in.HotItemPerEvent, in.HotItemShards = 1, 4
	find := func(ls []Limit, prefix string) Limit {
		t.Helper()
		for _, l := range ls {
			if strings.HasPrefix(l.Name, prefix) {
				return l
			}
		}
		t.Fatalf("no limit %q in %+v", prefix, ls)
		return Limit{}
	}
	ls := in.Limits()
	for _, w := range []struct {
		prefix string
		v      float64
	}{
		{"consumer SQS event source mapping MaximumConcurrency 2, 5 messages at once per invocation (batch 10; ledger)", 625},
		{"Lambda concurrent", 27932.96},
		{"SQS standard queue in-flight messages (about 120,000 per queue; a message is in flight for one invocation, 32 ms)", 3750000},
		{"example app: the ledger's per-currency balance, 4 write shards", 4000},
	} {
		if l := find(ls, w.prefix); math.Abs(l.PerSec-w.v) > 0.01 || !strings.HasPrefix(l.Doc, "https://docs.aws.amazon.com/") {
			t.Errorf("%q = %.2f/s (doc %s), want %.2f/s and an AWS doc", l.Name, l.PerSec, l.Doc, w.v)
		}
	}
	if got := strings.Join(in.PlanFor(1000).Changes, "; "); got != "consumer MaximumConcurrency=4" {
		t.Errorf("plan 1,000/s = %q, want consumer MaximumConcurrency=4", got)
	}
	in.ConsumerGroupConcurrency = 2
	if l := find(in.Limits(), "consumer SQS"); math.Abs(l.PerSec-250) > 0.01 {
		t.Errorf("two groups at once: %.2f/s, want 250", l.PerSec)
	}
	in.ConsumerGroupConcurrency, in.ConsumerProvisionedMaxPollers = 0, 2
	if l := find(in.Limits(), "consumer SQS event source mapping provisioned mode, MaximumPollers 2"); math.Abs(l.PerSec-2*10*5/0.016) > 0.01 {
		t.Errorf("provisioned mode, 2 pollers: %.2f/s, want %.2f", l.PerSec, 2*10*5/0.016)
	}
}

// Without measured function times (a run without the cloud-latency level)
// the Lambda and consumer ceilings are unknown: they are left out, not
// +Inf, and the limits encode as JSON (make bench wrote an empty
// bench-<ts>.json when one was +Inf).
func TestCapacityLimitsWithoutMeasuredTimesEncode(t *testing.T) {
	t.Parallel()
	in := workedExample()
	in.APISeconds, in.ConsumerSeconds, in.RelaySecondsPerEvent = 0, 0, 0
	in.ConsumerMaxConcurrency, in.ConsumerBatchSize = 2, 10
	ls := in.Limits()
	for _, l := range ls {
		if strings.HasPrefix(l.Name, "Lambda") || strings.HasPrefix(l.Name, "consumer") {
			t.Errorf("unmeasured ceiling %q = %v listed", l.Name, l.PerSec)
		}
	}
	if len(ls) != 5 {
		t.Errorf("%d limits, want the 5 measured ones: %+v", len(ls), ls)
	}
	if _, err := json.Marshal(struct {
		Limits []Limit
		Plan   Plan
	}{ls, in.PlanFor(1000)}); err != nil {
		t.Errorf("limits do not encode: %v", err)
	}
}
