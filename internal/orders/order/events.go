package order

// AggregateType is the outbox aggregate_type of orders.
const AggregateType = "Order"

// Event types (EventBridge DetailType) emitted by the order aggregate. Each
// has a JSON Schema under events/schemas/<type>.v<version>.json.
const (
	EventOrderPlaced    = "OrderPlaced"
	EventOrderPaid      = "OrderPaid"
	EventOrderShipped   = "OrderShipped"
	EventOrderCancelled = "OrderCancelled"
)

// EventVersion is the schema version of every order event payload.
const EventVersion = 1

// EventTypes lists every event type the order aggregate emits.
var EventTypes = []string{EventOrderPlaced, EventOrderPaid, EventOrderShipped, EventOrderCancelled}

// Placed is the OrderPlaced payload.
type Placed struct {
	OrderID     string `json:"order_id"`
	CustomerID  string `json:"customer_id"`
	AmountMinor int64  `json:"amount_minor"` // integer minor units, e.g. cents
	Currency    string `json:"currency"`     // ISO 4217 alphabetic code
}

// Paid is the OrderPaid payload.
type Paid struct {
	OrderID     string `json:"order_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
}

// Shipped is the OrderShipped payload.
type Shipped struct {
	OrderID string `json:"order_id"`
}

// Cancelled is the OrderCancelled payload. WasPaid tells a ledger whether
// the cancellation refunds RefundMinor (equal to the paid amount).
type Cancelled struct {
	OrderID     string `json:"order_id"`
	Reason      string `json:"reason,omitempty"`
	WasPaid     bool   `json:"was_paid"`
	RefundMinor int64  `json:"refund_minor"`
	Currency    string `json:"currency"`
}
