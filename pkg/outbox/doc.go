// Package outbox is the write side of the transactional outbox: the event
// envelope, the outbox record stored in the dedicated outbox table, and the
// Writer that commits a business change and its outbox records in one
// DynamoDB TransactWriteItems call.
//
// Part of the outbox library, the packages a team imports for its own tables
// (outbox, relay, reconciler, dedup, streamimage, idempotency); they never
// import the example orders application or the local tooling. The runnable
// example "add an outbox to your own table" runs against a local server.
//
// # Invariants
//
//   - A change and its events commit together or not at all (one
//     TransactWriteItems). Writer.Write refuses a transaction that carries no
//     event (ErrNoEvents), so an aggregate cannot be changed through it
//     without recording what happened.
//   - Each outbox record is put with attribute_not_exists(pk): a record is
//     never overwritten.
//   - A new record carries the sparse pending index attribute (AttrPendingShard)
//     and no TTL attribute. The relay removes it and sets AttrExpiresAt only
//     after EventBridge accepted the event; an unpublished record never expires.
//   - Limits are checked before anything is sent: EventBridge entry size
//     (256 KB by default, measured as AWS does), at most 100 actions and 4 MB
//     per transaction, at most one action per item.
//
// # Keys
//
// The outbox table has a composite primary key: AttrPK is
// "<aggregate_type>#<aggregate_id>" and AttrSK is the zero-padded sequence
// followed by the event's index within the change, so one aggregate version
// can only ever be recorded once and the records of an aggregate read back in
// order. The pending index (PendingIndexName) has AttrPendingShard as its
// partition key, spread over N shards by a hash of the event id (one hot
// partition throttles past ~1,000 writes/s), and AttrCreatedAt as its sort key.
//
// # Example
//
//	env, _ := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: 1},
//		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: placed}, outbox.Metadata{})
//	err := w.Write(ctx, []types.TransactWriteItem{putOrder}, []outbox.Envelope{env})
package outbox
