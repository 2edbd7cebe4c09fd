package regions

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/mrec"
)

// Finding kinds only Chaos reports (Audit reports the others).
const (
	// KindTakeoverUnpublished: a record of the lost Region, replicated
	// into the survivor and pending there, that the survivor's reconciler
	// did not publish under the takeover (no PUBLISHED takeover mark).
	KindTakeoverUnpublished = "takeover_unpublished"
	// KindFenceBreach: a write of an account sent to a Region that is not
	// its home was not refused (the fence let it through).
	KindFenceBreach = "fence_breaches"
	// KindHomeWriteRefused: a write of an account in its home Region
	// refused by a condition (the account's next sequence already
	// written elsewhere: what a fence breach leads to).
	KindHomeWriteRefused = "home_write_refused"
	// KindForeignDuringPause: while replication was paused (and before any
	// takeover), a Region published an event written in another Region.
	KindForeignDuringPause = "published_foreign_during_pause"
)

// ChecksKinds are the checks a chaos run reports, in report order: each
// must count 0.
var ChecksKinds = []string{KindPublishedByNonOrigin, KindForeignDuringPause, KindTakeoverUnpublished, KindDoubleApplied,
	KindStatusRegression, KindLost, KindAppliedOutOfOrder, KindBalanceMismatch, KindDiverged, KindStuckPending, KindFenceBreach, KindHomeWriteRefused}

// ChaosConfig configures Chaos. Zero values take the defaults stated per
// field.
type ChaosConfig struct {
	// Seed seeds the workload and the replicator's delays.
	Seed uint64
	// Events is the number of deposits and withdrawals tried after the
	// accounts are opened (default 3,000), a quarter in each phase:
	// steady, replication paused, Region A lost, after recovery.
	Events int
	// Accounts is the number of accounts, opened in turn in A and B
	// (default 16); Workers the concurrent writers, each owning its share
	// of the accounts (default 4).
	Accounts, Workers int
	// ProbeEvery: every ProbeEvery-th operation of a worker also tries a
	// deposit of its account in the other Region, which the fence must
	// refuse (default 20).
	ProbeEvery int
	// Replication shapes the replicator (internal/mrec; Seed defaults to
	// Seed, TailProb to 0.02 with a 200 ms to 1 s tail).
	Replication MRECConfig
	// ReconcileAfter is each Region's reconciler stale age (default
	// 500 ms); LagMargin the takeover's lag margin (default 200 ms).
	ReconcileAfter, LagMargin time.Duration
	// LastWrites is the number of deposits A takes after its stack went
	// down and before it is lost (its relay no longer publishing them; the
	// replicator takes some across, holds the rest), default Events/40.
	LastWrites int
	// SettleTimeout bounds each settle (default 3 min).
	SettleTimeout time.Duration
	// Logger receives the runtime's logs (default: discarded); Progress,
	// when set, a line per phase.
	Logger   *slog.Logger
	Progress func(string)
}

func (c *ChaosConfig) setDefaults() {
	if c.Events <= 0 {
		c.Events = 3000
	}
	if c.Accounts <= 0 {
		c.Accounts = 16
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	c.Workers = min(c.Workers, c.Accounts)
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = 20
	}
	if c.Replication.Seed == 0 {
		c.Replication.Seed = int64(c.Seed) //nolint:gosec // G115: a seed, any bits do
	}
	if c.Replication.TailProb == 0 {
		c.Replication.TailProb = 0.02
		if c.Replication.TailMin == 0 {
			c.Replication.TailMin, c.Replication.TailMax = 200*time.Millisecond, time.Second
		}
	}
	if c.Replication.Logger == nil {
		c.Replication.Logger = c.Logger
	}
	if c.ReconcileAfter <= 0 {
		c.ReconcileAfter = 500 * time.Millisecond
	}
	if c.LagMargin <= 0 {
		c.LagMargin = 200 * time.Millisecond
	}
	if c.LastWrites <= 0 {
		c.LastWrites = max(c.Events/40, 4)
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 3 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
}

// ChaosReport is what a chaos run did and found.
type ChaosReport struct {
	// Audit is the audit of the settled runtime, with Chaos's own findings
	// (takeover_unpublished, fence_breaches,
	// published_foreign_during_pause) added.
	Audit Report
	// Written counts the events committed per Region; Refused the
	// withdrawals refused for funds; Skipped the operations on accounts
	// whose home Region was down.
	Written          map[string]int
	Refused, Skipped int
	// FenceRefusals counts writes sent to the wrong Region and refused
	// (outbox.ErrNotHomeRegion); FenceConflicts those that failed on
	// another condition instead (outbox.ErrConflict or a *outbox.TxError:
	// nothing written either; only without the fence).
	FenceRefusals, FenceConflicts int
	// LastWrites is A's writes after its stack went down; HeldAtLoss the
	// replicator's held writes (both directions) just before A recovered,
	// HeldFromA those of them from A to B (A's unreplicated writes).
	LastWrites, HeldAtLoss, HeldFromA int
	// TakenOver counts A's records B published under the takeover
	// (PUBLISHED marks); TakeoverPending A's records pending in B's
	// replica when it was checked; Adopted those of them A never sent
	// after recovery (its relay misses them, as lost with A's stream, and
	// its reconciler adopts B's marks).
	TakenOver, TakeoverPending, Adopted int
	// Duplicates counts events published more than once (all Regions),
	// each absorbed by the consumers' dedup (else double_applied).
	Duplicates int
	// Replication is the replicator's final stats.
	Replication mrec.Stats
	// Phases names the phases run, in order; Wall is the run's wall time.
	Phases []string
	Wall   time.Duration
}

// OK reports whether every check is 0.
func (r ChaosReport) OK() bool { return r.Audit.OK() }

// String is the report: Counts, then the phases run, one per line.
func (r ChaosReport) String() string {
	var b strings.Builder
	b.WriteString(r.Counts())
	b.WriteString("phases:\n")
	for i, p := range r.Phases {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, p)
	}
	return b.String()
}

// Counts is the report without the phase list (outboxdev chaos-regions
// prints each phase as it starts): the counts, then each check and its
// count, then the findings (at most 20), then the wall time.
// docs/MULTI-REGION.md "Two Regions locally" explains every line.
func (r ChaosReport) Counts() string {
	var b strings.Builder
	st := r.Replication
	fmt.Fprintf(&b, "events written: %s %d, %s %d (%d committed in all); refused for funds %d, skipped (home down) %d\n",
		RegionA, r.Written[RegionA], RegionB, r.Written[RegionB], r.Audit.Committed, r.Refused, r.Skipped)
	fmt.Fprintf(&b, "replication: replicated %d, coalesced %d, reordered %d, suppressed by LWW %d\n",
		st.Replicated, st.Coalesced, st.Reordered, st.SuppressedByLWW)
	fmt.Fprintf(&b, "held at A's loss: %d writes queued both ways (%d of A's not yet in %s, %d of %s's not yet in A); A's last writes %d\n",
		r.HeldAtLoss, r.HeldFromA, RegionB, r.HeldAtLoss-r.HeldFromA, RegionB, r.LastWrites)
	fmt.Fprintf(&b, "fence: %d wrong-Region writes refused, %d failed on a conflict\n", r.FenceRefusals, r.FenceConflicts)
	fmt.Fprintf(&b, "takeover: %d of A's records pending in B, %d taken over by B, %d adopted by A; %d duplicate publishes absorbed\n",
		r.TakeoverPending, r.TakenOver, r.Adopted, r.Duplicates)
	b.WriteString("checks:\n")
	for _, k := range ChecksKinds {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.Audit.Count(k))
	}
	for i, f := range r.Audit.Findings {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d more findings\n", len(r.Audit.Findings)-i)
			break
		}
		fmt.Fprintf(&b, "  %s %s: %s\n", f.Kind, f.Subject, f.Detail)
	}
	fmt.Fprintf(&b, "wall time %s\n", r.Wall.Round(time.Millisecond))
	return b.String()
}

// Chaos starts a two-Region Runtime with internal/mrec's replicator and
// drives the bank in both Regions through four phases of cfg.Events/4
// operations each: steady; replication paused both ways (nothing foreign
// may be published: no timer takes over); Region A lost (its stack
// suspended after a few last writes, then cut off by the replicator with
// its unreplicated writes held; B writes its own accounts, and the
// operator's takeover in B publishes A's replicated pending records); A
// recovered (replication and stack resumed, its reconciler adopting B's
// marks, the takeover released). Throughout, workers also write accounts
// in the wrong Region, which the fence must refuse. It then settles,
// observes and audits. The error is the runtime's, a writer's, a step's
// or a settle's (ctx or SettleTimeout ending first); a report that is not
// OK broke a promise its findings name.
func Chaos(ctx context.Context, cfg ChaosConfig) (ChaosReport, error) {
	cfg.setDefaults()
	start := time.Now()
	rep := ChaosReport{Written: map[string]int{}}
	rt, err := Start(ctx, Config{Replication: MREC(cfg.Replication), Logger: cfg.Logger, ReconcileAfter: cfg.ReconcileAfter})
	if err != nil {
		return rep, err
	}
	defer rt.Close()
	c := &chaosRun{cfg: cfg, rt: rt, rep: &rep}
	err = c.run(ctx)
	if s, ok := rt.Replication().(replicationStats); ok {
		rep.Replication = s.Stats()
	}
	rep.Wall = time.Since(start)
	return rep, err
}
