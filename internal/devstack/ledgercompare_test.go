package devstack_test

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
)

// TestCompareLedgersSortsDifferencesByKind: an entry missing, one extra,
// one booked with another amount and a balance off are each reported under
// their own kind, and DiffLedgers lists them all.
func TestCompareLedgersSortsDifferencesByKind(t *testing.T) {
	t.Parallel()
	pay := ledger.Entry{EventID: "e1", OrderID: "o1", AmountMinor: 500, Currency: "EUR", Direction: ledger.DirectionCredit, Sequence: 2}
	refund := ledger.Entry{EventID: "e2", OrderID: "o1", AmountMinor: 500, Currency: "EUR", Direction: ledger.DirectionDebit, Sequence: 3}
	other := ledger.Entry{EventID: "e3", OrderID: "o2", AmountMinor: 70, Currency: "USD", Direction: ledger.DirectionCredit, Sequence: 2}
	want := devstack.LedgerState{Entries: map[string]ledger.Entry{"e1": pay, "e2": refund}, Balances: map[string]int64{"EUR": 0}}
	twice := pay
	twice.AmountMinor = 1000
	got := devstack.LedgerState{Entries: map[string]ledger.Entry{"e1": twice, "e3": other}, Balances: map[string]int64{"EUR": 1000, "USD": 70}}
	d := devstack.CompareLedgers(want, got)
	if len(d.Missing) != 1 || len(d.Extra) != 1 || len(d.Different) != 1 || len(d.Balances) != 2 {
		t.Fatalf("CompareLedgers = %+v; want 1 missing (e2), 1 extra (e3), 1 different (e1), 2 balances (EUR, USD)", d)
	}
	if n := len(devstack.DiffLedgers(want, got)); n != 5 {
		t.Errorf("DiffLedgers lists %d differences, want 5", n)
	}
	if d := devstack.CompareLedgers(want, want); len(d.All()) != 0 {
		t.Errorf("a ledger differs from itself: %v", d.All())
	}
}
