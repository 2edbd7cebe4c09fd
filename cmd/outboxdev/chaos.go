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

func runChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	var cfg chaos.Config
	fs.IntVar(&cfg.Orders, "orders", 10000, "orders in all")
	fs.IntVar(&cfg.EpochOrders, "epoch-orders", 500, "orders per epoch (each epoch runs on a fresh Dynoxide)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 8, "concurrent HTTP clients")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of faults and scenarios; a failing seed replays exactly")
	fs.Float64Var(&cfg.Rate, "rate", 0.05, "probability of each fault kind at every boundary (0..1)")
	fs.IntVar(&cfg.OnlyEpoch, "epoch", -1, "run only this epoch (replay a failure)")
	fs.BoolVar(&cfg.NaiveProvider, "naive-provider", false, "the fulfilment provider ignores Idempotency-Key: duplicate shipments appear, each traced to an injected crash before COMPLETED or an answer lost after the provider acted")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 6*time.Minute, "bound on draining one epoch (outages wait for their receives)")
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "use this DynamoDB-compatible endpoint instead of a fresh Dynoxide per epoch")
	verbose := fs.Bool("v", false, "log every component's warnings and errors to stderr (for a replayed epoch)")
	_ = fs.Parse(args)
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cfg.Progress = func(line string) { fmt.Println(" ", line) }

	fmt.Printf("chaos: %d orders in epochs of %d, %d clients, seed %d, fault rate %.3f at every boundary\n",
		cfg.Orders, cfg.EpochOrders, cfg.Concurrency, cfg.Seed, cfg.Rate)
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(rep.Table())
	for _, p := range rep.Problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("\nelapsed %s\n", rep.Elapsed.Round(time.Second))
	fmt.Println(rep.Summary())
	if !rep.OK() {
		return fmt.Errorf("audit failed in epochs %v: replay one with -seed %d -epoch N", rep.FailedEpochs, cfg.Seed)
	}
	if rep.Epochs == 0 {
		return errors.New("no epoch ran")
	}
	return nil
}
