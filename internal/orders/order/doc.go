// Package order is the order aggregate, its state machine and its DynamoDB
// repository built on the outbox writer.
//
// # Aggregate
//
// An Order is priced in integer minor units (AmountMinor) of an active ISO
// 4217 currency. Its states are PLACED → PAID → SHIPPED, and PLACED or PAID →
// CANCELLED. Place builds a new order; Pay, Ship and Cancel change one. Each
// change raises Version by one and returns the outbox.Event it caused
// (OrderPlaced, OrderPaid, OrderShipped, OrderCancelled; payloads in
// events.go). The event's sequence is the version after the change, so Place
// yields sequence 1. Errors wrap ErrValidation or ErrInvalidTransition.
//
// # Storage
//
// The orders table has one string partition key "pk": "ORDER#<id>" for
// orders, "IDEMPOTENCY#<hex SHA-256 of the caller scope>#<key>" for
// idempotency records (the only items with the TTL attribute "expires_at"):
// an idempotency key belongs to the caller that sent it (IdempotencyKey,
// IdempotencyScope). Orders record who created and last changed them
// (created_by, updated_by: CreateMeta.Actor, UpdateMeta.Actor), and every
// envelope carries the actor.
//
// # Event contract
//
// CheckEvent is what every consumer runs before applying an order event: it
// refuses (a *ContractError wrapping ErrForeignEvent, with a
// machine-readable Reason) anything this domain cannot emit: another
// aggregate type, an order_id that is not the aggregate id, amounts outside
// 1..MaxAmountMinor, currencies outside the ISO 4217 list, customer ids and
// reasons that break the text rules (CheckText), and sequences the state
// machine never produces (ExpectedSequences, MaxEventsPerOrder = 3). The
// write side validates with the same functions, so there is one source of
// truth. Repository.Create and Repository.Update commit
// the order write and its outbox records in one TransactWriteItems through
// outbox.Writer (invariants I1 and I4): an update's order put is conditioned
// on "version = :read_version" (optimistic concurrency), a create's on
// attribute_not_exists(pk).
//
// # Example
//
//	o, evs, err := order.Place(order.PlaceInput{ID: id, CustomerID: "c-1", AmountMinor: 1999, Currency: "EUR"}, time.Now())
//	if err != nil { ... }                       // errors.Is(err, order.ErrValidation)
//	o2, created, err := repo.Create(ctx, o, evs, order.CreateMeta{IdempotencyKey: key, RequestHash: hash})
//	paid, err := repo.Update(ctx, o2.ID, func(o *order.Order) ([]outbox.Event, error) {
//		return o.Pay(time.Now())
//	}, order.UpdateMeta{ExpectedVersion: 1})    // errors.Is(err, order.ErrVersionConflict)
package order
