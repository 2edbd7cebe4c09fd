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
// # Versioned updates
//
// Writer.Update owns the read-version, change, conditional-write loop: it
// reads the aggregate's item, runs the caller's ChangeFunc, and writes the
// new item, its version and the outbox records in one transaction
// conditioned on the version read, retrying a conflict within
// WriterConfig.UpdateMaxAttempts (then ErrConflict). Each event's sequence is
// the aggregate's version after it, written together, so sequences are
// gap-free by construction — what an ordered consumer needs. A create
// (version 0 → 1) is the same call. Use Write directly only when the caller
// keeps the version itself.
//
//	res, err := w.Update(ctx, outbox.UpdateInput{AggregateType: "Account", AggregateID: id,
//		Table: "accounts", Key: key}, func(ctx context.Context, cur outbox.Current) (outbox.Change, error) {
//		// cur.Version, cur.Item: the account as read (consistent read)
//		return outbox.Change{Item: newItem, Events: []outbox.Event{{Type: "AmountDeposited", Version: 1, Payload: p}}}, nil
//	})
//
// # Multi-Region mode
//
// With WriterConfig.Region set (WriterConfigFromEnv: AWS_REGION when
// OUTBOX_REGIONS lists the global table's Regions; docs/MULTI-REGION.md)
// every record is stamped with AttrOriginRegion and kept in its Region's
// pending shards (PendingShardIn), so each Region's relay and reconciler
// handle only what was written there. Every transaction is also fenced: an
// aggregate's first event (sequence 1) writes its home item (HomeKey,
// AttrHomeRegion = Region) and every later one checks that the home item
// names this Region. A write elsewhere is refused with a *NotHomeError
// (ErrNotHomeRegion), final and never retried; an aggregate created before
// multi-Region mode has no home item until Writer.ClaimHome writes it. Home
// items carry no event id and no pending shard, so the relay's stream filter
// and the pending index never see them, and no TTL: one small item per
// aggregate stays. The writer then also needs dynamodb:ConditionCheckItem
// on the outbox table. Without a Region nothing changes: items, keys and
// transactions are those of single-Region mode.
//
// # Example
//
//	env, _ := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: 1},
//		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: placed}, outbox.Metadata{})
//	err := w.Write(ctx, []types.TransactWriteItem{putOrder}, []outbox.Envelope{env})
package outbox
