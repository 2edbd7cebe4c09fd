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
	// consumers, unpublished in B's stream.
	if down.Count(KindLost) != 9 || down.Count(KindStuckPending) != 3 || len(down.Findings) != 12 {
		t.Errorf("while B is down: %s(want 9 lost: A's 3 for statement, B's 3 for each consumer; B's 3 stuck pending)", down)
	}
	if err := rt.Resume(RegionB); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if r := audit(t, rt); !r.OK() || r.Committed != 8 {
		t.Errorf("after B is back: %s(want 8 events and no finding)", r)
	}
}

// A seeded workload with Region B down in the middle: the operations on
// B's accounts are skipped while it is down (a Region that is down takes
// no writes), A's go on; once B is back and the runtime settled, every
// committed event was applied once by each consumer, in order.
func TestWorkloadWithARegionDown(t *testing.T) {
	t.Parallel()
	rt := startRuntime(t, Config{ReconcileEvery: time.Hour})
	ctx := context.Background()
	st, err := rt.Run(ctx, Workload{Accounts: 4, Ops: 30, Seed: 7,
		Steps: []Step{SuspendStep(10, RegionB), ResumeStep(20, RegionB)}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped == 0 || st.Written < 4 || len(st.Steps) != 2 {
		t.Errorf("stats %+v: want some operations skipped while B was down, the 4 openings written, 2 steps", st)
	}
	settle(t, rt)
	if r := audit(t, rt); !r.OK() || r.Committed != st.Written {
		t.Errorf("audit: %s(want %d events and no finding)", r, st.Written)
	}
}

// recordingReplication records the calls the runtime makes; it replicates
// nothing.
type recordingReplication struct {
	replicas []Replica
	tables   []string
	calls    []string
}

func (r *recordingReplication) Pause() error  { r.calls = append(r.calls, "pause"); return nil }
func (r *recordingReplication) Resume() error { r.calls = append(r.calls, "resume"); return nil }
func (r *recordingReplication) Lose(region string) error {
	r.calls = append(r.calls, "lose "+region)
	return nil
}
func (r *recordingReplication) Recover(region string) error {
	r.calls = append(r.calls, "recover "+region)
	return nil
}
func (r *recordingReplication) Settle(context.Context) error {
	r.calls = append(r.calls, "settle")
	return nil
}
func (r *recordingReplication) Close() error { r.calls = append(r.calls, "close"); return nil }

// The replication plugs in through Config.Replication: it gets both
// Regions' clients and the global tables, Settle settles it first, steps
// drive it, Close closes it; and with replication the audit expects the
// Regions' accounts to agree (this one replicates nothing: diverged).
func TestReplicationPlugsIn(t *testing.T) {
	t.Parallel()
	rec := &recordingReplication{}
	rt := startRuntime(t, Config{ReconcileEvery: time.Hour, Replication: func(_ context.Context, replicas []Replica, tables []string) (Replication, error) {
		rec.replicas, rec.tables = replicas, tables
		return rec, nil
	}})
	if len(rec.replicas) != 2 || rec.replicas[0].Name != RegionA || rec.replicas[1].Name != RegionB || rec.replicas[0].DDB != rt.A.Stack.DDB ||
		rec.replicas[1].Streams != rt.B.Stack.Streams || rec.replicas[0].Endpoint == "" || rec.replicas[0].Endpoint == rec.replicas[1].Endpoint || len(rec.tables) != 2 || rec.tables[0] != OutboxTable || rec.tables[1] != AccountsTable {
		t.Fatalf("replication started with %+v, tables %v", rec.replicas, rec.tables)
	}
	ctx := context.Background()
	if _, err := rt.Run(ctx, Workload{Accounts: 2, Ops: 2, Seed: 1, Steps: []Step{
		ReplicationStep(0, "pause", Replication.Pause), ReplicationStep(1, "lose A", func(r Replication) error { return r.Lose(RegionA) }),
		ReplicationStep(2, "recover A", func(r Replication) error { return r.Recover(RegionA) }),
	}}); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if r := audit(t, rt); r.Count(KindDiverged) != 2 || r.Count(KindDiverged) != len(r.Findings) {
		t.Errorf("audit: %s(want each of the 2 accounts diverged, as nothing replicated, and nothing else)", r)
	}
	rt.Close()
	rt.Close()
	want := []string{"pause", "lose " + RegionA, "recover " + RegionA, "settle", "settle", "close"}
	if len(rec.calls) != len(want) {
		t.Fatalf("calls %v, want %v", rec.calls, want)
	}
	for i := range want {
		if rec.calls[i] != want[i] {
			t.Fatalf("calls %v, want %v", rec.calls, want)
		}
	}
}

// A small chaos run (internal/mrec with a tail, a pause, Region A lost,
// taken over and recovered, wrong-Region writes) audits clean: every check
// 0, the takeover published A's replicated pending records, the fence
// refused the probes.
func TestChaosRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos run of a few seconds")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Chaos(ctx, ChaosConfig{Seed: 3, Events: 240, Accounts: 8, ProbeEvery: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.String())
	if !r.OK() {
		t.Fatalf("chaos: %s", r)
	}
	if r.FenceRefusals == 0 || r.Written[RegionA] == 0 || r.Written[RegionB] == 0 || r.Replication.Replicated == 0 || len(r.Phases) != 8 {
		t.Errorf("want wrong-Region writes refused, events written in both Regions, writes replicated, 8 phases: %s", r)
	}
}
