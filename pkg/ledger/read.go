package ledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Entry is one booked ledger entry (item "ENTRY#<event_id>").
type Entry struct {
	EventID     string    `dynamodbav:"event_id"`
	EventType   string    `dynamodbav:"event_type"`
	OrderID     string    `dynamodbav:"order_id"`
	AmountMinor int64     `dynamodbav:"amount_minor"` // positive, minor units
	Currency    string    `dynamodbav:"currency"`
	Direction   string    `dynamodbav:"direction"` // DirectionCredit or DirectionDebit
	Sequence    int64     `dynamodbav:"sequence"`
	BookedAt    time.Time `dynamodbav:"booked_at"`
}

// balance is the shape of a "BALANCE#<currency>" item.
type balance struct {
	PK           string `dynamodbav:"pk"`
	BalanceMinor int64  `dynamodbav:"balance_minor"`
}

// Balance returns the balance of currency in minor units with a strongly
// consistent GetItem; 0 when nothing was booked in that currency.
func (l *Ledger) Balance(ctx context.Context, currency string) (int64, error) {
	item, err := l.get(ctx, BalancePrefix+currency)
	if err != nil || item == nil {
		return 0, err
	}
	var b balance
	if err := attributevalue.UnmarshalMap(item, &b); err != nil {
		return 0, fmt.Errorf("ledger: decode balance %s: %w", currency, err)
	}
	return b.BalanceMinor, nil
}

// Entry returns the entry booked for an event id (strongly consistent
// GetItem); ok is false when the event booked no entry.
func (l *Ledger) Entry(ctx context.Context, eventID string) (e Entry, ok bool, err error) {
	item, err := l.get(ctx, EntryPrefix+eventID)
	if err != nil || item == nil {
		return Entry{}, false, err
	}
	if err := attributevalue.UnmarshalMap(item, &e); err != nil {
		return e, true, fmt.Errorf("ledger: decode entry %s: %w", eventID, err)
	}
	return e, true, nil
}

// Balances returns every currency's balance in minor units, keyed by ISO 4217
// code.
//
// AUDIT ONLY: it Scans the whole ledger table (strongly consistent, all
// pages), costing read capacity proportional to the table size. Use Balance
// for a known currency on any request path.
func (l *Ledger) Balances(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := l.scan(ctx, BalancePrefix, false, func(items []map[string]types.AttributeValue, _ int32) error {
		var bs []balance
		if err := attributevalue.UnmarshalListOfMaps(items, &bs); err != nil {
			return fmt.Errorf("ledger: decode balances: %w", err)
		}
		for _, b := range bs {
			out[strings.TrimPrefix(b.PK, BalancePrefix)] = b.BalanceMinor
		}
		return nil
	})
	return out, err
}

// EntryCount returns the number of booked entries.
//
// AUDIT ONLY: it Scans the whole ledger table (strongly consistent, all
// pages, Select COUNT).
func (l *Ledger) EntryCount(ctx context.Context) (int, error) {
	total := 0
	err := l.scan(ctx, EntryPrefix, true, func(_ []map[string]types.AttributeValue, n int32) error {
		total += int(n)
		return nil
	})
	return total, err
}

func (l *Ledger) get(ctx context.Context, key string) (map[string]types.AttributeValue, error) {
	return l.cfg.GetItem(ctx, l.client, key)
}

func (l *Ledger) scan(ctx context.Context, prefix string, count bool, page func([]map[string]types.AttributeValue, int32) error) error {
	return l.cfg.ScanPrefix(ctx, l.client, prefix, count, page)
}
