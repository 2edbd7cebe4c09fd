package outboxcdk

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// IAM actions NewConsumer grants the consumer's function, each on its own
// resource only. Together with the platform grants (logs, X-Ray) they are
// everything the library's consumer runtime (pkg/dedup, pkg/sqsconsumer)
// calls; no wildcards.
var (
	// ConsumerStateActions, on the consumer's state table
	// (ConsumerProps.Table or the table NewConsumerTable creates):
	// dynamodb:PutItem, UpdateItem and DeleteItem for the transaction
	// dedup.Applier writes (the dedup marker Put, the ordering gate's
	// Update, the resequencer's buffer item Put and Delete; a
	// TransactWriteItems call is authorized per action), and
	// dynamodb:GetItem for the reads (the ordering gate after a failed
	// condition, a buffered event, a marker). An unordered consumer built on
	// pkg/idempotency needs the same four on its idempotency table.
	ConsumerStateActions = []string{"dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
	// ConsumerBufferQueryActions, on the state table's buffer index
	// (StateIndexArn), ordered consumers only: dynamodb:Query for
	// dedup.Resequencer's sweep, which lists the consumer's buffered events.
	ConsumerBufferQueryActions = []string{"dynamodb:Query"}
	// ConsumerDLQActions, on the consumer's DLQ: sqs:SendMessage, with which
	// sqsconsumer.Handler dead-letters an event no retry can fix
	// (config.EnvConsumerDLQURL).
	ConsumerDLQActions = []string{"sqs:SendMessage"}
	// ConsumerQueueActions, on the consumer's queue: what the Lambda SQS
	// event source mapping polls and deletes with (ReceiveMessage,
	// DeleteMessage, GetQueueAttributes, GetQueueUrl,
	// ChangeMessageVisibility; the CDK's SqsEventSource grants them), and
	// sqs:ChangeMessageVisibility, with which sqsconsumer.Handler brings a
	// failed message back before the visibility timeout (RetryDelay).
	ConsumerQueueActions = []string{"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage"}
)

// Consumer delivery defaults and limits (NewConsumer).
const (
	// ConsumerQueueRetention is how long a consumer queue keeps a message
	// (SQS default, 4 days): shorter than its DLQ's deadletter.Retention
	// (14 days), because a standard queue's message keeps its original
	// enqueue time when it moves to the DLQ (Amazon SQS developer guide,
	// dead-letter queues).
	ConsumerQueueRetention = 4 * 24 * time.Hour
	// DefaultConsumerOldestMessageThreshold is the threshold of the alarm
	// on a consumer queue's ApproximateAgeOfOldestMessage: longer than a
	// message retried maxReceiveCount times takes to reach the DLQ
	// (5 × 180 s = 15 min with the defaults), so it means a backlog, not
	// one failing event.
	DefaultConsumerOldestMessageThreshold = 20 * time.Minute
	// DefaultConsumerMaxEventAge is how long EventBridge keeps retrying to
	// deliver an event to the consumer's queue before it goes to the rule's
	// DLQ (the target's MaximumEventAgeInSeconds): 6 h.
	DefaultConsumerMaxEventAge = 6 * time.Hour
	// DefaultConsumerRetryAttempts bounds EventBridge's retries of a failed
	// delivery to the queue (MaximumRetryAttempts).
	DefaultConsumerRetryAttempts = 20
	// MinConsumerMaxEventAge and MaxConsumerMaxEventAge are the limits of
	// an EventBridge target's MaximumEventAgeInSeconds (60 s..24 h);
	// MaxConsumerRetryAttempts of its MaximumRetryAttempts (0..185; at
	// least 1 here). EventBridge API reference, RetryPolicy.
	MinConsumerMaxEventAge   = 60 * time.Second
	MaxConsumerMaxEventAge   = 24 * time.Hour
	MaxConsumerRetryAttempts = 185
	// SweepRetryAttempts bounds EventBridge's retries of one sweep tick;
	// a tick carries no data and is not retried past the next one
	// (MaximumEventAge max(config.ResequencerSweepInterval,
	// MinConsumerMaxEventAge)).
	SweepRetryAttempts = 2
	// MaxConsumerBatchSize is the largest BatchSize of an SQS event source
	// mapping without a batching window (Lambda developer guide,
	// services-sqs-configure).
	MaxConsumerBatchSize = 10
	// MaxConsumerFunctionTimeout is Lambda's function timeout limit
	// (15 min); the queue's visibility timeout is
	// config.ConsumerVisibilityTimeoutFactor times the function timeout
	// and at most 12 h (SQS limit).
	MaxConsumerFunctionTimeout = 15 * time.Minute
	// MinDedupRetention is the shortest dedup marker retention
	// dedup.Config accepts (one hour).
	MinDedupRetention = time.Hour
)

// QueueSendersStatementID is the Sid of the consumer queue policy statement
// that denies sqs:SendMessage to every request that is neither from one of
// the consumer's rules (aws:SourceArn) nor from one of
// ConsumerProps.DeadLetterOperatorArns (aws:PrincipalArn).
const QueueSendersStatementID = "OnlyTheRulesSend"

// detailAggregateType is the EventBridge detail field holding the
// aggregate type: the JSON name of outbox.Envelope.AggregateType (the
// relay publishes the envelope as the detail, outbox.Envelope.Detail).
var detailAggregateType = func() string {
	f, ok := reflect.TypeOf(outbox.Envelope{}).FieldByName("AggregateType")
	if !ok {
		panic("outboxcdk: outbox.Envelope has no AggregateType field")
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}()

// Consumer is the consumer side of the outbox for one consumer function:
// rule → queue → event source mapping → function, with the DLQs, the state
// table, the ordered consumer's resequencer sweep schedule, the alarms and
// the grants.
//
// Delivery: the rule on the bus puts each matching event on Queue
// (EventBridge retries a failed delivery, then sends the event to
// RuleDLQ); the mapping invokes the function with batches and
// ReportBatchItemFailures; a message reported failed comes back after the
// visibility timeout and moves to DLQ after
// config.DefaultConsumerMaxReceiveCount receives (the queue's redrive
// policy); the function dead-letters events no retry can fix to DLQ itself.
// An ordered consumer's Sweep puts a tick on Queue every
// config.ResequencerSweepInterval (dedup.IsSweepTick): the consumer drains
// what a crash left in its buffer and reports the oldest buffered age,
// which BufferedAgeAlarm watches.
type Consumer struct {
	constructs.Construct

	// Queue is the consumer's SQS queue: encrypted as the outbox
	// (SSE-SQS, or ConsumerProps.EncryptionKey), TLS only, visibility
	// timeout config.ConsumerVisibilityTimeoutFactor × FunctionTimeout,
	// retention ConsumerQueueRetention, 1 MiB messages, redrive to DLQ
	// after config.DefaultConsumerMaxReceiveCount receives. Its policy
	// lets EventBridge send for Rule and Sweep only and denies
	// sqs:SendMessage to everyone else but the dead-letter operators
	// (QueueSendersStatementID).
	Queue awssqs.Queue
	// DLQ is Queue's dead-letter queue (and the function's, for events no
	// retry can fix), with its depth alarm. It accepts messages from the
	// function's role and Queue's redrive only.
	DLQ *deadletter.Queue
	// Rule is the EventBridge rule on the bus that routes the consumer's
	// events to Queue.
	Rule awsevents.Rule
	// RuleDLQ receives events EventBridge could not deliver to Queue
	// (SSE-SQS; accepts Rule's deliveries only).
	RuleDLQ *deadletter.Queue
	// RuleAlarms are Rule's FailedInvocations and
	// InvocationsFailedToBeSentToDlq alarms (RuleDeliveryAlarms).
	RuleAlarms []awscloudwatch.Alarm
	// Table is the consumer's state table: ConsumerProps.Table, or the
	// table NewConsumerTable created.
	Table awsdynamodb.ITable
	// Mapping is the function's SQS event source mapping on Queue.
	Mapping awslambdaeventsources.SqsEventSource
	// Sweep is the ordered consumer's resequencer sweep schedule (a rule on
	// the account's default bus, the only bus schedules run on), SweepDLQ
	// its target's DLQ and SweepAlarms its delivery alarms; nil for an
	// unordered consumer.
	Sweep       awsevents.Rule
	SweepDLQ    *deadletter.Queue
	SweepAlarms []awscloudwatch.Alarm
	// ErrorsAlarm fires on a failed invocation (a crash or a timeout: with
	// partial batch responses a failed event is not a function error).
	ErrorsAlarm awscloudwatch.Alarm
	// BacklogAlarm fires when Queue's oldest message is older than
	// OldestMessageThreshold.
	BacklogAlarm awscloudwatch.Alarm
	// BufferedAgeAlarm (ordered consumers) fires when an event has waited
	// longer than BufferedAgeThreshold in the buffer for its predecessor:
	// a gap that does not close.
	BufferedAgeAlarm awscloudwatch.Alarm
	// Alarms lists every alarm of the construct; each notifies the alarm
	// topic on ALARM and OK (NotifyAlarms).
	Alarms []awscloudwatch.Alarm

	props ConsumerProps
}

// NewConsumer creates consumer props.Name's infrastructure as id under
// scope (see Consumer). It returns an error wrapping ErrInvalidProps when
// props do not validate or the function has no execution role to grant to,
// and one wrapping ErrReplicatedStateTable when props.Table is replicated to
// other Regions (a consumer's state is regional: NewConsumerForwarder).
func NewConsumer(scope constructs.Construct, id string, props ConsumerProps) (*Consumer, error) {
	if err := props.Validate(); err != nil {
		return nil, err
	}
	if replicatedTable(props.Table) {
		return nil, fmt.Errorf("consumer %q: %w", props.Name, ErrReplicatedStateTable)
	}
	props = props.withDefaults()
	role := props.Function.Role()
	if role == nil {
		return nil, fmt.Errorf("%w: consumer %q: Function has no execution role (import it with its role) to grant to", ErrInvalidProps, props.Name)
	}
	c := &Consumer{Construct: constructs.NewConstruct(scope, jsii.String(id)), props: props}
	removal, key := props.RemovalPolicy, props.EncryptionKey
	operators := make([]*string, len(props.DeadLetterOperatorArns))
	for i, a := range props.DeadLetterOperatorArns {
		operators[i] = jsii.String(a)
	}

	c.Table = props.Table
	if c.Table == nil {
		c.Table = NewConsumerTable(c.Construct, "Table", ConsumerTableProps{EncryptionKey: key, RemovalPolicy: removal})
	}
	c.DLQ = deadletter.New(c.Construct, "DLQ", "events consumer "+props.Name+" failed "+
		strconv.Itoa(config.DefaultConsumerMaxReceiveCount)+" times or could never apply", removal, key)
	enc := awssqs.QueueEncryption_SQS_MANAGED
	if key != nil {
		enc = awssqs.QueueEncryption_KMS
	}
	c.Queue = awssqs.NewQueue(c.Construct, jsii.String("Queue"), &awssqs.QueueProps{
		Encryption:          enc,
		EncryptionMasterKey: key,
		EnforceSSL:          jsii.Bool(true),
		VisibilityTimeout:   awscdk.Duration_Seconds(jsii.Number((config.ConsumerVisibilityTimeoutFactor * props.FunctionTimeout).Seconds())),
		RetentionPeriod:     awscdk.Duration_Seconds(jsii.Number(ConsumerQueueRetention.Seconds())),
		// the whole EventBridge event, whatever the outbox entry limit
		MaxMessageSizeBytes: jsii.Number(deadletter.MaxMessageBytes),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			MaxReceiveCount: jsii.Number(config.DefaultConsumerMaxReceiveCount),
			Queue:           c.DLQ.Queue,
		},
		RemovalPolicy: removal,
	})

	fn := props.Function
	if key != nil {
		key.Grant(fn, *jsii.Strings(KeyUseActions...)...)
	}
	esProps := &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(props.BatchSize),
		ReportBatchItemFailures: jsii.Bool(true),
	}
	props.Scaling.Apply(esProps)
	c.Mapping = awslambdaeventsources.NewSqsEventSource(c.Queue, esProps)
	fn.AddEventSource(c.Mapping)
	// ConsumerQueueActions are the mapping's own grant (SqsEventSource:
	// queue.grantConsumeMessages): not granted twice.
	grant(fn, ConsumerStateActions, c.Table.TableArn())
	if props.Ordering == dedup.Ordered {
		grant(fn, ConsumerBufferQueryActions, StateIndexArn(c.Table))
	}
	grant(fn, ConsumerDLQActions, c.DLQ.Queue.QueueArn())
	if f, ok := fn.(awslambda.Function); ok {
		env := map[string]*string{
			config.EnvConsumerTable:        c.Table.TableName(),
			config.EnvConsumerName:         jsii.String(props.Name),
			config.EnvEventSource:          jsii.String(props.EventSource),
			config.EnvConsumerDLQURL:       c.DLQ.Queue.QueueUrl(),
			config.EnvExpectedEventAccount: awscdk.Stack_Of(c.Construct).Account(),
		}
		if props.DedupRetention > 0 {
			env[config.EnvDedupRetentionSeconds] = jsii.String(seconds(props.DedupRetention))
		}
		for k, v := range env {
			f.AddEnvironment(jsii.String(k), v, nil)
		}
	}
	// only the function's role sends to the DLQ (its permanent failures);
	// the queue's redrive is not refused (deadletter.AcceptOnlyFrom)
	c.DLQ.AcceptOnlyFrom(deadletter.Senders{PrincipalArns: []*string{role.RoleArn()}})
	c.DLQ.KeepMessagesFromAllBut(operators)

	var senders []*string
	if props.Ordering == dedup.Ordered {
		c.addSweep(operators)
		senders = append(senders, c.Sweep.RuleArn())
	}
	c.addRule(operators)
	senders = append(senders, c.Rule.RuleArn())
	c.restrictSenders(senders)
	c.addAlarms()
	NotifyAlarms(c.Construct, props.AlarmTopic)
	return c, nil
}

// Props returns the consumer's effective props (defaults applied).
func (c *Consumer) Props() ConsumerProps { return c.props }

// EventPattern returns the rule's event pattern: the events of
// EventSource whose detail's aggregate_type is AggregateType, or whose
// detail-type is one of AggregateEventTypes (ordered) or EventTypes
// (unordered) when set.
func (p ConsumerProps) EventPattern() *awsevents.EventPattern {
	pattern := &awsevents.EventPattern{Source: jsii.Strings(p.EventSource)}
	switch types := append(append([]string(nil), p.AggregateEventTypes...), p.EventTypes...); {
	case len(types) > 0:
		pattern.DetailType = jsii.Strings(types...)
	default:
		pattern.Detail = &map[string]any{detailAggregateType: []any{p.AggregateType}}
	}
	return pattern
}

// addRule creates Rule, its DLQ and its alarms.
func (c *Consumer) addRule(operators []*string) {
	p := c.props
	c.RuleDLQ = deadletter.New(c.Construct, "RuleDLQ", "events EventBridge could not deliver to the "+p.Name+" queue", p.RemovalPolicy, nil)
	c.Rule = awsevents.NewRule(c.Construct, jsii.String("Rule"), &awsevents.RuleProps{
		EventBus:     p.EventBus,
		Description:  jsii.String("Routes " + p.AggregateType + " events to the queue of consumer " + p.Name + "."),
		EventPattern: p.EventPattern(),
		Targets: &[]awsevents.IRuleTarget{&queueTarget{
			queue: c.Queue, dlq: c.RuleDLQ.Queue, maxEventAge: p.MaxEventAge, retryAttempts: p.RetryAttempts,
		}},
	})
	c.RuleDLQ.AcceptOnlyFrom(deadletter.Senders{SourceArns: []*string{c.Rule.RuleArn()}})
	c.RuleDLQ.RefuseRedriveSources()
	c.RuleDLQ.KeepMessagesFromAllBut(operators)
	c.RuleAlarms = RuleDeliveryAlarms(c.Construct, "Rule", c.Rule, p.EventBus.EventBusName(), "consumer "+p.Name+"'s rule (to its queue)")
}

// addSweep creates the ordered consumer's sweep schedule: a rule on the
// default bus whose target is Queue. A tick that cannot be delivered is
// not retried past the next one: ticks carry no data.
func (c *Consumer) addSweep(operators []*string) {
	p := c.props
	c.SweepDLQ = deadletter.New(c.Construct, "SweepDLQ", "resequencer sweep ticks EventBridge could not deliver to the "+p.Name+" queue", p.RemovalPolicy, nil)
	c.Sweep = awsevents.NewRule(c.Construct, jsii.String("Sweep"), &awsevents.RuleProps{
		Description: jsii.String(fmt.Sprintf("Sends consumer %s's queue a resequencer sweep tick: it drains buffered events a crash left and reports the oldest buffered age.", p.Name)),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(config.ResequencerSweepInterval.Seconds()))),
		Targets: &[]awsevents.IRuleTarget{&queueTarget{
			queue: c.Queue, dlq: c.SweepDLQ.Queue,
			maxEventAge: max(config.ResequencerSweepInterval, MinConsumerMaxEventAge), retryAttempts: SweepRetryAttempts,
		}},
	})
	c.SweepDLQ.AcceptOnlyFrom(deadletter.Senders{SourceArns: []*string{c.Sweep.RuleArn()}})
	c.SweepDLQ.RefuseRedriveSources()
	c.SweepDLQ.KeepMessagesFromAllBut(operators)
	c.SweepAlarms = RuleDeliveryAlarms(c.Construct, "Sweep", c.Sweep, nil, "consumer "+p.Name+"'s resequencer sweep schedule")
}

// restrictSenders adds to Queue's policy an explicit Deny of
// sqs:SendMessage to every request whose aws:SourceArn is not one of rules
// (EventBridge sets it when it delivers for a rule; an IAM principal's
// request has none) and whose aws:PrincipalArn is not a dead-letter
// operator (a redrive). Only SendMessage is denied: the mapping polls with
// the function's role.
func (c *Consumer) restrictSenders(rules []*string) {
	notFrom := map[string]any{"aws:SourceArn": rules}
	if ops := c.props.DeadLetterOperatorArns; len(ops) > 0 {
		notFrom["aws:PrincipalArn"] = ops
	}
	c.Queue.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(QueueSendersStatementID),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings("sqs:SendMessage"),
		Resources:  &[]*string{c.Queue.QueueArn()},
		Conditions: &map[string]any{"ArnNotEquals": notFrom},
	}))
}

// QueueAgeMetric is Queue's ApproximateAgeOfOldestMessage in seconds
// (maximum over one minute).
func (c *Consumer) QueueAgeMetric() awscloudwatch.Metric {
	return c.Queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
		Period: awscdk.Duration_Minutes(jsii.Number(1)), Statistic: jsii.String("Maximum"),
	})
}

// BufferedAgeMetric is the ordered consumer's oldest buffered event age in
// seconds (maximum over five minutes), emitted by its sweep as
// config.MetricNamespace/config.MetricOldestBufferedAge with dimension
// config.MetricDimensionConsumer = ConsumerProps.Name.
func (c *Consumer) BufferedAgeMetric() awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(config.MetricNamespace),
		MetricName:    jsii.String(config.MetricOldestBufferedAge),
		DimensionsMap: &map[string]*string{config.MetricDimensionConsumer: jsii.String(c.props.Name)},
		Statistic:     jsii.String("Maximum"),
		Period:        awscdk.Duration_Minutes(jsii.Number(5)),
	})
}

func (c *Consumer) addAlarms() {
	p := c.props
	alarm := func(id, desc string, m awscloudwatch.IMetric, threshold float64, cmp awscloudwatch.ComparisonOperator, periods float64) awscloudwatch.Alarm {
		return awscloudwatch.NewAlarm(c.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             m,
			Threshold:          jsii.Number(threshold),
			ComparisonOperator: cmp,
			EvaluationPeriods:  jsii.Number(periods),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	// With partial batch responses a failed event is not a function error:
	// Errors counts crashes and timeouts (the whole batch comes back);
	// single failures show as queue age and, in the end, DLQ depth.
	c.ErrorsAlarm = alarm("ErrorsAlarm", "Consumer "+p.Name+" invocations failed (crash or timeout; the SQS queue redelivers the batch).",
		p.Function.MetricErrors(&awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}),
		1, awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1)
	c.BacklogAlarm = alarm("BacklogAlarm", fmt.Sprintf("Consumer %s's queue holds a message older than %s: the consumer is behind or failing.", p.Name, p.OldestMessageThreshold),
		c.QueueAgeMetric(), p.OldestMessageThreshold.Seconds(), awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 5)
	c.Alarms = append(c.Alarms, c.ErrorsAlarm, c.BacklogAlarm, c.DLQ.Alarm)
	if c.Sweep != nil {
		c.BufferedAgeAlarm = alarm("BufferedAgeAlarm", fmt.Sprintf("Consumer %s: an event has waited over %s in the resequencer buffer for its predecessor "+
			"(parked, dead-lettered or lost upstream). outboxctl consumer-buffered lists them; redriving the missing event drains them.", p.Name, p.BufferedAgeThreshold),
			c.BufferedAgeMetric(), p.BufferedAgeThreshold.Seconds(), awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1)
		c.Alarms = append(c.Alarms, c.BufferedAgeAlarm, c.SweepDLQ.Alarm)
		c.Alarms = append(c.Alarms, c.SweepAlarms...)
	}
	c.Alarms = append(c.Alarms, c.RuleDLQ.Alarm)
	c.Alarms = append(c.Alarms, c.RuleAlarms...)
}

// queueTarget is an EventBridge rule target that puts the event on an SQS
// queue, with a retry policy and a target DLQ. It is what
// awseventstargets.SqsQueue does, without that target's grant on a KMS
// encrypted queue's key: the CDK gives events.amazonaws.com kms:Decrypt,
// kms:Encrypt, kms:ReEncrypt* and kms:GenerateDataKey* with no condition,
// and drops the rule condition from the queue policy (aws-cdk issue
// #11158); the key's policy must let EventBridge use it instead (infra/stack
// scopes that statement to SQS queues of the account). The queue and the
// DLQ each allow events.amazonaws.com sqs:SendMessage for this rule only
// (aws:SourceArn; EventBridge user guide, eb-use-resource-based, "Amazon
// SQS permissions").
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
