package order

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The producer's event contract: what the order domain can emit, checked by
// every consumer before it applies an event (CheckEvent). The rules are the
// same code the write side validates with (ValidateID, ValidateCustomerID,
// ValidateReason, KnownCurrency, MaxAmountMinor), so there is one source of
// truth: an event that fails them was not emitted by this domain, whatever
// path it came by.

// Sequences follow from the state machine (PLACED → PAID → SHIPPED, PLACED or
// PAID → CANCELLED; every transition raises the version by one, Place yields
// version 1):
//
//	OrderPlaced     1
//	OrderPaid       2
//	OrderShipped    3
//	OrderCancelled  2 (was_paid false: cancelled while PLACED)
//	                3 (was_paid true: cancelled while PAID)
//
// MaxEventsPerOrder is therefore 3. A change to the state machine that adds
// a transition must update ExpectedSequences and this bound in the same
// change; TestEveryTransitionSatisfiesTheContract walks every path so the two
// cannot drift. Deploy consumers before producers when the bound grows: an
// older consumer dead-letters (never applies) an event it cannot place.
const MaxEventsPerOrder = 3

// ErrForeignEvent is wrapped by every *ContractError: the event is not one
// the order domain can emit. Retrying cannot fix it; consumers dead-letter it.
var ErrForeignEvent = errors.New("order: event the order domain cannot emit")

// Machine-readable reasons of a *ContractError (the DLQ's "reason" message
// attribute).
const (
	ReasonUnknownEventType   = "unknown_event_type"
	ReasonUnsupportedVersion = "unsupported_version"
	ReasonForeignAggregate   = "foreign_aggregate_type"
	ReasonInvalidEventID     = "invalid_event_id"
	ReasonInvalidOrderID     = "invalid_order_id"
	ReasonOrderIDMismatch    = "order_id_mismatch"
	ReasonInvalidPayload     = "invalid_payload"
	ReasonAmountOutOfRange   = "amount_out_of_range"
	ReasonUnknownCurrency    = "unknown_currency"
	ReasonImpossibleSequence = "impossible_sequence"
	ReasonInvalidText        = "invalid_text"
	ReasonInvalidActor       = "invalid_actor"
)

// ContractError reports an envelope the order domain cannot have emitted.
// errors.Is(err, ErrForeignEvent) holds for every one.
type ContractError struct {
	// Reason is one of the Reason* constants.
	Reason string
	// EventID and EventType identify the refused event (as claimed by it).
	EventID, EventType string
	// Detail says what is wrong, for logs and the DLQ's error attribute.
	Detail string
}

// Error returns "order: <type> <event id> refused (<reason>): <detail>".
func (e *ContractError) Error() string {
	return fmt.Sprintf("order: %s %s refused (%s): %s", e.EventType, e.EventID, e.Reason, e.Detail)
}

// Unwrap returns ErrForeignEvent.
func (e *ContractError) Unwrap() error { return ErrForeignEvent }

// AsContractError returns the *ContractError in err's chain, if any.
func AsContractError(err error) (*ContractError, bool) {
	var ce *ContractError
	ok := errors.As(err, &ce)
	return ce, ok
}

// ExpectedSequences returns the sequences at which the state machine can emit
// an event of eventType (see MaxEventsPerOrder), or nil for a type the order
// domain does not emit. For OrderCancelled wasPaid selects 3 (true) or 2.
func ExpectedSequences(eventType string, wasPaid bool) []int64 {
	switch eventType {
	case EventOrderPlaced:
		return []int64{1}
	case EventOrderPaid:
		return []int64{2}
	case EventOrderShipped:
		return []int64{3}
	case EventOrderCancelled:
		if wasPaid {
			return []int64{3}
		}
		return []int64{2}
	}
	return nil
}

// CheckEvent decodes env's payload and checks that the whole envelope is one
// the order domain can emit. It returns the typed payload (Placed, Paid,
// Shipped or Cancelled, by value) or a *ContractError (wrapping
// ErrForeignEvent) with the first rule broken:
//
//   - event_type is one of EventTypes (unknown_event_type) and event_version
//     is EventVersion (unsupported_version);
//   - aggregate_type is AggregateType (foreign_aggregate_type);
//   - event_id is a lower-case canonical UUID, as outbox.NewEnvelope makes
//     (invalid_event_id);
//   - aggregate_id passes ValidateID (invalid_order_id) and payload.order_id
//     equals it (order_id_mismatch);
//   - the payload is a JSON object of the type's shape (invalid_payload);
//   - amounts are 1..MaxAmountMinor, a refund is 0 when was_paid is false
//     (amount_out_of_range); currency is KnownCurrency (unknown_currency);
//   - customer_id passes ValidateCustomerID and reason ValidateReason
//     (invalid_text); actor, when set, passes ValidateActor (invalid_actor);
//   - sequence is in ExpectedSequences (impossible_sequence), so at most
//     MaxEventsPerOrder.
//
// Unknown payload members are tolerated (a tolerant reader: an optional
// member added later must not poison running consumers).
//
// It does not (cannot) check that the order exists or that the amounts
// match the stored order: consumers have no read access to the orders
// table. That an event came from the outbox at all is the job of the bus
// and queue policies (docs/SECURITY-MODEL.md).
func CheckEvent(env outbox.Envelope) (any, error) {
	fail := func(reason, format string, args ...any) (any, error) {
		return nil, &ContractError{Reason: reason, EventID: env.EventID, EventType: env.EventType, Detail: fmt.Sprintf(format, args...)}
	}
	if ExpectedSequences(env.EventType, false) == nil {
		return fail(ReasonUnknownEventType, "event_type %q is not an order event", truncate(env.EventType, 64))
	}
	if env.EventVersion != EventVersion {
		return fail(ReasonUnsupportedVersion, "event_version %d (this consumer understands %d)", env.EventVersion, EventVersion)
	}
	if env.AggregateType != AggregateType {
		return fail(ReasonForeignAggregate, "aggregate_type %q, want %q", truncate(env.AggregateType, 64), AggregateType)
	}
	if u, err := uuid.Parse(env.EventID); err != nil || u.String() != env.EventID {
		return fail(ReasonInvalidEventID, "event_id %q is not a lower-case UUID", truncate(env.EventID, 64))
	}
	if err := ValidateID(env.AggregateID); err != nil {
		return fail(ReasonInvalidOrderID, "aggregate_id %q: %v", truncate(env.AggregateID, 64), err)
	}
	if env.Actor != "" {
		if err := ValidateActor(env.Actor); err != nil {
			return fail(ReasonInvalidActor, "actor: %v", err)
		}
	}
	var (
		payload  any
		orderID  string
		wasPaid  bool
		amount   int64
		currency string
	)
	decode := func(dst any) error {
		if b := bytes.TrimSpace(env.Payload); len(b) == 0 || b[0] != '{' {
			return errors.New("payload is not a JSON object")
		}
		// The producer never emits duplicate or differently-cased keys;
		// encoding/json would read them differently from other readers.
		return env.DecodePayload(dst)
	}
	switch env.EventType {
	case EventOrderPlaced:
		var p Placed
		if err := decode(&p); err != nil {
			return fail(ReasonInvalidPayload, "%v", err)
		}
		if err := ValidateCustomerID(p.CustomerID); err != nil {
			return fail(ReasonInvalidText, "%v", err)
		}
		payload, orderID, amount, currency = p, p.OrderID, p.AmountMinor, p.Currency
	case EventOrderPaid:
		var p Paid
		if err := decode(&p); err != nil {
			return fail(ReasonInvalidPayload, "%v", err)
		}
		payload, orderID, amount, currency = p, p.OrderID, p.AmountMinor, p.Currency
	case EventOrderShipped:
		var p Shipped
		if err := decode(&p); err != nil {
			return fail(ReasonInvalidPayload, "%v", err)
		}
		payload, orderID = p, p.OrderID
	case EventOrderCancelled:
		var p Cancelled
		if err := decode(&p); err != nil {
			return fail(ReasonInvalidPayload, "%v", err)
		}
		if err := ValidateReason(p.Reason); err != nil {
			return fail(ReasonInvalidText, "%v", err)
		}
		if !p.WasPaid && p.RefundMinor != 0 {
			return fail(ReasonAmountOutOfRange, "refund_minor %d on an order that was not paid", p.RefundMinor)
		}
		payload, orderID, wasPaid, currency = p, p.OrderID, p.WasPaid, p.Currency
		if p.WasPaid {
			amount = p.RefundMinor
		}
	}
	if orderID != env.AggregateID {
		return fail(ReasonOrderIDMismatch, "payload order_id %q differs from aggregate_id %q", truncate(orderID, 64), env.AggregateID)
	}
	moves := env.EventType == EventOrderPlaced || env.EventType == EventOrderPaid || wasPaid
	if moves && (amount < 1 || amount > MaxAmountMinor) {
		return fail(ReasonAmountOutOfRange, "amount %d is outside 1..%d", amount, MaxAmountMinor)
	}
	if env.EventType != EventOrderShipped && !KnownCurrency(currency) {
		return fail(ReasonUnknownCurrency, "currency %q is not an active ISO 4217 code", truncate(currency, 16))
	}
	if !containsSeq(ExpectedSequences(env.EventType, wasPaid), env.Sequence) {
		return fail(ReasonImpossibleSequence, "sequence %d; the state machine emits %s only at %v", env.Sequence, env.EventType, ExpectedSequences(env.EventType, wasPaid))
	}
	return payload, nil
}

func containsSeq(list []int64, v int64) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}
