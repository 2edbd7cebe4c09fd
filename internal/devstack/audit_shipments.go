package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// ShipmentAudit is what the local fulfilment provider did against what the
// events owed (promise I3 for an effect outside DynamoDB).
type ShipmentAudit struct {
	// Shipments counts the provider's shipments; Expected the paid orders
	// whose OrderPaid event was delivered (or not parked).
	Shipments int
	Expected  int
	// Duplicates counts shipments beyond the first of an order (a provider
	// that ignores Idempotency-Key can create them: see the idempotency
	// package's documented window); DuplicateKeys the Idempotency-Key
	// (the OrderPaid event_id) of each, for tracing them to their cause.
	Duplicates    int
	DuplicateKeys []string
	// Missing counts owed shipments the provider never created;
	// NotCancelled orders whose paid cancellation was delivered but none of
	// whose shipments is cancelled.
	Missing      int
	NotCancelled int
	Problems     []string
}

func (a *ShipmentAudit) problem(format string, args ...any) {
	if len(a.Problems) < 20 {
		a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
	}
}

// AuditShipments compares the provider's shipments with the outbox events:
// each paid order whose OrderPaid was not parked owes one shipment, and
// one that was cancelled after payment owes its cancellation.
func (s *Stack) AuditShipments(ctx context.Context) (ShipmentAudit, error) {
	var a ShipmentAudit
	if s.Provider == nil {
		return a, nil
	}
	paid := map[string]string{}      // order id -> OrderPaid event id (owed)
	paidParked := map[string]bool{}  // OrderPaid parked: not owed, may still have happened
	cancelled := map[string]string{} // order id -> paid OrderCancelled event id (delivered)
	err := s.scan(ctx, s.Settings.OutboxTable, func(it map[string]types.AttributeValue) {
		typ, status := str(it[outbox.AttrEventType]), str(it[outbox.AttrStatus])
		payload := json.RawMessage(str(it[outbox.AttrPayload]))
		switch typ {
		case order.EventOrderPaid:
			var p order.Paid
			if json.Unmarshal(payload, &p) != nil {
				return
			}
			if status == outbox.StatusParked {
				paidParked[p.OrderID] = true
				return
			}
			paid[p.OrderID] = str(it[outbox.AttrEventID])
		case order.EventOrderCancelled:
			var c order.Cancelled
			if json.Unmarshal(payload, &c) == nil && c.WasPaid && status != outbox.StatusParked {
				cancelled[c.OrderID] = str(it[outbox.AttrEventID])
			}
		}
	})
	if err != nil {
		return a, err
	}
	byOrder := map[string][]provider.Shipment{}
	for _, sh := range s.Provider.Shipments() {
		byOrder[sh.OrderID] = append(byOrder[sh.OrderID], sh)
		a.Shipments++
	}
	creates := map[string][]string{} // order id -> Idempotency-Keys of creations, in order
	for _, r := range s.Provider.Requests() {
		if r.Method == http.MethodPost && r.Path == "/shipments" && r.Outcome == provider.OutcomeCreated {
			var body provider.ShipmentRequest
			if json.Unmarshal([]byte(r.Body), &body) == nil {
				creates[body.OrderID] = append(creates[body.OrderID], r.IdempotencyKey)
			}
		}
	}
	a.Expected = len(paid)
	for id, evID := range paid {
		switch n := len(byOrder[id]); {
		case n == 0:
			a.Missing++
			a.problem("shipment missing: order %s (OrderPaid %s)", id, evID)
		case n > 1:
			a.Duplicates += n - 1
			keys := creates[id]
			if len(keys) > 1 {
				a.DuplicateKeys = append(a.DuplicateKeys, keys[1:]...)
			}
		}
	}
	for id, sh := range byOrder {
		if _, owed := paid[id]; !owed && !paidParked[id] {
			a.problem("ghost shipment: order %s has %d shipment(s) and no OrderPaid", id, len(sh))
		}
		if _, c := cancelled[id]; c {
			done := 0
			for _, x := range sh {
				if x.Status == provider.StatusCancelled {
					done++
				}
			}
			// The consumer cancels the shipment it recorded; a duplicate
			// (only possible with a provider ignoring Idempotency-Key) stays
			// open and is counted as a duplicate, not here.
			if done == 0 {
				a.NotCancelled++
				a.problem("shipment of cancelled order %s still open", id)
			}
		}
	}
	return a, nil
}
