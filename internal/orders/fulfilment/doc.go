// Package fulfilment is an event consumer whose effect lives outside
// DynamoDB: it creates a shipment at a fulfilment provider's HTTP API when an
// order is paid and cancels it when a paid order is cancelled. It is the
// example application's user of pkg/idempotency (where internal/orders/ledger and
// internal/orders/notifier use pkg/dedup, whose marker commits in the same transaction
// as a DynamoDB effect, an HTTP call cannot join that transaction).
//
// # What it does
//
//   - OrderPaid: POST /shipments {"order_id","amount_minor","currency"} with
//     "Idempotency-Key: <event_id>", then records the provider's shipment id
//     in the shipments table (one item per order, pk = order id; see
//     CreateTableInput and Fulfilment.Shipment).
//   - OrderCancelled with was_paid=true: reads the order's shipment and sends
//     POST /shipments/{id}/cancel with "Idempotency-Key: <event_id>", then
//     marks the item cancelled. No shipment recorded yet (the OrderPaid event
//     is still on its way: per-aggregate order is not kept by the bus) is a
//     retryable ErrNoShipment: the queue redelivers until the shipment
//     exists, or dead-letters after maxReceiveCount.
//   - OrderCancelled with was_paid=false, and any other event type: nothing
//     to do; acknowledged with a log line.
//
// # Exactly once, and where it is not
//
// Each event's effect runs inside idempotency.Store.Do keyed by the outbox
// event_id (never the EventBridge id), with a payload hash of the event's
// type, version, aggregate, sequence and decoded payload: a duplicate
// delivery replays the stored result, a concurrent one gets
// idempotency.ErrInProgress (retried by the queue), a forged reuse of an
// event_id with another payload is dead-lettered (payload_mismatch).
//
// Before it calls the provider, each effect reads the order's item in the
// shipments table, which outlives any idempotency record: a shipment this
// event already recorded (a redelivery or a redrive after the record
// expired, or after a crash between recording the shipment and writing
// COMPLETED) is the answer and the provider is not called again; a
// cancellation already recorded is not sent again; an OrderPaid for an order
// that has another event's shipment is refused (duplicate_shipment) before
// any call.
//
// The window no library can close (the function dies after the provider
// acted and before the shipment is recorded, or the provider's answer is
// lost) is closed by the provider: every attempt and every redelivery sends
// the same Idempotency-Key, so a key-honouring provider answers the repeat
// with the first shipment. Against a provider that ignores keys a second
// shipment is created there. If another shipment was recorded meanwhile the
// shipments table refuses the second id for the same order (the update is
// conditioned on attribute_not_exists(pk) OR shipment_id = :id) and the
// event is dead-lettered with reason duplicate_shipment for an operator,
// never silently accepted; if none was, only the provider's own records show
// the first one.
//
// The provider's answer must be about what was asked: a creation's order_id
// must be the order's, a cancellation's order_id, shipment_id and status
// ("cancelled") the recorded shipment's. Anything else (a provider that lost
// its state and reuses shipment ids answers about another order) is never
// recorded as a success: it is dead-lettered with reason
// provider_order_mismatch (ErrProviderOrderMismatch).
//
// # Errors
//
// Handle returns nil when the event is applied, replayed or ignored. It
// returns a *sqsconsumer.PermanentError (dead-lettered at once) for:
// forged_source, forged_account, malformed_event (dedup.Decode), the
// order.Reason* contract reasons (order.CheckEvent), payload_mismatch,
// provider_rejected (a provider 4xx other than 409 and 429; 401 and 403 once
// a refreshed token is refused too), provider_redirected (a 3xx: the client
// follows no redirect), provider_order_mismatch and duplicate_shipment. Any other error (provider 5xx/429/network after the
// client's bounded retries, ErrInProgress, ErrNoShipment, DynamoDB errors)
// is retryable: the consumer queue redelivers it.
package fulfilment
