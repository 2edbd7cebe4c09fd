package routing_test

import (
	"slices"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

// TestOrderedConsumersSeeEverySequence: a consumer that applies an
// aggregate's events in sequence order must receive every event type of
// the aggregate, or the sequences it never sees hold the others forever.
// The ledger and the notifier are ordered; fulfilment is not.
func TestOrderedConsumersSeeEverySequence(t *testing.T) {
	t.Parallel()
	want := map[string]bool{routing.ConsumerLedger: true, routing.ConsumerNotifier: true, routing.ConsumerFulfilment: false}
	for _, r := range routing.Rules() {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			if r.Ordered != want[r.Consumer] {
				t.Fatalf("rule %s (consumer %s): Ordered = %v, want %v", r.Name, r.Consumer, r.Ordered, want[r.Consumer])
			}
			if !r.Ordered {
				return
			}
			for _, typ := range order.EventTypes {
				if !slices.Contains(r.DetailTypes, typ) {
					t.Errorf("ordered rule %s does not route %s to %s", r.Name, typ, r.Consumer)
				}
			}
			p := r.Pattern("src")["detail-type"].([]any)
			if len(p) != len(r.DetailTypes) {
				t.Errorf("pattern has %d detail-types, rule %d", len(p), len(r.DetailTypes))
			}
		})
	}
}
