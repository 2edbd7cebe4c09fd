package stack

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawsevents"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// Consumer delivery settings, from pkg/config so that the stack and the local
// runtime deliver alike.
const (
	// ConsumerTimeout is every consumer function's timeout.
	ConsumerTimeout = config.DefaultConsumerTimeout
	// ConsumerVisibilityTimeout is the consumer queues' visibility timeout:
	// config.ConsumerVisibilityTimeoutFactor (6) times ConsumerTimeout, as
	// the Lambda developer guide advises (services-sqs-configure).
	ConsumerVisibilityTimeout = config.ConsumerVisibilityTimeoutFactor * ConsumerTimeout
	// ConsumerOldestMessageThreshold is the threshold of the alarm on a
	// consumer queue's ApproximateAgeOfOldestMessage: longer than a message
	// retried maxReceiveCount times takes to reach the DLQ
	// (5 × 180 s = 15 min), so it means a backlog, not one failing event.
	ConsumerOldestMessageThreshold = 20 * time.Minute
	// ConsumerQueueRetention is how long a consumer queue keeps a message
	// (SQS default, 4 days). It is shorter than the DLQ's
	// deadletter.Retention (14 days) because a standard queue's message keeps
	// its original enqueue time when it moves to the DLQ, so the DLQ must
	// keep messages longer than the source queue (Amazon SQS developer
	// guide, dead-letter queues).
	ConsumerQueueRetention = 4 * 24 * time.Hour
)

// Consumer is one event consumer: its function, table, queue and DLQ.
//
// Delivery: the routing rule's target is Queue (EventBridge retries a failed
// delivery to the queue, then sends the event to the rule's DLQ); a Lambda
// SQS event source mapping (EventSource) invokes Function with batches of
// config.DefaultConsumerBatchSize and ReportBatchItemFailures; a message
// reported failed comes back after the visibility timeout and moves to DLQ
// after config.DefaultConsumerMaxReceiveCount receives (the queue's redrive
// policy). The function also sends permanently failing events to DLQ itself
// (config.EnvConsumerDLQURL, pkg/sqsconsumer).
type Consumer struct {
	// Function is the consumer's Lambda function (timeout ConsumerTimeout).
	Function awslambda.Function
	// Table is the consumer's own side-effect table (ledger entries,
	// notifications, shipments).
	Table awsdynamodb.Table
	// Queue is the consumer's SQS queue: SSE-SQS, TLS only, visibility
	// timeout ConsumerVisibilityTimeout, redrive to DLQ.
	Queue awssqs.Queue
	// DLQ is the consumer queue's dead-letter queue and its depth alarm.
	DLQ *deadletter.Queue
	// EventSource is the function's SQS event source mapping on Queue.
	EventSource awslambdaeventsources.SqsEventSource
	// BacklogAlarm fires when Queue's oldest message is older than
	// ConsumerOldestMessageThreshold.
	BacklogAlarm awscloudwatch.Alarm
	// Rules are the EventBridge rules targeting Queue: the only senders
	// its policy allows besides OrdersStackProps.RedriveRoleArns.
	Rules []awsevents.Rule
	// Resequencer is the ordered consumer's sweep schedule and buffered-age
	// alarm; nil for an unordered consumer.
	Resequencer *Resequencer
}

// consumerTable is a consumer's own table: construct id, partition key
// attribute (S, from the owning package's CreateTableInput), the
// app.Resource its grants name, and the env var carrying its name.
type consumerTable struct {
	id, pk   string
	resource app.Resource
	env      string
}

// consumerSpec is what differs between consumers; everything else (queue,
// DLQ, mapping, alarms, rule, queue policy) is built alike by addConsumer.
type consumerSpec struct {
	table       consumerTable
	description string
	// dedup: the consumer keeps its pkg/dedup state (markers, ordering
	// gates, buffer) in its own table beside its effects (ledger,
	// notifier): the table gets the state index and TTL on
	// dedup.TTLAttribute, and no other consumer's role may write it.
	dedup bool
	// extra creates the consumer's other resources and env vars and
	// returns the ARNs of the resources its grants name besides its table,
	// its DLQ and the dedup table; nil for none.
	extra func(s *OrdersStack, name string, fn awslambda.Function) map[app.Resource]*string
}

// consumerSpecs are the consumers the stack deploys, by routing consumer
// name. Every name in routing.Consumers() needs one (NewOrdersStack fails
// otherwise).
var consumerSpecs = map[string]consumerSpec{
	routing.ConsumerLedger: {
		table:       consumerTable{"LedgerTable", ledger.AttrPK, app.ResourceLedgerTable, appenv.EnvLedgerTable},
		description: "Event consumer ledger: applies each order event once (dedup marker + side effect in one transaction), fed by its SQS queue.",
		dedup:       true,
	},
	routing.ConsumerNotifier: {
		table:       consumerTable{"NotificationsTable", notifier.AttrPK, app.ResourceNotificationsTable, appenv.EnvNotificationsTable},
		description: "Event consumer notifier: applies each order event once (dedup marker + side effect in one transaction), fed by its SQS queue.",
		dedup:       true,
		extra: func(s *OrdersStack, _ string, fn awslambda.Function) map[app.Resource]*string {
			// how long a notification (customer data) is kept; 0 keeps it forever
			fn.AddEnvironment(jsii.String(appenv.EnvNotificationRetentionSeconds),
				jsii.String(fmt.Sprint(int64(max(s.props.NotificationRetention, 0)/time.Second))), nil)
			return nil
		},
	},
	routing.ConsumerFulfilment: {
		table: consumerTable{"ShipmentsTable", fulfilment.AttrPK, app.ResourceShipmentsTable, appenv.EnvShipmentsTable},
		description: "Event consumer fulfilment: creates and cancels shipments at the fulfilment provider's HTTP API, " +
			"each effect guarded by an idempotency record, fed by its SQS queue.",
		extra: (*OrdersStack).addFulfilmentResources,
	},
}

// consumerNames are the consumers in a fixed order (deterministic template):
// routing.Consumers().
var consumerNames = routing.Consumers()

// addConsumer creates consumer name: its table, queue with DLQ, function with
// the SQS event source mapping, env and grants. It returns an error when the
// stack has no consumerSpec for name, gofunc's error (a missing bootstrap),
// or grantCode's.
func (s *OrdersStack) addConsumer(name, source string) error {
	spec, ok := consumerSpecs[name]
	if !ok {
		return fmt.Errorf("stack: routing consumer %q has no consumer definition in the stack", name)
	}
	st, props, removal := s.Stack, s.props, s.props.removalPolicy()
	cid := idOf(name)
	ttl := ""
	switch {
	case name == routing.ConsumerNotifier:
		ttl = props.NotificationsTTLAttribute // = dedup.TTLAttribute (Validate)
	case spec.dedup:
		ttl = dedup.TTLAttribute // the dedup markers expire; the consumer's own items carry no such attribute
	}
	table := s.newTable(spec.table.id, spec.table.pk, ttl)
	if spec.dedup {
		addStateIndex(table)
	}
	dlq := deadletter.New(st, cid+"ConsumerDLQ", "events consumer "+name+" failed "+
		fmt.Sprint(config.DefaultConsumerMaxReceiveCount)+" times or could never apply", removal, s.EncryptionKey)
	enc := awssqs.QueueEncryption_SQS_MANAGED
	if s.EncryptionKey != nil {
		enc = awssqs.QueueEncryption_KMS
	}
	queue := awssqs.NewQueue(st, jsii.String(cid+"ConsumerQueue"), &awssqs.QueueProps{
		Encryption:          enc,
		EncryptionMasterKey: s.EncryptionKey,
		EnforceSSL:          jsii.Bool(true),
		VisibilityTimeout:   awscdk.Duration_Seconds(jsii.Number(ConsumerVisibilityTimeout.Seconds())),
		RetentionPeriod:     awscdk.Duration_Seconds(jsii.Number(ConsumerQueueRetention.Seconds())),
		// the whole EventBridge event, whatever the outbox entry limit
		MaxMessageSizeBytes: jsii.Number(deadletter.MaxMessageBytes),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			MaxReceiveCount: jsii.Number(config.DefaultConsumerMaxReceiveCount),
			Queue:           dlq.Queue,
		},
		RemovalPolicy: removal,
	})
	fn, err := gofunc.New(st, cid, gofunc.Props{
		AssetDir:      filepath.Join(props.AssetRoot, name),
		Description:   spec.description,
		Timeout:       ConsumerTimeout,
		LogRetention:  props.LogRetention,
		RemovalPolicy: removal,
		// none by default; when reserved, at least the mapping's peak
		// concurrency (Validate)
		ReservedConcurrency: max(props.ReservedConcurrency[name], 0),
		EncryptionKey:       s.EncryptionKey,
		TelemetryLayerArn:   props.TelemetryLayerArn,
	})
	if err != nil {
		return err
	}
	if s.EncryptionKey != nil {
		s.EncryptionKey.Grant(fn, *jsii.Strings(outboxcdk.KeyUseActions...)...)
	}
	arns := map[app.Resource]*string{
		spec.table.resource:     table.TableArn(),
		app.ResourceConsumerDLQ: dlq.Queue.QueueArn(),
		// ChangeMessageVisibility (sqsconsumer's RetryDelay) on its own queue
		app.ResourceConsumerQueue: queue.QueueArn(),
	}
	if spec.dedup {
		arns[app.ResourceConsumerStateIndex] = stateIndexArn(table)
	}
	fn.AddEnvironment(jsii.String(spec.table.env), table.TableName(), nil)
	fn.AddEnvironment(jsii.String(config.EnvEventSource), jsii.String(source), nil)
	fn.AddEnvironment(jsii.String(config.EnvConsumerDLQURL), dlq.Queue.QueueUrl(), nil)
	// events from any other account are refused (forged_account)
	fn.AddEnvironment(jsii.String(config.EnvExpectedEventAccount), awscdk.Aws_ACCOUNT_ID(), nil)
	if spec.extra != nil {
		for r, arn := range spec.extra(s, name, fn) {
			arns[r] = arn
		}
	}
	esProps := &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(config.DefaultConsumerBatchSize),
		ReportBatchItemFailures: jsii.Bool(true),
	}
	// MaximumConcurrency, or provisioned mode (validated)
	props.ConsumerScaling.Apply(esProps)
	es := awslambdaeventsources.NewSqsEventSource(queue, esProps)
	fn.AddEventSource(es)
	// only the consumer's role sends to its DLQ (its permanent failures);
	// SQS's own redrive moves are not refused (deadletter.AcceptOnlyFrom)
	dlq.AcceptOnlyFrom(deadletter.Senders{PrincipalArns: []*string{fn.Role().RoleArn()}})
	// the consumer only sends to its DLQ; the operators' redrive deletes
	dlq.KeepMessagesFromAllBut(s.dlqOperators())
	c := &Consumer{Function: fn, Table: table, Queue: queue, DLQ: dlq, EventSource: es}
	s.Consumers[name] = c
	if ordered(name) {
		s.addResequencer(name, c)
	}
	// sqs:ChangeMessageVisibility on the queue (sqsconsumer's RetryDelay)
	// is part of the event source mapping's grant (SqsEventSource:
	// grantConsumeMessages, app's sqsMappingGrant): not granted twice.
	return s.grantCode(fn, name, arns, app.ResourceConsumerQueue)
}

// addRule creates routing rule r: an EventBridge rule on the bus whose target
// is the consumer's queue, with the rule DLQ for events EventBridge could not
// deliver to the queue, and the alarms on the rule's failed deliveries
// (outboxcdk.RuleDeliveryAlarms). The rule DLQ is SSE-SQS whatever the
// stack's key: a DLQ must not fail the way its target can (a key policy or
// a disabled key that refuses EventBridge for the consumer queue would
// refuse it for the DLQ too, and the event would be dropped); it accepts
// messages from its rule only and may be no queue's redrive target.
func (s *OrdersStack) addRule(r routing.Rule, source string) error {
	c, ok := s.Consumers[r.Consumer]
	if !ok {
		return fmt.Errorf("stack: routing rule %s targets unknown consumer %q", r.Name, r.Consumer)
	}
	pattern, err := eventPattern(r.Pattern(source))
	if err != nil {
		return fmt.Errorf("stack: routing rule %s: %w", r.Name, err)
	}
	cid := idOf(r.Name)
	dlq := deadletter.New(s.Stack, cid+"DLQ", "events EventBridge could not deliver to the "+r.Consumer+" queue (rule "+r.Name+")", s.props.removalPolicy(), nil)
	rule := awsevents.NewRule(s.Stack, jsii.String(cid+"Rule"), &awsevents.RuleProps{
		EventBus:     s.Bus,
		Description:  jsii.String("Routes " + r.Name + " events to the queue of consumer " + r.Consumer + " (routing.Rules)."),
		EventPattern: pattern,
		Targets: &[]awsevents.IRuleTarget{&queueTarget{
			queue: c.Queue, dlq: dlq.Queue,
			maxEventAge: s.props.ConsumerMaxEventAge, retryAttempts: s.props.ConsumerRetryAttempts,
		}},
	})
	dlq.AcceptOnlyFrom(deadletter.Senders{SourceArns: []*string{rule.RuleArn()}})
	dlq.RefuseRedriveSources()
	dlq.KeepMessagesFromAllBut(s.dlqOperators())
	s.Rules[r.Name] = rule
	s.RuleDLQs[r.Name] = dlq
	s.RuleAlarms[r.Name] = outboxcdk.RuleDeliveryAlarms(s.Stack, cid+"Rule", rule, s.Bus.EventBusName(), "rule "+r.Name+" (to the "+r.Consumer+" queue)")
	c.Rules = append(c.Rules, rule)
	return nil
}

// queueTarget is an EventBridge rule target that puts the event on an SQS
// queue, with a retry policy and a target DLQ. It is what
// awseventstargets.SqsQueue does, without that target's grant on a KMS
// encrypted queue's key: the CDK gives events.amazonaws.com kms:Decrypt,
// kms:Encrypt, kms:ReEncrypt* and kms:GenerateDataKey* with no condition,
// and drops the rule condition from the queue policy (aws-cdk issue
// #11158); the stack's own key statement (allowEventBridgeToUseKey) is
// scoped instead. The queue and the DLQ each allow events.amazonaws.com
// sqs:SendMessage for this rule only (aws:SourceArn; EventBridge user
// guide, eb-use-resource-based, "Amazon SQS permissions").
type queueTarget struct {
	queue, dlq    awssqs.IQueue
	maxEventAge   time.Duration
	retryAttempts int
}

// Bind implements awsevents.IRuleTarget.
func (q *queueTarget) Bind(rule interfacesawsevents.IRuleRef, _ *string) *awsevents.RuleTargetConfig {
	ruleArn := rule.RuleRef().RuleArn
	for _, dst := range []awssqs.IQueue{q.queue, q.dlq} {
		dst.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("events.amazonaws.com"), nil)},
			Actions:    jsii.Strings("sqs:SendMessage"),
			Resources:  &[]*string{dst.QueueArn()},
			Conditions: &map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": ruleArn}},
		}))
	}
	return &awsevents.RuleTargetConfig{
		Arn:              q.queue.QueueArn(),
		TargetResource:   q.queue,
		DeadLetterConfig: &awsevents.CfnRule_DeadLetterConfigProperty{Arn: q.dlq.QueueArn()},
		RetryPolicy: &awsevents.CfnRule_RetryPolicyProperty{
			MaximumEventAgeInSeconds: jsii.Number(q.maxEventAge.Seconds()),
			MaximumRetryAttempts:     jsii.Number(q.retryAttempts),
		},
	}
}

// grantCode grants fn the IAM actions its code's SDK calls need
// (app.PermissionsOf(name).CodeActions()), one statement per resource, on
// the ARNs in arns, except on the resources in grantedElsewhere. It returns
// an error when a resource has no ARN.
func (s *OrdersStack) grantCode(fn awslambda.Function, name string, arns map[app.Resource]*string, grantedElsewhere ...app.Resource) error {
	p, ok := app.PermissionsOf(name)
	if !ok {
		return fmt.Errorf("stack: no app.Permissions for function %s", name)
	}
	code := p.CodeActions()
	resources := make([]app.Resource, 0, len(code))
	for r := range code {
		resources = append(resources, r)
	}
	slices.Sort(resources)
	for _, r := range resources {
		if slices.Contains(grantedElsewhere, r) {
			continue
		}
		arn, ok := arns[r]
		if !ok {
			return fmt.Errorf("stack: function %s needs %v on %s, which the stack does not map to an ARN", name, code[r], r)
		}
		grant(fn, code[r], arn)
	}
	return nil
}
