package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The history audit. It runs once the pipeline is drained and every DLQ
// redriven (drainRedriveAndAudit), on the operator's client (no injected
// faults), and counts, for every consumer of the epoch:
//
//   - owed events: the outbox records a consumer must apply once each — a
//     published record, or a parked one that reached the bus anyway (the
//     live ledger booked it). A consumer with a starting point per order
//     (the late ledger: dedup.SetBaseline) owes only the events after it:
//     sequence > its starting point (0 for an order it started applying
//     on its own before the starting points were set, or that did not
//     exist yet) — and never less than what it held: a starting point
//     never covers an event the consumer already held in its buffer when
//     the starting point was set (heldStart; the commit witness saw the
//     buffer write answer before the SetBaseline call began).
//   - lost: an owed event whose effect a ledger-shaped consumer (the live,
//     late, switched and restored ledgers, the funds consumer) does not
//     hold, plus devstack.Audit's (a committed change without its outbox
//     record, an event the notifier did not record) and shipments missing.
//   - double_applied: an effect for an event the consumer does not owe
//     (booked before its starting point, or for an event nobody
//     published), plus shipments made twice.
//   - balance_mismatch: per ledger and currency, the balance differs from
//     the sum the owed events imply (paid minus refunded amounts); per
//     funds order, the amount paid or refunded differs from the owed
//     events'; or an entry differs from its event (amount, direction,
//     currency, order, sequence, type). Comparing with the events, not with
//     the live ledger, makes the rebuilt and backfilled ledgers answer to
//     the same truth as the live one.
//   - refund_before_payment: a refund booked before its payment by a
//     consumer that must book them in order. By the consumer's effect log:
//     the commit witness saw the refund entry's transaction answer before
//     the payment entry's was first sent (booked_at cannot tell: it is
//     taken before the transaction is sent, so a refund retried after its
//     payment committed keeps an earlier one); or the refund is held
//     without its payment although the payment is owed (after the starting
//     point). Refunds the switched ledger booked while it ran unordered
//     are not counted (unordered promises no order). Plus every refund the
//     funds consumer refused as insufficient funds: its payment was not
//     booked when the gate let the refund through.
//   - stuck: per ordered consumer and order, a gate that did not reach the
//     order's last published sequence, an event still in its buffer
//     (devstack.Stack.Buffered), or a message still on its DLQ, once the
//     audit's redrives are done.

// outboxEvent is one outbox record as the audit reads it.
type outboxEvent struct {
	id, typ, agg, status string
	seq, createdMs       int64
	payload              json.RawMessage
}

// scanOutbox reads every outbox record.
func scanOutbox(ctx context.Context, client *dynamodb.Client, table string) ([]outboxEvent, error) {
	var out []outboxEvent
	err := scanTable(ctx, client, table, func(it map[string]types.AttributeValue) {
		id := strAttr(it[outbox.AttrEventID])
		if id == "" {
			return
		}
		out = append(out, outboxEvent{id: id, typ: strAttr(it[outbox.AttrEventType]), agg: strAttr(it[outbox.AttrAggregateID]),
			status: strAttr(it[outbox.AttrStatus]), seq: numAttr(it[outbox.AttrSequence]), createdMs: numAttr(it[outbox.AttrCreatedAt]),
			payload: json.RawMessage(strAttr(it[outbox.AttrPayload]))})
	})
	return out, err
}

func scanTable(ctx context.Context, client *dynamodb.Client, table string, f func(map[string]types.AttributeValue)) error {
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("chaos: scan %s: %w", table, err)
		}
		for _, it := range page.Items {
			f(it)
		}
	}
	return nil
}

func strAttr(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// impliedEntry returns the ledger entry an event implies (BookedAt zero),
// and false for an event that moves no money.
func impliedEntry(e outboxEvent) (ledger.Entry, bool) {
	le := ledger.Entry{EventID: e.id, EventType: e.typ, OrderID: e.agg, Sequence: e.seq}
	switch e.typ {
	case order.EventOrderPaid:
		var p order.Paid
		if json.Unmarshal(e.payload, &p) != nil {
			return le, false
		}
		le.AmountMinor, le.Currency, le.Direction = p.AmountMinor, p.Currency, ledger.DirectionCredit
		return le, true
	case order.EventOrderCancelled:
		var c order.Cancelled
		if json.Unmarshal(e.payload, &c) != nil || !c.WasPaid {
			return le, false
		}
		le.AmountMinor, le.Currency, le.Direction = c.RefundMinor, c.Currency, ledger.DirectionDebit
		return le, true
	}
	return le, false
}

// owedLedger returns the state a ledger that owes the events after start
// (by order id; absent: 0) must end with: their entries and, per currency,
// paid minus refunded.
func owedLedger(owed []outboxEvent, start map[string]int64) devstack.LedgerState {
	st := devstack.LedgerState{Entries: map[string]ledger.Entry{}, Balances: map[string]int64{}}
	for _, e := range owed {
		le, ok := impliedEntry(e)
		if !ok || e.seq <= start[e.agg] {
			continue
		}
		st.Entries[e.id] = le
		if le.Direction == ledger.DirectionDebit {
			st.Balances[le.Currency] -= le.AmountMinor
		} else {
			st.Balances[le.Currency] += le.AmountMinor
		}
	}
	return st
}

// fundsAsLedger views the funds consumer's state as a LedgerState whose
// "balances" are per order: "<order>/paid" and "<order>/refunded".
func fundsAsLedger(f fundsState) devstack.LedgerState {
	st := devstack.LedgerState{Entries: f.Entries, Balances: map[string]int64{}}
	for id, o := range f.Orders {
		st.Balances[id+"/paid"], st.Balances[id+"/refunded"] = o.Paid, o.Refunded
	}
	return st
}

// owedFunds is what the funds consumer must end with (fundsAsLedger's
// shape).
func owedFunds(owed []outboxEvent) devstack.LedgerState {
	st := devstack.LedgerState{Entries: map[string]ledger.Entry{}, Balances: map[string]int64{}}
	for _, e := range owed {
		le, ok := impliedEntry(e)
		if !ok {
			continue
		}
		st.Entries[e.id] = le
		if le.Direction == ledger.DirectionDebit {
			st.Balances[e.agg+"/refunded"] += le.AmountMinor
		} else {
			st.Balances[e.agg+"/paid"] += le.AmountMinor
		}
	}
	return st
}

// ledgerCheck is one ledger-shaped consumer the audit compares.
type ledgerCheck struct {
	name, table string
	got         devstack.LedgerState
	start       map[string]int64 // starting points (nil: none)
	orderedFrom time.Time        // refunds committed before it are not checked for order
	funds       bool
}

// auditCounts are the audit's counts for one epoch.
type auditCounts struct {
	lost, double, balance, refundFirst, insufficient, stuck int
	// refundsOrdered counts refunds whose commit order against their
	// payment's the effect log could judge (both entries witnessed);
	// notOwed the owed events a starting point excluded (the late
	// ledger's).
	refundsOrdered, notOwed int
	problems                []string
}

func (c *auditCounts) problem(format string, args ...any) {
	if len(c.problems) < 30 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// checkLedgers counts lost, double_applied, balance_mismatch and
// refund_before_payment over the ledger-shaped consumers.
func checkLedgers(events []outboxEvent, owed []outboxEvent, checks []ledgerCheck, w *orderWitness, c *auditCounts) {
	paymentOf := map[string]outboxEvent{} // order id → its OrderPaid
	for _, e := range events {
		if e.typ == order.EventOrderPaid {
			paymentOf[e.agg] = e
		}
	}
	for _, lc := range checks {
		want := owedLedger(owed, lc.start)
		if lc.funds {
			want = owedFunds(owed)
		} else if lc.start != nil {
			c.notOwed += len(owedLedger(owed, nil).Entries) - len(want.Entries)
		}
		d := devstack.CompareLedgers(want, lc.got)
		c.lost += len(d.Missing)
		c.double += len(d.Extra)
		c.balance += len(d.Different) + len(d.Balances)
		for _, p := range d.All() {
			c.problem("%s: %s", lc.name, p)
		}
		for id, r := range lc.got.Entries {
			if r.Direction != ledger.DirectionDebit {
				continue
			}
			p, ok := paymentOf[r.OrderID]
			if !ok || p.seq <= lc.start[r.OrderID] {
				continue // its payment is before the starting point: not this consumer's
			}
			rw, rok := w.entryWindow(lc.table, id)
			if rok && !lc.orderedFrom.IsZero() && rw.earliest.Before(lc.orderedFrom) {
				continue // booked while the consumer ran unordered
			}
			if _, booked := lc.got.Entries[p.id]; !booked {
				c.refundFirst++
				c.problem("%s: refund %s of order %s booked without its payment %s", lc.name, id, r.OrderID, p.id)
				continue
			}
			pw, pok := w.entryWindow(lc.table, p.id)
			if rok && pok {
				c.refundsOrdered++
			}
			if rok && pok && !rw.latest.IsZero() && rw.latest.Before(pw.earliest) {
				c.refundFirst++
				c.problem("%s: refund %s of order %s committed by %s, before its payment %s was first sent at %s", lc.name, id, r.OrderID,
					rw.latest.Format(time.RFC3339Nano), p.id, pw.earliest.Format(time.RFC3339Nano))
			}
		}
	}
}

// checkStuck counts, per ordered consumer of s and order, a gate short of
// the order's last published sequence or an event still buffered, and
// every message left on a consumer DLQ.
func checkStuck(ctx context.Context, s *devstack.Stack, admin *dynamodb.Client, events []outboxEvent, c *auditCounts) error {
	last := map[string]int64{} // order id → last published sequence
	for _, e := range events {
		if e.status == outbox.StatusPublished && e.seq > last[e.agg] {
			last[e.agg] = e.seq
		}
	}
	buffered, err := listBuffered(ctx, s)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(s.Sweeps))
	for name := range s.Sweeps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prefix := s.StateConsumer(name) + dedup.SequenceInfix + order.AggregateType + "#"
		gate := map[string]int64{}
		err := scanTable(ctx, admin, s.StateTables[name], func(it map[string]types.AttributeValue) {
			if pk := strAttr(it[dedup.AttrPK]); strings.HasPrefix(pk, prefix) {
				gate[strings.TrimPrefix(pk, prefix)] = numAttr(it[dedup.AttrLastSequence])
			}
		})
		if err != nil {
			return err
		}
		stuck := map[string]bool{}
		for agg, l := range last {
			if gate[agg] < l {
				stuck[agg] = true
				c.problem("stuck: %s's gate of order %s is at %d, its last published sequence %d", name, agg, gate[agg], l)
			}
		}
		for _, b := range buffered[name] {
			if !stuck[b.AggregateID] {
				stuck[b.AggregateID] = true
				c.problem("stuck: %s still buffers sequence %d of order %s (%s)", name, b.Sequence, b.AggregateID, b.FailedReason)
			}
		}
		c.stuck += len(stuck)
	}
	for name, p := range s.Consumers {
		if n := p.DLQ.Len(); n > 0 {
			c.stuck += n
			c.problem("stuck: %d message(s) left on %s's DLQ after the redrives", n, name)
		}
	}
	return nil
}

// heldStart returns the late ledger's starting points as the audit holds
// them: SetBaseline's, but below the lowest event the ledger certainly held
// in its buffer before the call began. A starting point above such an event
// counts as a problem here, and its event as lost if it was never applied
// (checkLedgers).
func (ep *historyEpoch) heldStart(c *auditCounts) map[string]int64 {
	start := map[string]int64{}
	for id, last := range ep.start {
		start[id] = last
		if h := ep.witness.heldBefore(lateLedger, order.AggregateType, id, ep.baselineAt[id]); h > 0 && h-1 < last {
			start[id] = h - 1
			c.problem("%s: starting point of order %s set after sequence %d, though it already held sequence %d", lateLedger, id, last, h)
		}
	}
	return start
}

// retried calls f until it succeeds, up to 6 times: the audit's reads on
// the stack's own client meet injected faults too.
func retried[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		v, err := f()
		if err == nil || attempt == 5 || ctx.Err() != nil {
			return v, err
		}
	}
}

// audit checks the epoch's consumers (see the top of this file) and adds
// the epoch's injections and findings to rep.
func (ep *historyEpoch) audit(ctx context.Context, sa devstack.Audit, dl dlqCounts, inj *faults.Injector, rep *HistoryReport, epoch int, step func(string, ...any)) error {
	s := ep.s
	events, err := scanOutbox(ctx, ep.admin, s.Settings.OutboxTable)
	if err != nil {
		return err
	}
	live, err := retried(ctx, func() (devstack.LedgerState, error) { return s.ReadLedger(ctx, s.Settings.LedgerTable, s.Ledger) })
	if err != nil {
		return err
	}
	var owed []outboxEvent
	for _, e := range events {
		if _, booked := live.Entries[e.id]; e.status == outbox.StatusPublished || booked {
			owed = append(owed, e)
		}
	}
	c := auditCounts{lost: sa.Lost - sa.LedgerLost, double: sa.DoubleApplied - sa.BalanceMismatch}
	checks := []ledgerCheck{{name: routing.ConsumerLedger, table: s.Settings.LedgerTable, got: live}}
	for _, name := range []string{lateLedger, switchLedger, restoredLedger} {
		l, table := ep.ledgers[name], ep.tables[name]
		got, err := retried(ctx, func() (devstack.LedgerState, error) { return s.ReadLedger(ctx, table, l) })
		if err != nil {
			return err
		}
		lc := ledgerCheck{name: name, table: table, got: got}
		switch name {
		case lateLedger:
			lc.start = ep.heldStart(&c)
		case switchLedger:
			lc.orderedFrom = ep.switchAt
		}
		checks = append(checks, lc)
	}
	fs, err := readFunds(ctx, ep.admin, ep.funds.table)
	if err != nil {
		return err
	}
	checks = append(checks, ledgerCheck{name: fundsConsumer, table: ep.funds.table, got: fundsAsLedger(fs), funds: true})

	for _, p := range sa.Problems {
		c.problem("%s", p)
	}
	checkLedgers(events, owed, checks, ep.witness, &c)
	why := map[string]int{}
	for _, l := range dl.letters {
		if why[l.consumer+"/"+l.letter.Reason] == 0 && l.letter.Reason != "max_receive_count" {
			step("first %s dead letter of %s: %s", l.letter.Reason, l.consumer, l.letter.Error)
		}
		why[l.consumer+"/"+l.letter.Reason]++
		switch l.letter.Reason {
		case reasonInsufficientFunds:
			c.insufficient++
			c.refundFirst++
			c.problem("%s refused a refund as insufficient funds: %s", l.consumer, l.letter.Error)
		case dedup.ReasonDrainFailed, dedup.ReasonDrainPanic, dedup.ReasonDrainTimeout:
			rep.DrainDeadLettered++
		}
	}
	step("dead letters by consumer/reason: %v", why)
	ship, err := retried(ctx, func() (devstack.ShipmentAudit, error) { return s.AuditShipments(ctx) })
	if err != nil {
		return err
	}
	c.lost += ship.Missing + ship.NotCancelled
	c.double += ship.Duplicates
	for _, p := range ship.Problems {
		c.problem("%s", p)
	}
	if err := checkStuck(ctx, s, ep.admin, events, &c); err != nil {
		return err
	}
	_, inversions, problems := ep.witness.audit(ep.floor)
	for _, p := range problems {
		c.problem("%s", p)
	}

	rep.Epochs++
	rep.Orders += sa.Orders
	rep.Committed += sa.Committed
	rep.Events += sa.Events
	rep.Published += sa.Published
	rep.Parked += sa.Parked
	rep.Replayed += s.Bus.Stats().Replayed
	hf := ep.hf
	rep.DrainErrors += hf.drainErrors.Load()
	rep.DrainPanics += hf.drainPanics.Load()
	rep.DrainEvents += hf.drainEvents.Load()
	rep.DLQRefused += hf.dlqRefused.Load()
	rep.BufferedDLQRefused += hf.bufferedDLQRefused.Load()
	rep.AdjacentConcurrent += hf.pairs.Load()
	rep.BackupPauses += hf.pauses.Load()
	rep.GateAndEffectFailed += int64(ep.witness.gateAndEffectFailed(ep.funds.table))
	for k, n := range inj.Stats().ByKind() {
		rep.Faults[k] += n
	}
	rep.DeadLettered += dl.deadLettered
	rep.Redriven += dl.redriven
	rep.Lost += c.lost
	rep.DoubleApplied += c.double
	rep.AppliedOutOfOrder += inversions
	rep.BalanceMismatch += c.balance
	rep.RefundBeforePayment += c.refundFirst
	rep.InsufficientFunds += c.insufficient
	rep.RefundsOrdered += c.refundsOrdered
	rep.NotOwed += c.notOwed
	rep.Stuck += c.stuck
	rep.Ghost += sa.Ghost
	if c.lost+c.double+inversions+c.balance+c.refundFirst+c.stuck+sa.Ghost > 0 {
		rep.FailedEpochs = append(rep.FailedEpochs, epoch)
		for _, p := range c.problems {
			if len(rep.Problems) < 30 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("epoch %d: %s", epoch, p))
			}
		}
	}
	step("audit: %d events, lost=%d double_applied=%d applied_out_of_order=%d balance_mismatch=%d refund_before_payment=%d stuck=%d ghost=%d",
		sa.Events, c.lost, c.double, inversions, c.balance, c.refundFirst, c.stuck, sa.Ghost)
	return nil
}
