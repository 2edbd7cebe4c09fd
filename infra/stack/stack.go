// Package stack is the orders application stack: an HTTP API in front of the
// api function (the declared routes plus a $default catch-all), the orders
// table, the reusable Outbox construct (infra/outboxcdk), an EventBridge
// custom bus with one rule per routing.Rules() entry, and the ledger,
// notifier and fulfilment consumers (the last calls a provider's HTTP API
// with a token from Secrets Manager), each fed by its own SQS queue through a Lambda SQS
// event source mapping (rule → queue → mapping → function; the queue's
// redrive policy and the function dead-letter to the consumer's DLQ), with
// their tables, dead-letter queues, alarms and a dashboard.
//
// IAM: the api's and the consumers' code grants come from app.Permissions,
// and the template test compares every role, the outbox construct's
// included, with it action for action.
//
// Security (docs/SECURITY-MODEL.md): the bus's resource policy denies
// events:PutEvents to every principal but the outbox's relay and reconciler
// roles; each consumer queue's policy denies sqs:SendMessage to anything but
// its EventBridge rules (and the redrive roles); consumers expect events
// from the stack's account (config.EnvExpectedEventAccount); the API offers
// route-scoped caller policies, per-route throttles and 4xx/5xx-rate alarms;
// every function has a Throttles alarm and, opt-in, reserved concurrency
// checked at synth against the account's quota (none by default, so that
// a new account's quota deploys the stack); every
// dead-letter queue accepts only its own source; every alarm notifies the
// alarm topic; tables have deletion protection unless the stack is a
// throw-away one (Destroy); a customer managed KMS key can encrypt every
// table and queue.
package stack

import (
	"fmt"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

// OrdersStack is the synthesized application stack and its main parts.
type OrdersStack struct {
	awscdk.Stack

	// Outbox is the outbox construct (table, relay, reconciler, DLQs, alarms).
	Outbox *outboxcdk.Outbox
	// API is the HTTP API and Stage its $default stage.
	API   awsapigatewayv2.HttpApi
	Stage awsapigatewayv2.HttpStage
	// DefaultRoute is the API's $default route: every request matching no
	// route in Routes goes to APIFunction (same authorizer), which answers
	// it with its JSON 404 or 405.
	DefaultRoute awsapigatewayv2.HttpRoute
	// APIFunction serves every route.
	APIFunction awslambda.Function
	// Bus is the custom event bus the outbox publishes to.
	Bus awsevents.EventBus
	// OrdersTable holds the order aggregates. Each consumer keeps its
	// dedup markers, ordering gates and buffer in its own table
	// (Consumer.Table), beside its effects.
	OrdersTable awsdynamodb.Table
	// Consumers by name (routing.Consumers(): ledger, notifier,
	// fulfilment).
	Consumers map[string]*Consumer
	// IdempotencyTable holds the fulfilment consumer's pkg/idempotency
	// records (TTL on idempotency.TTLAttribute).
	IdempotencyTable awsdynamodb.Table
	// ProviderSecret is the Secrets Manager secret holding the fulfilment
	// provider's API token: OrdersStackProps.FulfilmentProviderSecretArn
	// imported, or a secret created in the stack for the operator to fill.
	ProviderSecret awssecretsmanager.ISecret
	// Rules by routing rule name, their targets' DLQs, and the alarms on
	// each rule's failed deliveries (outboxcdk.RuleDeliveryAlarms).
	Rules      map[string]awsevents.Rule
	RuleDLQs   map[string]*deadletter.Queue
	RuleAlarms map[string][]awscloudwatch.Alarm
	// Alarms lists every alarm in the stack, the outbox construct's included.
	// Every alarm of the stack notifies AlarmTopic (outboxcdk.NotifyAlarms),
	// these and any added later.
	Alarms []awscloudwatch.Alarm
	// AlarmTopic is the SNS topic every alarm notifies on ALARM and OK:
	// OrdersStackProps.AlarmTopicArn, or a topic the stack created
	// (outboxcdk.NewAlarmTopic; output AlarmTopicArn).
	AlarmTopic awssns.ITopic
	// Dashboard shows the API, outbox and consumer signals and all alarms.
	Dashboard awscloudwatch.Dashboard
	// EncryptionKey is the customer managed KMS key of every table and
	// queue, or nil (AWS managed keys).
	EncryptionKey awskms.IKey
	// BusPolicy is the bus's resource policy: only the outbox's roles (and
	// OrdersStackProps.PublisherArns) may call events:PutEvents.
	BusPolicy awsiam.PolicyDocument
	// Forwarder forwards the outbox's events to the primary Region's bus
	// in a multi-Region deployment's other Regions (regions.go); nil in
	// single-Region mode and in the primary Region.
	Forwarder *outboxcdk.ConsumerForwarder
	// ReadOnlyCallerPolicy allows execute-api:Invoke on the API's GET
	// routes; CommandCallerPolicy on its POST routes. Attach them to the
	// callers' roles (IAM auth mode).
	ReadOnlyCallerPolicy awsiam.ManagedPolicy
	CommandCallerPolicy  awsiam.ManagedPolicy
	// ReplayPolicy allows what outboxctl backfill and replays need on the
	// outbox's archive (outboxcdk.Outbox.ReplayStatements), attached to
	// OrdersStackProps.ReplayRoleArns; nil without an archive.
	ReplayPolicy awsiam.ManagedPolicy
	// API4xxRateAlarm and API5xxRateAlarm fire when the API's 4xx or 5xx
	// responses pass OrdersStackProps.API4xxRatePercent / API5xxRatePercent
	// of its requests.
	API4xxRateAlarm awscloudwatch.Alarm
	API5xxRateAlarm awscloudwatch.Alarm

	props OrdersStackProps
}

// NewOrdersStack creates the stack id under scope. It returns an error
// wrapping ErrInvalidProps or outboxcdk.ErrInvalidProps for invalid props,
// gofunc.ErrMissingBootstrap when a function has not been built, and an
// error when routing.Rules() names an unknown consumer or uses a pattern key
// the stack cannot express.
func NewOrdersStack(scope constructs.Construct, id string, props OrdersStackProps) (*OrdersStack, error) {
	props.StackName = id
	if n := props.StackProps.StackName; n != nil && *n != "" {
		props.StackName = *n
	}
	if err := props.Validate(); err != nil {
		return nil, err
	}
	props.SetDefaults()
	removal := props.removalPolicy()
	sp := props.StackProps
	if sp.Description == nil {
		sp.Description = jsii.String("ddb-outbox: orders API with a DynamoDB transactional outbox relayed to EventBridge")
	}
	st := awscdk.NewStack(scope, jsii.String(id), &sp)
	s := &OrdersStack{
		Stack:      st,
		Consumers:  map[string]*Consumer{},
		Rules:      map[string]awsevents.Rule{},
		RuleDLQs:   map[string]*deadletter.Queue{},
		RuleAlarms: map[string][]awscloudwatch.Alarm{},
		props:      props,
	}

	s.EncryptionKey = props.EncryptionKey
	if props.CustomerManagedKey {
		s.EncryptionKey = awskms.NewKey(st, jsii.String("EncryptionKey"), &awskms.KeyProps{
			Description:       jsii.String("ddb-outbox: encrypts the tables and queues of stack " + props.StackName),
			EnableKeyRotation: jsii.Bool(true),
			RemovalPolicy:     removal,
		})
	}

	busProps := &awsevents.EventBusProps{Description: jsii.String("ddb-outbox order events")}
	if props.MultiRegion != nil {
		busProps.EventBusName = jsii.String(MultiRegionBusName(props.MultiRegion))
	}
	s.Bus = awsevents.NewEventBus(st, jsii.String("Bus"), busProps)

	if props.AlarmTopicArn != "" {
		s.AlarmTopic = awssns.Topic_FromTopicArn(st, jsii.String("AlarmTopic"), jsii.String(props.AlarmTopicArn))
	} else {
		s.AlarmTopic = outboxcdk.NewAlarmTopic(st, "AlarmTopic", s.EncryptionKey)
	}

	op := props.Outbox
	if s.EncryptionKey != nil {
		op.EncryptionKey = s.EncryptionKey
	}
	op.AlarmTopic = s.AlarmTopic
	op.ReconcilerReservedConcurrency = props.ReservedConcurrency[outboxcdk.ReconcilerFunction]
	op.EventBus = s.Bus
	op.AssetRoot = props.AssetRoot
	op.EventSource = props.EventSource // SetDefaults: the example's own
	op.RemovalPolicy = removal
	op.LogRetention = props.LogRetention
	op.TelemetryLayerArn = props.TelemetryLayerArn
	// the operators who redrive the DLQs are the only ones who may delete
	// from them (deadletter.Queue.KeepMessagesFromAllBut)
	op.DeadLetterOperatorArns = props.RedriveRoleArns
	op.MultiRegion = props.MultiRegion
	ob, err := outboxcdk.New(st, "Outbox", op)
	if err != nil {
		return nil, err
	}
	s.Outbox = ob
	s.addReplayPolicy(props.ReplayRoleArns)

	s.OrdersTable = s.newTable("OrdersTable", order.AttrPK, order.TTLAttribute)
	reserve(ob.Relay, props.ReservedConcurrency[outboxcdk.RelayFunction])

	s.APIFunction, err = gofunc.New(st, idOf(APIFunction), gofunc.Props{
		AssetDir:            filepath.Join(props.AssetRoot, APIFunction),
		Description:         "Orders HTTP API: validates commands and commits order + outbox event in one transaction.",
		LogRetention:        props.LogRetention,
		RemovalPolicy:       removal,
		ReservedConcurrency: max(props.ReservedConcurrency[APIFunction], 0),
		EncryptionKey:       s.EncryptionKey,
		TelemetryLayerArn:   props.TelemetryLayerArn,
	})
	if err != nil {
		return nil, err
	}
	s.APIFunction.AddEnvironment(jsii.String(appenv.EnvOrdersTable), s.OrdersTable.TableName(), nil)
	s.APIFunction.AddEnvironment(jsii.String(appenv.EnvAPICallerMode), jsii.String(callerModes[props.AuthMode]), nil)
	ob.GrantWriteEvents(s.APIFunction)
	// the outbox Put is granted by GrantWriteEvents (outboxcdk.WriteEventsActions)
	if err := s.grantCode(s.APIFunction, app.FunctionAPI, map[app.Resource]*string{
		app.ResourceOrdersTable: s.OrdersTable.TableArn(),
	}, app.ResourceOutboxTable); err != nil {
		return nil, err
	}

	for _, name := range s.homedConsumers() {
		if err := s.addConsumer(name); err != nil {
			return nil, err
		}
	}
	if !s.isHome() {
		if err := s.addForwarder(); err != nil {
			return nil, err
		}
	}
	s.restrictPublishers()
	s.allowEventBridgeToUseKey()

	s.addAPI(removal)
	s.addCallerPolicies()
	s.addAlarmsAndDashboard()
	// every alarm in the stack, now or added later, notifies the topic; the
	// outbox and consumer constructs notify their own (same topic)
	own := []constructs.IConstruct{ob}
	for _, name := range s.homedConsumers() {
		own = append(own, s.Consumers[name].Construct)
	}
	outboxcdk.NotifyAlarms(st, s.AlarmTopic, own...)
	s.addOutputs()
	s.addPreflightNotes()
	return s, nil
}

// addPreflightNotes puts OrdersStackProps.AccountRequirement in the synth
// output (an info message): what the stack reserves (nothing by default),
// what the account's quota must be for it, and what the consumers without
// reservation can start from the unreserved pool.
func (s *OrdersStack) addPreflightNotes() {
	awscdk.Annotations_Of(s.Stack).AddInfo(jsii.String(s.props.AccountRequirement()))
	if s.Outbox.Archive != nil {
		awscdk.Annotations_Of(s.Stack).AddInfo(jsii.String(ArchiveRetentionNote(s.Outbox.Props().ArchiveRetentionDays)))
	}
}

// ArchiveRetentionNote says, for the synth output, how long the outbox's
// event archive keeps personal data (days > 0, or
// outboxcdk.KeepArchiveForever): every published order event, with its
// customer_id and cancellation reasons, the setting that changes it, and
// that EventBridge cannot erase a single event from an archive (its API
// has no per-event delete: CreateArchive, DescribeArchive, ListArchives,
// UpdateArchive, DeleteArchive), with the procedure's place.
func ArchiveRetentionNote(days int) string {
	how := fmt.Sprintf("for %d days", days)
	if days == outboxcdk.KeepArchiveForever {
		how = "forever"
	}
	return "The event archive keeps every published event, personal data included (customer_id, cancellation reasons), " + how +
		" (-c ddb-outbox:archiveRetentionDays=<days>, -1 forever, -2 no archive). EventBridge cannot erase one event from an archive: " +
		"shorten the retention or delete and recreate the archive (docs/ARCHIVE.md, \"Personal data and erasure\")."
}

// Props returns the stack's effective props (defaults applied).
func (s *OrdersStack) Props() OrdersStackProps { return s.props }

// newTable creates an on-demand table with partition key pk (S), PITR, the
// AWS managed encryption key or the stack's EncryptionKey, and deletion
// protection unless the stack is a throw-away one (Destroy); ttl names the
// TTL attribute ("" for none). The shape matches the owning package's
// CreateTableInput (tested).
func (s *OrdersStack) newTable(id, pk, ttl string) awsdynamodb.Table {
	p := &awsdynamodb.TableProps{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(pk), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(!s.props.Destroy),
		RemovalPolicy:      s.props.removalPolicy(),
	}
	if s.EncryptionKey != nil {
		p.Encryption = awsdynamodb.TableEncryption_CUSTOMER_MANAGED
		p.EncryptionKey = s.EncryptionKey
	}
	if ttl != "" {
		p.TimeToLiveAttribute = jsii.String(ttl)
	}
	return awsdynamodb.NewTable(s.Stack, jsii.String(id), p)
}

// reserve sets fn's reserved concurrency to n (NoReservedConcurrency or 0:
// none) on its CloudFormation resource, for functions the stack does not
// create itself (the outbox construct's relay).
func reserve(fn awslambda.Function, n int) {
	if n > 0 {
		fn.Node().DefaultChild().(awslambda.CfnFunction).SetReservedConcurrentExecutions(jsii.Number(n))
	}
}

func (s *OrdersStack) addOutputs() {
	out := func(id string, v *string, desc string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("ApiUrl", s.Stage.Url(), "Base URL of the orders HTTP API ("+string(s.props.AuthMode)+" authorization)")
	out("EventBusName", s.Bus.EventBusName(), "EventBridge bus receiving order events")
	out("OrdersTableName", s.OrdersTable.TableName(), "Orders table")
	out("OutboxTableName", s.Outbox.OutboxTable().TableName(), "Outbox table")
	if s.isHome() {
		out("LedgerTableName", s.Consumers[routing.ConsumerLedger].Table.TableName(), "Ledger consumer table")
		out("NotificationsTableName", s.Consumers[routing.ConsumerNotifier].Table.TableName(), "Notifier consumer table")
		out("ShipmentsTableName", s.Consumers[routing.ConsumerFulfilment].Table.TableName(), "Fulfilment consumer's shipments table (pk = order id)")
		out("IdempotencyTableName", s.IdempotencyTable.TableName(), "Fulfilment consumer's idempotency records")
		out("ProviderSecretArn", s.ProviderSecret.SecretArn(), "Secrets Manager secret holding the fulfilment provider's API token (SecretString = the token)")
	}
	if s.Outbox.Archive != nil {
		out("ArchiveName", s.Outbox.Archive.ArchiveName(), "EventBridge archive of every published event: outboxctl backfill -archive (OUTBOX_ARCHIVE_NAME)")
		out("ReplayPolicyArn", s.ReplayPolicy.ManagedPolicyArn(), "Managed policy for operators who backfill consumers from the archive (outboxctl backfill, replays)")
	}
	out("ParkedQueueUrl", s.Outbox.ParkedQueue.Queue.QueueUrl(), "DLQ of parked outbox records")
	out("AlarmTopicArn", s.AlarmTopic.TopicArn(), "SNS topic every alarm notifies on ALARM and OK: subscribe to it (aws sns subscribe --protocol email ...)")
	for _, name := range s.homedConsumers() {
		c := s.Consumers[name]
		out(idOf(name)+"QueueUrl", c.Queue.QueueUrl(), "Queue feeding consumer "+name)
		out(idOf(name)+"DlqUrl", c.DLQ.Queue.QueueUrl(), "DLQ of consumer "+name+" (redrive to its queue once fixed)")
	}
	for _, r := range routing.Rules() {
		if s.Rules[r.Name] == nil { // a Region without the consumers
			continue
		}
		out(idOf(r.Name)+"RuleArn", s.Rules[r.Name].RuleArn(), "EventBridge rule "+r.Name+" (to the "+r.Consumer+" queue): outboxctl rule-dlq-redrive -rule")
		out(idOf(r.Name)+"RuleDlqUrl", s.RuleDLQs[r.Name].Queue.QueueUrl(), "DLQ of rule "+r.Name+": events EventBridge could not deliver to the "+r.Consumer+" queue (outboxctl rule-dlq-redrive -dlq, once the queue accepts again)")
	}
	if s.Forwarder != nil {
		out("ForwarderRuleArn", s.Forwarder.Rule.RuleArn(), "EventBridge rule forwarding the outbox's events to the consumers' home Region's bus")
		out("ForwarderDlqUrl", s.Forwarder.DLQ.Queue.QueueUrl(), "DLQ of the forwarder: events EventBridge could not deliver to the home Region's bus")
	}
	out("DashboardName", s.Dashboard.DashboardName(), "CloudWatch dashboard")
	out("ReadOnlyCallerPolicyArn", s.ReadOnlyCallerPolicy.ManagedPolicyArn(), "Managed policy for API callers that only read orders (execute-api:Invoke on the GET routes)")
	out("CommandCallerPolicyArn", s.CommandCallerPolicy.ManagedPolicyArn(), "Managed policy for API callers that create and change orders (execute-api:Invoke on the POST routes)")
}

// grant adds one IAM statement with actions on arns to g's policy.
func grant(g awsiam.IGrantable, actions []string, arns ...*string) {
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      g,
		Actions:      jsii.Strings(actions...),
		ResourceArns: &arns,
	})
}

// idOf turns a kebab-case name into a CamelCase construct id ("ledger-order-payments" -> "LedgerOrderPayments").
func idOf(name string) string {
	out := make([]byte, 0, len(name))
	up := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '-' || c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}
