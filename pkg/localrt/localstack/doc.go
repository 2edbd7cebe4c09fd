// Package localstack starts a team's own outbox end to end on one machine,
// for its end-to-end tests: from a short declarative Config, Start runs a
// DynamoDB-compatible server (Dynoxide, pkg/dynoxide, or any endpoint with
// Streams), creates the tables, and wires the library's real parts on the
// local runtime (pkg/localrt): the stream event source mapping invoking the
// relay (pkg/relay), a local EventBridge bus with one rule per consumer,
// each consumer's SQS queue, DLQ, rule DLQ and SQS event source mapping
// with partial batch responses, the reconciler (pkg/reconciler) on a
// schedule, each ordered consumer's resequencer sweep schedule, and the
// parked-records and on-failure queues. Nothing is mocked; nothing calls
// AWS (dummy credentials, explicit endpoints). It is part of the library
// and imports nothing of the example application. The guide:
// docs/LOCAL-STACK.md.
//
// It is a package of its own, not part of localrt, because localrt is the
// emulation of AWS's services (streams, bus, queues, schedules) and
// depends on little; this package wires the library's relay, reconciler
// and dedup onto it and starts a server, which an emulator user does not
// need. The project's own dev stack (make dev) is built from its parts:
// CreateTables, NewConsumerPath, NewSweep, Quiet, LoseAfterPublish,
// RejectSwitch.
//
// # Config
//
//	localstack.Config{
//		OutboxTable:   "wallet-outbox",   // created with outbox.CreateTableInput; required
//		PendingShards: 16,                // as the writers' (default 16)
//		Tables:        []*dynamodb.CreateTableInput{...}, // business tables
//		TTL:           map[string]string{"sessions": "expires_at"}, // table → attribute
//		Source:        "com.example.wallet", // the writers' event source; required
//		BusName:       "wallet-bus",         // required
//		Consumers: []localstack.Consumer{{
//			Name:          "balances",
//			Ordered:       true,     // sweep schedule; the rule must match every event type
//			AggregateType: "Wallet", // rule: every event of the aggregate (or Pattern)
//			NewHandler:    build,    // or Handler, or SQSHandler
//			StateTable:    "balances-state", // created with dedup.CreateTableInput unless in Tables
//		}},
//		ReconcileEvery: time.Second, ReconcileAfter: 2 * time.Second, SweepEvery: time.Second,
//	}
//
// A consumer's handler is one of: Handler, an sqsconsumer.EventHandler the
// stack runs behind sqsconsumer.New with the consumer's DLQ; NewHandler,
// which builds that handler from ConsumerEnv (the stack's DynamoDB client
// and the consumer's state table, which exist only once Start runs); or
// SQSHandler, which builds the whole events.SQSEvent handler (an
// *sqsconsumer.Handler's Handle) from ConsumerEnv. ConsumerEnv.Environment
// gives the environment variables the consumer construct sets on AWS.
//
// Units: every duration is a time.Duration; the defaults are short, for
// tests (ReconcileEvery 1 s, ReconcileAfter 2 s, SweepEvery 1 s, stream
// poll 20 ms, consumer function timeout 10 s, visibility timeout the same,
// maxReceiveCount 5; on AWS the reconciler's stale age is at least
// config.MinReconcileAfter, 2 min, which the local stack does not
// enforce). Names: each consumer's queue is <Name>, its DLQ <Name>-dlq, its
// rule <Name>-rule with the target DLQ <Name>-rule-dlq; the parked queue
// is <OutboxTable>-parked, the on-failure queue
// <OutboxTable>-relay-onfailure, the bus archive <BusName>-archive.
//
// # Stack
//
// Drain waits until the stream is read, the bus idle and every consumer
// queue empty; Settle also waits until no outbox record is pending (what
// the relay missed, the reconciler publishes after ReconcileAfter).
// Faults: MissRecords makes the relay miss records (the reconciler must
// catch them); RejectDetailTypes makes the bus refuse entries for good, so
// they are parked, and StopRejecting plus RedriveParked publishes them.
// ReconcileNow and SweepNow run a schedule at once. Close stops everything
// and the started Dynoxide.
//
// # Regions
//
// Config.Region makes the stack one Region of a multi-Region outbox
// (docs/MULTI-REGION.md): it publishes only the records written in it
// (outbox.StreamFilterPatternIn), counts its own pending shards, and
// WriterConfig gives writers the Region. Config.Forward forwards events to
// another Region's bus (a consumer's home Region) as a rule with an event
// bus target, retry policy and DLQ; an event forwarded into a bus goes no
// further (one hop). ForwardTarget and BusARN let two stacks forward to
// each other. Suspend and Resume take the Region down and back up without
// losing anything.
//
// # Errors
//
// Start returns an error wrapping ErrInvalidConfig (naming the field)
// before anything starts; ErrSchemaMismatch (wrapped) for an existing
// table of another shape; dynoxide.ErrNotInstalled when no Dynoxide binary
// is found (make deps installs it; or set Endpoint); or the failing part's
// error, after stopping what had started. Drain and Settle return the
// context's error, wrapped, when it ends first.
package localstack
