// Package outboxcdk is the reusable AWS CDK construct of the transactional
// outbox: New creates the outbox table, the relay and its DynamoDB Streams
// event source mapping, the scheduled reconciler, the dead-letter queues and
// the alarms; GrantWriteEvents gives a writer function exactly the IAM access
// and the environment variables (names from pkg/config) it needs. On the
// consumer side, NewConsumer creates one consumer's queue, DLQ, rule (an
// ordered consumer's matches every event type of its aggregate), state table
// (NewConsumerTable, AddStateIndex), SQS event source mapping, resequencer
// sweep schedule and alarms, grants the published action lists
// (ConsumerStateActions, ConsumerBufferQueryActions, ConsumerDLQActions,
// ConsumerQueueActions) and sets the environment the consumer runtime reads.
//
// # Invariants
//
//   - Table shape, attribute names, index name and the stream filter come
//     from pkg/outbox constants and outbox.StreamFilterPattern(); env var
//     and metric names from pkg/config. Infra imports the runtime, never the
//     reverse, so the two cannot drift.
//   - The event source mapping always has bounded retries, a maximum record
//     age, bisect-on-error, ReportBatchItemFailures and an SQS on-failure
//     destination (promise I5). That queue receives batch metadata only:
//     unpublished records stay in the pending index for the reconciler.
//   - The reconciler's scheduled (asynchronous) invocations have an SQS
//     on-failure destination, so a run that fails Lambda's retries is
//     recorded and alarmed, never discarded.
//   - Every queue is encrypted and TLS-only (SSE-SQS; the parked-records
//     queue with Props.EncryptionKey when set, the two on-failure queues,
//     which hold metadata only, always SSE-SQS); the table is encrypted with
//     the AWS managed key or Props.EncryptionKey, has PITR and, unless its
//     RemovalPolicy is DESTROY, deletion protection; no IAM statement uses
//     a wildcard action (KeyUseActions on a customer key).
//   - The reconciler runs one at a time by default (reserved concurrency
//     ReconcilerReservedConcurrency = 1; Props.ReconcilerReservedConcurrency
//     NoReservedConcurrency leaves it unreserved, overlapping runs being
//     safe); every function logs in Lambda's JSON log format.
//   - Every alarm notifies Props.AlarmTopic (or a topic the construct
//     creates) on ALARM and OK: NotifyAlarms, an aspect, so no alarm under
//     the construct is left without an action. The reconciler's schedule
//     has a target DLQ and alarms on its FailedInvocations and
//     InvocationsFailedToBeSentToDlq (RuleDeliveryAlarms).
//   - Every dead-letter queue accepts messages from its own source only
//     (deadletter.Queue.AcceptOnlyFrom) and may be no SQS queue's redrive
//     target.
//   - Only the outbox publishes: PublishOnlyStatement is the bus resource
//     policy statement denying events:PutEvents to every principal but the
//     relay's and the reconciler's roles (PublisherRoleArns). The construct
//     does not attach it (a bus may be shared); infra/stack does.
//   - Props.Validate checks every tunable against the AWS limit it maps to
//     and touches nothing in the CDK.
//   - Two or more Regions (Props.MultiRegion, region.go; issue 34,
//     docs/MULTI-REGION.md): the primary Region's Outbox creates the table as
//     a global table (TableV2) with a replica per other Region, the others
//     import their replica with its exact stream ARN (a DescribeTable custom
//     resource); each relay publishes only its own Region's records
//     (outbox.StreamFilterPatternIn), each Region alarms on ReplicationLatency
//     to the others, and GrantTakeover serves the operator's takeover
//     command. Consumers keep regional state (NewConsumer refuses a
//     replicated table) in one home Region, fed from the others by
//     NewConsumerForwarder.
//
// # Example
//
//	bus := awsevents.NewEventBus(stack, jsii.String("Bus"), nil)
//	ob, err := outboxcdk.New(stack, "Outbox", outboxcdk.Props{
//		EventBus:  bus,
//		AssetRoot: "../dist",
//		BatchSize: 200,
//	})
//	if err != nil {
//		return err
//	}
//	ob.GrantWriteEvents(apiFunction)
package outboxcdk
