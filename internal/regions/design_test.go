package regions

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/tagtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
)

// One test per design point of docs/MULTI-REGION.md, each against the
// two-Region runtime with internal/mrec replicating the global tables.

// reconcileAfter is the tests' stale age: short, so a reconciler would
// act within the tests' waits if it were going to.
const reconcileAfter = 300 * time.Millisecond

func startMREC(t *testing.T, m MRECConfig) *Runtime {
	t.Helper()
	return startRuntime(t, Config{Replication: MREC(m), ReconcileAfter: reconcileAfter})
}

// writeIn deposits 1 on account id n times (in its home Region) and
// returns the event ids written.
func writeIn(t *testing.T, rt *Runtime, id string, n int) []string {
	t.Helper()
	before := len(rt.Bank.Committed())
	for range n {
		if err := rt.Bank.Deposit(context.Background(), id, 1); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for _, c := range rt.Bank.Committed()[before:] {
		ids = append(ids, c.Event.EventID)
	}
	return ids
}

func wantClean(t *testing.T, rt *Runtime) {
	t.Helper()
	settle(t, rt)
	if r := audit(t, rt); !r.OK() {
		t.Errorf("audit: %s", r)
	}
}

// published reports which of ids Region r's own relay or reconciler put
// on its bus.
func published(r *Region, ids []string) []string {
	own := ownPublished(r)
	var out []string
	for _, id := range ids {
		if own[id] > 0 {
			out = append(out, id)
		}
	}
	return out
}

// (1) Each Region publishes only its own records: A's records replicate
// into B (B's stream carries them), but B's relay never publishes them and
// B's reconciler does not sweep them, even pending there past its stale
// age with A's stack down.
func TestEachRegionPublishesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	rt := startMREC(t, MRECConfig{Seed: 1})
	ctx := context.Background()
	if err := rt.Bank.Open(ctx, RegionA, "acc-a", 100); err != nil {
		t.Fatal(err)
	}
	if err := rt.Bank.Open(ctx, RegionB, "acc-b", 100); err != nil {
		t.Fatal(err)
	}
	writeIn(t, rt, "acc-a", 3)
	writeIn(t, rt, "acc-b", 3)
	settle(t, rt)
	obs, err := Observe(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	replicated := 0
	for _, images := range obs.Statuses[RegionB] {
		if images[0].Origin == RegionA {
			replicated++
		}
	}
	if replicated != 4 {
		t.Errorf("B's stream carries %d of A's records, want 4 (replicated)", replicated)
	}
	if r := Audit(obs); !r.OK() {
		t.Fatalf("audit: %s", r)
	}

	// A's stack down: its new records stay pending, replicate into B, and
	// age past B's ReconcileAfter there.
	if err := rt.Suspend(RegionA); err != nil {
		t.Fatal(err)
	}
	ids := writeIn(t, rt, "acc-a", 3)
	if err := rt.repl.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(reconcileAfter + 100*time.Millisecond)
	rep, err := rt.B.Stack.Reconciler.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := pendingOf(ctx, rt.B.Stack.DDB, RegionA); err != nil || len(pending) != 3 {
		t.Fatalf("A's records pending in B: %v (%v), want the 3 new ones", pending, err)
	}
	if got := published(rt.B, ids); rep.TakenOver != 0 || len(got) != 0 {
		t.Errorf("B's reconciler without a takeover: taken over %d, B published %v of A's records; want none", rep.TakenOver, got)
	}
	if err := rt.Resume(RegionA); err != nil {
		t.Fatal(err)
	}
	wantClean(t, rt)
}

// (2) Status only moves forward under last writer wins: with replication
// paused while A publishes, and long-tailed delays after, the PENDING
// image replicated late never undoes PUBLISHED, in A or in B.
func TestStatusOnlyMovesForward(t *testing.T) {
	t.Parallel()
	rt := startMREC(t, MRECConfig{Seed: 2, TailProb: 0.3, TailMin: 50 * time.Millisecond, TailMax: 300 * time.Millisecond})
	ctx := context.Background()
	if err := rt.Bank.Open(ctx, RegionA, "acc-a", 100); err != nil {
		t.Fatal(err)
	}
	if err := rt.repl.Pause(); err != nil {
		t.Fatal(err)
	}
	ids := writeIn(t, rt, "acc-a", 10)
	if err := rt.A.Stack.Settle(ctx); err != nil { // A published them all
		t.Fatal(err)
	}
	if err := rt.repl.Resume(); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	obs, err := Observe(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	for _, region := range []string{RegionA, RegionB} {
		n := 0
		for key, images := range obs.Statuses[region] {
			if images[len(images)-1].Status != outbox.StatusPublished {
				t.Errorf("%s: %s ends %s (images %+v), want %s", region, key, images[len(images)-1].Status, images, outbox.StatusPublished)
			}
			n++
		}
		if n != 11 {
			t.Errorf("%s's stream has %d records, want 11", region, n)
		}
	}
	if st := rt.repl.(replicationStats).Stats(); st.Coalesced == 0 {
		t.Errorf("replication %+v: want the PENDING images held by the pause coalesced into PUBLISHED", st)
	}
	if r := Audit(obs); !r.OK() || r.Committed != 1+len(ids) {
		t.Errorf("audit: %s", r)
	}
}

// (3) Consumers: the statement consumer, homed in B, applies A's events
// (forwarded by A's bus) exactly once and in sequence order, under
// reordering replication and with A's relay missing a third of the records
// (its reconciler re-sends them late, after later sequences).
func TestStatementAppliesForwardedEventsOnceInOrder(t *testing.T) {
	t.Parallel()
	rt := startMREC(t, MRECConfig{Seed: 3, TailProb: 0.2, TailMin: 50 * time.Millisecond, TailMax: 200 * time.Millisecond})
	ctx := context.Background()
	for _, id := range []string{"acc-1", "acc-2"} {
		if err := rt.Bank.Open(ctx, RegionA, id, 100); err != nil {
			t.Fatal(err)
		}
	}
	rt.A.Stack.MissRecords(func(e outbox.Envelope) bool { return e.Sequence%3 == 0 })
	writeIn(t, rt, "acc-1", 8)
	writeIn(t, rt, "acc-2", 8)
	settle(t, rt)
	obs, err := Observe(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acc-1", "acc-2"} {
		want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
		if got := obs.Statements[id].Seqs; !slices.Equal(got, want) {
			t.Errorf("statement of %s: %v, want %v", id, got, want)
		}
	}
	if got := rt.B.Stack.Bus.Stats().Forwarded; got < 18 {
		t.Errorf("forwarded into B: %d, want A's 18 events (and any duplicate the relay and reconciler sent)", got)
	}
	if r := Audit(obs); !r.OK() {
		t.Errorf("audit: %s", r)
	}
}

// (4) Takeover is an operator's decision: with A's records pending in B
// and replication paused for several reconciler periods, B publishes none
// of them; once declared, B's reconciler publishes every one; once A is
// back, A adopts B's marks (its relay having missed the records) and
// sends none again: each applied once.
func TestTakeoverOnlyWhenDeclared(t *testing.T) {
	t.Parallel()
	rt := startMREC(t, MRECConfig{Seed: 4})
	ctx := context.Background()
	if err := rt.Bank.Open(ctx, RegionA, "acc-a", 100); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if err := rt.Suspend(RegionA); err != nil {
		t.Fatal(err)
	}
	ids := writeIn(t, rt, "acc-a", 4)
	if err := rt.repl.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.repl.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // two of B's reconciler periods, past its stale age
	if got := published(rt.B, ids); len(got) != 0 {
		t.Fatalf("B published %v of A's records without a takeover", got)
	}
	if err := rt.repl.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := rt.repl.Lose(RegionA); err != nil {
		t.Fatal(err)
	}
	if err := reconciler.DeclareTakeover(ctx, rt.B.Stack.DDB, OutboxTable, reconciler.TakeoverDecl{
		Failed: RegionA, Survivor: RegionB, LagMargin: 50 * time.Millisecond, DeclaredBy: "test"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := rt.B.Stack.ReconcileNow(ctx); err != nil {
		t.Fatal(err)
	}
	marks, err := publishedMarks(ctx, rt.B.Stack.DDB, RegionA, RegionB)
	if err != nil {
		t.Fatal(err)
	}
	if got := published(rt.B, ids); len(got) != 4 || len(marks) != 4 {
		t.Fatalf("under the takeover B published %d of A's 4 pending records (%d PUBLISHED marks)", len(got), len(marks))
	}
	// A comes back; its relay misses the records (as if their stream
	// records had been lost), so its reconciler finds them and adopts.
	if err := rt.repl.Recover(RegionA); err != nil {
		t.Fatal(err)
	}
	if err := rt.repl.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	rt.A.Stack.MissRecords(func(e outbox.Envelope) bool { return slices.Contains(ids, e.EventID) })
	if err := rt.Resume(RegionA); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if got := published(rt.A, ids); len(got) != 0 {
		t.Errorf("A re-sent %v after the takeover, want each adopted", got)
	}
	if err := reconciler.ReleaseTakeover(ctx, rt.B.Stack.DDB, OutboxTable, RegionA, RegionB, "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	wantClean(t, rt)
}

// (5) Fencing end to end: with replication paused, a deposit of an
// account homed in A sent to B is refused and nothing is written; the
// audit of the settled runtime is clean. On a build without the fence
// (outbox_unfenced) B writes the account's next sequence beside A's, and
// the audit finds the loss and the divergence
// (TestUnfencedBuildFailsFencingEndToEnd).
func TestFencingEndToEnd(t *testing.T) {
	t.Parallel()
	rt := startMREC(t, MRECConfig{Seed: 5})
	ctx := context.Background()
	if err := rt.Bank.Open(ctx, RegionA, "acc-a", 100); err != nil {
		t.Fatal(err)
	}
	settle(t, rt) // the account and its home item are in B
	if err := rt.repl.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Bank.Deposit(ctx, "acc-a", 10); err != nil {
		t.Fatal(err)
	}
	err := rt.Bank.DepositIn(ctx, RegionB, "acc-a", 5)
	var nh *outbox.NotHomeError
	if !errors.Is(err, outbox.ErrNotHomeRegion) || !errors.As(err, &nh) || nh.Home != RegionA || nh.Here != RegionB {
		t.Errorf("deposit of an A-homed account in B: %v, want a *NotHomeError homed in %s", err, RegionA)
	}
	if err := rt.repl.Resume(); err != nil {
		t.Fatal(err)
	}
	settle(t, rt)
	if r := audit(t, rt); !r.OK() || r.Committed != 2 {
		t.Errorf("audit: %s(want 2 events, no finding)", r)
	}
}

// TestUnfencedBuildFailsFencingEndToEnd: the end-to-end fencing test is
// able to fail — on a build without the fence it does.
func TestUnfencedBuildFailsFencingEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds this package's tests again with -tags outbox_unfenced")
	}
	if !fencedBuild {
		t.Skip("this is the unfenced build")
	}
	t.Parallel()
	tagtest.MustFail(t, ".", "outbox_unfenced", "TestFencingEndToEnd")
}
