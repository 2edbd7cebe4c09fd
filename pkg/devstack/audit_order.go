package devstack

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/notifier"
)

// OrderAudit checks promise I4 at the consumers: each ordered consumer
// applied an aggregate's events in sequence order. It reads the effects'
// own records — notifications (sequence, created_at) and ledger entries
// (sequence, booked_at) — per order, sorts them by when they were applied
// and counts every event applied after one with a higher sequence.
type OrderAudit struct {
	// AppliedOutOfOrder counts inversions per consumer.
	AppliedOutOfOrder map[string]int
	Problems          []string
}

// Total is the number of inversions over every consumer.
func (a OrderAudit) Total() int {
	n := 0
	for _, v := range a.AppliedOutOfOrder {
		n += v
	}
	return n
}

type applied struct {
	at  string // RFC 3339 nanoseconds, UTC: sorts as text
	seq int64
}

// AuditOrder reads the notifications and ledger tables (Scans: an audit).
func (s *Stack) AuditOrder(ctx context.Context) (OrderAudit, error) {
	a := OrderAudit{AppliedOutOfOrder: map[string]int{}}
	collect := func(table, prefix, orderAttr, atAttr, seqAttr string) (map[string][]applied, error) {
		out := map[string][]applied{}
		err := s.scan(ctx, table, func(it map[string]types.AttributeValue) {
			pk := str(it["pk"])
			if len(pk) < len(prefix) || pk[:len(prefix)] != prefix {
				return
			}
			out[str(it[orderAttr])] = append(out[str(it[orderAttr])], applied{at: str(it[atAttr]), seq: num(it[seqAttr])})
		})
		return out, err
	}
	byConsumer := map[string][3]string{
		"notifier": {s.Settings.NotificationsTable, notifier.NotificationPrefix, notifier.AttrCreatedAt},
		"ledger":   {s.Settings.LedgerTable, ledger.EntryPrefix, ledger.AttrBookedAt},
	}
	for consumer, t := range byConsumer {
		seqAttr, orderAttr := notifier.AttrSequence, notifier.AttrOrderID
		if consumer == "ledger" {
			seqAttr, orderAttr = ledger.AttrSequence, ledger.AttrOrderID
		}
		m, err := collect(t[0], t[1], orderAttr, t[2], seqAttr)
		if err != nil {
			return a, err
		}
		for order, xs := range m {
			sort.Slice(xs, func(i, j int) bool { return xs[i].at < xs[j].at })
			highest := int64(0)
			for _, x := range xs {
				if x.seq < highest {
					a.AppliedOutOfOrder[consumer]++
					if len(a.Problems) < 20 {
						a.Problems = append(a.Problems, fmt.Sprintf("%s applied order %s sequence %d after sequence %d", consumer, order, x.seq, highest))
					}
				}
				highest = max(highest, x.seq)
			}
		}
	}
	return a, nil
}
