package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/regions"
)

// runChaosRegions runs make chaos-regions: the bank driven in two local
// Regions (two Dynoxide servers) under internal/mrec's replication faults,
// Region A lost, taken over by B and recovered, wrong-Region writes
// refused by the fence (internal/regions Chaos); then the counts, each
// check and the wall time. It returns an error (exit 1) when any check is
// not zero.
func runChaosRegions(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos-regions", flag.ExitOnError)
	var cfg regions.ChaosConfig
	var seed int64
	fs.IntVar(&cfg.Events, "events", 3000, "deposits and withdrawals tried, a quarter per phase (steady, paused, A lost, recovered)")
	fs.Int64Var(&seed, "seed", 1, "seed of the workload and of the replication delays")
	fs.IntVar(&cfg.Accounts, "accounts", 16, "accounts, opened in turn in each Region")
	fs.IntVar(&cfg.Workers, "workers", 4, "concurrent writers, each owning its share of the accounts")
	fs.IntVar(&cfg.ProbeEvery, "probe-every", 20, "every Nth operation of a writer also writes the account in the wrong Region (the fence must refuse it)")
	fs.DurationVar(&cfg.Replication.DelayMedian, "delay-median", 20*time.Millisecond, "median per-item replication delay")
	fs.Float64Var(&cfg.Replication.TailProb, "tail-prob", 0.02, "probability of a long-tail replication delay")
	fs.DurationVar(&cfg.Replication.TailMin, "tail-min", 200*time.Millisecond, "shortest long-tail delay")
	fs.DurationVar(&cfg.Replication.TailMax, "tail-max", time.Second, "longest long-tail delay")
	fs.DurationVar(&cfg.LagMargin, "lag-margin", 200*time.Millisecond, "the takeover's lag margin")
	fs.DurationVar(&cfg.SettleTimeout, "settle-timeout", 3*time.Minute, "bound on each settle")
	verbose := fs.Bool("v", false, "log every component's warnings and errors to stderr")
	_ = fs.Parse(args)
	if seed < 0 {
		return fmt.Errorf("-seed %d: want 0 or more", seed)
	}
	cfg.Seed = uint64(seed)
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.Progress = func(line string) { fmt.Printf("  %s  %s\n", time.Now().Format("15:04:05"), line) }

	fmt.Printf("chaos-regions: %d operations on %d accounts in %s and %s, %d writers, seed %d; replication median %s, tail %.3f in [%s, %s]\n",
		cfg.Events, cfg.Accounts, regions.RegionA, regions.RegionB, cfg.Workers, seed, cfg.Replication.DelayMedian,
		cfg.Replication.TailProb, cfg.Replication.TailMin, cfg.Replication.TailMax)
	rep, err := regions.Chaos(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(rep.Counts()) // the phases were printed as they started
	if rep.Audit.Committed == 0 {
		return errors.New("no event committed")
	}
	if !rep.OK() {
		return fmt.Errorf("audit failed: %d findings (replay with -seed %d)", len(rep.Audit.Findings), seed)
	}
	fmt.Println("chaos-regions: every check 0")
	return nil
}
