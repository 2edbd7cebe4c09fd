package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Audit is the result of checking every promise against the tables after
// the pipeline drained. Lost, Ghost and DoubleApplied must be zero.
type Audit struct {
	// Orders is the number of orders; Committed the number of committed
	// changes (the sum of the orders' versions).
	Orders    int
	Committed int
	// Events is the number of outbox records; Published, Pending and Parked
	// count them by status.
	Events    int
	Published int
	Pending   int
	Parked    int
	// LedgerApplied counts ledger entries; LedgerExpected the events the
	// ledger must book (OrderPaid, and OrderCancelled after payment).
	LedgerApplied  int
	LedgerExpected int
	// LedgerRouted counts the events routed to the ledger (every order
	// event: it is an ordered consumer and advances past the events it does
	// not book; parked ones excluded); the difference from LedgerExpected is
	// events that moved no money.
	LedgerRouted int
	// Notifications counts notifier records (one per event expected).
	Notifications int
	// Lost counts committed changes without an outbox record, and events
	// not parked that a consumer that should have applied did not.
	Lost int
	// LedgerLost counts the events (also in Lost) the ledger should have
	// booked and did not.
	LedgerLost int
	// Ghost counts outbox records without a committed change, and consumer
	// effects for events that do not exist.
	Ghost int
	// DoubleApplied counts currencies whose ledger balance differs from the
	// sum of paid minus refunded amounts in the events (money moved twice or
	// not at all), plus ledger entries for one event booked more than once.
	DoubleApplied int
	// BalanceMismatch counts the currencies (also in DoubleApplied) whose
	// ledger balance differs from the sum of paid minus refunded amounts in
	// the events.
	BalanceMismatch int
	// Problems describes each violation found (at most 20).
	Problems []string
	// Balances are the ledger balances by currency, in minor units.
	Balances map[string]int64
}

// OK reports whether no promise is broken and nothing is left pending.
func (a Audit) OK() bool {
	return a.Lost == 0 && a.Ghost == 0 && a.DoubleApplied == 0 && a.Pending == 0
}

// Summary is the one-line summary printed by make demo.
func (a Audit) Summary() string {
	return fmt.Sprintf("orders=%d events=%d published=%d pending=%d ledger_applied=%d notifications=%d lost=%d ghost=%d double_applied=%d",
		a.Orders, a.Events, a.Published, a.Pending, a.LedgerApplied, a.Notifications, a.Lost, a.Ghost, a.DoubleApplied)
}

func (a *Audit) problem(format string, args ...any) {
	if len(a.Problems) < 20 {
		a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
	}
}

// Audit reads every table (with Scans: an audit tool, never a request path)
// and checks the promises:
//   - I1: each order at version v has outbox records with sequence 1..v,
//     exactly one each, and no outbox record lacks its committed change;
//   - I2: every outbox record is published (or parked, counted);
//   - I3: the notifier recorded every published event once, the ledger
//     booked every payment and refund once, and balances equal paid minus
//     refunded amounts.
func (s *Stack) Audit(ctx context.Context) (Audit, error) {
	var a Audit
	orders := map[string]int64{} // order id -> version
	err := s.scan(ctx, s.Settings.OrdersTable, func(it map[string]types.AttributeValue) {
		pk := str(it["pk"])
		if !strings.HasPrefix(pk, order.KeyPrefixOrder) {
			return
		}
		orders[strings.TrimPrefix(pk, order.KeyPrefixOrder)] = num(it[order.AttrVersion])
	})
	if err != nil {
		return a, err
	}
	a.Orders = len(orders)
	for _, v := range orders {
		a.Committed += int(v)
	}

	type ev struct {
		typ, status string
		payload     json.RawMessage
	}
	eventsByID := map[string]ev{}
	seqs := map[string]map[int64]int{} // aggregate id -> sequence -> count
	err = s.scan(ctx, s.Settings.OutboxTable, func(it map[string]types.AttributeValue) {
		a.Events++
		id, agg, seq := str(it[outbox.AttrEventID]), str(it[outbox.AttrAggregateID]), num(it[outbox.AttrSequence])
		e := ev{typ: str(it[outbox.AttrEventType]), status: str(it[outbox.AttrStatus]), payload: json.RawMessage(str(it[outbox.AttrPayload]))}
		eventsByID[id] = e
		if seqs[agg] == nil {
			seqs[agg] = map[int64]int{}
		}
		seqs[agg][seq]++
		switch e.status {
		case outbox.StatusPublished:
			a.Published++
		case outbox.StatusParked:
			a.Parked++
		default:
			a.Pending++
		}
	})
	if err != nil {
		return a, err
	}
	for id, v := range orders {
		for seq := int64(1); seq <= v; seq++ {
			switch n := seqs[id][seq]; {
			case n == 0:
				a.Lost++
				a.problem("lost: order %s version %d has no outbox record", id, seq)
			case n > 1:
				a.Ghost += n - 1
				a.problem("ghost: order %s version %d has %d outbox records", id, seq, n)
			}
		}
	}
	for agg, m := range seqs {
		for seq, n := range m {
			if v, ok := orders[agg]; !ok || seq > v {
				a.Ghost += n
				a.problem("ghost: outbox record %s sequence %d has no committed change", agg, seq)
			}
		}
	}

	entries := map[string]int{}
	a.Balances = map[string]int64{}
	err = s.scan(ctx, s.Settings.LedgerTable, func(it map[string]types.AttributeValue) {
		pk := str(it["pk"])
		switch {
		case strings.HasPrefix(pk, ledger.EntryPrefix):
			entries[strings.TrimPrefix(pk, ledger.EntryPrefix)]++
		case strings.HasPrefix(pk, ledger.BalancePrefix):
			if cur, ok := ledger.BalanceCurrency(pk); ok {
				a.Balances[cur] += num(it[ledger.AttrBalanceMinor]) // the sum of its shards
			}
		}
	})
	if err != nil {
		return a, err
	}
	a.LedgerApplied = len(entries)
	notes := map[string]int{}
	err = s.scan(ctx, s.Settings.NotificationsTable, func(it map[string]types.AttributeValue) {
		if pk := str(it["pk"]); strings.HasPrefix(pk, notifier.NotificationPrefix) {
			notes[strings.TrimPrefix(pk, notifier.NotificationPrefix)]++
		}
	})
	if err != nil {
		return a, err
	}
	a.Notifications = len(notes)

	// Expected ledger effects from the events themselves. A parked event is
	// not owed to consumers, but it may still have reached them (another
	// delivery published it before or after it was parked): then it counts
	// like a published one, so money it moved is checked too.
	delivered := func(id string, e ev) bool {
		return e.status != outbox.StatusParked || notes[id] > 0 || entries[id] > 0
	}
	ledgerRoutes := map[string]bool{}
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerLedger {
			for _, t := range r.DetailTypes {
				ledgerRoutes[t] = true
			}
		}
	}
	expected := map[string]int64{}
	needsLedger := map[string]bool{}
	for id, e := range eventsByID {
		if !delivered(id, e) {
			continue
		}
		if ledgerRoutes[e.typ] {
			a.LedgerRouted++
		}
		switch e.typ {
		case order.EventOrderPaid:
			var p order.Paid
			if json.Unmarshal(e.payload, &p) == nil {
				expected[p.Currency] += p.AmountMinor
				needsLedger[id] = true
			}
		case order.EventOrderCancelled:
			var c order.Cancelled
			if json.Unmarshal(e.payload, &c) == nil && c.WasPaid {
				expected[c.Currency] -= c.RefundMinor
				needsLedger[id] = true
			}
		}
	}
	a.LedgerExpected = len(needsLedger)

	for id, e := range eventsByID {
		if !delivered(id, e) {
			continue
		}
		if notes[id] == 0 {
			a.Lost++
			a.problem("lost: event %s (%s) has no notification", id, e.typ)
		}
		if needsLedger[id] && entries[id] == 0 {
			a.Lost++
			a.LedgerLost++
			a.problem("lost: event %s (%s) was not booked by the ledger", id, e.typ)
		}
	}
	for id, n := range entries {
		if _, known := eventsByID[id]; !known {
			a.Ghost++
			a.problem("ghost: ledger entry for unknown or non-monetary event %s", id)
		}
		if n > 1 {
			a.DoubleApplied += n - 1
		}
	}
	for id := range notes {
		if _, ok := eventsByID[id]; !ok {
			a.Ghost++
			a.problem("ghost: notification for unknown event %s", id)
		}
	}
	currencies := map[string]bool{}
	for c := range expected {
		currencies[c] = true
	}
	for c := range a.Balances {
		currencies[c] = true
	}
	names := make([]string, 0, len(currencies))
	for c := range currencies {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		if a.Balances[c] != expected[c] {
			a.DoubleApplied++
			a.BalanceMismatch++
			a.problem("balance %s is %d, events say %d", c, a.Balances[c], expected[c])
		}
	}
	return a, nil
}

// scan reads every item of table, page by page (audit only).
func (s *Stack) scan(ctx context.Context, table string, f func(map[string]types.AttributeValue)) error {
	p := dynamodb.NewScanPaginator(s.DDB, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("devstack: audit scan %s: %w", table, err)
		}
		for _, it := range out.Items {
			f(it)
		}
	}
	return nil
}

func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func num(v types.AttributeValue) int64 {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		i, _ := strconv.ParseInt(n.Value, 10, 64)
		return i
	}
	return 0
}
