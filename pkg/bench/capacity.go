package bench

import (
	"fmt"
	"math"
	"sort"
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
	// 2..1000; 0: not modelled); a consumer handles a batch's messages one
	// at a time, so it applies at most ConsumerMaxConcurrency ÷
	// ConsumerSeconds deliveries/s. BusiestConsumerPerEvent is the
	// deliveries per event of the consumer taking the most (BusiestConsumer).
	ConsumerMaxConcurrency  int     `json:"consumer_max_concurrency"`
	BusiestConsumer         string  `json:"busiest_consumer"`
	BusiestConsumerPerEvent float64 `json:"busiest_consumer_deliveries_per_event"`
	// HotItemPerEvent is the writes per event to one item every event of a
	// kind touches (the example ledger's per-currency balance: one
	// transactional update per OrderPaid, 2 WCU), against PartitionWCU. 0:
	// none.
	HotItemPerEvent float64 `json:"hot_item_wcu_per_event"`
	// USDPerMillion is the cost model's USD per million events.
	USDPerMillion float64 `json:"usd_per_million_events"`
	// Utilisation is the share of a limit a plan allows itself (0.8).
	Utilisation float64 `json:"utilisation"`
}

// Limit is one ceiling on sustained events/s.
type Limit struct {
	Name    string  `json:"name"`
	PerSec  float64 `json:"events_per_second"`
	Setting string  `json:"setting"`
	Doc     string  `json:"doc"`
}

// Limits computes every ceiling of in, lowest first.
func (in CapacityInputs) Limits() []Limit {
	div := func(a, b float64) float64 {
		if b <= 0 {
			return math.Inf(1)
		}
		return a / b
	}
	perEventConc := in.APISeconds + in.TargetsPerEvent*in.ConsumerSeconds + in.RelaySecondsPerEvent
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
	if in.ConsumerMaxConcurrency > 0 {
		ls = append(ls, Limit{fmt.Sprintf("consumer SQS event source mapping MaximumConcurrency %d, one message at a time (%s)", in.ConsumerMaxConcurrency, in.BusiestConsumer),
			div(float64(in.ConsumerMaxConcurrency), in.ConsumerSeconds*in.BusiestConsumerPerEvent),
			fmt.Sprintf("consumer MaximumConcurrency (now %d, 2..1000)", in.ConsumerMaxConcurrency), DocSQSScaling})
	}
	if in.HotItemPerEvent > 0 {
		ls = append(ls, Limit{"example app: the ledger's per-currency balance, one item (1,000 WCU/s)", div(in.PartitionWCU, in.HotItemPerEvent),
			"not a setting: split the balance item (app change)", DocPartitionLimit})
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].PerSec < ls[j].PerSec })
	return ls
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
	if c := math.Ceil(need * (in.APISeconds + in.TargetsPerEvent*in.ConsumerSeconds + in.RelaySecondsPerEvent)); c > in.LambdaConcurrency {
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
	if in.ConsumerMaxConcurrency > 0 {
		if c := int(math.Ceil(need * in.ConsumerSeconds * in.BusiestConsumerPerEvent)); c > in.ConsumerMaxConcurrency {
			if c > 1000 {
				p.Reachable = false
				p.Changes = append(p.Changes, fmt.Sprintf("consumer MaximumConcurrency %d: beyond 1000", c))
			} else {
				p.Changes = append(p.Changes, fmt.Sprintf("consumer MaximumConcurrency=%d", c))
			}
		}
	}
	if in.HotItemPerEvent > 0 && need*in.HotItemPerEvent > in.PartitionWCU {
		p.Changes = append(p.Changes, "example app: split the ledger's balance item")
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
