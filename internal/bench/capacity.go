package bench

import (
	"fmt"
	"math"
	"sort"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// The capacity model: from AWS's documented limits and the calls and
// durations measured per event, the sustained events/s of a configuration,
// the first limit it hits, and what to change for a target rate.

// Documentation of every limit the model uses.
const (
	DocPartitionLimit   = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
	DocTableQuota       = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
	DocTransactionCost  = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html"
	DocEventBridgeQuota = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html"
	DocPutEventsEntries = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html"
	DocESMParams        = "https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html"
	DocLambdaQuota      = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
	DocSQSQuota         = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html"
	DocSQSScaling       = "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html"
	// DocSQSScalingConfig: MaximumConcurrency 2..1000.
	DocSQSScalingConfig = "https://docs.aws.amazon.com/lambda/latest/dg/API_ScalingConfig.html"
	// DocSQSProvisioned: provisioned mode, MinimumPollers ≥ 2, MaximumPollers
	// (SQS: default 200; the API reference says up to 2,000 in one version
	// and 10,000 in another), each poller ≈ 5 MB/s.
	DocSQSProvisioned = "https://docs.aws.amazon.com/lambda/latest/api/API_ProvisionedPollerConfig.html"
	// DocSQSProvisionedBlog: provisioned mode "up to 20,000 concurrency"
	// (AWS News Blog, 2025-11-14).
	DocSQSProvisionedBlog = "https://aws.amazon.com/blogs/aws/aws-lambda-enhances-sqs-processing-with-new-provisioned-mode-3x-faster-scaling-16x-higher-capacity"
	// DocSQSQueueQuota: about 120,000 in-flight messages per standard queue.
	DocSQSQueueQuota = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html"
	// DocSQSThroughput: standard queues, "a nearly unlimited number of API
	// calls per second, per API action".
	DocSQSThroughput = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/DistributedQueues.html"
	// DocLambdaScaling: 1,000 execution environments every 10 s per function.
	DocLambdaScaling = "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html"
)

// Documented ceilings of the consumers' SQS event source mapping.
const (
	// MaxConsumerMaxConcurrency is the largest MaximumConcurrency
	// (ScalingConfig, DocSQSScalingConfig).
	MaxConsumerMaxConcurrency = 1000
	// ProvisionedInvokesPerPoller and MaxProvisionedConcurrency: in
	// provisioned mode each event poller runs up to
	// config.SQSProvisionedInvokesPerPoller (10) concurrent invokes (the
	// shared constant infra/outboxcdk sizes pollers with), up to 20,000 per
	// mapping (DocSQSProvisionedBlog; AWS's scaling page says "up to 16
	// times higher processing capacity" than standard mode's 1,250). The
	// 20,000 is not confirmed on an API reference page.
	ProvisionedInvokesPerPoller = config.SQSProvisionedInvokesPerPoller
	MaxProvisionedConcurrency   = 20000
	// SQSInFlightPerQueue is a standard queue's in-flight message quota
	// (about 120,000; DocSQSQueueQuota).
	SQSInFlightPerQueue = 120000
)

// RegionQuota is EventBridge's default PutEvents and target-invocation
// throttle of one region (transactions per second, adjustable; account-wide
// per region), from the EventBridge quotas page (DocEventBridgeQuota).
type RegionQuota struct {
	Region         string  `json:"region"`
	PutEventsTPS   float64 `json:"putevents_tps"`
	InvocationsTPS float64 `json:"invocations_tps"`
}

// EventBridgeQuotas are the default quotas of a few regions (the quota page
// lists more; 400 PutEvents/s and 1,100 invocations/s is the smallest
// tier).
var EventBridgeQuotas = []RegionQuota{
	{"us-east-1", 10000, 18750},
	{"eu-west-1", 10000, 18750},
	{"us-east-2", 2400, 4500},
	{"eu-west-2", 1200, 2250},
	{"other (smallest tier)", 400, 1100},
}

// CapacityInputs are the limits and the measured per-event figures.
type CapacityInputs struct {
	Quota RegionQuota `json:"eventbridge_quota"`
	// PartitionWCU is one partition's write ceiling (1,000 WCU/s).
	PartitionWCU float64 `json:"partition_wcu_per_second"`
	// PendingShards is the pending index's partition-key spread (the
	// outbox's PendingShards, default 16, at most MaxPendingShards); each
	// shard value is one hot key, and the index's sort key (created_at)
	// grows, so a split for heat does not spread it.
	PendingShards    int `json:"pending_shards"`
	MaxPendingShards int `json:"max_pending_shards"`
	// PendingWCUPerEvent is the pending index's writes per event: the
	// entry appears with the outbox record and goes when it is marked
	// published (2 for records ≤ 1 KB, projection ALL).
	PendingWCUPerEvent float64 `json:"pending_wcu_per_event"`
	// TableWRUQuota is the on-demand per-table quota (40,000 WRU/s);
	// OutboxWRUPerEvent and DedupWRUPerEvent the outbox and dedup tables'
	// write units per event (transactional writes count twice).
	TableWRUQuota     float64 `json:"table_wru_quota"`
	OutboxWRUPerEvent float64 `json:"outbox_wru_per_event"`
	DedupWRUPerEvent  float64 `json:"dedup_wru_per_event"`
	// EntriesPerPutEvents is the mean entries per PutEvents call measured
	// (≤ 10); TargetsPerEvent the rule targets each event matched.
	EntriesPerPutEvents float64 `json:"entries_per_putevents"`
	TargetsPerEvent     float64 `json:"targets_per_event"`
	// LambdaConcurrency is the regional concurrency quota (1,000);
	// APISeconds, ConsumerSeconds and RelaySecondsPerEvent are the
	// function-seconds one event costs the API (one command), each target
	// consumer, and the relay (its invocation time ÷ records per
	// invocation).
	LambdaConcurrency    float64 `json:"lambda_concurrency"`
	APISeconds           float64 `json:"api_seconds_per_event"`
	ConsumerSeconds      float64 `json:"consumer_seconds_per_delivery"`
	RelaySecondsPerEvent float64 `json:"relay_seconds_per_event"`
	// RelayBatch and RelayInvocationSeconds give one stream shard's relay
	// rate (RelayBatch records per invocation, ParallelizationFactor
	// invocations at a time, 1..10).
	RelayBatch             float64 `json:"relay_batch"`
	RelayInvocationSeconds float64 `json:"relay_invocation_seconds"`
	ParallelizationFactor  int     `json:"parallelization_factor"`
	// ConsumerMaxConcurrency is each consumer's SQS event source mapping
	// MaximumConcurrency (the stack's config.DefaultConsumerMaxConcurrency,
	// 2..1000; 0: not modelled). ConsumerProvisionedMaxPollers, when > 0,
	// models the mapping in provisioned mode instead (the two exclude each
	// other): at most ProvisionedInvokesPerPoller invokes per poller.
	// BusiestConsumerPerEvent is the deliveries per event of the consumer
	// taking the most (BusiestConsumer).
	ConsumerMaxConcurrency        int     `json:"consumer_max_concurrency"`
	ConsumerProvisionedMaxPollers int     `json:"consumer_provisioned_max_pollers,omitempty"`
	BusiestConsumer               string  `json:"busiest_consumer"`
	BusiestConsumerPerEvent       float64 `json:"busiest_consumer_deliveries_per_event"`
	// ConsumerBatchSize is the mapping's BatchSize N (the stack's
	// config.DefaultConsumerBatchSize; 0 or 1: one message per
	// invocation). A consumer processes a batch's messages grouped by
	// aggregate, each group in sequence, groups at once (pkg/sqsconsumer),
	// so an invocation of N messages takes the time of its messages ÷
	// ConsumerParallel() = min(N, ConsumerGroupsPerBatch,
	// ConsumerGroupConcurrency) rather than their sum: an assumption (the
	// groups' messages take equal time and the function's CPU does not
	// bind; DynamoDB round trips dominate a delivery).
	// ConsumerGroupsPerBatch is the distinct aggregates expected among a
	// batch's N messages (0: N); ConsumerGroupConcurrency bounds the
	// groups run at once (0: no bound).
	ConsumerBatchSize        int     `json:"consumer_batch_size"`
	ConsumerGroupsPerBatch   float64 `json:"consumer_groups_per_batch"`
	ConsumerGroupConcurrency int     `json:"consumer_group_concurrency,omitempty"`
	// HotItemPerEvent is the writes per event to one item every event of a
	// kind touches (the example ledger's per-currency balance: one
	// transactional update per OrderPaid, 2 WCU), against PartitionWCU,
	// spread over HotItemShards write shards (0 or 1: one item). 0: none.
	HotItemPerEvent float64 `json:"hot_item_wcu_per_event"`
	HotItemShards   int     `json:"hot_item_shards,omitempty"`
	// USDPerMillion is the cost model's USD per million events.
	USDPerMillion float64 `json:"usd_per_million_events"`
	// Utilisation is the share of a limit a plan allows itself (0.8).
	Utilisation float64 `json:"utilisation"`
}

// ConsumerParallel is the messages a consumer invocation processes at
// once: min(batch size, groups per batch, group bound), at least 1.
func (in CapacityInputs) ConsumerParallel() float64 {
	n := float64(max(in.ConsumerBatchSize, 1))
	p := n
	if in.ConsumerGroupsPerBatch > 0 {
		p = min(p, in.ConsumerGroupsPerBatch)
	}
	if in.ConsumerGroupConcurrency > 0 {
		p = min(p, float64(in.ConsumerGroupConcurrency))
	}
	return max(p, 1)
}

// ConsumerInvocationSeconds is one consumer invocation's time for a full
// batch: N deliveries × ConsumerSeconds ÷ ConsumerParallel().
func (in CapacityInputs) ConsumerInvocationSeconds() float64 {
	return float64(max(in.ConsumerBatchSize, 1)) * in.ConsumerSeconds / in.ConsumerParallel()
}

// consumerConcurrency is the mapping's concurrency ceiling of the
// configuration, and how it is set.
func (in CapacityInputs) consumerConcurrency() (float64, string) {
	if in.ConsumerProvisionedMaxPollers > 0 {
		c := min(in.ConsumerProvisionedMaxPollers*ProvisionedInvokesPerPoller, MaxProvisionedConcurrency)
		return float64(c), fmt.Sprintf("provisioned mode, MaximumPollers %d (× %d invokes)", in.ConsumerProvisionedMaxPollers, ProvisionedInvokesPerPoller)
	}
	return float64(in.ConsumerMaxConcurrency), fmt.Sprintf("MaximumConcurrency %d", in.ConsumerMaxConcurrency)
}

// lambdaSecondsPerEvent is the Lambda concurrency one event per second
// holds: the API, each target consumer (its share of an invocation that
// processes ConsumerParallel() messages at once), the relay.
func (in CapacityInputs) lambdaSecondsPerEvent() float64 {
	return in.APISeconds + in.TargetsPerEvent*in.ConsumerSeconds/in.ConsumerParallel() + in.RelaySecondsPerEvent
}

// Limit is one ceiling on sustained events/s.
type Limit struct {
	Name    string  `json:"name"`
	PerSec  float64 `json:"events_per_second"`
	Setting string  `json:"setting"`
	Doc     string  `json:"doc"`
}

// Limits computes every ceiling of in, lowest first. A ceiling whose
// per-event figure is 0 (not measured) is left out.
func (in CapacityInputs) Limits() []Limit {
	div := func(a, b float64) float64 {
		if b <= 0 {
			return math.Inf(1)
		}
		return a / b
	}
	perEventConc := in.lambdaSecondsPerEvent()
	ls := []Limit{
		{"pending index: one partition-key value per shard, 1,000 WCU/s each", div(float64(in.PendingShards)*in.PartitionWCU, in.PendingWCUPerEvent),
			fmt.Sprintf("PENDING_SHARDS (now %d, at most %d)", in.PendingShards, in.MaxPendingShards), DocPartitionLimit},
		{"EventBridge PutEvents quota, " + in.Quota.Region, in.Quota.PutEventsTPS * in.EntriesPerPutEvents,
			fmt.Sprintf("PutEvents TPS quota (now %.0f/s, adjustable)", in.Quota.PutEventsTPS), DocEventBridgeQuota},
		{"EventBridge target invocations quota, " + in.Quota.Region, div(in.Quota.InvocationsTPS, in.TargetsPerEvent),
			fmt.Sprintf("invocations TPS quota (now %.0f/s, adjustable)", in.Quota.InvocationsTPS), DocEventBridgeQuota},
		{"Lambda concurrent executions (API + consumers + relay)", div(in.LambdaConcurrency, perEventConc),
			fmt.Sprintf("concurrency quota (now %.0f, adjustable)", in.LambdaConcurrency), DocLambdaQuota},
		{"DynamoDB on-demand table quota, outbox table", div(in.TableWRUQuota, in.OutboxWRUPerEvent),
			fmt.Sprintf("table WRU quota (now %.0f/s, adjustable)", in.TableWRUQuota), DocTableQuota},
		{"DynamoDB on-demand table quota, dedup table", div(in.TableWRUQuota, in.DedupWRUPerEvent),
			fmt.Sprintf("table WRU quota (now %.0f/s, adjustable)", in.TableWRUQuota), DocTableQuota},
	}
	if conc, how := in.consumerConcurrency(); conc > 0 {
		par := in.ConsumerParallel()
		ls = append(ls, Limit{fmt.Sprintf("consumer SQS event source mapping %s, %s messages at once per invocation (batch %d; %s)",
			how, fmtNum(par), max(in.ConsumerBatchSize, 1), in.BusiestConsumer),
			div(conc*par, in.ConsumerSeconds*in.BusiestConsumerPerEvent),
			fmt.Sprintf("consumer MaximumConcurrency (now %d, 2..%d) or provisioned mode (≤ %d concurrent invokes)", in.ConsumerMaxConcurrency, MaxConsumerMaxConcurrency, MaxProvisionedConcurrency), DocSQSScaling})
		if inv := in.ConsumerInvocationSeconds(); inv > 0 {
			ls = append(ls, Limit{fmt.Sprintf("SQS standard queue in-flight messages (about %s per queue; a message is in flight for one invocation, %.0f ms)", fmtNum(SQSInFlightPerQueue), inv*1000),
				div(SQSInFlightPerQueue, inv*in.BusiestConsumerPerEvent), "one queue per consumer (split a consumer's queue)", DocSQSQueueQuota})
		}
	}
	if in.HotItemPerEvent > 0 {
		shards := max(in.HotItemShards, 1)
		name := "example app: the ledger's per-currency balance, one item (1,000 WCU/s)"
		if shards > 1 {
			name = fmt.Sprintf("example app: the ledger's per-currency balance, %d write shards (1,000 WCU/s each)", shards)
		}
		ls = append(ls, Limit{name, div(float64(shards)*in.PartitionWCU, in.HotItemPerEvent),
			"not a setting: more balance write shards (app change)", DocPartitionLimit})
	}
	// A ceiling whose per-event cost was not measured (0: no cloud-latency
	// level) is not a limit the model knows: left out, never +Inf (which
	// JSON cannot carry).
	out := ls[:0]
	for _, l := range ls {
		if !math.IsInf(l.PerSec, 0) && !math.IsNaN(l.PerSec) {
			out = append(out, l)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PerSec < out[j].PerSec })
	return out
}

// ShardCheck compares one stream shard's relay rate with the most events a
// shard can receive (its partition's write ceiling ÷ the outbox WRU per
// event): the relay keeps up with any load DynamoDB accepts when the first
// is the larger.
func (in CapacityInputs) ShardCheck() (relayPerShard, inflowPerShard float64) {
	if in.RelayInvocationSeconds > 0 {
		relayPerShard = float64(max(in.ParallelizationFactor, 1)) * in.RelayBatch / in.RelayInvocationSeconds
	}
	if in.OutboxWRUPerEvent > 0 {
		inflowPerShard = in.PartitionWCU / in.OutboxWRUPerEvent
	}
	return
}

// Plan is what one target rate needs.
type Plan struct {
	Target    float64  `json:"events_per_second"`
	Changes   []string `json:"changes"`
	Reachable bool     `json:"reachable"`
	// USDPerMonth is the cost model at Target for 30 days.
	USDPerMonth float64 `json:"usd_per_month"`
}

// SecondsPerMonth is 30 days.
const SecondsPerMonth = 30 * 24 * 3600

// PlanFor returns the settings to change (each limit kept at Utilisation or
// below) to sustain target events/s, and the monthly cost.
func (in CapacityInputs) PlanFor(target float64) Plan {
	u := in.Utilisation
	if u <= 0 || u > 1 {
		u = 1
	}
	p := Plan{Target: target, Reachable: true, USDPerMonth: math.Round(target*SecondsPerMonth*in.USDPerMillion/1e6*100) / 100}
	need := target / u
	if s := int(math.Ceil(need * in.PendingWCUPerEvent / in.PartitionWCU)); s > in.PendingShards {
		if s > in.MaxPendingShards {
			p.Reachable = false
			p.Changes = append(p.Changes, fmt.Sprintf("PENDING_SHARDS %d: beyond the maximum %d", s, in.MaxPendingShards))
		} else {
			p.Changes = append(p.Changes, fmt.Sprintf("PENDING_SHARDS=%d", s))
		}
	}
	if q := math.Ceil(need / in.EntriesPerPutEvents); q > in.Quota.PutEventsTPS {
		p.Changes = append(p.Changes, fmt.Sprintf("PutEvents quota ≥ %.0f/s", q))
	}
	if q := math.Ceil(need * in.TargetsPerEvent); q > in.Quota.InvocationsTPS {
		p.Changes = append(p.Changes, fmt.Sprintf("invocations quota ≥ %.0f/s", q))
	}
	if c := math.Ceil(need * in.lambdaSecondsPerEvent()); c > in.LambdaConcurrency {
		p.Changes = append(p.Changes, fmt.Sprintf("Lambda concurrency ≥ %.0f", c))
	}
	for _, t := range []struct {
		name string
		wru  float64
	}{{"outbox", in.OutboxWRUPerEvent}, {"dedup", in.DedupWRUPerEvent}} {
		if w := math.Ceil(need * t.wru); w > in.TableWRUQuota {
			p.Changes = append(p.Changes, fmt.Sprintf("%s table WRU quota ≥ %.0f/s", t.name, w))
		}
	}
	if conc, _ := in.consumerConcurrency(); conc > 0 {
		c := int(math.Ceil(need * in.ConsumerSeconds * in.BusiestConsumerPerEvent / in.ConsumerParallel()))
		switch {
		case float64(c) <= conc:
		case c <= MaxConsumerMaxConcurrency && in.ConsumerProvisionedMaxPollers == 0:
			p.Changes = append(p.Changes, fmt.Sprintf("consumer MaximumConcurrency=%d", c))
		case c <= MaxProvisionedConcurrency:
			p.Changes = append(p.Changes, fmt.Sprintf("consumer mappings in provisioned mode, MaximumPollers=%d", (c+ProvisionedInvokesPerPoller-1)/ProvisionedInvokesPerPoller))
		default:
			p.Reachable = false
			p.Changes = append(p.Changes, fmt.Sprintf("consumer concurrency %d: beyond provisioned mode's %d", c, MaxProvisionedConcurrency))
		}
	}
	if in.HotItemPerEvent > 0 {
		if s := int(math.Ceil(need * in.HotItemPerEvent / in.PartitionWCU)); s > max(in.HotItemShards, 1) {
			p.Changes = append(p.Changes, fmt.Sprintf("example app: the ledger's balance in ≥ %d write shards", s))
		}
	}
	// One stream shard takes at most its partition's write ceiling (and at
	// most the whole load): the relay of a shard must keep up with that.
	relay, inflow := in.ShardCheck()
	inflow = min(inflow, need)
	if relay > 0 && relay*u < inflow {
		pf := int(math.Ceil(inflow / (relay * u / float64(max(in.ParallelizationFactor, 1)))))
		if pf > 10 {
			p.Reachable = false
			p.Changes = append(p.Changes, fmt.Sprintf("ParallelizationFactor %d: beyond 10", pf))
		} else if pf > in.ParallelizationFactor {
			p.Changes = append(p.Changes, fmt.Sprintf("ParallelizationFactor=%d", pf))
		}
	}
	if len(p.Changes) == 0 {
		p.Changes = []string{"none (defaults)"}
	}
	return p
}

// fmtNum prints v without a fraction when it is whole, with thousands
// separators ("1,250", "2.5").
func fmtNum(v float64) string {
	if v != math.Trunc(v) {
		return fmt.Sprintf("%.1f", v)
	}
	str := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range str {
		if i > 0 && (len(str)-i)%3 == 0 && str[i-1] != '-' {
			out = append(out, ',')
		}
		out = append(out, str[i])
	}
	return string(out)
}
