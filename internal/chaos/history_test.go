package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/chaos"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
)

// TestChaosHistory is the short make chaos-history run by make test: one
// epoch of 200 orders through every history path under faults — archive
// replays into the live consumers, a late ledger with starting points set
// while events are in flight and then backfilled, a ledger switched from
// unordered to ordered and backfilled, a ledger restored from a backup and
// backfilled, buffered events failing and panicking in the drain, refused
// DLQ sends, adjacent sequences delivered at once to a consumer whose
// refund depends on its payment. It fails if any count of the audit is
// not zero, and also if an injection did not bite (the audit would then
// prove nothing about it).
func TestChaosHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos history skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rep, err := chaos.RunHistory(ctx, chaos.HistoryConfig{Orders: 200, EpochOrders: 200, Seed: 31, OnlyEpoch: -1,
		// more of the rarer injections than the defaults, so that one
		// epoch reaches each path
		DrainFaultRate: 0.5, DLQRefuseRate: 0.5,
		Progress: func(l string) { t.Log(l) }})
	if err != nil {
		t.Fatalf("history run: %v", err)
	}
	t.Log(rep.Summary())
	t.Log("\n" + rep.Table())
	for _, p := range rep.Problems {
		t.Error(p)
	}
	if !rep.OK() {
		t.Fatalf("promises broken: %s", rep.Summary())
	}
	for _, c := range []struct {
		what string
		n    int64
	}{
		{"replays into the live consumers", int64(rep.Replays)}, {"events replayed", rep.Replayed},
		{"late starting points", int64(rep.LateBaselines)}, {"starting points lowered below a held event", int64(rep.BaselinesLowered)},
		{"money events before the starting points", int64(rep.NotOwed)},
		{"switches to ordered", int64(rep.Switched)}, {"restores from a backup", int64(rep.Restored)}, {"backfills", int64(rep.Backfills)},
		{"drain errors", rep.DrainErrors}, {"drain panics", rep.DrainPanics}, {"buffered events dead-lettered from the drain", rep.DrainDeadLettered},
		{"refused DLQ sends", rep.DLQRefused}, {"refused DLQ sends of buffered events", rep.BufferedDLQRefused},
		{"adjacent sequences delivered at once", rep.AdjacentConcurrent}, {"gate and refund condition failing together", rep.GateAndEffectFailed},
		{"refunds ordered by the effect log", int64(rep.RefundsOrdered)}, {"consumer dead letters redriven", int64(rep.Redriven)},
		{"boundary faults", rep.Faults[faults.ResponseLost] + rep.Faults[faults.Throttle]},
	} {
		if c.n == 0 {
			t.Errorf("no %s: the audit proved nothing about it", c.what)
		}
	}
}
