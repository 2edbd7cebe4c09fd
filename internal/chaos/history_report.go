package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/faults"
)

// HistoryReport sums every epoch of a history run (RunHistory).
type HistoryReport struct {
	Epochs, Orders, Committed, Events, Published, Parked int

	// Injected history faults (the summary line's first part).
	//
	// Replays: archive replays started into the live consumers (ledger,
	// notifier, funds, fulfilment), two per epoch over overlapping ranges
	// while orders keep coming; Replayed: events the bus replayed, to any
	// rule (the backfills' included).
	Replays  int
	Replayed int64
	// LateBaselines: starting points set for the ordered consumer added
	// late (dedup.SetBaseline per order from the orders table, while events
	// are in flight); BaselinesLowered: those set below the order's version
	// because the consumer already held a later event; BaselinesKept:
	// orders it had already started applying (no starting point written).
	LateBaselines, BaselinesLowered, BaselinesKept int
	// Switched: consumers switched from unordered to ordered, then
	// backfilled; Restored: consumers rebuilt from a backup (a copy of the
	// live ledger's table taken mid-run), keeping its consumer name, and
	// backfilled from shortly before the backup; Backfills: archive
	// replays to one consumer's rule (late, switched and restored ones).
	Switched, Restored, Backfills int
	// DrainErrors, DrainPanics: applies of a buffered event in the drain
	// the wrapped handler failed (DrainEvents: the events chosen);
	// DrainDeadLettered: buffered events dead-lettered on their own with a
	// drain reason (dedup.ReasonDrainFailed, ReasonDrainPanic,
	// ReasonDrainTimeout), then redriven.
	DrainErrors, DrainPanics, DrainEvents, DrainDeadLettered int64
	// DLQRefused: consumer DLQ sends refused; BufferedDLQRefused: those
	// of buffered events (kept buffered, marked failed).
	DLQRefused, BufferedDLQRefused int64
	// AdjacentConcurrent: pairs of adjacent sequences delivered to the
	// funds consumer at once; GateAndEffectFailed: its transactions that
	// DynamoDB cancelled on the gate and the refund's condition together
	// (the race the pairs provoke; the gate decides).
	AdjacentConcurrent, GateAndEffectFailed int64
	// BackupPauses: live-ledger invocations that waited for the backup.
	BackupPauses int64
	// Faults: internal/faults' injections at every boundary, by kind.
	Faults map[faults.Kind]int64

	// Audit (the summary line's second part: each must be 0).
	//
	// Lost: a committed change without its outbox record, or an event a
	// consumer owes (see historyAudit) that it never applied.
	// DoubleApplied: an effect a consumer should not have (an event it
	// does not owe, booked: e.g. before its starting point), or a shipment
	// twice. AppliedOutOfOrder: an ordered consumer's gate certainly
	// committed sequence n after n+1 (the commit witness). BalanceMismatch,
	// RefundBeforePayment, Stuck: see historyAudit. Ghost: an outbox record
	// or an effect for a change nobody committed.
	Lost, DoubleApplied, AppliedOutOfOrder, BalanceMismatch, RefundBeforePayment, Stuck, Ghost int
	// InsufficientFunds: refunds the funds consumer refused because their
	// payment was not booked while the gate held (also in
	// RefundBeforePayment).
	InsufficientFunds int
	// RefundsOrdered: refunds whose commit the effect log could order
	// against their payment's (what refund_before_payment judged);
	// NotOwed: money events the late ledger's starting points excluded
	// (the backfill brought them again: none may be booked).
	RefundsOrdered, NotOwed int
	// DeadLettered and Redriven: consumer DLQ messages, and those the
	// audit moved back.
	DeadLettered, Redriven int
	// Problems are the audit's findings (first 30).
	Problems []string
	// FailedEpochs lists epochs whose audit failed.
	FailedEpochs []int
	Elapsed      time.Duration
}

// OK reports whether every count of the audit is zero.
func (r HistoryReport) OK() bool {
	return r.Lost == 0 && r.DoubleApplied == 0 && r.AppliedOutOfOrder == 0 && r.BalanceMismatch == 0 &&
		r.RefundBeforePayment == 0 && r.Stuck == 0 && r.Ghost == 0 && len(r.FailedEpochs) == 0
}

// Summary is the one-line result of make chaos-history: the injected
// faults, then the audit's counts, each of which must be 0.
func (r HistoryReport) Summary() string {
	return fmt.Sprintf("chaos-history: epochs=%d orders=%d events=%d replays=%d replayed=%d late_baselines=%d baselines_lowered=%d switched_to_ordered=%d restored_from_backup=%d backfills=%d "+
		"drain_errors=%d drain_panics=%d drain_dead_lettered=%d dlq_sends_refused=%d buffered_dlq_sends_refused=%d adjacent_concurrent=%d gate_and_effect_failed=%d boundary_faults=%d "+
		"lost=%d double_applied=%d applied_out_of_order=%d balance_mismatch=%d refund_before_payment=%d stuck=%d ghost=%d wall=%s",
		r.Epochs, r.Orders, r.Events, r.Replays, r.Replayed, r.LateBaselines, r.BaselinesLowered, r.Switched, r.Restored, r.Backfills,
		r.DrainErrors, r.DrainPanics, r.DrainDeadLettered, r.DLQRefused, r.BufferedDLQRefused, r.AdjacentConcurrent, r.GateAndEffectFailed, sum(r.Faults),
		r.Lost, r.DoubleApplied, r.AppliedOutOfOrder, r.BalanceMismatch, r.RefundBeforePayment, r.Stuck, r.Ghost, r.Elapsed.Round(time.Second))
}

// Table renders every count, one per line.
func (r HistoryReport) Table() string {
	var b strings.Builder
	rows := []struct {
		name string
		v    int64
	}{
		{"epochs", int64(r.Epochs)}, {"orders", int64(r.Orders)}, {"committed changes", int64(r.Committed)},
		{"outbox events", int64(r.Events)}, {"published", int64(r.Published)}, {"parked", int64(r.Parked)},
		{"replays into live consumers", int64(r.Replays)}, {"events replayed (all rules)", r.Replayed},
		{"late consumer: starting points", int64(r.LateBaselines)}, {"  lowered (event held)", int64(r.BaselinesLowered)},
		{"  kept (already started)", int64(r.BaselinesKept)}, {"  money events before them", int64(r.NotOwed)},
		{"switched unordered→ordered", int64(r.Switched)}, {"restored from a backup", int64(r.Restored)},
		{"backfills", int64(r.Backfills)}, {"backup pauses (ledger)", r.BackupPauses},
		{"drain: events failing", r.DrainEvents}, {"  errors injected", r.DrainErrors}, {"  panics injected", r.DrainPanics},
		{"  dead-lettered on their own", r.DrainDeadLettered},
		{"DLQ sends refused", r.DLQRefused}, {"  of buffered events", r.BufferedDLQRefused},
		{"adjacent sequences at once", r.AdjacentConcurrent}, {"  gate+effect both failed", r.GateAndEffectFailed},
		{"consumer dead-lettered", int64(r.DeadLettered)}, {"consumer DLQ redriven", int64(r.Redriven)},
		{"lost", int64(r.Lost)}, {"double applied", int64(r.DoubleApplied)}, {"applied out of order", int64(r.AppliedOutOfOrder)},
		{"balance mismatch", int64(r.BalanceMismatch)}, {"refund before payment", int64(r.RefundBeforePayment)},
		{"  refunds ordered by the log", int64(r.RefundsOrdered)}, {"  insufficient funds refused", int64(r.InsufficientFunds)}, {"stuck", int64(r.Stuck)}, {"ghost", int64(r.Ghost)},
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "%-32s %10d\n", row.name, row.v)
	}
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "\n%-32s %10s\n", "boundary fault (internal/faults)", "count")
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-32s %10d\n", k, r.Faults[faults.Kind(k)])
	}
	return b.String()
}
