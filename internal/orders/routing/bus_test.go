package routing_test

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// TestRoutingRulePatterns: every routing rule's pattern, compiled by the
// local bus's matcher (the one the local stack routes with), delivers
// exactly the detail types its consumer takes, of the outbox's source
// only; BusRules hands the bus those patterns with the consumers as
// targets.
func TestRoutingRulePatterns(t *testing.T) {
	t.Parallel()
	event := func(source, detailType string) string {
		return `{"version":"0","id":"x","detail-type":"` + detailType + `","source":"` + source +
			`","account":"000000000000","time":"2024-01-01T00:00:00Z","region":"us-east-1","resources":[],"detail":{"event_id":"e"}}`
	}
	src := appenv.EventSource
	want := map[string]map[string]bool{ // consumer → detail type → delivered
		// ordered: the ledger receives every event of an order and advances
		// past those it does not book (docs/ORDERING.md)
		routing.ConsumerLedger: {
			order.EventOrderPlaced: true, order.EventOrderPaid: true, order.EventOrderShipped: true, order.EventOrderCancelled: true,
		},
		routing.ConsumerFulfilment: {
			order.EventOrderPlaced: false, order.EventOrderPaid: true, order.EventOrderShipped: false, order.EventOrderCancelled: true,
		},
		routing.ConsumerNotifier: {
			order.EventOrderPlaced: true, order.EventOrderPaid: true, order.EventOrderShipped: true, order.EventOrderCancelled: true,
		},
	}
	for _, r := range routing.Rules() {
		p := localrt.MustCompilePattern(r.Pattern(src))
		for dt, exp := range want[r.Consumer] {
			got, err := p.MatchJSON([]byte(event(src, dt)))
			if err != nil {
				t.Fatal(err)
			}
			if got != exp {
				t.Errorf("rule %s, %s: match = %v, want %v", r.Name, dt, got, exp)
			}
			if got, _ := p.MatchJSON([]byte(event("com.other", dt))); got {
				t.Errorf("rule %s matched a foreign source", r.Name)
			}
		}
		if got, _ := p.MatchJSON([]byte(event(src, "Unknown"))); got {
			t.Errorf("rule %s matched an unknown detail type", r.Name)
		}
	}
}

func TestBusRules(t *testing.T) {
	t.Parallel()
	rules, bus := routing.Rules(), routing.BusRules("src")
	if len(bus) != len(rules) {
		t.Fatalf("%d bus rules for %d routing rules", len(bus), len(rules))
	}
	for i, r := range rules {
		b := bus[i]
		if b.Name != r.Name || b.Target != r.Consumer {
			t.Errorf("bus rule %+v for routing rule %s → %s", b, r.Name, r.Consumer)
		}
		if _, err := localrt.CompilePattern(b.Pattern); err != nil {
			t.Errorf("rule %s: %v", r.Name, err)
		}
	}
}
