package ledger

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// balance is the shape of a balance item (BalanceKey, or the unsharded
// "BALANCE#<currency>" of tables written before sharding).
type balance struct {
	PK           string `dynamodbav:"pk"`
	BalanceMinor int64  `dynamodbav:"balance_minor"`
}

// Balance returns the balance of currency in minor units: the sum of its
// BalanceShards items and of an unsharded item left from before sharding,
// read with strongly consistent BatchGetItem calls of at most 100 keys
// (unprocessed keys are read again, bounded by CallTimeout per call); 0 when nothing was booked in
// that currency. It returns ErrBalanceOverflow when the sum leaves the
// int64 range (each item is kept inside it, their sum need not be), and
// the read's error otherwise.
func (l *Ledger) Balance(ctx context.Context, currency string) (int64, error) {
	keys := []map[string]types.AttributeValue{pk(BalancePrefix + currency)}
	for i := range BalanceShards {
		keys = append(keys, pk(BalanceKey(currency, i)))
	}
	var sum int64
	for chunk := range slices.Chunk(keys, maxBatchGetKeys) {
		in := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			l.cfg.Table: {Keys: chunk, ConsistentRead: aws.Bool(true)},
		}}
		for len(in.RequestItems) > 0 {
			cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
			out, err := l.client.BatchGetItem(cctx, in)
			cancel()
			if err != nil {
				return 0, fmt.Errorf("ledger: read balance %s: %w", currency, err)
			}
			var bs []balance
			if err := attributevalue.UnmarshalListOfMaps(out.Responses[l.cfg.Table], &bs); err != nil {
				return 0, fmt.Errorf("ledger: decode balance %s: %w", currency, err)
			}
			for _, b := range bs {
				v := b.BalanceMinor
				if v > 0 && sum > math.MaxInt64-v || v < 0 && sum < math.MinInt64-v {
					return 0, fmt.Errorf("%w: the shards of %s sum past int64", ErrBalanceOverflow, currency)
				}
				sum += v
			}
			in.RequestItems = out.UnprocessedKeys
		}
	}
	return sum, nil
}

// maxBatchGetKeys is BatchGetItem's limit: 100 keys per call (DynamoDB
// API reference, BatchGetItem).
const maxBatchGetKeys = 100

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
			if cur, ok := BalanceCurrency(b.PK); ok {
				out[cur] += b.BalanceMinor
			}
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
