// Package relay forwards outbox records to Amazon EventBridge: the DynamoDB
// Streams handler (Relay), the PutEvents batcher with partial-failure
// handling (Publisher), and the marking of records as published or parked
// (Marker). The reconciler reuses Publisher and Marker.
//
// Part of the outbox library, the packages a team imports for its own tables
// (outbox, relay, reconciler, dedup, streamimage, idempotency); they never
// import the example orders application or the local tooling. The runnable
// example "run the relay on your own stream" runs against a local server.
//
// # Invariants
//
//   - Publish, then mark (promise I2): a record is marked PUBLISHED (its
//     pending_shard removed, its TTL expires_at set) only after EventBridge
//     returned an EventId for it. Anything else leaves it pending, without a
//     TTL, for a retry or the reconciler.
//   - PutEvents partial failures (HTTP 200 with FailedEntryCount > 0): only
//     the failed entries with a retryable code are re-sent; accepted entries
//     are never re-sent. Calls hold at most 10 entries and at most
//     MaxRequestBytes, entries measured with outbox.EntrySize. A request
//     refused whole for its size (HTTP 413, ValidationException "Total size
//     of the entries in the request is over the limit.") is split and its
//     parts re-sent, never retried as is; an entry refused alone is parked
//     with the reason (CodeRequestRejected).
//   - Nothing is dropped silently (I5): permanent failures, oversized entries
//     and undecodable (poison) records are sent to the parked-records DLQ
//     first, then marked PARKED (no TTL), counted and logged. The DLQ
//     message is legal for SQS whatever text the record holds (characters
//     SQS refuses are JSON-escaped) and fits the queue's MaximumMessageSize
//     (MarkerConfig.MaxMessageBytes, attributes included), shrinking to the
//     key, the reason and what fits with "truncated": true.
//   - Marking is batched: up to 25 parameterised PartiQL UPDATE statements
//     per BatchExecuteStatement call, falling back to bounded-parallel
//     UpdateItem for retryable statement errors or a server without PartiQL
//     (see Marker.MarkAll). A stream batch of 100 records of distinct
//     aggregates costs 10 PutEvents and 4 BatchExecuteStatement calls: 140
//     calls per 1,000 events.
//   - Per-aggregate order (I4): an aggregate's event is sent only after its
//     previous event in the batch was answered (Publisher.PublishInOrder),
//     never in the same PutEvents call or a call beside it; an aggregate
//     whose event is not published stops, its later events are held back
//     (CodeHeldBack) while other aggregates flow.
//   - Cost of that order (issue 22): none at the usual mixes. The calls are
//     packed highest-remaining-chain first, so the events of aggregates with
//     fewer events in the batch fill the calls the longer ones leave partly
//     empty: for entries of equal size, the fewest calls any order-keeping
//     schedule can make (Hu's highest-level-first rule), which for the mixes
//     of a stream batch of orders is max(ceil(n/10), the most events of one
//     aggregate) PutEvents calls — 10 per 100 events whether each order has one or two
//     events in the batch (140 calls per 1,000 events with the marking; one
//     partly filled call per batch more, 150, when each event position
//     ("wave") was packed alone), and one call per event only when a batch is
//     one aggregate's. The time it costs is one PutEvents round trip per
//     extra round: an aggregate's k-th event in a batch goes out at least
//     k−1 round trips after its first.
//   - Why the order is kept at publish although ordered consumers resequence
//     (an early event waits in the consumer's table and is applied right
//     after its predecessor): EventBridge documents no delivery order, so
//     the consumers' resequencer is needed either way; but every event sent
//     before its predecessor was accepted may reach a consumer early, and
//     each ordered consumer then pays for buffering it (a failed
//     transaction, a read, the buffer write, later the buffer read and
//     delete; docs/ORDERING.md, Cost) and applies it no sooner; and a
//     failed event's successors sent anyway would sit in every ordered
//     consumer's buffer, and raise its gap alarm, until the relay or the
//     reconciler re-sends the failed one. Held back, they stay pending in
//     the outbox, where the relay's retry or the reconciler sends them in
//     order. At the floor of calls, that saving is free.
//   - Handle reports the dynamodb.SequenceNumber of the first record not
//     done, never the eventID; a configuration error (no NewImage) fails the
//     whole batch.
//   - Deadline budget (a timed-out invocation loses its partial batch
//     response): publishing stops MarkerConfig.Reserve before the invocation
//     deadline, marking AnswerMargin before it, and what is not done is
//     reported. MinFunctionTimeout gives the function timeout a
//     configuration needs: RetryBudget + Reserve + 1 s (32 s by default).
//   - Multi-Region mode (Config.Region, docs/MULTI-REGION.md): a Region
//     publishes only what was written in it. Handle acknowledges, counts
//     (MetricForeignRecordsSkipped) and never publishes a record whose
//     origin_region is another Region or missing; every status write is
//     conditioned so that a status only moves forward (mark published:
//     status <> PUBLISHED; park: status <> PUBLISHED AND status <> PARKED);
//     Redrive with RedriveInRegion moves a record back only in its origin
//     Region (ErrNotOrigin) and bumps its redrive_generation conditioned on
//     the one it read (ErrRedriveConflict); a record without an origin
//     Region (written before the switch to multi-Region mode) only in the
//     legacy owner, the first Region of OUTBOX_REGIONS
//     (RedriveAsLegacyOwner).
//
// # Example
//
//	cfg := relay.Config{
//		Publisher: relay.PublisherConfig{EventBusName: "orders"},
//		Marker:    relay.MarkerConfig{Table: "outbox", ParkedQueueURL: queueURL},
//	}
//	r, err := relay.New(eventbridge.NewFromConfig(aws), dynamodb.NewFromConfig(aws), sqs.NewFromConfig(aws), cfg)
//	lambda.Start(r.Handle)
package relay
