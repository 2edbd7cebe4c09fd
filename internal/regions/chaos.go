package regions

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// ChaosConfig configures Chaos. Zero values take the defaults stated per
// field.
type ChaosConfig struct {
	// Seed seeds the workload. Accounts and Ops size it (Workload's
	// defaults: 4 and 40).
	Seed          uint64
	Accounts, Ops int
	// Replication starts the replicator between the Regions (nil: none;
	// the replication faults are then left out).
	Replication NewReplication
	// SettleTimeout bounds the final settle (default 2 min).
	SettleTimeout time.Duration
	// Logger receives the runtime's logs (default: discarded).
	Logger *slog.Logger
}

// ChaosSteps are the faults of a chaos run of ops operations: Region B
// down from ops/4 to ops/2, and with replication, replication paused from
// ops/8 to 3·ops/8 and Region A cut off from 5·ops/8 to 7·ops/8.
func ChaosSteps(ops int, replicated bool) []Step {
	steps := []Step{SuspendStep(ops/4, RegionB), ResumeStep(ops/2, RegionB)}
	if replicated {
		steps = append(steps,
			ReplicationStep(ops/8, "pause replication", Replication.Pause),
			ReplicationStep(3*ops/8, "resume replication", Replication.Resume),
			ReplicationStep(5*ops/8, "lose "+RegionA, func(r Replication) { r.Lose(RegionA) }),
			ReplicationStep(7*ops/8, "recover "+RegionA, func(r Replication) { r.Recover(RegionA) }))
	}
	return steps
}

// Chaos starts a Runtime, runs a seeded Workload under ChaosSteps,
// resumes what is left down, settles, audits and stops the runtime. It
// returns the audit's report and the workload's stats; the error is the
// runtime's, the workload's, or the settle's (ctx or SettleTimeout ending
// first). A run whose report is not OK broke a promise the report names.
func Chaos(ctx context.Context, cfg ChaosConfig) (Report, RunStats, error) {
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 2 * time.Minute
	}
	rt, err := Start(ctx, Config{Replication: cfg.Replication, Logger: cfg.Logger})
	if err != nil {
		return Report{}, RunStats{}, err
	}
	defer rt.Close()
	w := Workload{Accounts: cfg.Accounts, Ops: cfg.Ops, Seed: cfg.Seed}
	w.setDefaults()
	w.Steps = ChaosSteps(w.Ops, cfg.Replication != nil)
	st, err := rt.Run(ctx, w)
	if err != nil {
		return Report{}, st, err
	}
	for _, r := range rt.Regions() {
		if r.Stack.Suspended() {
			if err := r.Stack.Resume(); err != nil {
				return Report{}, st, fmt.Errorf("regions: resume %s: %w", r.Name, err)
			}
		}
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.SettleTimeout)
	defer cancel()
	if err := rt.Settle(sctx); err != nil {
		return Report{}, st, err
	}
	obs, err := Observe(ctx, rt)
	if err != nil {
		return Report{}, st, err
	}
	return Audit(obs), st, nil
}
