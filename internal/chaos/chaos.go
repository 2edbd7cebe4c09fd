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
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
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
	witnessed, inversions, problems := witness.audit(nil)
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
