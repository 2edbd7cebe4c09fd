package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// History under faults (issue #31, item 9; make chaos-history). Each epoch
// runs, on a fresh stack with internal/faults at every boundary, the paths
// by which a consumer meets an aggregate's history rather than its live
// events, while orders keep coming in three waves (A, B, C):
//
//  1. wave A; once a third of it is on the bus, an archive replay of
//     everything so far into the live consumers (ledger, notifier,
//     fulfilment, funds), shuffled by the bus, overlapping live traffic;
//  2. a backup of the live ledger's table (devstack.SnapshotTable while
//     the ledger pauses: a consistent image);
//  3. wave B; meanwhile an ordered ledger added late ("ledger-late") gets a
//     starting point per order from the orders table (dedup.SetBaseline)
//     while events are in flight, and is then backfilled with the whole
//     archive: it must end with exactly the effects after its starting
//     points (the replay brings every earlier event again: none may be
//     applied), and the backfill closes any gap an event published just
//     before its rule existed would leave;
//  4. a ledger that ran unordered since the start ("ledger-switch", same
//     consumer name and table) is switched to ordered and backfilled with
//     the whole archive (history replayed in another order than it was
//     published, events it applied ahead of its gate);
//  5. a second replay into the live consumers over a range overlapping
//     the first (every event of the overlap arrives a third time);
//  6. wave C; meanwhile the ledger is rebuilt from the backup
//     ("ledger-restored", consumer name "ledger" kept) and backfilled from
//     shortly before the backup (backfillFrom);
//  7. drain, redrive every DLQ, sweep, and audit (history_audit.go).
//
// Throughout, the funds consumer (history_funds.go), whose refund depends
// on its predecessor's payment, gets adjacent sequences at once
// (pairHolder), fails or panics on buffered events in the drain
// (drainFaults), and every consumer's DLQ sends are refused at a rate
// (dlqRefuser).

// HistoryConfig shapes a history run. Zero values take the defaults; a
// negative rate turns that injection off.
type HistoryConfig struct {
	// Orders is the total number of orders (default 3,200), EpochOrders
	// the orders per epoch, each on a fresh Dynoxide (default 400).
	Orders, EpochOrders int
	// Concurrency is the number of concurrent HTTP clients (default 6).
	Concurrency int
	// Seed makes the run reproducible (default 1).
	Seed int64
	// Rate is internal/faults' probability of each fault kind at every
	// boundary (default 0.02).
	Rate float64
	// DrainFaultRate is the fraction of the funds consumer's buffered
	// events that fail (error or panic) 1 to 4 times when drained
	// (default 0.3).
	DrainFaultRate float64
	// DLQRefuseRate is the fraction of consumer DLQ sends refused (default
	// 0.25).
	DLQRefuseRate float64
	// PairRate is the fraction of payments held at the funds consumer's
	// queue until their successor arrives, then delivered with it (default
	// 0.5).
	PairRate float64
	// OnlyEpoch, when >= 0, runs that single epoch (to replay a failure).
	OnlyEpoch int
	// DrainTimeout bounds the drain, redrives and audit of one epoch
	// (default 6 minutes).
	DrainTimeout time.Duration
	// Progress, when set, receives a line per epoch and step.
	Progress func(string)
	// Logger receives the components' logs (default: discarded).
	Logger *slog.Logger
}

func (c *HistoryConfig) setDefaults() {
	def := func(v *float64, d float64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	if c.Orders == 0 {
		c.Orders = 3200
	}
	if c.EpochOrders == 0 {
		c.EpochOrders = 400
	}
	if c.Concurrency == 0 {
		c.Concurrency = 6
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	def(&c.Rate, 0.02)
	def(&c.DrainFaultRate, 0.3)
	def(&c.DLQRefuseRate, 0.25)
	def(&c.PairRate, 0.5)
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

// historyConsumerConcurrency is each consumer's SQS event source mapping
// MaximumConcurrency in a history run: enough for adjacent sequences to
// run in two invocations at once.
const historyConsumerConcurrency = 4

// The consumers a history epoch adds (the funds consumer: fundsConsumer).
const (
	lateLedger     = "ledger-late"
	switchLedger   = "ledger-switch"
	restoredLedger = "ledger-restored"
)

// RunHistory runs every epoch (or only HistoryConfig.OnlyEpoch) and returns
// the summed report. It returns an error only when the stack or a step
// cannot run; broken promises are in the report (HistoryReport.OK).
func RunHistory(ctx context.Context, cfg HistoryConfig) (HistoryReport, error) {
	cfg.setDefaults()
	start := time.Now()
	rep := HistoryReport{Faults: map[faults.Kind]int64{}}
	epochs := (cfg.Orders + cfg.EpochOrders - 1) / cfg.EpochOrders
	for e := 0; e < epochs; e++ {
		if cfg.OnlyEpoch >= 0 && e != cfg.OnlyEpoch {
			continue
		}
		n := min(cfg.EpochOrders, cfg.Orders-e*cfg.EpochOrders)
		if err := runHistoryEpoch(ctx, cfg, e, n, &rep); err != nil {
			return rep, fmt.Errorf("chaos-history: epoch %d (seed %d): %w", e, EpochSeed(cfg.Seed, e), err)
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// historyEpoch is what one epoch's steps leave for its audit.
type historyEpoch struct {
	s       *devstack.Stack
	admin   *dynamodb.Client
	witness *orderWitness
	hf      *historyFaults
	funds   *funds
	ledgers map[string]*ledger.Ledger // late, switched, restored
	tables  map[string]string
	start   map[string]int64 // the late ledger's starting points (dedup.SetBaseline's)
	// baselineAt: when each order's SetBaseline call began (heldStart)
	baselineAt map[string]time.Time
	switchAt   time.Time
	// floor: the starting point of each ordering item (orderWitness.audit)
	// of the late ledger (its starting points) and the restored one (the
	// backup's gates).
	floor map[string]int64
}

func runHistoryEpoch(ctx context.Context, cfg HistoryConfig, epoch, orders int, rep *HistoryReport) error {
	seed := EpochSeed(cfg.Seed, epoch)
	began := time.Now()
	step := func(format string, args ...any) {
		cfg.Progress(fmt.Sprintf("epoch %d +%s: %s", epoch, time.Since(began).Round(100*time.Millisecond), fmt.Sprintf(format, args...)))
	}
	inj, err := faults.New(faults.Config{Seed: seed, Rate: cfg.Rate})
	if err != nil {
		return err
	}
	ep := &historyEpoch{witness: newOrderWitness(), hf: &historyFaults{}, ledgers: map[string]*ledger.Ledger{}, tables: map[string]string{},
		floor: map[string]int64{}}
	pause := &pauser{consumer: routing.ConsumerLedger, f: ep.hf}
	pairs := &pairHolder{seed: seed, rate: cfg.PairRate, holdFor: time.Second, f: ep.hf, held: map[string]*heldEvent{}, seen: map[string]bool{}}
	drains := &drainFaults{seed: seed, rate: cfg.DrainFaultRate, f: ep.hf, hits: map[string]int{}}
	s, err := devstack.Start(ctx, devstack.Options{
		Prefix: fmt.Sprintf("hist%d", epoch), Logger: cfg.Logger, ArchiveDelay: 300 * time.Millisecond,
		AWSConfig: func(c *aws.Config) {
			c.APIOptions = append(c.APIOptions, inj.Middleware())
			ep.witness.apply(c) // after the faults: inside them
			c.Retryer = func() aws.Retryer {
				return retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None })
			}
		},
		WrapEventBridge:     func(eb relay.EventBridgeAPI) relay.EventBridgeAPI { return inj.EventBridge(eb) },
		WrapQueue:           func(q relay.QueueSender) relay.QueueSender { return inj.Queue(q) },
		WrapStream:          func(h localrt.StreamHandler) localrt.StreamHandler { return inj.StreamHandler(h) },
		ConsumerInterceptor: pause.wrap(inj.Interceptor()),
		WrapQueueTarget: func(consumer string, q localrt.MessageSender) localrt.MessageSender {
			if consumer == fundsConsumer {
				q = pairs.wrap(q) // innermost: at the queue, after late deliveries
			}
			return inj.Reorder(consumer, q)
		},
		WrapConsumer: inj.SQSHandler,
		WrapConsumerDLQ: func(consumer string, dlq sqsconsumer.MessageSender) sqsconsumer.MessageSender {
			return newDLQRefuser(seed, consumer, cfg.DLQRefuseRate, ep.hf, dlq)
		},
		BusTargetMaxAttempts:      40,
		ConsumerFunctionTimeout:   ConsumerFunctionTimeout,
		ConsumerVisibilityTimeout: ConsumerVisibilityTimeout,
		ConsumerMaxReceiveCount:   ConsumerMaxReceiveCount,
		// Seven consumers share one Dynoxide: at the default concurrency
		// (sized for AWS) their invocations starve each other past the
		// 1 s function timeout, and the redrives go round in circles.
		ConsumerMaxConcurrency: historyConsumerConcurrency,
		RelayRetryBudget:       RelayRetryBudget,
		RelayCallTimeout:       RelayCallTimeout,
		RelayFunctionTimeout:   RelayFunctionTimeout,
		ReconcileEvery:         500 * time.Millisecond,
		ReconcileAfter:         time.Second,
		PollInterval:           20 * time.Millisecond,
		// Buffered events kept after a refused DLQ send are retried by
		// the next sweep: tick often.
		SweepEvery: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	ep.s = s
	ep.admin = dynamodb.NewFromConfig(dynoxide.AWSConfig(s.Endpoint)) // the operator's client: no injected faults
	if ep.funds, err = addFunds(ctx, s, ep.admin, drains.wrap, 2*time.Second, cfg.Logger); err != nil {
		return err
	}
	if ep.ledgers[switchLedger], _, err = s.AddLedgerWith(ctx, devstack.LedgerSpec{Name: switchLedger, Ordering: dedup.Unordered}); err != nil {
		return err
	}
	ep.tables[switchLedger] = s.StateTables[switchLedger]
	t0 := time.Now()
	nA, nB := orders*2/5, orders*7/20
	nC := orders - nA - nB
	wave := func(n int, part uint64) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: n, Concurrency: cfg.Concurrency, Seed: uint64(seed)*4 + part, Logger: cfg.Logger}) //nolint:gosec // G115: the seed's bits
		}()
		return done
	}

	// 1. Wave A, and a replay of everything so far into it.
	a := wave(nA, 1)
	waitAccepted(ctx, s, int64(nA), a)
	r1End := time.Now()
	if err := replayLive(ctx, s, replayName(epoch, "live-1"), t0.Add(-time.Minute), r1End); err != nil {
		return err
	}
	rep.Replays++
	step("wave A (%d orders) with replay 1 into the live consumers", nA)
	<-a

	// 2. The backup.
	backupTable, backupAt, err := backup(ctx, s, ep.admin, pause)
	if err != nil {
		return err
	}
	step("backup of %s taken", s.Settings.LedgerTable)

	// 3. Wave B; a late ledger with starting points, backfilled: added
	// once a third of the wave's events are on the bus, so orders are
	// half-way through their lives (events in flight) while the starting
	// points are set.
	acceptedB := s.Bus.Stats().Accepted
	b := wave(nB, 2)
	waitAccepted(ctx, s, acceptedB+int64(nB), b)
	if ep.ledgers[lateLedger], _, err = s.AddLedger(ctx, lateLedger); err != nil {
		return err
	}
	ep.tables[lateLedger] = s.StateTables[lateLedger]
	// The operator sets the starting points a little after the consumer
	// exists: events published meanwhile reach it first (held in its
	// buffer, or applied from an order's first event on).
	waitAccepted(ctx, s, s.Bus.Stats().Accepted+int64(nB)/4, b)
	if ep.start, ep.baselineAt, err = baselines(ctx, s, ep.admin, lateLedger, rep); err != nil {
		return err
	}
	for id, last := range ep.start {
		ep.floor[ep.tables[lateLedger]+"/"+dedup.SequenceKey(lateLedger, order.AggregateType, id)] = last
	}
	step("late ledger: %d starting points", len(ep.start))
	if err := backfill(ctx, s, lateLedger, time.Time{}); err != nil {
		return err
	}
	rep.Backfills++
	step("late ledger backfilled")

	// 4. The unordered ledger switched to ordered, its history replayed.
	if ep.ledgers[switchLedger], err = s.SwitchLedger(switchLedger, dedup.Ordered); err != nil {
		return err
	}
	ep.switchAt = time.Now()
	rep.Switched++

	// 5. Replay 2, overlapping replay 1's range.
	if err := replayLive(ctx, s, replayName(epoch, "live-2"), t0.Add(r1End.Sub(t0)/2), time.Now()); err != nil {
		return err
	}
	rep.Replays++
	if err := backfill(ctx, s, switchLedger, time.Time{}); err != nil {
		return err
	}
	rep.Backfills++
	step("ledger switched to ordered and backfilled; replay 2 started")
	<-b

	// 6. Wave C; the ledger rebuilt from the backup, backfilled.
	c := wave(nC, 3)
	err = scanTable(ctx, ep.admin, backupTable, func(it map[string]types.AttributeValue) {
		if pk := strAttr(it[dedup.AttrPK]); strings.HasPrefix(pk, routing.ConsumerLedger+dedup.SequenceInfix) {
			ep.floor[backupTable+"/"+pk] = numAttr(it[dedup.AttrLastSequence])
		}
	})
	if err != nil {
		return err
	}
	if ep.ledgers[restoredLedger], _, err = s.AddLedgerWith(ctx, devstack.LedgerSpec{Name: restoredLedger, Table: backupTable, StateConsumer: routing.ConsumerLedger}); err != nil {
		return err
	}
	ep.tables[restoredLedger] = backupTable
	events, err := scanOutbox(ctx, ep.admin, s.Settings.OutboxTable)
	if err != nil {
		return err
	}
	from, err := backfillFrom(ctx, ep.admin, events, backupTable, backupAt)
	if err != nil {
		return err
	}
	if err := backfill(ctx, s, restoredLedger, from); err != nil {
		return err
	}
	rep.Restored++
	rep.Backfills++
	step("ledger restored from the backup and backfilled from %s before it", backupAt.Sub(from).Round(time.Second))
	<-c
	step("waves done: %d orders", orders)

	// 7. Drain, redrive, sweep, audit.
	dctx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
	defer cancel()
	sa, dl, err := drainRedriveAndAudit(dctx, s, inj)
	if err != nil {
		return err
	}
	step("drained and redriven (%d dead-lettered, %d redriven)", dl.deadLettered, dl.redriven)
	return ep.audit(dctx, sa, dl, inj, rep, epoch, step)
}
