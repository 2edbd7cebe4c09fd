package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/faults"
)

// Report sums every epoch.
type Report struct {
	Epochs             int
	Orders             int
	Committed          int
	Events             int
	Published          int
	Pending            int
	Parked             int
	Lost               int
	Ghost              int
	DoubleApplied      int
	DuplicatesAbsorbed int64
	LedgerApplied      int
	Notifications      int
	// Client-side view: acknowledged changes and ambiguous answers.
	Acked, Ambiguous, Conflicts, Unexpected int64
	// Pipeline counters.
	PollerRestarts  int
	ESMRetries      int64
	ESMDiscarded    int64 // batches sent to the on-failure destination (records stay pending)
	BusRetries      int64
	BusDeadLettered int64
	// DeadLettered counts events that reached a consumer DLQ (redrive
	// policy or a permanent error); Redriven those moved back by the
	// audit's redrive. ConsumerTimeouts counts consumer invocations that
	// overran their function timeout; ConsumerRedeliveries messages
	// received again after a failed, timed-out or partial invocation.
	DeadLettered int
	Redriven     int
	// Shipments, ShipmentDuplicates and ShipmentsMissing are the fulfilment
	// provider's audit (internal/devstack AuditShipments; missing counts open
	// shipments of paid cancellations too). With NaiveProvider, each
	// duplicate is traced: to an injected crash before COMPLETED, to a
	// provider answer lost after it acted, or untraced (a failure).
	Shipments, ShipmentDuplicates, ShipmentsMissing                                                      int
	DuplicatesFromCrashes, DuplicatesFromLateAnswers, DuplicatesFromFailedCompletion, DuplicatesUntraced int
	// AppliedOutOfOrder counts events an ordered consumer certainly
	// committed after a later event of the same aggregate, by the commit
	// witness on the SDK stack (order_witness.go; OrderedCommitsWitnessed
	// is how many ordered transactions it saw commit);
	// SequenceGapsDeadLettered the events dead-lettered with reason
	// sequence_gap (and redriven by the audit), each traced to the event it
	// waited for: parked by the relay (SequenceGapsToParked), dead-lettered
	// by the same consumer (SequenceGapsToDeadLettered), or on its way and
	// applied after the gap was dead-lettered (SequenceGapsClosedLate: the
	// hold bound, scaled down to seconds in chaos, was shorter than its
	// delay). SequenceGapsUntraced counts the rest, a failure.
	AppliedOutOfOrder, SequenceGapsDeadLettered, OrderedCommitsWitnessed                           int
	SequenceGapsToParked, SequenceGapsToDeadLettered, SequenceGapsClosedLate, SequenceGapsUntraced int
	// ParkedRedriven counts parked records the audit redrove because a
	// later event of their aggregate exists (an ordered consumer holds it).
	ParkedRedriven int
	// Buffered counts events an ordered consumer stored in its resequencer
	// buffer because they arrived before their predecessor (witnessed on
	// the SDK stack), BufferDrained those applied from it right after
	// their predecessor, StillBuffered those left waiting after the audit
	// (each is an event not applied: a failure), LongestBufferedWait the
	// longest wait and BufferAlarms the waits past the
	// OldestBufferedAgeSeconds alarm's threshold (config.DefaultBufferedAgeAlarm).
	Buffered, BufferDrained, StillBuffered, BufferAlarms int
	LongestBufferedWait                                  time.Duration
	// HostileWritten counts legacy changes committed with text SQS refuses
	// (HostileReasons); each must end parked.
	HostileWritten       int
	ConsumerTimeouts     int64
	ConsumerRedeliveries int64
	ReconcilerResends    int
	ParkedMessages       int // messages on the parked-records DLQ
	// Faults counts injected faults by kind, over all epochs.
	Faults map[faults.Kind]int64
	// Problems are the audit's findings (first 20).
	Problems []string
	// FailedEpochs lists epochs whose audit failed.
	FailedEpochs []int
	Elapsed      time.Duration
}

// OK reports whether every promise held in every epoch.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Ghost == 0 && r.DoubleApplied == 0 && r.Pending == 0 && r.DeadLettered == r.Redriven &&
		r.ShipmentsMissing == 0 && r.DuplicatesUntraced == 0 && r.AppliedOutOfOrder == 0 && r.SequenceGapsUntraced == 0 && len(r.FailedEpochs) == 0 &&
		r.SequenceGapsDeadLettered == 0 && r.StillBuffered == 0
}

// Summary is the one-line result of make chaos.
func (r Report) Summary() string {
	return fmt.Sprintf("orders=%d committed=%d events=%d published=%d lost=%d ghost=%d double_applied=%d duplicates_absorbed=%d parked=%d dead_lettered=%d redriven=%d shipments=%d shipment_duplicates=%d shipments_missing=%d ordered_commits_witnessed=%d applied_out_of_order=%d sequence_gaps_dead_lettered=%d buffered=%d drained=%d still_buffered=%d gap_alarms=%d",
		r.Orders, r.Committed, r.Events, r.Published, r.Lost, r.Ghost, r.DoubleApplied, r.DuplicatesAbsorbed, r.Parked, r.DeadLettered, r.Redriven,
		r.Shipments, r.ShipmentDuplicates, r.ShipmentsMissing, r.OrderedCommitsWitnessed, r.AppliedOutOfOrder, r.SequenceGapsDeadLettered,
		r.Buffered, r.BufferDrained, r.StillBuffered, r.BufferAlarms)
}

// Table renders the per-kind fault counts and pipeline counters.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %10s\n", "injected fault", "count")
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-28s %10d\n", k, r.Faults[faults.Kind(k)])
	}
	fmt.Fprintf(&b, "\n%-28s %10s\n", "pipeline", "count")
	rows := []struct {
		name string
		v    int64
	}{
		{"epochs", int64(r.Epochs)},
		{"orders", int64(r.Orders)},
		{"committed changes", int64(r.Committed)},
		{"client-acknowledged", r.Acked},
		{"client ambiguous answers", r.Ambiguous},
		{"client 409 conflicts", r.Conflicts},
		{"outbox events", int64(r.Events)},
		{"published", int64(r.Published)},
		{"parked (DLQ + counted)", int64(r.Parked)},
		{"parked DLQ messages", int64(r.ParkedMessages)},
		{"parked redriven (held others)", int64(r.ParkedRedriven)},
		{"pending after drain", int64(r.Pending)},
		{"ledger entries", int64(r.LedgerApplied)},
		{"notifications", int64(r.Notifications)},
		{"duplicates absorbed", r.DuplicatesAbsorbed},
		{"ESM retries", r.ESMRetries},
		{"ESM batches to on-failure", r.ESMDiscarded},
		{"poller restarts", int64(r.PollerRestarts)},
		{"bus delivery retries", r.BusRetries},
		{"bus dead letters", r.BusDeadLettered},
		{"legacy hostile-text changes", int64(r.HostileWritten)},
		{"ordered commits witnessed", int64(r.OrderedCommitsWitnessed)},
		{"early events buffered", int64(r.Buffered)},
		{"  applied after their predecessor", int64(r.BufferDrained)},
		{"  still buffered after the audit", int64(r.StillBuffered)},
		{"  longest wait (ms)", r.LongestBufferedWait.Milliseconds()},
		{"  waits past the gap alarm", int64(r.BufferAlarms)},
		{"applied out of order", int64(r.AppliedOutOfOrder)},
		{"sequence gaps dead-lettered", int64(r.SequenceGapsDeadLettered)},
		{"  waiting for a parked event", int64(r.SequenceGapsToParked)},
		{"  waiting for a dead letter", int64(r.SequenceGapsToDeadLettered)},
		{"  missing one applied later", int64(r.SequenceGapsClosedLate)},
		{"  untraced", int64(r.SequenceGapsUntraced)},
		{"shipments", int64(r.Shipments)},
		{"shipment duplicates", int64(r.ShipmentDuplicates)},
		{"  from crashes before COMPLETED", int64(r.DuplicatesFromCrashes)},
		{"  from answers lost after acting", int64(r.DuplicatesFromLateAnswers)},
		{"  from answered, not completed", int64(r.DuplicatesFromFailedCompletion)},
		{"  untraced", int64(r.DuplicatesUntraced)},
		{"shipments missing", int64(r.ShipmentsMissing)},
		{"consumer dead-lettered", int64(r.DeadLettered)},
		{"consumer DLQ redriven", int64(r.Redriven)},
		{"consumer timeouts", r.ConsumerTimeouts},
		{"consumer redeliveries", r.ConsumerRedeliveries},
		{"reconciler re-sends", int64(r.ReconcilerResends)},
		{"lost", int64(r.Lost)},
		{"ghost", int64(r.Ghost)},
		{"double applied", int64(r.DoubleApplied)},
	}
	for _, row := range rows {
		fmt.Fprintf(&b, "%-28s %10d\n", row.name, row.v)
	}
	return b.String()
}
