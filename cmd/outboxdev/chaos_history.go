package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/chaos"
)

// runChaosHistory runs make chaos-history: orders driven through local
// stacks while the history paths are injected (internal/chaos RunHistory),
// then the audit's one summary line. It returns an error (exit 1) when any
// audit count is not zero.
func runChaosHistory(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos-history", flag.ExitOnError)
	var cfg chaos.HistoryConfig
	fs.IntVar(&cfg.Orders, "orders", 3200, "orders in all")
	fs.IntVar(&cfg.EpochOrders, "epoch-orders", 400, "orders per epoch (each epoch runs every history path on a fresh Dynoxide)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 6, "concurrent HTTP clients")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of faults and scenarios")
	fs.Float64Var(&cfg.Rate, "rate", 0.02, "probability of each internal/faults kind at every boundary (negative: none)")
	fs.Float64Var(&cfg.DrainFaultRate, "drain-fault-rate", 0.3, "fraction of the funds consumer's buffered events that fail or panic 1 to 4 times in the drain (negative: none)")
	fs.Float64Var(&cfg.DLQRefuseRate, "dlq-refuse-rate", 0.25, "fraction of consumer DLQ sends refused (negative: none)")
	fs.Float64Var(&cfg.PairRate, "pair-rate", 0.5, "fraction of payments delivered to the funds consumer together with their successor (negative: none)")
	fs.IntVar(&cfg.OnlyEpoch, "epoch", -1, "run only this epoch (replay a failure)")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 6*time.Minute, "bound on the drain, redrives and audit of one epoch")
	verbose := fs.Bool("v", false, "log every component's warnings and errors to stderr (for a replayed epoch)")
	_ = fs.Parse(args)
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.Progress = func(line string) { fmt.Println(" ", line) }

	fmt.Printf("chaos-history: %d orders in epochs of %d, %d clients, seed %d; boundary fault rate %.3f, drain faults %.2f, DLQ refusals %.2f, paired deliveries %.2f\n",
		cfg.Orders, cfg.EpochOrders, cfg.Concurrency, cfg.Seed, cfg.Rate, cfg.DrainFaultRate, cfg.DLQRefuseRate, cfg.PairRate)
	start := time.Now()
	rep, err := chaos.RunHistory(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(rep.Table())
	for _, p := range rep.Problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("\nwall time %s\n", time.Since(start).Round(time.Second))
	fmt.Println(rep.Summary())
	if rep.Epochs == 0 {
		return errors.New("no epoch ran")
	}
	if !rep.OK() {
		return fmt.Errorf("audit failed in epochs %v: replay one with -seed %d -epoch N", rep.FailedEpochs, cfg.Seed)
	}
	return nil
}
