package regions

import (
	"context"
	"errors"
	"testing"
	"time"
)

func startRuntime(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt
}

func audit(t *testing.T, rt *Runtime) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs, err := Observe(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	return Audit(obs)
}

func settle(t *testing.T, rt *Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Settle(ctx); err != nil {
		t.Fatal(err)
	}
}

// The bank in two Regions, without replication: accounts opened in A and
// in B, each written in its home Region; each Region publishes its own
// events, forwards the other consumer's, and each consumer applies every
// event once, the statement in order; the audit finds nothing.
func TestBankInTwoRegions(t *testing.T) {
	t.Parallel()
	rt := startRuntime(t, Config{ReconcileEvery: time.Hour})
	ctx := context.Background()
	b := rt.Bank
	if err := b.Open(ctx, RegionA, "acc-a", 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Open(ctx, RegionB, "acc-b", 50); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := b.Deposit(ctx, "acc-a", int64(10+i)); err != nil {
			t.Fatal(err)
		}
		if err := b.Withdraw(ctx, "acc-b", 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Withdraw(ctx, "acc-b", 1000); !errors.Is(err, ErrInsufficientFunds) {
		t.Errorf("overdraft: %v, want ErrInsufficientFunds", err)
	}
	if err := b.Deposit(ctx, "acc-x", 1); !errors.Is(err, ErrNoAccount) {
		t.Errorf("deposit to an unknown account: %v, want ErrNoAccount", err)
	}
	settle(t, rt)

	r := audit(t, rt)
	if !r.OK() || r.Committed != 8 {
		t.Fatalf("audit: %s(want 8 events and no finding)", r)
	}
	obs, err := Observe(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	if got := obs.Statements["acc-a"].Seqs; len(got) != 4 {
		t.Errorf("statement of acc-a (written in A, applied in B) %v, want 4 sequences", got)
	}
	for _, c := range obs.Committed {
		if n := obs.PublishedBy[c.Event.EventID][c.Region]; n < 1 {
			t.Errorf("event %s of %s not published by its origin %s", c.Event.EventID, c.Event.AggregateID, c.Region)
		}
	}
	if a, bb := rt.A.Stack.Bus.Stats().Forwarded, rt.B.Stack.Bus.Stats().Forwarded; a != 4 || bb != 4 {
		t.Errorf("forwarded into A %d, into B %d; want 4 and 4 (the other Region's events)", a, bb)
	}
}

// Region B goes down while both Regions keep writing: A's events reach
// A's consumer and wait for B's on B's queue, B's own events wait in B's
// stream, and the audit sees them missing; once B is back, nothing is
// lost and nothing applied twice.
func TestRegionDownLosesNothing(t *testing.T) {
	t.Parallel()
	rt := startRuntime(t, Config{ReconcileEvery: time.Hour})
	ctx := context.Background()
	b := rt.Bank
	if err := b.Open(ctx, RegionA, "acc-a", 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Open(ctx, RegionB, "acc-b", 100); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if err := rt.Suspend(RegionB); err != nil {
		t.Fatal(err)
	}
	if err := rt.Suspend("us-east-1"); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("Suspend of an unknown Region: %v", err)
	}
	for range 3 {
		if err := b.Deposit(ctx, "acc-a", 1); err != nil {
			t.Fatal(err)
		}
		if err := b.Deposit(ctx, "acc-b", 2); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, rt) // A only
	down := audit(t, rt)
	// acc-a's 3 deposits wait for the statement (in B), acc-b's 3 for both
	// consumers.
	if down.Count(KindLost) != 9 || down.Count(KindLost) != len(down.Findings) {
		t.Errorf("while B is down: %s(want 9 lost: A's 3 for statement, B's 3 for each consumer)", down)
	}
	if err := rt.Resume(RegionB); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if r := audit(t, rt); !r.OK() || r.Committed != 8 {
		t.Errorf("after B is back: %s(want 8 events and no finding)", r)
	}
}
