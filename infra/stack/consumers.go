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
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/app"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/notifier"
	"github.com/ddb-outbox/ddb-outbox/pkg/routing"
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
	// Table is the consumer's own side-effect table.
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
}

// consumerTables names each consumer's table, its partition key attribute
// and its env var.
var consumerTables = map[string]struct{ id, pk, env string }{
	routing.ConsumerLedger:   {"LedgerTable", ledger.AttrPK, config.EnvLedgerTable},
	routing.ConsumerNotifier: {"NotificationsTable", notifier.AttrPK, config.EnvNotificationsTable},
}

// consumerNames are the consumers in a fixed order (deterministic template).
var consumerNames = []string{routing.ConsumerLedger, routing.ConsumerNotifier}

// addConsumer creates consumer name: its table, queue with DLQ, function with
// the SQS event source mapping, env and grants.
func (s *OrdersStack) addConsumer(name, source string) error {
	st, props, removal := s.Stack, s.props, s.props.removalPolicy()
	t := consumerTables[name]
	cid := idOf(name)
	ttl := ""
	if name == routing.ConsumerNotifier {
		ttl = props.NotificationsTTLAttribute
	}
	table := s.newTable(t.id, t.pk, ttl)
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
		Description:   "Event consumer " + name + ": applies each order event once (dedup marker + side effect in one transaction), fed by its SQS queue.",
		Timeout:       ConsumerTimeout,
		LogRetention:  props.LogRetention,
		RemovalPolicy: removal,
		// at least the mapping's MaximumConcurrency (Validate)
		ReservedConcurrency: max(props.ReservedConcurrency[name], 0),
	})
	if err != nil {
		return err
	}
	if s.EncryptionKey != nil {
		s.EncryptionKey.Grant(fn, *jsii.Strings(outboxcdk.KeyUseActions...)...)
	}
	fn.AddEnvironment(jsii.String(config.EnvDedupTable), s.DedupTable.TableName(), nil)
	fn.AddEnvironment(jsii.String(t.env), table.TableName(), nil)
	fn.AddEnvironment(jsii.String(config.EnvEventSource), jsii.String(source), nil)
	fn.AddEnvironment(jsii.String(config.EnvConsumerDLQURL), dlq.Queue.QueueUrl(), nil)
	if name == routing.ConsumerNotifier {
		// how long a notification (customer data) is kept; 0 keeps it forever
		fn.AddEnvironment(jsii.String(config.EnvNotificationRetentionSeconds),
			jsii.String(fmt.Sprint(int64(max(props.NotificationRetention, 0)/time.Second))), nil)
	}
	// events from any other account are refused (forged_account)
	fn.AddEnvironment(jsii.String(config.EnvExpectedEventAccount), awscdk.Aws_ACCOUNT_ID(), nil)
	es := awslambdaeventsources.NewSqsEventSource(queue, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(config.DefaultConsumerBatchSize),
		ReportBatchItemFailures: jsii.Bool(true),
		MaxConcurrency:          jsii.Number(config.DefaultConsumerMaxConcurrency),
	})
	fn.AddEventSource(es)
	c := &Consumer{Function: fn, Table: table, Queue: queue, DLQ: dlq, EventSource: es}
	s.Consumers[name] = c
	return s.grantCode(fn, name, map[app.Resource]*string{
		app.ResourceDedupTable:  s.DedupTable.TableArn(),
		consumerResource(name):  table.TableArn(),
		app.ResourceConsumerDLQ: dlq.Queue.QueueArn(),
	})
}

// consumerResource is the app.Resource of consumer name's table.
func consumerResource(name string) app.Resource {
	if name == routing.ConsumerNotifier {
		return app.ResourceNotificationsTable
	}
	return app.ResourceLedgerTable
}

// addRule creates routing rule r: an EventBridge rule on the bus whose target
// is the consumer's queue, with the rule DLQ for events EventBridge could not
// deliver to the queue.
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
	dlq := deadletter.New(s.Stack, cid+"DLQ", "events EventBridge could not deliver to the "+r.Consumer+" queue (rule "+r.Name+")", s.props.removalPolicy(), s.EncryptionKey)
	rule := awsevents.NewRule(s.Stack, jsii.String(cid+"Rule"), &awsevents.RuleProps{
		EventBus:     s.Bus,
		Description:  jsii.String("Routes " + r.Name + " events to the queue of consumer " + r.Consumer + " (routing.Rules)."),
		EventPattern: pattern,
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewSqsQueue(c.Queue, &awseventstargets.SqsQueueProps{
			DeadLetterQueue: dlq.Queue,
			MaxEventAge:     awscdk.Duration_Seconds(jsii.Number(s.props.ConsumerMaxEventAge.Seconds())),
			RetryAttempts:   jsii.Number(s.props.ConsumerRetryAttempts),
		})},
	})
	s.Rules[r.Name] = rule
	s.RuleDLQs[r.Name] = dlq
	c.Rules = append(c.Rules, rule)
	return nil
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
