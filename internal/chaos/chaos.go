// Package chaos is the seeded fault-injection audit of the local stack: it
// drives orders through the real HTTP API while internal/faults injects failures
// at every boundary (DynamoDB and Streams calls through SDK middleware,
// PutEvents and the parked-records queue through their narrow interfaces,
// relay and consumer crashes, poller restarts, the reconciler racing the
// relay), lets the pipeline drain, and audits the tables (devstack.Audit).
//
// Dynoxide's cost per stream write grows with the stream's length, so a long
// run is split into epochs, each on a fresh server with its own seed
// (Seed*1_000_003 + epoch): a failing epoch replays alone with -epoch.
package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Config shapes a chaos run. Zero values take the defaults.
type Config struct {
	// Orders is the total number of orders (default 10,000).
	Orders int
	// EpochOrders is the number of orders per epoch, each on a fresh
	// Dynoxide (default 500).
	EpochOrders int
	// Concurrency is the number of concurrent HTTP clients (default 8).
	Concurrency int
	// Seed makes the run reproducible (default 1).
	Seed int64
	// Rate is the probability of each fault kind at every boundary
	// (default 0.05). EntryPermanent (an event EventBridge rejects for good,
	// which is parked) defaults to Rate/100.
	Rate float64
	// OnlyEpoch, when >= 0, runs that single epoch (to replay a failure).
	OnlyEpoch int
	// NaiveProvider runs the fulfilment provider in the mode that ignores
	// Idempotency-Key: duplicates then appear, and each must trace to the
	// one documented window (the provider acted, the consumer never wrote
	// COMPLETED): an injected crash before COMPLETED, or a provider answer
	// that never reached the consumer (an injected timeout after acting,
	// or the consumer's own deadline cutting the call).
	NaiveProvider bool
	// DrainTimeout bounds the drain of one epoch (default 6 minutes).
	DrainTimeout time.Duration
	// Endpoint uses a running DynamoDB-compatible server instead of a fresh
	// Dynoxide per epoch (tables get a per-epoch prefix).
	Endpoint string
	// Progress, when set, receives a line per epoch and while driving.
	Progress func(string)
	// Logger receives the components' logs (default: discarded).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Orders == 0 {
		c.Orders = 10000
	}
	if c.EpochOrders == 0 {
		c.EpochOrders = 500
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Rate == 0 {
		c.Rate = 0.05
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 6 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Report sums every epoch.
type Report struct {
	Epochs             int
	Orders             int
	Committed          int
	Events             int
	Published          int
	Pending            int
	Parked             int
	Lost               int
	Ghost              int
	DoubleApplied      int
	DuplicatesAbsorbed int64
	LedgerApplied      int
	Notifications      int
	// Client-side view: acknowledged changes and ambiguous answers.
	Acked, Ambiguous, Conflicts, Unexpected int64
	// Pipeline counters.
	PollerRestarts  int
	ESMRetries      int64
	ESMDiscarded    int64 // batches sent to the on-failure destination (records stay pending)
	BusRetries      int64
	BusDeadLettered int64
	// DeadLettered counts events that reached a consumer DLQ (redrive
	// policy or a permanent error); Redriven those moved back by the
	// audit's redrive. ConsumerTimeouts counts consumer invocations that
	// overran their function timeout; ConsumerRedeliveries messages
	// received again after a failed, timed-out or partial invocation.
	DeadLettered int
	Redriven     int
	// Shipments, ShipmentDuplicates and ShipmentsMissing are the fulfilment
	// provider's audit (internal/devstack AuditShipments; missing counts open
	// shipments of paid cancellations too). With NaiveProvider, each
	// duplicate is traced: to an injected crash before COMPLETED, to a
	// provider answer lost after it acted, or untraced (a failure).
	Shipments, ShipmentDuplicates, ShipmentsMissing                                                      int
	DuplicatesFromCrashes, DuplicatesFromLateAnswers, DuplicatesFromFailedCompletion, DuplicatesUntraced int
	// AppliedOutOfOrder counts events an ordered consumer certainly
	// committed after a later event of the same aggregate, by the commit
	// witness on the SDK stack (order_witness.go; OrderedCommitsWitnessed
	// is how many ordered transactions it saw commit);
	// SequenceGapsDeadLettered the events dead-lettered with reason
	// sequence_gap (and redriven by the audit), each traced to the event it
	// waited for: parked by the relay (SequenceGapsToParked), dead-lettered
	// by the same consumer (SequenceGapsToDeadLettered), or on its way and
	// applied after the gap was dead-lettered (SequenceGapsClosedLate: the
	// hold bound, scaled down to seconds in chaos, was shorter than its
	// delay). SequenceGapsUntraced counts the rest, a failure.
	AppliedOutOfOrder, SequenceGapsDeadLettered, OrderedCommitsWitnessed                           int
	SequenceGapsToParked, SequenceGapsToDeadLettered, SequenceGapsClosedLate, SequenceGapsUntraced int
	// ParkedRedriven counts parked records the audit redrove because a
	// later event of their aggregate exists (an ordered consumer holds it).
	ParkedRedriven int
	// Buffered counts events an ordered consumer stored in its resequencer
	// buffer because they arrived before their predecessor (witnessed on
	// the SDK stack), BufferDrained those applied from it right after
	// their predecessor, StillBuffered those left waiting after the audit
	// (each is an event not applied: a failure), LongestBufferedWait the
	// longest wait and BufferAlarms the waits past the
	// OldestBufferedAgeSeconds alarm's threshold (config.DefaultBufferedAgeAlarm).
	Buffered, BufferDrained, StillBuffered, BufferAlarms int
	LongestBufferedWait                                  time.Duration
	// HostileWritten counts legacy changes committed with text SQS refuses
	// (HostileReasons); each must end parked.
	HostileWritten       int
	ConsumerTimeouts     int64
	ConsumerRedeliveries int64
	ReconcilerResends    int
	ParkedMessages       int // messages on the parked-records DLQ
	// Faults counts injected faults by kind, over all epochs.
	Faults map[faults.Kind]int64
	// Problems are the audit's findings (first 20).
	Problems []string
	// FailedEpochs lists epochs whose audit failed.
	FailedEpochs []int
	Elapsed      time.Duration
}

// OK reports whether every promise held in every epoch.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Ghost == 0 && r.DoubleApplied == 0 && r.Pending == 0 && r.DeadLettered == r.Redriven &&
		r.ShipmentsMissing == 0 && r.DuplicatesUntraced == 0 && r.AppliedOutOfOrder == 0 && r.SequenceGapsUntraced == 0 && len(r.FailedEpochs) == 0 &&
		r.SequenceGapsDeadLettered == 0 && r.StillBuffered == 0
}

// Summary is the one-line result of make chaos.
func (r Report) Summary() string {
	return fmt.Sprintf("orders=%d committed=%d events=%d published=%d lost=%d ghost=%d double_applied=%d duplicates_absorbed=%d parked=%d dead_lettered=%d redriven=%d shipments=%d shipment_duplicates=%d shipments_missing=%d ordered_commits_witnessed=%d applied_out_of_order=%d sequence_gaps_dead_lettered=%d buffered=%d drained=%d still_buffered=%d gap_alarms=%d",
		r.Orders, r.Committed, r.Events, r.Published, r.Lost, r.Ghost, r.DoubleApplied, r.DuplicatesAbsorbed, r.Parked, r.DeadLettered, r.Redriven,
		r.Shipments, r.ShipmentDuplicates, r.ShipmentsMissing, r.OrderedCommitsWitnessed, r.AppliedOutOfOrder, r.SequenceGapsDeadLettered,
		r.Buffered, r.BufferDrained, r.StillBuffered, r.BufferAlarms)
}

// Table renders the per-kind fault counts and pipeline counters.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %10s\n", "injected fault", "count")
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-28s %10d\n", k, r.Faults[faults.Kind(k)])
	}
	fmt.Fprintf(&b, "\n%-28s %10s\n", "pipeline", "count")
	rows := []struct {
		name string
		v    int64
	}{
		{"epochs", int64(r.Epochs)},
		{"orders", int64(r.Orders)},
		{"committed changes", int64(r.Committed)},
		{"client-acknowledged", r.Acked},
		{"client ambiguous answers", r.Ambiguous},
		{"client 409 conflicts", r.Conflicts},
		{"outbox events", int64(r.Events)},
		{"published", int64(r.Published)},
		{"parked (DLQ + counted)", int64(r.Parked)},
		{"parked DLQ messages", int64(r.ParkedMessages)},
		{"parked redriven (held others)", int64(r.ParkedRedriven)},
		{"pending after drain", int64(r.Pending)},
		{"ledger entries", int64(r.LedgerApplied)},
		{"notifications", int64(r.Notifications)},
		{"duplicates absorbed", r.DuplicatesAbsorbed},
		{"ESM retries", r.ESMRetries},
		{"ESM batches to on-failure", r.ESMDiscarded},
		{"poller restarts", int64(r.PollerRestarts)},
		{"bus delivery retries", r.BusRetries},
		{"bus dead letters", r.BusDeadLettered},
		{"legacy hostile-text changes", int64(r.HostileWritten)},
		{"ordered commits witnessed", int64(r.OrderedCommitsWitnessed)},
		{"early events buffered", int64(r.Buffered)},
		{"  applied after their predecessor", int64(r.BufferDrained)},
		{"  still buffered after the audit", int64(r.StillBuffered)},
		{"  longest wait (ms)", r.LongestBufferedWait.Milliseconds()},
		{"  waits past the gap alarm", int64(r.BufferAlarms)},
		{"applied out of order", int64(r.AppliedOutOfOrder)},
		{"sequence gaps dead-lettered", int64(r.SequenceGapsDeadLettered)},
		{"  waiting for a parked event", int64(r.SequenceGapsToParked)},
		{"  waiting for a dead letter", int64(r.SequenceGapsToDeadLettered)},
		{"  missing one applied later", int64(r.SequenceGapsClosedLate)},
		{"  untraced", int64(r.SequenceGapsUntraced)},
		{"shipments", int64(r.Shipments)},
		{"shipment duplicates", int64(r.ShipmentDuplicates)},
		{"  from crashes before COMPLETED", int64(r.DuplicatesFromCrashes)},
		{"  from answers lost after acting", int64(r.DuplicatesFromLateAnswers)},
		{"  from answered, not completed", int64(r.DuplicatesFromFailedCompletion)},
		{"  untraced", int64(r.DuplicatesUntraced)},
		{"shipments missing", int64(r.ShipmentsMissing)},
		{"consumer dead-lettered", int64(r.DeadLettered)},
		{"consumer DLQ redriven", int64(r.Redriven)},
		{"consumer timeouts", r.ConsumerTimeouts},
		{"consumer redeliveries", r.ConsumerRedeliveries},
		{"reconciler re-sends", int64(r.ReconcilerResends)},
		{"lost", int64(r.Lost)},
		{"ghost", int64(r.Ghost)},
		{"double applied", int64(r.DoubleApplied)},
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "%-28s %10d\n", row.name, row.v)
	}
	return b.String()
}

// EpochSeed is the fault and scenario seed of one epoch.
func EpochSeed(seed int64, epoch int) int64 { return seed*1_000_003 + int64(epoch) }

// Run runs every epoch (or only Config.OnlyEpoch) and returns the summed
// report. It returns an error only when the stack cannot run; broken
// promises are in the report (Report.OK).
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.setDefaults()
	start := time.Now()
	rep := Report{Faults: map[faults.Kind]int64{}}
	epochs := (cfg.Orders + cfg.EpochOrders - 1) / cfg.EpochOrders
	for e := 0; e < epochs; e++ {
		if cfg.OnlyEpoch >= 0 && e != cfg.OnlyEpoch {
			continue
		}
		n := cfg.EpochOrders
		if rest := cfg.Orders - e*cfg.EpochOrders; rest < n {
			n = rest
		}
		if err := runEpoch(ctx, cfg, e, n, &rep); err != nil {
			return rep, fmt.Errorf("chaos: epoch %d (seed %d): %w", e, EpochSeed(cfg.Seed, e), err)
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func runEpoch(ctx context.Context, cfg Config, epoch, orders int, rep *Report) error {
	seed := EpochSeed(cfg.Seed, epoch)
	inj, err := faults.New(faults.Config{Seed: seed, Rate: cfg.Rate})
	if err != nil {
		return err
	}
	epochStart := time.Now()
	metrics := &emfCounter{}
	applied := &applyCounter{n: map[string]int64{}}
	crashes := &keySet{m: map[string]bool{}}
	witness := newOrderWitness()
	s, err := devstack.Start(ctx, devstack.Options{
		Metrics:  metrics,
		Endpoint: cfg.Endpoint,
		Prefix:   fmt.Sprintf("chaos%d", epoch),
		Logger:   cfg.Logger,
		AWSConfig: func(c *aws.Config) {
			c.APIOptions = append(c.APIOptions, inj.Middleware())
			witness.apply(c) // after the faults: inside them
			// A fault storm empties the SDK's retry token bucket ("retry quota
			// exceeded"); production sees far fewer faults.
			c.Retryer = func() aws.Retryer {
				return retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None })
			}
		},
		WrapEventBridge:     func(eb relay.EventBridgeAPI) relay.EventBridgeAPI { return inj.EventBridge(eb) },
		WrapQueue:           func(q relay.QueueSender) relay.QueueSender { return inj.Queue(q) },
		WrapStream:          func(h localrt.StreamHandler) localrt.StreamHandler { return inj.StreamHandler(h) },
		ConsumerInterceptor: applied.wrap(inj.Interceptor()),
		// The bus delivers some events late, so later events of an order
		// overtake them (EventBridge does not order deliveries).
		WrapQueueTarget: inj.Reorder,
		WrapConsumer:    inj.SQSHandler,
		// EventBridge retries a target for up to 24 h and 185 attempts.
		BusTargetMaxAttempts: 40,
		// The fulfilment provider fails, throttles, resets, answers late
		// after acting and slows down at the fault rate; the consumer dies
		// between the provider's answer and COMPLETED.
		Provider: provider.Config{IgnoreIdempotencyKey: cfg.NaiveProvider, HoldFor: 2 * time.Second, Faults: provider.FaultConfig{
			Seed: uint64(seed), ServerError: cfg.Rate / 2, Throttle: cfg.Rate / 2, Reset: cfg.Rate / 2, //nolint:gosec // G115: the seed's bits, reinterpreted on purpose
			TimeoutAfterAct: cfg.Rate / 4, Latency: cfg.Rate, LatencyBy: 50 * time.Millisecond,
		}},
		TuneFulfilment: func(c *fulfilment.Config) {
			c.Idempotency.BeforeComplete = func(ctx context.Context, key string) error {
				if inj.Chance("fulfilment.before_complete", faults.CrashBeforeComplete) {
					crashes.add(key)
					return &faults.Error{Kind: faults.CrashBeforeComplete, Boundary: "fulfilment.before_complete", Code: "InjectedCrash"}
				}
				return nil
			}
		},
		// Consumer delivery scaled down so that an outage reaches the DLQ in
		// seconds: 1 s function timeout, 2 s visibility timeout (Lambda
		// requires visibility >= function timeout; AWS advises 6x, which the
		// CDK stack uses), 3 receives before the DLQ.
		ConsumerFunctionTimeout:   ConsumerFunctionTimeout,
		ConsumerVisibilityTimeout: ConsumerVisibilityTimeout,
		ConsumerMaxReceiveCount:   ConsumerMaxReceiveCount,
		// A short relay: 2 s retry budget, 1 s calls, and the shortest
		// function timeout that holds them (relay.MinFunctionTimeout, 6 s),
		// so that stalled marking (SlowCall) pushes it against its deadline
		// budget.
		RelayRetryBudget:     RelayRetryBudget,
		RelayCallTimeout:     RelayCallTimeout,
		RelayFunctionTimeout: RelayFunctionTimeout,
		// The reconciler races the relay on purpose: records older than 1 s
		// are re-sent every 500 ms while the relay may be publishing them.
		ReconcileEvery: 500 * time.Millisecond,
		ReconcileAfter: time.Second,
		PollInterval:   20 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer s.Close()

	// Poller restarts from the checkpoint, at the fault rate per 200 ms tick.
	restartCtx, stopRestarts := context.WithCancel(ctx)
	restarts := make(chan int, 1)
	go func() {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed)) //nolint:gosec // G115: the seed's bits, reinterpreted on purpose
		n := 0
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		defer func() { restarts <- n }()
		for {
			select {
			case <-restartCtx.Done():
				return
			case <-t.C:
				if rng.Float64() < cfg.Rate {
					if _, err := s.RestartPoller(); err == nil {
						n++
						inj.Record(faults.BoundaryPoller, faults.PollerRestart, "restart from checkpoint")
					}
				}
			}
		}
	}()

	driveStart := time.Now()
	drive := devstack.Drive(ctx, s.URL, devstack.DriveOptions{
		Orders: orders, Concurrency: cfg.Concurrency, Seed: uint64(seed), Logger: cfg.Logger, //nolint:gosec // G115: the seed's bits, reinterpreted on purpose
	})
	stopRestarts()
	rep.PollerRestarts += <-restarts
	hostile, err := writeLegacyCancels(ctx, s)
	if err != nil {
		return err
	}
	rep.HostileWritten += hostile

	dctx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
	defer cancel()
	driveTime := time.Since(driveStart)
	drainStart := time.Now()
	a, dl, err := drainRedriveAndAudit(dctx, s, inj)
	drainTime := time.Since(drainStart)
	if err != nil {
		return err
	}
	rep.DeadLettered += dl.deadLettered
	rep.Redriven += dl.redriven
	gt := traceGaps(dl.letters, dl.parked, stackLastApplied(dctx, s))
	rep.ParkedRedriven += dl.parkedRedriven
	rep.SequenceGapsDeadLettered += gt.gaps
	rep.SequenceGapsToParked += gt.toParked
	rep.SequenceGapsToDeadLettered += gt.toDeadLettered
	rep.SequenceGapsClosedLate += gt.closedLate
	rep.SequenceGapsUntraced += len(gt.problems)
	a.Problems = append(a.Problems, gt.problems...)
	buffered, drained, longest, alarms := witness.bufferStats(config.DefaultBufferedAgeAlarm)
	rep.Buffered += buffered
	rep.BufferDrained += drained
	rep.BufferAlarms += alarms
	rep.LongestBufferedWait = max(rep.LongestBufferedWait, longest)
	still, err := listBuffered(dctx, s)
	if err != nil {
		return err
	}
	for name, b := range still {
		rep.StillBuffered += len(b)
		for _, e := range b {
			if len(a.Problems) < 20 {
				a.Problems = append(a.Problems, fmt.Sprintf("%s: event %s (sequence %d of %s %s) still waits in the buffer", name, e.EventID, e.Sequence, e.AggregateType, e.AggregateID))
			}
		}
	}
	witnessed, inversions, problems := witness.audit()
	rep.OrderedCommitsWitnessed += witnessed
	rep.AppliedOutOfOrder += inversions
	a.Problems = append(a.Problems, problems...)
	sa, err := s.AuditShipments(dctx)
	if err != nil {
		return err
	}
	rep.Shipments += sa.Shipments
	rep.ShipmentDuplicates += sa.Duplicates
	rep.ShipmentsMissing += sa.Missing + sa.NotCancelled
	if sa.Missing+sa.NotCancelled > 0 || !cfg.NaiveProvider && sa.Duplicates > 0 {
		a.Lost += sa.Missing + sa.NotCancelled
		a.DoubleApplied += map[bool]int{true: 0, false: sa.Duplicates}[cfg.NaiveProvider]
		a.Problems = append(a.Problems, sa.Problems...)
	}
	if cfg.NaiveProvider {
		late, answered := map[string]bool{}, map[string]bool{}
		for _, r := range s.Provider.Requests() {
			if r.Method != http.MethodPost || r.Path != "/shipments" || r.Outcome != provider.OutcomeCreated {
				continue
			}
			if r.Fault == provider.FaultTimeoutAfterAct || r.ClientGone {
				late[r.IdempotencyKey] = true
			} else {
				answered[r.IdempotencyKey] = true
			}
		}
		for _, k := range sa.DuplicateKeys {
			switch {
			case crashes.has(k):
				rep.DuplicatesFromCrashes++
			case late[k]:
				rep.DuplicatesFromLateAnswers++
			case answered[k]:
				// The provider's answer reached the consumer, which still
				// did not write COMPLETED (its deadline, or a step after the
				// provider call failed): the same window, not injected.
				rep.DuplicatesFromFailedCompletion++
			default:
				rep.DuplicatesUntraced++
				a.Problems = append(a.Problems, "duplicate shipment with key "+k+" traces to no injected crash or late answer")
			}
		}
	}
	if dl.deadLettered != dl.redriven {
		a.Problems = append(a.Problems, fmt.Sprintf("%d events reached a consumer DLQ but %d were redriven", dl.deadLettered, dl.redriven))
	}

	rep.Epochs++
	rep.Orders += a.Orders
	rep.Committed += a.Committed
	rep.Events += a.Events
	rep.Published += a.Published
	rep.Pending += a.Pending
	rep.Parked += a.Parked
	rep.Lost += a.Lost
	rep.Ghost += a.Ghost
	rep.DoubleApplied += a.DoubleApplied
	rep.LedgerApplied += a.LedgerApplied
	rep.Notifications += a.Notifications
	rep.Acked += drive.Acked
	rep.Ambiguous += drive.Ambiguous
	rep.Conflicts += drive.Conflicts
	rep.Unexpected += drive.Unexpected
	bs := s.Bus.Stats()
	// Every successful apply beyond the first per event and consumer found
	// its dedup marker and changed nothing.
	rep.DuplicatesAbsorbed += applied.get(routing.ConsumerNotifier) - int64(a.Notifications) +
		applied.get(routing.ConsumerLedger) - int64(a.LedgerRouted)
	for _, c := range s.Consumers {
		st := c.Poller.Stats()
		rep.ConsumerTimeouts += st.Timeouts
		rep.ConsumerRedeliveries += st.Messages - st.Deleted
	}
	for _, n := range bs.Retries {
		rep.BusRetries += n
	}
	for _, n := range bs.DeadLettered {
		rep.BusDeadLettered += n
	}
	ps := s.Poller.Stats()
	rep.ESMRetries += ps.Retries
	rep.ESMDiscarded += int64(s.OnFailureQueue.Len())
	rep.ParkedMessages += s.ParkedQueue.Len()
	rep.ReconcilerResends += metrics.Resent() // scheduled runs and the drain's runs alike
	for k, n := range inj.Stats().ByKind() {
		rep.Faults[k] += n
	}
	if !a.OK() || len(gt.problems) > 0 || dl.deadLettered != dl.redriven {
		rep.FailedEpochs = append(rep.FailedEpochs, epoch)
		for _, p := range a.Problems {
			if len(rep.Problems) < 20 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("epoch %d: %s", epoch, p))
			}
		}
	}
	cfg.Progress(fmt.Sprintf("epoch %d seed %d: %d orders in %s (drive %s, drain+redrive+audit %s): %s | faults %d, ambiguous answers %d, dead-lettered %d, duplicates absorbed so far %d",
		epoch, seed, a.Orders, time.Since(epochStart).Round(time.Millisecond), driveTime.Round(time.Millisecond), drainTime.Round(time.Millisecond),
		a.Summary(), sum(inj.Stats().ByKind()), drive.Ambiguous, dl.deadLettered, rep.DuplicatesAbsorbed))
	return nil
}

// ReasonSequenceGap is the dead-letter reason of an event an ordered
// consumer held until its earlier events' gap timed out.
const ReasonSequenceGap = "sequence_gap"

// Consumer delivery settings of a chaos run (see runEpoch).
const (
	ConsumerFunctionTimeout   = time.Second
	ConsumerVisibilityTimeout = 2 * time.Second
	ConsumerMaxReceiveCount   = 3
	RelayRetryBudget          = 2 * time.Second
	RelayCallTimeout          = time.Second
	RelayFunctionTimeout      = 6 * time.Second
)

type dlqCounts struct {
	deadLettered, redriven int
	// letters are every message the redrive rounds moved off a consumer
	// DLQ; the sequence_gap ones are traced to their missing event after
	// the audit (traceGaps).
	letters []deadLetterSeen
	// parked are the parked records' sequences by aggregate id before the
	// audit redrove the ones ordered consumers wait for (parkedRedriven).
	parked         map[string][]int64
	parkedRedriven int
}

// drainRedriveAndAudit drains, then does what an operator does after a
// consumer outage: ends the outage (the consumer is fixed), redrives every
// consumer DLQ through the code outboxctl uses (sqsconsumer.Redrive), drains
// again, and audits.
func drainRedriveAndAudit(ctx context.Context, s *devstack.Stack, inj *faults.Injector) (devstack.Audit, dlqCounts, error) {
	var c dlqCounts
	if err := s.Drain(ctx); err != nil {
		return devstack.Audit{}, c, err
	}
	inj.EndOutages()
	// An event redriven can fail again while the pipeline settles (an
	// ordered consumer waiting for an event redriven with it, a
	// cancellation that overtook its payment): like an operator, redrive
	// until the DLQs stay empty after a drain (bounded rounds). Each round
	// first redrives the parked records an ordered consumer waits for (a
	// record can be parked during the rounds too: a re-send refused for
	// good) and lets the reconciler publish them, then the consumer DLQs.
	c.parked = map[string][]int64{}
	for round := 0; round < maxRedriveRounds; round++ {
		parked, n, err := redriveParkedPredecessors(ctx, s)
		if err != nil {
			return devstack.Audit{}, c, err
		}
		for agg, seqs := range parked {
			c.parked[agg] = append(c.parked[agg], seqs...)
		}
		c.parkedRedriven += n
		if n > 0 {
			// the reconciler publishes them (drainAndAudit waits for no
			// record pending; its losses are the held events the DLQ
			// redrive below brings back)
			if _, err := drainAndAudit(ctx, s); err != nil {
				return devstack.Audit{}, c, err
			}
		}
		moved := 0
		for name, p := range s.Consumers {
			// Only what the consumer's queue moved or the consumer's
			// role dead-lettered (the function runs as its role's
			// session locally too, localrt.FunctionSenderID).
			res, err := sqsconsumer.Redrive(ctx, p.DLQ, p.DLQ.URL(), p.Queue, p.Queue.URL(), sqsconsumer.RedriveOptions{
				From: sqsconsumer.Provenance{SourceQueueARN: p.Queue.ARN(), SenderIDs: []string{localrt.FunctionRoleID(p.Name)}},
				OnMessage: func(d sqsconsumer.DeadLetter) {
					c.letters = append(c.letters, deadLetterSeen{consumer: name, letter: d})
				},
			})
			n := res.Moved
			c.redriven += n
			moved += n
			if err != nil {
				return devstack.Audit{}, c, err
			}
		}
		if moved == 0 {
			break
		}
		if err := s.Drain(ctx); err != nil {
			return devstack.Audit{}, c, err
		}
	}
	// What a crash left in a resequencer buffer (an invocation that died
	// between applying an event and applying its buffered successors) the
	// next sweep tick applies, as the schedule would within a minute.
	if err := sweepBuffers(ctx, s); err != nil {
		return devstack.Audit{}, c, err
	}
	for _, p := range s.Consumers {
		// counted last: every message that reached a DLQ, the ones that
		// came back during the rounds included
		c.deadLettered += int(p.DLQ.Sent())
	}
	a, err := drainAndAudit(ctx, s)
	return a, c, err
}

// sweepBuffers does what the sweep schedule does every minute, until no
// buffered event is left whose predecessor is applied (bounded by
// maxSweepRounds): a sweep leaves events younger than
// dedup.DefaultSweepMinAge to the live path, and one whose own calls met
// injected faults leaves its aggregates to the next one. What is still
// buffered after that is waiting for an event that never came: the audit
// reports it.
func sweepBuffers(ctx context.Context, s *devstack.Stack) error {
	for range maxSweepRounds {
		if err := s.SweepNow(ctx); err != nil {
			return err
		}
		left, err := listBuffered(ctx, s)
		if err != nil {
			return err
		}
		var youngest time.Time
		drainable := false
		for name, b := range left {
			for _, e := range b {
				if e.BufferedAt.After(youngest) {
					youngest = e.BufferedAt
				}
				last, err := gateLast(ctx, s, name, e)
				if err != nil {
					return err
				}
				drainable = drainable || e.Sequence <= last+1
			}
		}
		if !drainable {
			return nil
		}
		wait := max(dedup.DefaultSweepMinAge-time.Since(youngest)+time.Second, 0)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// listBuffered lists the ordered consumers' buffers (retried: the audit's
// reads meet injected faults too).
func listBuffered(ctx context.Context, s *devstack.Stack) (map[string][]dedup.BufferedEvent, error) {
	for attempt := 0; ; attempt++ {
		b, err := s.Buffered(ctx)
		if err == nil || attempt == 5 || ctx.Err() != nil {
			return b, err
		}
	}
}

// maxSweepRounds bounds the audit's sweeps: each round's calls can meet
// injected faults (5 % of every call by default), so one sweep may leave an
// aggregate to the next.
const maxSweepRounds = 6

// gateLast reads the last sequence consumer applied for e's aggregate
// (retried: the audit's reads meet injected faults too).
func gateLast(ctx context.Context, s *devstack.Stack, consumer string, e dedup.BufferedEvent) (int64, error) {
	a, err := dedup.NewApplier(s.DDB, dedup.Config{Table: s.Settings.DedupTable, Consumer: consumer, Ordered: true})
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		st, err := a.ReadGate(ctx, e.AggregateType, e.AggregateID)
		if err == nil || attempt == 5 || ctx.Err() != nil {
			return st.Last, err
		}
	}
}

// maxRedriveRounds bounds the audit's redrive rounds. Rounds converge (a
// redriven event applies, or waits for one redriven with it and then
// applies, or is a duplicate), but chains of held events under load took
// more than 5 rounds in 1 epoch of 20 of a default make chaos.
const maxRedriveRounds = 12

// drainAndAudit waits until the stream is read, the bus is idle and no
// outbox record is pending (running the reconciler for records whose
// event source mapping retries were exhausted), then audits. It returns
// once no record is pending, whatever the audit found: nothing else
// changes the tables after a drain.
func drainAndAudit(ctx context.Context, s *devstack.Stack) (devstack.Audit, error) {
	for {
		if err := s.Drain(ctx); err != nil {
			return devstack.Audit{}, err
		}
		a, err := s.Audit(ctx)
		if err != nil {
			// The audit's own reads can be faulted: try again.
			if ctx.Err() != nil {
				return a, err
			}
			continue
		}
		// Only pending records are left to the reconciler: once none is,
		// nothing will change any more and the audit stands (losses
		// included). Waiting on Lost as well stalled a run whose held
		// events stayed in a consumer DLQ until the context ended.
		if a.Pending == 0 {
			return a, nil
		}
		// Records left pending (ESM retries exhausted, or a crash after
		// publish) are the reconciler's job: run it now rather than wait
		// (its re-sends are counted from its metrics like the scheduled runs).
		_, _ = s.Reconciler.Run(ctx)
		select {
		case <-ctx.Done():
			return a, nil // the audit reports what is still pending or lost
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sum(m map[faults.Kind]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
