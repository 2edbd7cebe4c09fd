package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// newAccountFixture is newFixture with Config.ExpectedAccount set to the
// account delivery() puts on events.
func newAccountFixture(t *testing.T, env *ddbtest.Env) fixture {
	t.Helper()
	lt, dt := ddbtest.Name("ledger"), ddbtest.Name("dedup")
	env.CreateTable(t, ledger.CreateTableInput(lt))
	env.CreateTable(t, dedup.CreateTableInput(dt))
	l, err := ledger.New(env.DDB, ledger.Config{Ordering: dedup.Unordered, Table: lt, Dedup: dedup.Config{Table: dt, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
		Logger: quiet, ExpectedAccount: "123456789012"})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{env: env, ledger: l, table: lt, dedup: dt}
}

// TestLedgerRefusesForgedEvents: inputs the ledger booked before it checked
// origin and the order domain's event contract. Each is refused as a
// permanent failure with its reason (dead-lettered by sqsconsumer at once),
// writes nothing (no marker, no entry, no balance), and keeps errors.Is on
// the ledger's sentinels.
func TestLedgerRefusesForgedEvents(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	paid := func(id string, seq int64, p order.Paid) outbox.Envelope {
		return envelope(t, id, seq, order.EventOrderPaid, p)
	}
	valid := order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"}
	tests := []struct {
		name   string
		ev     func() events.EventBridgeEvent
		reason string
		want   error
	}{
		{"the forged OrderPaid of the report (every field forged)", func() events.EventBridgeEvent {
			e := paid("no-such-order", 2, order.Paid{OrderID: "no-such-order", AmountMinor: 9_000_000_000_000_000_000, Currency: "EUR"})
			e.AggregateType = "Whatever"
			ev := delivery(t, e)
			ev.Source, ev.AccountID = "evil.example", "999999999999"
			return ev
		}, dedup.ReasonForeignSource, dedup.ErrForeignSource},
		{"source evil.example", func() events.EventBridgeEvent {
			ev := delivery(t, paid("o-1", 2, valid))
			ev.Source = "evil.example"
			return ev
		}, dedup.ReasonForeignSource, dedup.ErrForeignSource},
		{"account 999999999999", func() events.EventBridgeEvent {
			ev := delivery(t, paid("o-1", 2, valid))
			ev.AccountID = "999999999999"
			return ev
		}, dedup.ReasonForeignAccount, dedup.ErrForeignAccount},
		{"aggregate type Whatever", func() events.EventBridgeEvent {
			e := paid("o-1", 2, valid)
			e.AggregateType = "Whatever"
			return delivery(t, e)
		}, order.ReasonForeignAggregate, ledger.ErrInvalidPayload},
		{"order id not the aggregate id", func() events.EventBridgeEvent {
			return delivery(t, paid("o-1", 2, order.Paid{OrderID: "no-such-order", AmountMinor: 100, Currency: "EUR"}))
		}, order.ReasonOrderIDMismatch, ledger.ErrInvalidPayload},
		{"amount 9e18", func() events.EventBridgeEvent {
			return delivery(t, paid("o-1", 2, order.Paid{OrderID: "o-1", AmountMinor: 9_000_000_000_000_000_000, Currency: "EUR"}))
		}, order.ReasonAmountOutOfRange, ledger.ErrInvalidPayload},
		{"amount one over MaxAmountMinor", func() events.EventBridgeEvent {
			return delivery(t, paid("o-1", 2, order.Paid{OrderID: "o-1", AmountMinor: order.MaxAmountMinor + 1, Currency: "EUR"}))
		}, order.ReasonAmountOutOfRange, ledger.ErrInvalidPayload},
		{"refund of 5 ZZZ", func() events.EventBridgeEvent {
			return delivery(t, envelope(t, "o-1", 3, order.EventOrderCancelled, order.Cancelled{OrderID: "o-1", WasPaid: true, RefundMinor: 5, Currency: "ZZZ"}))
		}, order.ReasonUnknownCurrency, ledger.ErrInvalidPayload},
		{"sequence MaxInt64", func() events.EventBridgeEvent {
			return delivery(t, paid("o-1", math.MaxInt64, valid))
		}, order.ReasonImpossibleSequence, ledger.ErrInvalidPayload},
		{"OrderPaid at sequence 1", func() events.EventBridgeEvent {
			return delivery(t, paid("o-1", 1, valid))
		}, order.ReasonImpossibleSequence, ledger.ErrInvalidPayload},
		{"event id not a UUID", func() events.EventBridgeEvent {
			e := paid("o-1", 2, valid)
			e.EventID = "evt-1"
			return delivery(t, e)
		}, order.ReasonInvalidEventID, ledger.ErrInvalidPayload},
		{"unsupported version", func() events.EventBridgeEvent {
			e := paid("o-1", 2, valid)
			e.EventVersion = 2
			return delivery(t, e)
		}, order.ReasonUnsupportedVersion, ledger.ErrUnsupportedVersion},
		{"malformed detail", func() events.EventBridgeEvent {
			ev := delivery(t, paid("o-1", 2, valid))
			ev.Detail = []byte(`{"event_id":1}`)
			return ev
		}, dedup.ReasonMalformedEvent, dedup.ErrMalformedEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newAccountFixture(t, env)
			ev := tt.ev()
			err := f.ledger.Handle(context.Background(), ev)
			p, ok := sqsconsumer.AsPermanent(err)
			if !ok || p.Reason != tt.reason {
				t.Fatalf("err = %v, want a permanent error with reason %q", err, tt.reason)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v does not wrap %v", err, tt.want)
			}
			if n, err := f.ledger.EntryCount(context.Background()); err != nil || n != 0 {
				t.Fatalf("EntryCount = %d, %v; a refused event was booked", n, err)
			}
			bal, err := f.ledger.Balances(context.Background())
			if err != nil || len(bal) != 0 {
				t.Fatalf("Balances = %v, %v; want none", bal, err)
			}
			out, err := f.env.DDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(f.dedup), Select: types.SelectCount})
			if err != nil || out.Count != 0 {
				t.Fatalf("dedup table has %d markers (%v); a refused event was recorded", out.Count, err)
			}
		})
	}
	// The baseline is booked: the refusals above are not a broken fixture.
	f := newAccountFixture(t, env)
	if err := f.ledger.Handle(context.Background(), delivery(t, paid("o-1", 2, valid))); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	mustBalance(t, f.ledger, "EUR", 100)
}

// setBalance stores the balance shard of order orderID directly (as many
// earlier bookings would).
func setBalance(t *testing.T, f fixture, cur, orderID string, v int64) {
	t.Helper()
	_, err := f.env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		ledger.AttrPK:           &types.AttributeValueMemberS{Value: ledger.BalanceKey(cur, ledger.BalanceShard(orderID))},
		ledger.AttrCurrency:     &types.AttributeValueMemberS{Value: cur},
		ledger.AttrBalanceMinor: &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLedgerBalanceNeverOverflows: valid events whose booking would take a
// balance past the int64 range are refused (balance_overflow), write nothing,
// and Balance keeps working; bookings that land exactly on the bounds pass.
func TestLedgerBalanceNeverOverflows(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	const amount = order.MaxAmountMinor
	credit := func(id string) outbox.Envelope {
		return envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: amount, Currency: "EUR"})
	}
	debit := func(id string) outbox.Envelope {
		return envelope(t, id, 3, order.EventOrderCancelled, order.Cancelled{OrderID: id, WasPaid: true, RefundMinor: amount, Currency: "EUR"})
	}
	tests := []struct {
		name     string
		start    int64
		env      outbox.Envelope
		overflow bool
		end      int64
	}{
		{"credit that would pass MaxInt64", math.MaxInt64 - amount + 1, credit("o-1"), true, math.MaxInt64 - amount + 1},
		{"credit landing on MaxInt64", math.MaxInt64 - amount, credit("o-2"), false, math.MaxInt64},
		{"debit that would pass MinInt64", math.MinInt64 + amount - 1, debit("o-3"), true, math.MinInt64 + amount - 1},
		{"debit landing on MinInt64", math.MinInt64 + amount, debit("o-4"), false, math.MinInt64},
		{"credit on a new balance", 0, credit("o-5"), false, amount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newAccountFixture(t, env)
			if tt.start != 0 {
				setBalance(t, f, "EUR", tt.env.AggregateID, tt.start)
			}
			err := f.ledger.Handle(context.Background(), delivery(t, tt.env))
			if tt.overflow {
				p, ok := sqsconsumer.AsPermanent(err)
				if !ok || p.Reason != ledger.ReasonBalanceOverflow || !errors.Is(err, ledger.ErrBalanceOverflow) {
					t.Fatalf("err = %v, want permanent %s", err, ledger.ReasonBalanceOverflow)
				}
				if f.markerExists(t, tt.env.EventID) {
					t.Fatal("a refused booking wrote its marker")
				}
				if _, ok, _ := f.ledger.Entry(context.Background(), tt.env.EventID); ok {
					t.Fatal("a refused booking wrote its entry")
				}
			} else if err != nil {
				t.Fatalf("Handle: %v", err)
			}
			mustBalance(t, f.ledger, "EUR", tt.end)
		})
	}
}

// TestLedgerBalanceIsWriteSharded: bookings of one currency go to the
// balance shard of their order (BalanceShard), so orders on different
// shards update different items; Balance and Balances sum the shards and a
// balance item written before sharding ("BALANCE#<currency>"); a sum past
// the int64 range is an error, never a wrapped number.
func TestLedgerBalanceIsWriteSharded(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	f := newAccountFixture(t, env)
	ctx := context.Background()
	// two orders on different shards, the second past the first 100 keys
	// Balance reads (BatchGetItem takes 100 per call)
	a, b := "o-a", ""
	for i := range 10000 {
		if id := fmt.Sprint("o-", i); ledger.BalanceShard(id) != ledger.BalanceShard(a) && ledger.BalanceShard(id) >= 100 {
			b = id
			break
		}
	}
	if b == "" {
		t.Fatal("no order id on a shard past 100")
	}
	for _, id := range []string{a, b} {
		if err := f.ledger.Handle(ctx, delivery(t, envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: 250, Currency: "EUR"}))); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{a, b} {
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{ledger.AttrPK: &types.AttributeValueMemberS{Value: ledger.BalanceKey("EUR", ledger.BalanceShard(id))}}})
		if err != nil || out.Item == nil {
			t.Fatalf("balance shard of %s: %v, %v", id, out.Item, err)
		}
	}
	mustBalance(t, f.ledger, "EUR", 500)
	// a balance item from before sharding counts too
	if _, err := env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		ledger.AttrPK:           &types.AttributeValueMemberS{Value: ledger.BalancePrefix + "EUR"},
		ledger.AttrBalanceMinor: &types.AttributeValueMemberN{Value: "1000"},
	}}); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, f.ledger, "EUR", 1500)
	if all, err := f.ledger.Balances(ctx); err != nil || all["EUR"] != 1500 || len(all) != 1 {
		t.Fatalf("Balances = %v, %v; want EUR 1500", all, err)
	}
	// two shards near the bound: each is valid, their sum is not
	setBalance(t, f, "USD", a, math.MaxInt64-10)
	setBalance(t, f, "USD", b, 20)
	if _, err := f.ledger.Balance(ctx, "USD"); !errors.Is(err, ledger.ErrBalanceOverflow) {
		t.Fatalf("Balance past int64 = %v, want ErrBalanceOverflow", err)
	}
	for pk, want := range map[string]string{"BALANCE#EUR#07": "EUR", "BALANCE#EUR": "EUR", "ENTRY#x": "", "BALANCE#": ""} {
		if got, ok := ledger.BalanceCurrency(pk); got != want || ok != (want != "") {
			t.Errorf("BalanceCurrency(%q) = %q, %v", pk, got, ok)
		}
	}
}
