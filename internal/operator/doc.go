// Package operator answers the questions an operator asks of a running
// outbox, against AWS or the local stack, through the SDK clients of the
// store and the queues; cmd/outboxctl is its command line.
//
//   - ReadStatus: how far behind is the outbox? Pending records per pending
//     index shard and the oldest one's age (Query of the sparse pending
//     index, per shard), parked records and records published in the last
//     window (one Scan of the outbox table: an operator tool, never a request
//     path; it reads the whole table, about table-size / 4 KB × 0.5 read
//     units), and the depth of the dead-letter queues (GetQueueAttributes).
//   - FindEvent and AggregateEvents: what happened to an event, or to an
//     order's events? Status, sequence, publish time and EventBridge id,
//     parked reason, redrive time, and (with a dedup table) which consumers
//     applied it. By aggregate it is a Query of the aggregate's partition;
//     by event id a Scan (the table has no event_id index).
//   - Requeue and Replay: send a published event to the bus again, for a
//     consumer that needs it (a lost DLQ message, a consumer added later).
//     Requeue, the default of outboxctl replay, makes the record PENDING
//     again (status, pending shard, replayed_at; TTL removed) and the
//     reconciler's next run publishes it and marks it published: the
//     normal path, by the reconciler's role, which the bus policy admits
//     (it refuses PutEvents from any other principal). Replay sends the
//     stored envelope directly through relay.Publisher, the relay's own
//     PutEvents path (same Source, DetailType, Detail and Time), leaving the
//     record as it is: immediate, for the local stack or a principal the bus
//     admits. Either way every rule matching the event delivers it again;
//     consumers deduplicate on the outbox event_id, so those that applied
//     it change nothing. Only PUBLISHED records are replayed: a PENDING one
//     is the relay's or reconciler's to publish, a PARKED one is redriven
//     (relay.Redrive). In multi-Region mode (RequeueInRegion) a record is
//     requeued only in its origin Region, its redrive_generation bumped
//     under a condition on the one read (relay.ErrNotOrigin,
//     relay.ErrRedriveConflict); ReadStatus with StatusOptions.Region counts
//     that Region's pending shards.
//   - Backfill, Replays, CheckArchiveReach, FindStartGap and History:
//     replay the outbox's EventBridge archive to one consumer's rule (a new
//     or rebuilt consumer) and follow it (DescribeReplay) until it ends,
//     list the replays, say what the archive holds for the consumer (its
//     creation, retention window and pattern, and the backfill's -from),
//     find the orders that began before that (their history is not in it),
//     and list an aggregate's published events from the outbox table
//     (docs/ARCHIVE.md).
//   - RedriveRuleDLQ: move the events EventBridge could not deliver to a
//     consumer queue (the queue refused them: deleted, its KMS key
//     disabled, its policy) from the routing rule's DLQ back to that queue,
//     once the DLQ's policy proves that only EventBridge, for the rule,
//     sent there and each message's RULE_ARN, TARGET_ARN and body say it is
//     the rule's event for that queue; anything else is listed and left.
//     A receive, send and delete per message (SQS requests only).
//   - CheckAlarmNotifies: does an alarm of the deployed stack reach its SNS
//     topic? It sets one alarm to ALARM (SetAlarmState), reads the alarm's
//     history (DescribeAlarmHistory) until the SNS action's result appears,
//     and sets it back to OK: the post-deploy check (outboxctl alarms test;
//     AWS only, the local stack has no CloudWatch).
//   - Queues: the dead-letter queues by kind, named by URL or found by name
//     prefix (ListQueues) with the local stack's naming: <prefix>-parked,
//     <prefix>-relay-onfailure, <prefix>-<consumer>-dlq,
//     <prefix>-<rule>-rule-dlq.
//
// Clients are the narrow interfaces below, with the SDK's exact signatures:
// *dynamodb.Client, *sqs.Client, *eventbridge.Client and *cloudwatch.Client
// satisfy them.
package operator
