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
//   - Per-aggregate order (I4): a batch is published in waves (wave k = the
//     k-th event of each aggregate; Publisher.PublishInOrder); an aggregate
//     whose event is not published stops, its later events are held back
//     (CodeHeldBack) while other aggregates flow. Cost: ceil(|wave|/10)
//     PutEvents per wave: 140 calls per 1,000 events when each aggregate has
//     one event per batch of 100 (or the waves are multiples of 10 entries);
//     each extra, partly filled wave adds a call, up to 1,040 per 1,000
//     when a whole batch is one aggregate's (one call per event).
//   - Handle reports the dynamodb.SequenceNumber of the first record not
//     done, never the eventID; a configuration error (no NewImage) fails the
//     whole batch.
//   - Deadline budget (a timed-out invocation loses its partial batch
//     response): publishing stops MarkerConfig.Reserve before the invocation
//     deadline, marking AnswerMargin before it, and what is not done is
//     reported. MinFunctionTimeout gives the function timeout a
//     configuration needs: RetryBudget + Reserve + 1 s (32 s by default).
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
