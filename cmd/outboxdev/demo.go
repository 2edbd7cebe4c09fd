package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
)

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	orders := fs.Int("orders", 300, "orders to create")
	conc := fs.Int("concurrency", 8, "concurrent HTTP clients")
	seed := fs.Uint64("seed", 1, "scenario seed")
	endpoint := endpointFlag(fs)
	verbose := fs.Bool("v", false, "show every component's logs")
	attach := fs.Bool("attach", false, "drive the stack `make dev` runs (found through "+devstack.StateFile+") instead of a fresh one; its terminal shows the hops")
	_ = fs.Parse(args)
	if *attach {
		return runDemoAttached(ctx, *orders, *conc, *seed)
	}

	logw := io.Discard
	if *verbose {
		logw = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := devstack.Start(ctx, devstack.Options{
		Endpoint: *endpoint, Prefix: fmt.Sprintf("demo%d", time.Now().Unix()), Logger: log,
		ReconcileEvery: 2 * time.Second, ReconcileAfter: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf("demo: %d orders, %d clients, API %s, DynamoDB %s\n", *orders, *conc, s.URL, s.Endpoint)
	rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{
		Orders: *orders, Concurrency: *conc, Seed: *seed,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Progress: func(r *devstack.DriveReport) { fmt.Println("  driving:", r) },
	})
	fmt.Printf("driven in %s: %s\n", rep.Elapsed.Round(time.Millisecond), rep)
	fmt.Println("draining the pipeline ...")
	// Bounded by the ordered consumers' hold (a held event waits up to
	// 321 s in all before it is dead-lettered; typically seconds).
	dctx, cancel := context.WithTimeout(ctx, demoSettleTimeout)
	defer cancel()
	if err := s.Drain(dctx); err != nil {
		return err
	}
	a, err := s.Audit(ctx)
	if err != nil {
		return err
	}
	for _, p := range a.Problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("committed=%d acked=%d ledger_expected=%d parked=%d balances=%v\n", a.Committed, rep.Acked, a.LedgerExpected, a.Parked, a.Balances)
	fmt.Println(a.Summary())
	switch {
	case !a.OK():
		return errors.New("audit failed: a promise is broken")
	case rep.Unexpected > 0:
		return fmt.Errorf("audit failed: %d unexpected API answers", rep.Unexpected)
	case rep.Ambiguous == 0 && int64(a.Committed) != rep.Acked:
		return fmt.Errorf("audit failed: %d changes committed, %d acknowledged", a.Committed, rep.Acked)
	}
	return nil
}

// runDemoAttached drives the running dev stack and audits its tables once
// its pipeline has settled.
func runDemoAttached(ctx context.Context, orders, conc int, seed uint64) error {
	st, err := devstack.ReadState(devstack.StateFile)
	if err != nil {
		return err
	}
	s := devstack.Attach(st)
	before, err := s.Audit(ctx)
	if err != nil {
		return fmt.Errorf("audit the running stack's tables at %s: %w", st.Endpoint, err)
	}
	fmt.Printf("demo: %d orders, %d clients, attached to the dev stack at %s (tables %s-*)\n", orders, conc, st.URL, st.Prefix)
	rep := devstack.Drive(ctx, st.URL, devstack.DriveOptions{
		Orders: orders, Concurrency: conc, Seed: seed,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Progress: func(r *devstack.DriveReport) { fmt.Println("  driving:", r) },
	})
	fmt.Printf("driven in %s: %s\n", rep.Elapsed.Round(time.Millisecond), rep)
	fmt.Println(settleIntro(st))
	wctx, cancel := context.WithTimeout(ctx, demoSettleTimeout)
	defer cancel()
	start := time.Now()
	var said time.Time
	a, err := s.WaitSettledReporting(wctx, time.Second, func(a devstack.Audit) {
		if time.Since(said) < 5*time.Second {
			return
		}
		said = time.Now()
		fmt.Println("  " + settleProgress(a, time.Since(start), st, time.Now()))
	})
	if err != nil {
		return err
	}
	for _, p := range a.Problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("tables before: %s\n", before.Summary())
	fmt.Println(a.Summary())
	if !a.OK() {
		return errors.New("audit failed: a promise is broken")
	}
	return nil
}

// demoSettleTimeout bounds the wait for the pipeline after driving: longer
// than an ordered consumer's whole hold (app.retryDelay, 321 s), so a demo
// never fails while an event is still legitimately held.
const demoSettleTimeout = 6 * time.Minute

// settleIntro says what demo -attach waits for, and where to watch it.
func settleIntro(st devstack.State) string {
	msg := "waiting for the pipeline to settle: every outbox record published (or parked) and applied by its consumers, two audits in a row alike (at most " + demoSettleTimeout.String() + ")"
	if st.Console != "" {
		msg += "; watch it in the console: " + st.Console
	}
	return msg
}

// settleProgress is one line of what the wait still waits for.
func settleProgress(a devstack.Audit, waited time.Duration, st devstack.State, now time.Time) string {
	msg := fmt.Sprintf("after %s: %d of %d outbox records pending, %d parked; %d event(s) not yet applied by every consumer",
		waited.Round(time.Second), a.Pending, a.Events, a.Parked, a.Lost)
	if a.Pending > 0 && st.ReconcileEvery > 0 {
		msg += fmt.Sprintf("; the reconciler re-sends pending records older than %s (-reconcile-after) on its runs every %s (-reconcile-every)", st.ReconcileAfter, st.ReconcileEvery)
		if next := st.NextReconcile(now); !next.IsZero() {
			msg += fmt.Sprintf(", the next in %s", next.Sub(now).Round(time.Second))
		}
	}
	if a.Lost > 0 {
		msg += "; an ordered consumer holds an early event until its predecessor is applied (up to 321 s before it is dead-lettered)"
	}
	return msg
}
