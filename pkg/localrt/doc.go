// Package localrt is the local runtime: it stands in for what AWS runs
// around the Lambda handlers, so the dev command (cmd/outboxdev) and the
// end-to-end tests run the same handlers as production against a
// DynamoDB-compatible server (Dynoxide by default, pkg/dynoxide). It is
// part of the library (docs/VERSIONING.md): a team runs its own outbox
// locally with it, its own tables, rules and handlers; it knows nothing of
// the example orders application.
//
//   - StreamPoller behaves like a Lambda event source mapping on a DynamoDB
//     stream: shards (parents before children), GetRecords in order, filter
//     patterns (default outbox.StreamFilterPattern()), batch size and
//     batching window, the exact JSON Lambda sends decoded into
//     events.DynamoDBEvent, partial batch responses (ReportBatchItemFailures),
//     bounded retries with backoff, bisect on function error, and the
//     metadata-only on-failure record sent to an SQS-shaped destination.
//   - Bus is a local EventBridge bus: PutEvents with AWS's validation rules
//     and entry-level errors, the EventBridge event JSON decoded into
//     events.EventBridgeEvent, routing by its Rules (event patterns and
//     targets: the example stack passes the rules its CDK stack declares),
//     asynchronous delivery with per-target retries and
//     a dead-letter list (the rule target DLQ); targets are SQS queues
//     (SubscribeQueue, the consumers' path) or functions (Subscribe). Its
//     archives (BusConfig.Archives, CreateArchive) keep the events their
//     patterns match, after an archive delay, and StartReplay replays them
//     as EventBridge documents (by event time in one-minute intervals,
//     unordered, with replay-name, only to the named rules); AddRule adds
//     a rule to a running bus.
//   - SQSQueue is an in-memory SQS standard queue (visibility timeout,
//     ApproximateReceiveCount, redrive policy to a DLQ, body rules,
//     retention) and SQSPoller a Lambda SQS event source mapping over it
//     (batches, MaximumConcurrency, partial batch responses by messageId,
//     function timeout): the consumer delivery path.
//   - Scheduler invokes a handler (the reconciler) with a scheduled event
//     every interval.
//   - MemoryQueue is an in-memory SQS SendMessage target with SQS's body
//     rules (the parked-records DLQ and the on-failure destination).
//   - With a StateStore (a journal file in the example stack), the queues (SQSQueueConfig.Store,
//     OpenMemoryQueue) and the bus (BusConfig.Store, Resume) keep what AWS
//     would still hold across a restart of the process: messages in flight
//     or not, undelivered events, dead letters.
//   - Every handler gets its function timeout as its context deadline, and an
//     answer after the deadline is discarded, as Lambda discards it.
//
// What is modelled of AWS, and what is not, with the test of each row:
// docs/PARITY.md.
//   - Pattern is the event pattern matcher both the poller and the bus use.
//
// Invariants: the poller checkpoints a record only after the handler
// succeeded for it, the filter passed it over, or its batch was given up
// and reported to the on-failure destination; a partial batch response
// resumes at the lowest reported sequence number (compared as big
// integers); delivery is at-least-once everywhere, so handlers must be
// idempotent (consumers deduplicate on the outbox event_id, never on the
// EventBridge id, which is fresh for every accepted entry).
//
// Typical wiring (package localstack does all of it from one config):
//
//	bus, _ := localrt.NewBus(localrt.BusConfig{Name: busName, Rules: []localrt.Rule{{
//		Name: "deposits", Target: "statement",
//		Pattern: `{"source":["com.example.wallet"],"detail":{"aggregate_type":["Account"]}}`}}})
//	dlq, _ := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "statement-dlq"})
//	q, _ := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "statement",
//		Redrive: &localrt.RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 5}})
//	bus.SubscribeQueue("statement", q, q.URL())
//	consumer, _ := localrt.NewSQSPoller(localrt.SQSPollerConfig{Queue: q}, handler.Handle) // an sqsconsumer.Handler
//	go consumer.Run(ctx)
//	poller, _ := localrt.NewStreamPoller(localrt.StreamPollerConfig{
//		Streams: streamsClient, TableName: outboxTable, Tables: ddbClient,
//		OnFailure: dlq, OnFailureQueueURL: dlq.URL(),
//	}, relay.Handle) // relay publishes with bus as its PutEventsAPI
//	go poller.Run(ctx)
//	_ = poller.WaitCaughtUp(ctx)
//	_ = bus.WaitIdle(ctx)
//
// Sources: the Lambda developer guide pages on DynamoDB Streams event source
// mappings (with-ddb, services-ddb-params, services-ddb-batchfailurereporting,
// services-dynamodb-errors, with-ddb-filtering), the DynamoDB Streams and
// EventBridge PutEvents API references, and the pages cited on each type.
package localrt
