// Package dedup makes an event consumer effectively-once (promise I3): it
// commits a dedup marker and the consumer's side effect in ONE DynamoDB
// TransactWriteItems call, so an event delivered any number of times changes
// state exactly once.
//
// Part of the outbox library, the packages a team imports for its own tables
// (outbox, relay, reconciler, dedup, streamimage, idempotency); they never
// import the example orders application or the local tooling. The runnable
// example of Applier.Apply deduplicates a consumer against a local server.
//
// # Invariants
//
//   - The marker is keyed by the outbox envelope's event_id
//     ("<consumer>#<event_id>"), never by the EventBridge envelope id: a
//     re-send by the relay or the reconciler gets a new EventBridge id but
//     carries the same event_id.
//   - The marker Put is action 0 of the transaction, guarded by
//     attribute_not_exists(pk); the side-effect actions follow it. Either all
//     commit or none does: a marker is never written without its effect (that
//     would lose the event), and an effect is never applied without its marker
//     (that would apply it again on redelivery).
//   - A failed marker condition means "already applied": Apply returns
//     (false, nil) and the caller acknowledges the delivery.
//   - Transactions cancelled only by TransactionConflict or throttling are
//     retried a bounded number of times with jittered exponential backoff;
//     after that the *outbox.TxError is returned so the platform redelivers.
//   - Markers expire through DynamoDB TTL on AttrExpiresAt (epoch seconds)
//     after Config.Retention (default 7 days). The redelivery window can be
//     longer: EventBridge → consumer queue for up to the rule's maximum event
//     age (6 h), 4 days in the queue, then up to 14 days in the DLQ before a
//     redrive, and the reconciler re-sends pending records. A duplicate
//     after the marker expired is caught by the effect's own
//     attribute_not_exists condition (e.g. an entry Put keyed by the event
//     id; name it with AppliedIf).
//   - Ordered appliers (Config.Ordered; ConsumerConfig.Ordering, promise
//     I4) add one action after the effects: the ordering gate, an Update of
//     "<consumer>#SEQ#<aggregate_type>#<aggregate_id>" (AttrLastSequence)
//     guarded by last_sequence = sequence-1 (no last_sequence for sequence
//     1) and attribute_not_exists(buffered): in order, one transaction. A
//     duplicate (sequence <= last) is acknowledged; an early event
//     (sequence > last+1) is stored in the resequencer buffer
//     ("<consumer>#BUF#…", Resequencer) and applied right after its
//     predecessor by the invocation that applies the predecessor, each in
//     its own transaction; without a Resequencer, or past its limits, it
//     is returned as a *GapError and held by ConsumerConfig.Hold
//     (docs/ORDERING.md). Ordering items never expire.
//   - An ordered Apply takes one decision when DynamoDB cancels its
//     transaction (decide.go; docs/ORDERING.md "The decision table"): the
//     cancellation reasons first — the marker, then the gate, which decides
//     even when an effect's condition failed with it (ReasonUnjudged), then
//     permanent codes, then an effect's condition that failed while the
//     gate held (the effect's answer) — then the ordering item read against
//     the arrival: applied or not, behind / next / ahead of the gate,
//     events waiting or not. An applied event next is adopted (the gate
//     advances without applying it again), one ahead is kept in the buffer
//     as applied and adopted in turn: history replayed in any order closes
//     the gate. SetBaseline declares a starting point, never covering an
//     event the consumer already holds.
//   - A buffered event that fails when its turn comes (an error, a panic,
//     a timeout) is isolated from the delivery that drains it: counted,
//     dead-lettered on its own after ResequencerConfig.DrainMaxFailures or
//     on the draining delivery's last receive; it leaves the buffer only
//     applied or with a copy on a DLQ.
//   - A consumer's state (markers, ordering items, buffer) lives in its
//     own table beside its effects (ConsumerConfig.Dedup.Table defaults to
//     ConsumerConfig.Table; WithStateIndex): only its role writes it, and a
//     backup restores effects and state as one unit.
//
// # A consumer in a few lines
//
// Consumer.Handler runs the whole protocol — origin check and decoding
// (Accept), dedup marker and effects in one transaction (ApplyEvent), an
// early event buffered or held (Hold), a duplicate acknowledged, a
// permanent failure dead-lettered with its reason (Refuse), anything else
// retried — around the caller's effect builder, and returns the handler
// sqsconsumer.New takes. The configuration comes from the variables the
// consumer construct sets:
//
//	// CONSUMER_NAME, CONSUMER_TABLE_NAME, EVENT_SOURCE, EXPECTED_EVENT_ACCOUNT, DEDUP_RETENTION_SECONDS
//	c, cfg, err := dedup.NewConsumerFromEnv(ddb, dedup.Ordered)
//	h, err := c.Handler(func(ctx context.Context, env outbox.Envelope) ([]types.TransactWriteItem, error) {
//		return []types.TransactWriteItem{{Update: addToBalance(env)}}, nil
//	})
//	qc, err := sqsconsumer.ConfigFromEnv() // CONSUMER_DLQ_URL
//	qc.DLQ, qc.Queue = sqsClient, sqsClient
//	sh, err := sqsconsumer.New(h, qc)
//	lambda.Start(sh.Handle)
//
// # The ordered consumer's rule
//
// An ordered consumer's EventBridge rule must deliver EVERY event type of
// its aggregate, not only the types it acts on: the gate advances one
// sequence at a time, so an event type the rule leaves out is a gap the
// gate waits on for ever — every later event of that aggregate is
// buffered, alarmed (OldestBufferedAgeSeconds) and finally dead-lettered as
// sequence_gap. Return no effects for a type the consumer does not act on:
// the event is recorded as seen and the gate moves past it. In ordered mode
// the CDK module's consumer construct routes every event type of the
// aggregate; a rule written by hand must do the same. An unordered
// consumer may subscribe to the types it wants.
//
// # Example
//
//	a, err := dedup.NewApplier(client, dedup.Config{Table: "balances", Consumer: "balances"}) // the consumer's own table
//	env, err := dedup.DecodeEnvelope(ev) // ev is an events.EventBridgeEvent
//	applied, err := a.Apply(ctx, env, []types.TransactWriteItem{{Update: addToBalance}})
//	switch {
//	case err != nil: // return it: the consumer queue redelivers it
//	case !applied:   // duplicate delivery: acknowledge, nothing changed
//	}
package dedup
