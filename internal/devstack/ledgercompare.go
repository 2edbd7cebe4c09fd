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

// DiffLedgers lists every difference of got from want, sorted: an entry
// missing, different or extra, a balance different or extra.
func DiffLedgers(want, got LedgerState) []string {
	var d []string
	for id, w := range want.Entries {
		if g, ok := got.Entries[id]; !ok {
			d = append(d, fmt.Sprintf("entry %s (%s %d %s of order %s seq %d) missing", id, w.Direction, w.AmountMinor, w.Currency, w.OrderID, w.Sequence))
		} else if g != w {
			d = append(d, fmt.Sprintf("entry %s: %+v, want %+v", id, g, w))
		}
	}
	for id := range got.Entries {
		if _, ok := want.Entries[id]; !ok {
			d = append(d, "entry "+id+" booked only by the new ledger")
		}
	}
	for c, w := range want.Balances {
		if got.Balances[c] != w {
			d = append(d, fmt.Sprintf("balance %s: %d, want %d", c, got.Balances[c], w))
		}
	}
	for c, g := range got.Balances {
		if _, ok := want.Balances[c]; !ok && g != 0 {
			d = append(d, fmt.Sprintf("balance %s: %d, want none", c, g))
		}
	}
	sort.Strings(d)
	return d
}
