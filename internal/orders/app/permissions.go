package app

import (
	"slices"
	"sort"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

// Function names: functions/<name> is compiled to dist/<name>/bootstrap and
// deployed as one Lambda function with its own IAM role.
const (
	FunctionAPI        = "api"
	FunctionRelay      = "relay"
	FunctionReconciler = "reconciler"
	FunctionLedger     = routing.ConsumerLedger
	FunctionNotifier   = routing.ConsumerNotifier
	FunctionFulfilment = routing.ConsumerFulfilment
)

// Resource names, by its part in the application, an AWS resource a
// function's role is granted access to. The CDK stack (infra/stack) maps each
// to the resource's ARN; for ResourceConsumerQueue and ResourceConsumerDLQ
// that is the function's own consumer queue and DLQ.
type Resource string

// Resources of the application.
const (
	ResourceOrdersTable  Resource = "orders-table"
	ResourceOutboxTable  Resource = "outbox-table"
	ResourcePendingIndex Resource = "outbox-pending-index" // <outbox table ARN>/index/<outbox.PendingIndexName>
	ResourceOutboxStream Resource = "outbox-stream"        // the outbox table's latest stream ARN
	// ResourceConsumerStateIndex is the resequencer buffer index of the
	// function's own consumer table, where its dedup state lives beside
	// its effects: <consumer table ARN>/index/<dedup.BufferIndex>.
	ResourceConsumerStateIndex Resource = "consumer-state-index"
	ResourceLedgerTable        Resource = "ledger-table"
	ResourceNotificationsTable Resource = "notifications-table"
	// ResourceShipmentsTable is the fulfilment consumer's shipments table
	// (fulfilment.CreateTableInput); ResourceIdempotencyTable its
	// pkg/idempotency records' table (idempotency.CreateTableInput).
	ResourceShipmentsTable   Resource = "shipments-table"
	ResourceIdempotencyTable Resource = "idempotency-table"
	// ResourceProviderSecret is the Secrets Manager secret holding the
	// fulfilment provider's API token (appenv.EnvProviderSecretARN).
	ResourceProviderSecret     Resource = "provider-secret"
	ResourceEventBus           Resource = "event-bus"
	ResourceParkedQueue        Resource = "parked-queue"
	ResourceStreamFailureQueue Resource = "stream-failure-queue" // the relay mapping's on-failure destination
	// ResourceReconcilerFailureQueue is the on-failure destination of the
	// reconciler's asynchronous (scheduled) invocations.
	ResourceReconcilerFailureQueue Resource = "reconciler-failure-queue"
	ResourceConsumerQueue          Resource = "consumer-queue"
	ResourceConsumerDLQ            Resource = "consumer-dlq"
	ResourceLogGroup               Resource = "log-group" // the function's own log group
	// ResourceAll is "*", allowed only for actions that support no
	// resource-level permissions (dynamodb:ListStreams).
	ResourceAll Resource = "*"
	// ResourceEncryptionKey is the customer managed KMS key of the tables
	// and queues, when the stack is deployed with one (see
	// FunctionPermissions.WithEncryptionKey); by default there is none.
	ResourceEncryptionKey Resource = "encryption-key"
)

// KeyActions are the KMS actions every function's role needs on
// ResourceEncryptionKey when the tables and queues use a customer managed
// key: kms:GenerateDataKey and kms:Decrypt to send to and receive from an
// SSE-KMS queue (Amazon SQS developer guide, sqs-key-management; the SQS
// event source mapping's kms:Decrypt is among them), kms:Encrypt and
// kms:Decrypt for table data through DynamoDB. infra/outboxcdk.KeyUseActions
// grants exactly these (tested in infra/stack).
var KeyActions = []string{"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"}

// Grant is a set of IAM actions ("service:Action", no wildcards) on one
// resource.
type Grant struct {
	Resource Resource
	Actions  []string
}

// Call is one AWS SDK for Go v2 operation a function's code can call, and
// the IAM grants that call needs.
type Call struct {
	// Operation is "<service package>.<Operation>", e.g.
	// "dynamodb.TransactWriteItems": the SDK method whose parameter is
	// *<service>.<Operation>Input (a paginator built from that input
	// counts as the operation).
	Operation string
	// Grants are the IAM actions the call is authorized with. A
	// TransactWriteItems call is authorized per action it holds (Put →
	// dynamodb:PutItem, Update → dynamodb:UpdateItem, Delete →
	// dynamodb:DeleteItem, ConditionCheck → dynamodb:ConditionCheckItem,
	// each on its item's table); a PartiQL BatchExecuteStatement of UPDATE
	// statements by dynamodb:PartiQLUpdate. Sources: DynamoDB developer
	// guide, "Using IAM with DynamoDB transactions" and "IAM policies with
	// PartiQL for DynamoDB".
	Grants []Grant
	// Why says which code path calls it.
	Why string
	// MultiRegion marks a call the code makes only in multi-Region mode
	// (config.EnvRegions set): it counts as reachable code
	// (Operations), but its grants are part of the role only once
	// WithRegions is applied (Actions), so a single-Region role grants
	// nothing the deployment never calls.
	MultiRegion bool
}

// PlatformGrant is IAM access the function's role needs although the
// function's code makes no such call: the Lambda service uses the role to
// poll an event source mapping, to send to its on-failure destination, and
// to write the function's logs.
type PlatformGrant struct {
	Grant
	// Why names the AWS feature that uses it.
	Why string
}

// FunctionPermissions is the complete IAM access of one function's role.
type FunctionPermissions struct {
	// Function is the function's name (FunctionAPI, …).
	Function string
	// Calls are every SDK operation the function's code can reach from its
	// main, exactly (checked by TestPermissionsMatchSDKCalls).
	Calls []Call
	// Platform are the grants the Lambda service uses on the function's
	// behalf.
	Platform []PlatformGrant
}

// WithEncryptionKey returns f with one more platform grant: KeyActions on
// ResourceEncryptionKey (and, for the relay, kms:DescribeKey, which its
// stream event source mapping needs on an encrypted table). It is f's complete access when the stack encrypts
// its tables and queues with a customer managed key (the code makes no KMS
// call; DynamoDB and SQS use the key on the function's behalf with the
// function's credentials).
func (f FunctionPermissions) WithEncryptionKey() FunctionPermissions {
	f.Platform = append(slices.Clone(f.Platform), PlatformGrant{
		Grant: Grant{ResourceEncryptionKey, slices.Clone(KeyActions)},
		Why:   "DynamoDB and SQS use the customer managed key of the tables and queues with the function's credentials (infra: EncryptionKey / CustomerManagedKey)",
	})
	if f.Function == FunctionRelay {
		f.Platform = append(f.Platform, PlatformGrant{
			Grant: Grant{ResourceEncryptionKey, []string{"kms:DescribeKey"}},
			Why:   "the DynamoDB Streams event source mapping reads the stream of a table encrypted with the key (CDK DynamoEventSource: table.grantStreamRead grants kms:Decrypt and kms:DescribeKey)",
		})
	}
	return f
}

// RegionWriteActions are the IAM actions an outbox writer needs on the
// outbox table in multi-Region mode (config.EnvRegions set) besides
// dynamodb:PutItem: dynamodb:ConditionCheckItem for the ConditionCheck on
// each aggregate's home item that fences every write after its creation
// (outbox.Writer.Write, docs/MULTI-REGION.md; DynamoDB developer guide,
// "Using IAM with DynamoDB transactions"), and dynamodb:GetItem for the
// stored home item DynamoDB returns with a failed condition
// (ReturnValuesOnConditionCheckFailure ALL_OLD, outbox.NotHomeError's
// Home): no AWS page we found says whether returning it needs that read
// permission, so it is granted rather than risk an AccessDenied in place of
// the refusal (❓ in docs/MULTI-REGION.md). infra/outboxcdk.HomeCheckActions
// grants exactly these.
var RegionWriteActions = []string{"dynamodb:ConditionCheckItem", "dynamodb:GetItem"}

// WithRegions returns f as deployed in multi-Region mode (config.EnvRegions
// set): the api's outbox writes carry the home item's ConditionCheck, so
// its TransactWriteItems call also needs RegionWriteActions on
// ResourceOutboxTable. Other functions are returned unchanged. Single-Region
// deployments use f as it is.
func (f FunctionPermissions) WithRegions() FunctionPermissions {
	calls := slices.Clone(f.Calls)
	for i, c := range calls {
		if c.MultiRegion {
			c.MultiRegion = false
			calls[i] = c
			continue
		}
		if f.Function != FunctionAPI || c.Operation != "dynamodb.TransactWriteItems" {
			continue
		}
		c.Grants = append(slices.Clone(c.Grants), Grant{ResourceOutboxTable, slices.Clone(RegionWriteActions)})
		c.Why += "; in multi-Region mode the ConditionCheck on each aggregate's home item (outbox.HomeKey) fences every write after the order's creation"
		calls[i] = c
	}
	f.Calls = calls
	return f
}

// Operations returns the sorted SDK operations of f.Calls.
func (f FunctionPermissions) Operations() []string {
	out := make([]string, 0, len(f.Calls))
	for _, c := range f.Calls {
		out = append(out, c.Operation)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Actions returns, per resource, the sorted, de-duplicated IAM actions of
// every call and platform grant of f: exactly what the function's role must
// allow, no more.
func (f FunctionPermissions) Actions() map[Resource][]string {
	out := map[Resource][]string{}
	add := func(g Grant) { out[g.Resource] = append(out[g.Resource], g.Actions...) }
	for _, c := range f.Calls {
		if c.MultiRegion {
			continue
		}
		for _, g := range c.Grants {
			add(g)
		}
	}
	for _, p := range f.Platform {
		add(p.Grant)
	}
	for r, a := range out {
		sort.Strings(a)
		out[r] = slices.Compact(a)
	}
	return out
}

// CodeActions returns, per resource, the IAM actions of f.Calls only (what
// the function's code needs), sorted and de-duplicated.
func (f FunctionPermissions) CodeActions() map[Resource][]string {
	return FunctionPermissions{Calls: f.Calls}.Actions()
}

// Platform grants shared by functions. The CDK grants them when it binds the
// event source (DynamoEventSource, SqsEventSource, SqsDlq) or the log group
// (infra/gofunc); the actions are the CDK's.
var (
	logsGrant = PlatformGrant{
		Grant: Grant{ResourceLogGroup, []string{"logs:CreateLogStream", "logs:PutLogEvents"}},
		Why:   "Lambda writes the function's logs to its own log group (infra/gofunc, instead of AWSLambdaBasicExecutionRole)",
	}
	// xrayGrant is what X-Ray active tracing (every function: infra/gofunc,
	// Tracing ACTIVE) needs: Lambda sends the function's segments, and an
	// OTLP collector layer the spans, with the function's role. X-Ray
	// actions support no resource-level permissions. Source: Lambda
	// developer guide, "Visualize Lambda function invocations using AWS
	// X-Ray" (execution role permissions).
	xrayGrant = PlatformGrant{
		Grant: Grant{ResourceAll, []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}},
		Why:   "X-Ray active tracing: Lambda and the telemetry layer write trace segments with the function's role (CDK Tracing.ACTIVE)",
	}
	sqsMappingGrant = PlatformGrant{
		Grant: Grant{ResourceConsumerQueue, []string{
			"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage",
		}},
		Why: "the Lambda SQS event source mapping polls and deletes the consumer queue's messages with the function's role (CDK SqsEventSource: queue.grantConsumeMessages)",
	}
)

// Permissions returns the IAM access of every function: api, relay,
// reconciler, ledger, notifier and fulfilment. The CDK stack grants the api's and the
// consumers' code access from it; its template test compares every role with
// it (no action more, none missing), and TestPermissionsMatchSDKCalls
// compares each Calls list with the SDK operations reachable from the
// function's main.
func Permissions() []FunctionPermissions {
	markCalls := []Call{
		{Operation: "dynamodb.UpdateItem", Grants: []Grant{{ResourceOutboxTable, []string{"dynamodb:UpdateItem"}}},
			Why: "relay.Marker marks a record published or parked (and is the fallback of the batch mark)"},
		{Operation: "dynamodb.BatchExecuteStatement", Grants: []Grant{{ResourceOutboxTable, []string{"dynamodb:PartiQLUpdate"}}},
			Why: "relay.Marker.MarkAll marks published records with PartiQL UPDATE statements, up to 25 per call"},
		{Operation: "eventbridge.PutEvents", Grants: []Grant{{ResourceEventBus, []string{"events:PutEvents"}}},
			Why: "relay.Publisher publishes outbox records"},
		{Operation: "sqs.SendMessage", Grants: []Grant{{ResourceParkedQueue, []string{"sqs:SendMessage"}}},
			Why: "relay.Marker.Park sends an unpublishable record to the parked-records queue"},
	}
	consumer := func(name string, table Resource) FunctionPermissions {
		return FunctionPermissions{
			Function: name,
			Calls: []Call{
				{Operation: "dynamodb.TransactWriteItems", Grants: []Grant{
					{table, []string{"dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}},
				}, Why: "dedup.Applier, all in the consumer's own table: the dedup marker Put, the side effect's Put and Update and the ordering gate's Update (last_sequence) in one transaction; the resequencer's buffer item Put (an early event) and Delete (applied after its predecessor)"},
				{Operation: "dynamodb.GetItem", Grants: []Grant{{table, []string{"dynamodb:GetItem"}}},
					Why: "dedup.Applier.ReadGate reads the ordering item when the gate's condition failed, to tell a duplicate from an early event; the resequencer reads a buffered event to apply it and a dedup marker to settle a buffered event the gate is past (docs/ORDERING.md)"},
				{Operation: "dynamodb.Query", Grants: []Grant{{ResourceConsumerStateIndex, []string{"dynamodb:Query"}}},
					Why: "dedup.Resequencer.Sweep (the scheduled sweep) lists the buffered events of its consumer in its own table's buffer index"},
				{Operation: "sqs.SendMessage", Grants: []Grant{{ResourceConsumerDLQ, []string{"sqs:SendMessage"}}},
					Why: "sqsconsumer.Handler dead-letters a permanently failing event to the consumer's DLQ"},
				{Operation: "sqs.ChangeMessageVisibility", Grants: []Grant{{ResourceConsumerQueue, []string{"sqs:ChangeMessageVisibility"}}},
					Why: "sqsconsumer.Handler brings a failed message back sooner than the queue's visibility timeout (RetryDelay)"},
			},
			Platform: []PlatformGrant{sqsMappingGrant, logsGrant},
		}
	}
	perms := []FunctionPermissions{
		{
			Function: FunctionAPI,
			Calls: []Call{
				{Operation: "dynamodb.GetItem", Grants: []Grant{{ResourceOrdersTable, []string{"dynamodb:GetItem"}}},
					Why: "order.Repository reads an order or an idempotency record (consistent read)"},
				{Operation: "dynamodb.TransactWriteItems", Grants: []Grant{
					{ResourceOrdersTable, []string{"dynamodb:PutItem"}},
					{ResourceOutboxTable, []string{"dynamodb:PutItem"}},
				}, Why: "order.Repository via outbox.Writer: the order Put (and idempotency record Put) with the outbox record Puts"},
			},
			Platform: []PlatformGrant{logsGrant},
		},
		{
			Function: FunctionRelay,
			Calls:    markCalls,
			Platform: []PlatformGrant{
				{Grant: Grant{ResourceOutboxStream, []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}},
					Why: "the Lambda DynamoDB Streams event source mapping reads the outbox stream with the function's role (CDK DynamoEventSource)"},
				{Grant: Grant{ResourceAll, []string{"dynamodb:ListStreams"}},
					Why: "the same mapping lists streams; the action supports no resource-level permissions"},
				{Grant: Grant{ResourceStreamFailureQueue, []string{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}},
					Why: "the mapping sends failed batches' metadata to its on-failure destination with the function's role (CDK SqsDlq: queue.grantSendMessages)"},
				logsGrant,
			},
		},
		{
			Function: FunctionReconciler,
			Calls: append([]Call{
				{Operation: "dynamodb.Query", Grants: []Grant{{ResourcePendingIndex, []string{"dynamodb:Query"}}},
					Why: "reconciler.Reconciler sweeps, counts and ages the pending index shards"},
				{Operation: "dynamodb.Query", Grants: []Grant{{ResourceOutboxTable, []string{"dynamodb:Query"}}}, MultiRegion: true,
					Why: "reconciler.Reconciler lists the takeover items (partition \"takeover\") of the outbox table each multi-Region run (docs/MULTI-REGION.md)"},
				{Operation: "dynamodb.GetItem", Grants: []Grant{{ResourceOutboxTable, []string{"dynamodb:GetItem"}}}, MultiRegion: true,
					Why: "reconciler.Reconciler re-reads a failed Region's record (consistent read) before a takeover publish"},
				{Operation: "dynamodb.PutItem", Grants: []Grant{{ResourceOutboxTable, []string{"dynamodb:PutItem"}}}, MultiRegion: true,
					Why: "reconciler.Reconciler writes its Region's heartbeat item and the survivor's takeover marks"},
				{Operation: "dynamodb.BatchGetItem", Grants: []Grant{{ResourceOutboxTable, []string{"dynamodb:BatchGetItem"}}}, MultiRegion: true,
					Why: "reconciler.Reconciler reads a survivor's takeover marks of its pending records to adopt them without re-sending"},
			}, markCalls...),
			Platform: []PlatformGrant{
				{Grant: Grant{ResourceReconcilerFailureQueue, []string{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}},
					Why: "Lambda sends a scheduled run that failed its asynchronous retries to the on-failure destination with the function's role (CDK SqsDestination: queue.grantSendMessages)"},
				logsGrant,
			},
		},
		consumer(FunctionLedger, ResourceLedgerTable),
		consumer(FunctionNotifier, ResourceNotificationsTable),
		fulfilmentPermissions(),
	}
	for i := range perms {
		perms[i].Platform = append(perms[i].Platform, xrayGrant)
	}
	return perms
}

// fulfilmentPermissions is the fulfilment consumer's access. Its effect is an
// HTTP call, so it keeps pkg/idempotency records (single-item conditional
// writes, no transaction) instead of dedup markers, and records the
// provider's shipment id in its shipments table.
func fulfilmentPermissions() FunctionPermissions {
	return FunctionPermissions{
		Function: FunctionFulfilment,
		Calls: []Call{
			{Operation: "dynamodb.GetItem", Grants: []Grant{
				{ResourceIdempotencyTable, []string{"dynamodb:GetItem"}},
				{ResourceShipmentsTable, []string{"dynamodb:GetItem"}},
			}, Why: "idempotency.Store reads the record a failed conditional Put met when the error carried no item (consistent read); fulfilment.Shipment reads an order's shipment before cancelling it"},
			{Operation: "dynamodb.PutItem", Grants: []Grant{{ResourceIdempotencyTable, []string{"dynamodb:PutItem"}}},
				Why: "idempotency.Store.Do claims the event_id with a conditional IN_PROGRESS Put"},
			{Operation: "dynamodb.UpdateItem", Grants: []Grant{
				{ResourceIdempotencyTable, []string{"dynamodb:UpdateItem"}},
				{ResourceShipmentsTable, []string{"dynamodb:UpdateItem"}},
			}, Why: "idempotency.Store.Do completes its record with the result; fulfilment records a created or cancelled shipment (conditional Update)"},
			{Operation: "dynamodb.DeleteItem", Grants: []Grant{{ResourceIdempotencyTable, []string{"dynamodb:DeleteItem"}}},
				Why: "idempotency.Store.Do deletes its IN_PROGRESS record when the effect failed, so a redelivery runs it again"},
			{Operation: "sqs.SendMessage", Grants: []Grant{{ResourceConsumerDLQ, []string{"sqs:SendMessage"}}},
				Why: "sqsconsumer.Handler dead-letters a permanently failing event to the consumer's DLQ"},
			{Operation: "sqs.ChangeMessageVisibility", Grants: []Grant{{ResourceConsumerQueue, []string{"sqs:ChangeMessageVisibility"}}},
				Why: "sqsconsumer.Handler brings a failed message back sooner than the queue's visibility timeout (RetryDelay)"},
			{Operation: "secretsmanager.GetSecretValue", Grants: []Grant{{ResourceProviderSecret, []string{"secretsmanager:GetSecretValue"}}},
				Why: "app.SecretToken reads the provider's API token (cached by fulfilment.CachedCredentials for app.ProviderCredentialsTTL)"},
		},
		Platform: []PlatformGrant{sqsMappingGrant, logsGrant},
	}
}

// PermissionsOf returns the permissions of the named function, and false for
// an unknown name.
func PermissionsOf(function string) (FunctionPermissions, bool) {
	for _, f := range Permissions() {
		if f.Function == function {
			return f, true
		}
	}
	return FunctionPermissions{}, false
}
