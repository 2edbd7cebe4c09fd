package devstack

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// relayPublished is relay.Published's String, the publish spans' status.
var relayPublished = relay.Published.String()

// consoleOrders is how many orders the console shows (the latest first).
const consoleOrders = 15

// consoleView is what one render of the console shows.
type consoleView struct {
	Now            time.Time
	Orders         []orderView
	TotalOrders    int
	Pending        int
	OldestPending  string
	ReconcileEvery time.Duration
	ReconcileAfter time.Duration
	NextReconcile  string
	Parked         []relay.ParkedRecord
	DLQs           []dlqView
	RuleDLQs       []ruleDLQView
	Balances       []balanceView
	Rejecting      []string
	Refusing       []string
	DeadLetters    []string
	Errors         []string
}

type orderView struct {
	ID       string
	Last     string
	Events   []eventView
	Ledger   []ledger.Entry
	Notes    []notifier.Notification
	Shipment *fulfilment.ShipmentRecord
	Requests []provider.Request
}

type eventView struct {
	ID, Type, Status string
	Sequence         int64
	Committed        time.Time
	Steps            []stepView
	// Consumers has one cell per consumer the bus routes the event to.
	Consumers []consumerCell
}

type stepView struct {
	Label, Class, Detail string
	// MS is the milliseconds since the previous step; Total since commit.
	MS, Total int64
}

type consumerCell struct {
	Consumer, Outcome, Label string
	Total                    int64 // ms since commit of the last delivery; -1 when none
	Deliveries               int
}

type balanceView struct {
	Currency string
	Minor    int64
}

type dlqView struct {
	Consumer, Name string
	Messages       []sqsconsumer.DeadLetter
	Count          int
}

// ruleDLQView is a routing rule's DLQ: the events the bus could not
// deliver to Consumer's queue.
type ruleDLQView struct {
	Rule, Consumer, Name string
	Messages             []sqsconsumer.DeadLetter
	Count                int
}

// outcomeLabel is how the console names a consumer outcome.
func outcomeLabel(o string) string {
	switch o {
	case outboxtrace.OutcomeApplied:
		return "applied"
	case outboxtrace.OutcomeDuplicate:
		return "duplicate absorbed"
	case outboxtrace.OutcomeHeld:
		return "held for order"
	case outboxtrace.OutcomeDeadLettered:
		return "dead-lettered"
	case outboxtrace.OutcomeRetry:
		return "failed, will retry"
	case outboxtrace.OutcomeIgnored:
		return "ignored"
	case "":
		return "waiting"
	}
	return o
}

// routedTo returns the consumers the bus routes eventType to.
func routedTo(eventType string) []string {
	var out []string
	for _, r := range routing.Rules() {
		if slices.Contains(r.DetailTypes, eventType) && !slices.Contains(out, r.Consumer) {
			out = append(out, r.Consumer)
		}
	}
	sort.Strings(out)
	return out
}

// view reads what the console shows: a Scan of the outbox table (grouped
// by aggregate, the latest consoleOrders orders), each shown event's
// recorded path, the consumers' effects of the shown orders, the pending
// index (operator.ReadStatus), the parked records (relay.ListParked) and
// the consumer DLQs (sqsconsumer.Peek). A part that fails is named in
// Errors; the rest is shown.
func (c *console) view(ctx context.Context) consoleView {
	s := c.s
	v := consoleView{Now: time.Now(), ReconcileEvery: c.every, ReconcileAfter: c.after, Rejecting: s.Rejecting(), Refusing: s.Refusing()}
	for cons, types := range c.deadLetters {
		v.DeadLetters = append(v.DeadLetters, cons+": "+strings.Join(types, ", "))
	}
	sort.Strings(v.DeadLetters)
	if next := c.nextReconcile(); !next.IsZero() {
		v.NextReconcile = time.Until(next).Round(time.Second).String()
	}
	fail := func(what string, err error) { v.Errors = append(v.Errors, what+": "+err.Error()) }

	byOrder := map[string][]eventView{}
	latest := map[string]time.Time{}
	err := s.scan(ctx, s.Settings.OutboxTable, func(it map[string]types.AttributeValue) {
		id := str(it[outbox.AttrEventID])
		agg := str(it[outbox.AttrAggregateID])
		if id == "" || agg == "" {
			return
		}
		at, _ := time.Parse(time.RFC3339Nano, str(it[outbox.AttrOccurredAt]))
		seq, _ := strconv.ParseInt(numStr(it[outbox.AttrSequence]), 10, 64)
		byOrder[agg] = append(byOrder[agg], eventView{ID: id, Type: str(it[outbox.AttrEventType]), Status: str(it[outbox.AttrStatus]), Sequence: seq, Committed: at})
		if at.After(latest[agg]) {
			latest[agg] = at
		}
	})
	if err != nil {
		fail("outbox", err)
	}
	ids := make([]string, 0, len(byOrder))
	for id := range byOrder {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if !latest[ids[i]].Equal(latest[ids[j]]) {
			return latest[ids[i]].After(latest[ids[j]])
		}
		return ids[i] < ids[j]
	})
	v.TotalOrders = len(ids)
	if len(ids) > consoleOrders {
		ids = ids[:consoleOrders]
	}
	entries, notes := c.effects(ctx, fail)
	for _, id := range ids {
		evs := byOrder[id]
		sort.Slice(evs, func(i, j int) bool { return evs[i].Sequence < evs[j].Sequence })
		for i := range evs {
			c.fillPath(&evs[i])
		}
		o := orderView{ID: id, Events: evs, Ledger: entries[id], Notes: notes[id]}
		if len(evs) > 0 {
			o.Last = evs[len(evs)-1].Type
		}
		sh, err := s.Fulfilment.Shipment(ctx, id)
		if err != nil {
			fail("shipment of "+id, err)
		}
		o.Shipment = sh
		for _, r := range s.Provider.Requests() {
			if strings.Contains(r.Body, `"order_id":"`+id+`"`) || (sh != nil && sh.ShipmentID != "" && strings.Contains(r.Path, sh.ShipmentID)) {
				o.Requests = append(o.Requests, r)
			}
		}
		v.Orders = append(v.Orders, o)
	}

	st, err := operator.ReadStatus(ctx, s.DDB, nil, operator.StatusOptions{Table: s.Settings.OutboxTable, Shards: s.Settings.PendingShards, Now: v.Now})
	if err != nil {
		fail("pending index", err)
	}
	v.Pending = st.Pending
	if st.Pending > 0 {
		v.OldestPending = st.OldestPendingAge.Round(time.Millisecond).String()
	}
	if v.Parked, err = relay.ListParked(ctx, s.DDB, s.Settings.OutboxTable, 100); err != nil {
		fail("parked records", err)
	}
	if bal, err := s.Ledger.Balances(ctx); err != nil {
		fail("ledger balances", err)
	} else {
		for cur, m := range bal {
			v.Balances = append(v.Balances, balanceView{Currency: cur, Minor: m})
		}
		sort.Slice(v.Balances, func(i, j int) bool { return v.Balances[i].Currency < v.Balances[j].Currency })
	}
	v.DLQs = c.dlqs(ctx, fail)
	v.RuleDLQs = c.ruleDLQs(ctx, fail)
	return v
}

// fillPath sets e's steps and consumer cells from the recorded spans.
func (c *console) fillPath(e *eventView) {
	steps := c.rec.Path(e.ID)
	prev := e.Committed
	add := func(label, class, detail string, at time.Time) {
		sv := stepView{Label: label, Class: class, Detail: detail, MS: -1, Total: -1}
		if !e.Committed.IsZero() {
			sv.Total = at.Sub(e.Committed).Milliseconds()
			sv.MS = at.Sub(prev).Milliseconds()
		}
		prev = at
		e.Steps = append(e.Steps, sv)
	}
	if !e.Committed.IsZero() {
		e.Steps = append(e.Steps, stepView{Label: "committed", Class: "ok", MS: 0, Total: 0})
	}
	cells := map[string]*consumerCell{}
	waiting := outcomeLabel("")
	if len(steps) == 0 && !e.Committed.IsZero() && e.Committed.Before(c.s.started) {
		// The recorder is in memory: an event of a kept data set (-data)
		// handled before this start has no recorded path.
		waiting = "before this start (outboxctl show has its markers)"
	}
	for _, name := range routedTo(e.Type) {
		cells[name] = &consumerCell{Consumer: name, Label: waiting, Total: -1}
	}
	type timed struct {
		label, class, detail string
		at                   time.Time
	}
	var hops []timed
	for _, st := range steps {
		switch st.Kind {
		case StepRelay:
			hops = append(hops, timed{"relay", "ok", "", st.Start})
			if st.Outcome == relayPublished {
				hops = append(hops, timed{"published", "ok", "", st.End})
			} else {
				hops = append(hops, timed{"not published", "warn", st.Outcome + " " + st.Reason, st.End})
			}
		case StepParked:
			hops = append(hops, timed{"parked", "bad", st.Reason, st.End})
		case StepResend:
			if st.Outcome == relayPublished {
				hops = append(hops, timed{"re-sent by the reconciler", "resend", "", st.End})
			} else {
				hops = append(hops, timed{"reconciler re-send failed", "bad", st.Outcome + " " + st.Reason, st.End})
			}
		case StepConsumer:
			if st.Outcome == outboxtrace.OutcomeIgnored {
				continue
			}
			cls := map[string]string{outboxtrace.OutcomeApplied: "ok", outboxtrace.OutcomeDuplicate: "dup", outboxtrace.OutcomeHeld: "warn",
				outboxtrace.OutcomeDeadLettered: "bad", outboxtrace.OutcomeRetry: "warn"}[st.Outcome]
			hops = append(hops, timed{st.Consumer + ": " + outcomeLabel(st.Outcome), cls, st.Reason, st.End})
			cell := cells[st.Consumer]
			if cell == nil {
				cell = &consumerCell{Consumer: st.Consumer}
				cells[st.Consumer] = cell
			}
			cell.Deliveries++
			// The cell keeps the outcome that decided the event: applied
			// stays when a later delivery is a duplicate (counted).
			if cell.Outcome != outboxtrace.OutcomeApplied || st.Outcome == outboxtrace.OutcomeDeadLettered {
				cell.Outcome, cell.Label = st.Outcome, outcomeLabel(st.Outcome)
				cell.Total = -1
				if !e.Committed.IsZero() {
					cell.Total = st.End.Sub(e.Committed).Milliseconds()
				}
			}
		}
	}
	sort.SliceStable(hops, func(i, j int) bool { return hops[i].at.Before(hops[j].at) })
	for _, h := range hops {
		add(h.label, h.class, h.detail, h.at)
	}
	names := make([]string, 0, len(cells))
	for n := range cells {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e.Consumers = append(e.Consumers, *cells[n])
	}
}

// effects scans the ledger's entries and the notifications, by order id.
func (c *console) effects(ctx context.Context, fail func(string, error)) (map[string][]ledger.Entry, map[string][]notifier.Notification) {
	s := c.s
	entries, err := scanByOrder(ctx, s, s.Settings.LedgerTable, ledger.AttrPK, ledger.EntryPrefix,
		func(e ledger.Entry) (string, int64) { return e.OrderID, e.Sequence })
	if err != nil {
		fail("ledger", err)
	}
	notes, err := scanByOrder(ctx, s, s.Settings.NotificationsTable, notifier.AttrPK, notifier.NotificationPrefix,
		func(n notifier.Notification) (string, int64) { return n.OrderID, n.Sequence })
	if err != nil {
		fail("notifications", err)
	}
	return entries, notes
}

// scanByOrder scans table for the items whose pkAttr starts with prefix,
// decodes each as a T (skipping one that does not decode) and groups them
// by the order id key returns, each group sorted by the sequence it
// returns. On a scan error it returns what it read so far.
func scanByOrder[T any](ctx context.Context, s *Stack, table, pkAttr, prefix string, key func(T) (orderID string, seq int64)) (map[string][]T, error) {
	out := map[string][]T{}
	err := s.scan(ctx, table, func(it map[string]types.AttributeValue) {
		if !strings.HasPrefix(str(it[pkAttr]), prefix) {
			return
		}
		var v T
		if attributevalue.UnmarshalMap(it, &v) == nil {
			id, _ := key(v)
			out[id] = append(out[id], v)
		}
	})
	for _, vs := range out {
		sort.Slice(vs, func(i, j int) bool {
			_, a := key(vs[i])
			_, b := key(vs[j])
			return a < b
		})
	}
	return out, err
}

// dlqs lists each consumer DLQ's messages (sqsconsumer.Peek, as outboxctl
// consumer-dlq does; only when the queue holds visible messages, so an
// empty DLQ is not received from on every refresh).
func (c *console) dlqs(ctx context.Context, fail func(string, error)) []dlqView {
	c.dlqMu.Lock()
	defer c.dlqMu.Unlock()
	names := make([]string, 0, len(c.s.Consumers))
	for n := range c.s.Consumers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []dlqView
	for _, n := range names {
		q := c.s.Consumers[n].DLQ
		d := dlqView{Consumer: n, Name: lastSegment(q.URL())}
		if visible, inflight := q.Counts(); visible+inflight > 0 {
			d.Count = visible + inflight
			if visible > 0 {
				msgs, err := sqsconsumer.Peek(ctx, q, q.URL(), sqsconsumer.RedriveOptions{Max: 20})
				if err != nil {
					fail("DLQ "+d.Name, err)
				}
				d.Messages = msgs
			}
		}
		out = append(out, d)
	}
	return out
}

// ruleDLQs lists each routing rule's DLQ's messages (sqsconsumer.Peek,
// only when the queue holds visible messages), in rule order.
func (c *console) ruleDLQs(ctx context.Context, fail func(string, error)) []ruleDLQView {
	c.dlqMu.Lock()
	defer c.dlqMu.Unlock()
	var out []ruleDLQView
	for _, name := range c.s.RuleNames() {
		p := c.s.Rules[name]
		d := ruleDLQView{Rule: name, Consumer: p.Consumer, Name: lastSegment(p.DLQ.URL())}
		if visible, inflight := p.DLQ.Counts(); visible+inflight > 0 {
			d.Count = visible + inflight
			if visible > 0 {
				msgs, err := sqsconsumer.Peek(ctx, p.DLQ, p.DLQ.URL(), sqsconsumer.RedriveOptions{Max: 20})
				if err != nil {
					fail("rule DLQ "+d.Name, err)
				}
				d.Messages = msgs
			}
		}
		out = append(out, d)
	}
	return out
}

func numStr(v types.AttributeValue) string {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// money formats minor units with the currency (notifier.FormatMoney).
func money(minor int64, currency string) string { return notifier.FormatMoney(minor, currency) }

func msText(ms int64) string {
	if ms < 0 {
		return ""
	}
	return fmt.Sprintf("%d ms", ms)
}
