package devstack

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
)

// LedgerState is a ledger's whole state: its entries by event id (BookedAt
// cleared: when an entry was booked differs between two ledgers by design)
// and its balances by currency.
type LedgerState struct {
	Entries  map[string]ledger.Entry
	Balances map[string]int64
}

// ReadLedger reads the state of ledger l, whose table is table: a
// consistent Scan of the table and l.Balances. It returns the first read
// error.
func (s *Stack) ReadLedger(ctx context.Context, table string, l *ledger.Ledger) (LedgerState, error) {
	st := LedgerState{Entries: map[string]ledger.Entry{}}
	p := dynamodb.NewScanPaginator(s.DDB, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return st, fmt.Errorf("devstack: scan %s: %w", table, err)
		}
		for _, it := range page.Items {
			// the table also holds the ledger's dedup state (markers,
			// ordering items, buffer): entries only
			if pk, _ := it[ledger.AttrPK].(*types.AttributeValueMemberS); pk == nil || !strings.HasPrefix(pk.Value, ledger.EntryPrefix) {
				continue
			}
			var e ledger.Entry
			if err := attributevalue.UnmarshalMap(it, &e); err != nil {
				return st, fmt.Errorf("devstack: ledger item of %s: %w", table, err)
			}
			if e.EventID != "" {
				e.BookedAt = time.Time{}
				st.Entries[e.EventID] = e
			}
		}
	}
	var err error
	if st.Balances, err = l.Balances(ctx); err != nil {
		return st, fmt.Errorf("devstack: balances of %s: %w", table, err)
	}
	return st, nil
}

// LedgerDiff is how a ledger's state differs from the state it should
// have, by kind; each is a sorted list of descriptions.
type LedgerDiff struct {
	// Missing are entries it should have booked and did not.
	Missing []string
	// Extra are entries it booked that it should not have (an event it
	// does not owe, or booked under an event id nobody published).
	Extra []string
	// Different are entries booked with other values (amount, direction,
	// currency, order, sequence, type).
	Different []string
	// Balances are currencies whose balance differs (or exists where none
	// should).
	Balances []string
}

// CompareLedgers compares got with want, the state it should have.
func CompareLedgers(want, got LedgerState) LedgerDiff {
	var d LedgerDiff
	for id, w := range want.Entries {
		if g, ok := got.Entries[id]; !ok {
			d.Missing = append(d.Missing, fmt.Sprintf("entry %s (%s %d %s of order %s seq %d) missing", id, w.Direction, w.AmountMinor, w.Currency, w.OrderID, w.Sequence))
		} else if g != w {
			d.Different = append(d.Different, fmt.Sprintf("entry %s: %+v, want %+v", id, g, w))
		}
	}
	for id := range got.Entries {
		if _, ok := want.Entries[id]; !ok {
			d.Extra = append(d.Extra, "entry "+id+" booked, but not owed")
		}
	}
	for c, w := range want.Balances {
		if got.Balances[c] != w {
			d.Balances = append(d.Balances, fmt.Sprintf("balance %s: %d, want %d", c, got.Balances[c], w))
		}
	}
	for c, g := range got.Balances {
		if _, ok := want.Balances[c]; !ok && g != 0 {
			d.Balances = append(d.Balances, fmt.Sprintf("balance %s: %d, want none", c, g))
		}
	}
	for _, l := range [][]string{d.Missing, d.Extra, d.Different, d.Balances} {
		sort.Strings(l)
	}
	return d
}

// All returns every difference, sorted.
func (d LedgerDiff) All() []string {
	all := append(append(append(append([]string(nil), d.Missing...), d.Extra...), d.Different...), d.Balances...)
	sort.Strings(all)
	return all
}

// DiffLedgers lists every difference of got from want, sorted: an entry
// missing, different or extra, a balance different or extra
// (CompareLedgers).
func DiffLedgers(want, got LedgerState) []string {
	return CompareLedgers(want, got).All()
}
