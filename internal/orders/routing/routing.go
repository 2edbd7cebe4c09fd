// Package routing declares, once, which consumer receives which published
// events. The local bus (pkg/localrt) routes by these rules and the CDK stack
// (infra/) generates one EventBridge rule per entry, so local runs and AWS
// cannot drift.
package routing

import (
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// Consumer names. Each is a Lambda function (functions/<name>) and a rule.
const (
	ConsumerLedger   = "ledger"
	ConsumerNotifier = "notifier"
	// ConsumerFulfilment creates a shipment at the fulfilment provider for
	// each paid order and cancels it when the order is cancelled (an effect
	// outside DynamoDB: internal/orders/fulfilment, through pkg/idempotency).
	ConsumerFulfilment = "fulfilment"
)

// Consumers lists every consumer, in a fixed order.
func Consumers() []string { return []string{ConsumerLedger, ConsumerNotifier, ConsumerFulfilment} }

// Rule routes events whose Source is one of the bus sources and whose
// DetailType is in DetailTypes to one consumer. It is the subset of the
// EventBridge event pattern language this project uses:
// {"source":[<source>],"detail-type":[<types>...]}.
type Rule struct {
	// Name is the rule's logical name, unique per bus.
	Name string
	// Consumer is the target consumer's name (functions/<Consumer>).
	Consumer string
	// DetailTypes are the event types the consumer receives.
	DetailTypes []string
	// Ordered says the consumer applies an aggregate's events in sequence
	// order (dedup.Ordered, promise I4): it must then receive every event
	// type of the aggregate, including those it does not act on, or it
	// would wait forever for a sequence it never sees (docs/ORDERING.md).
	Ordered bool
}

// Pattern returns the rule's EventBridge event pattern for events of source,
// as a JSON-ready value: {"source":[source],"detail-type":[...]}.
func (r Rule) Pattern(source string) map[string]any {
	dt := make([]any, len(r.DetailTypes))
	for i, t := range r.DetailTypes {
		dt[i] = t
	}
	return map[string]any{
		"source":      []any{source},
		"detail-type": dt,
	}
}

// Rules returns every consumer rule.
func Rules() []Rule {
	return []Rule{
		{
			// Every order event, not only payments and cancellations: the
			// ledger is an ordered consumer (promise I4, docs/ORDERING.md)
			// and must see each sequence of an order to advance past the
			// ones it does not book (OrderPlaced, OrderShipped, an unpaid
			// cancellation). Filtered to its two types it could neither
			// wait for "last + 1" (sequence 1 never comes) nor accept any
			// later sequence (a refund would be booked before its payment).
			// The name is kept from when the rule matched payments only:
			// it is the CloudFormation logical id of the rule and of its
			// DLQ, so renaming it would replace both on deploy.
			Name:        "ledger-order-payments",
			Consumer:    ConsumerLedger,
			DetailTypes: append([]string(nil), order.EventTypes...),
			Ordered:     true,
		},
		{
			// Unordered: each effect is keyed by the order and guarded by
			// its idempotency record and the shipment's own state
			// (docs/ORDERING.md).
			Name:        "fulfilment-order-payments",
			Consumer:    ConsumerFulfilment,
			DetailTypes: []string{order.EventOrderPaid, order.EventOrderCancelled},
		},
		{
			Name:        "notifier-order-events",
			Consumer:    ConsumerNotifier,
			DetailTypes: append([]string(nil), order.EventTypes...),
			Ordered:     true,
		},
	}
}

// BusRules returns Rules as the local bus's rules (pkg/localrt) for events
// of source: each rule's event pattern (Pattern) and its consumer as the
// target.
func BusRules(source string) []localrt.Rule {
	rules := Rules()
	out := make([]localrt.Rule, len(rules))
	for i, r := range rules {
		out[i] = localrt.Rule{Name: r.Name, Target: r.Consumer, Pattern: r.Pattern(source)}
	}
	return out
}

// ArchivePattern is the event pattern of the outbox's archive: every event
// of source, whatever its type (the CDK stack's AWS::Events::Archive and
// the local bus's archive both use it). Replayed events never reach an
// archive: EventBridge adds a managed rule for that (eb-archive).
func ArchivePattern(source string) map[string]any {
	return map[string]any{"source": []any{source}}
}
