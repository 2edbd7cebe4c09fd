package stack

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
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
	ConsumerOldestMessageThreshold = outboxcdk.DefaultConsumerOldestMessageThreshold
	// ConsumerQueueRetention is how long a consumer queue keeps a message
	// (SQS default, 4 days). It is shorter than the DLQ's
	// deadletter.Retention (14 days) because a standard queue's message keeps
	// its original enqueue time when it moves to the DLQ, so the DLQ must
	// keep messages longer than the source queue (Amazon SQS developer
	// guide, dead-letter queues).
	ConsumerQueueRetention = outboxcdk.ConsumerQueueRetention
)

// Consumer is one event consumer: its function, its effects table, and the
// consumer construct (outboxcdk.NewConsumer) that gives it its queue, DLQ,
// rule, state grants and alarms.
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
	// Construct is the consumer construct that created Queue, DLQ,
	// EventSource, BacklogAlarm, Rules and Resequencer.
	Construct *outboxcdk.Consumer
}

// consumerTable is a consumer's own effects table: construct id, partition
// key attribute (S, from the owning package's CreateTableInput), the
// app.Resource its grants name, and the env var carrying its name.
type consumerTable struct {
	id, pk   string
	resource app.Resource
	env      string
}

// consumerSpec is what differs between consumers; everything else (queue,
// DLQ, mapping, alarms, rule, queue policy, state grants) is built alike by
// outboxcdk.NewConsumer.
type consumerSpec struct {
	table       consumerTable
	description string
	// dedup: the consumer keeps its pkg/dedup state (markers, ordering
	// gates, buffer) in its own table beside its effects (ledger,
	// notifier): the table gets the state index and TTL on
	// dedup.TTLAttribute, and is the construct's state table
	// (outboxcdk.ConsumerProps.Table).
	dedup bool
	// extra creates the consumer's other resources and env vars. It
	// returns the ARNs of the resources its grants name besides its
	// tables, its queue and its DLQ, and the consumer construct's state
	// table when it is not the consumer's own table (the fulfilment's
	// idempotency table); nil for none.
	extra func(s *OrdersStack, name string, fn awslambda.Function) (map[app.Resource]*string, awsdynamodb.ITable)
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
		extra: func(s *OrdersStack, _ string, fn awslambda.Function) (map[app.Resource]*string, awsdynamodb.ITable) {
			// how long a notification (customer data) is kept; 0 keeps it forever
			fn.AddEnvironment(jsii.String(appenv.EnvNotificationRetentionSeconds),
				jsii.String(fmt.Sprint(int64(max(s.props.NotificationRetention, 0)/time.Second))), nil)
			return nil, nil
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

// addConsumer creates consumer name: its function and effects table, and
// with outboxcdk.NewConsumer its queue, DLQ, rule (routing's one rule to
// the consumer), mapping, sweep schedule, alarms, state grants and env;
// then grants the rest of its code's calls (app.Permissions). It returns
// an error when the stack has no consumerSpec for name or routing not
// exactly one rule, gofunc's error (a missing bootstrap), NewConsumer's, or
// grantCode's.
func (s *OrdersStack) addConsumer(name string) error {
	spec, ok := consumerSpecs[name]
	if !ok {
		return fmt.Errorf("stack: routing consumer %q has no consumer definition in the stack", name)
	}
	var rules []routing.Rule
	for _, r := range routing.Rules() {
		if r.Consumer == name {
			rules = append(rules, r)
		}
	}
	if len(rules) != 1 {
		return fmt.Errorf("stack: consumer %q has %d routing rules, want 1 (the consumer construct has one rule)", name, len(rules))
	}
	rule := rules[0]
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
		outboxcdk.AddStateIndex(table)
	}
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
	fn.AddEnvironment(jsii.String(spec.table.env), table.TableName(), nil)
	arns := map[app.Resource]*string{spec.table.resource: table.TableArn()}
	var state awsdynamodb.ITable = table
	if spec.extra != nil {
		more, own := spec.extra(s, name, fn)
		for r, arn := range more {
			arns[r] = arn
		}
		if own != nil {
			state = own
		}
	}
	ordering := dedup.Unordered
	var aggregateTypes []string
	eventTypes := rule.DetailTypes
	if rule.Ordered {
		// every event type of the aggregate, by name: the rule's pattern
		// stays routing's (routing.Rule.Ordered), checked complete here
		if !sameSet(rule.DetailTypes, order.EventTypes) {
			return fmt.Errorf("stack: ordered consumer %s's rule %s matches %v, not every order event type %v: "+
				"a sequence it never receives stalls the order's gate for ever", name, rule.Name, rule.DetailTypes, order.EventTypes)
		}
		ordering, aggregateTypes, eventTypes = dedup.Ordered, rule.DetailTypes, nil
	}
	oc, err := outboxcdk.NewConsumer(st, cid+"Consumer", outboxcdk.ConsumerProps{
		Outbox:              s.Outbox,
		Name:                name,
		Function:            fn,
		Ordering:            ordering,
		AggregateType:       order.AggregateType,
		AggregateEventTypes: aggregateTypes,
		EventTypes:          eventTypes,
		Table:               state,
		FunctionTimeout:     ConsumerTimeout,
		Scaling:             props.ConsumerScaling,
		MaxEventAge:         props.ConsumerMaxEventAge,
		RetryAttempts:       props.ConsumerRetryAttempts,
	})
	if err != nil {
		return err
	}
	// the parts keep the logical ids they had as children of the stack
	rid := idOf(rule.Name)
	keepLogicalIDs(st, oc, map[string]string{
		"Queue": cid + "ConsumerQueue", "DLQ": cid + "ConsumerDLQ", "DLQAlarm": cid + "ConsumerDLQAlarm",
		"ErrorsAlarm": cid + "ErrorsAlarm", "BacklogAlarm": cid + "ConsumerBacklogAlarm", "BufferedAgeAlarm": cid + "BufferedAgeAlarm",
		"Rule": rid + "Rule", "RuleDLQ": rid + "DLQ", "RuleDLQAlarm": rid + "DLQAlarm",
		"RuleFailedInvocationsAlarm": rid + "RuleFailedInvocationsAlarm", "RuleDlqFailuresAlarm": rid + "RuleDlqFailuresAlarm",
		"Sweep": cid + "ResequencerSweep", "SweepDLQ": cid + "ResequencerSweepDLQ", "SweepDLQAlarm": cid + "ResequencerSweepDLQAlarm",
		"SweepFailedInvocationsAlarm": cid + "ResequencerSweepFailedInvocationsAlarm", "SweepDlqFailuresAlarm": cid + "ResequencerSweepDlqFailuresAlarm",
	})
	c := &Consumer{Function: fn, Table: table, Queue: oc.Queue, DLQ: oc.DLQ, EventSource: oc.Mapping,
		BacklogAlarm: oc.BacklogAlarm, Construct: oc}
	if oc.Sweep != nil {
		c.Resequencer = &Resequencer{SweepSchedule: oc.Sweep, SweepDLQ: oc.SweepDLQ, SweepAlarms: oc.SweepAlarms, AgeAlarm: oc.BufferedAgeAlarm}
		c.Rules = append(c.Rules, oc.Sweep)
	}
	c.Rules = append(c.Rules, oc.Rule)
	s.Consumers[name] = c
	s.Rules[rule.Name] = oc.Rule
	s.RuleDLQs[rule.Name] = oc.RuleDLQ
	s.RuleAlarms[rule.Name] = oc.RuleAlarms
	// The construct granted outboxcdk.ConsumerStateActions on its state
	// table, the buffer index query (ordered), the DLQ send and, through
	// the mapping, the queue: grantCode grants the rest.
	granted := []app.Resource{app.ResourceConsumerQueue, app.ResourceConsumerDLQ, app.ResourceConsumerStateIndex}
	if state == table {
		granted = append(granted, spec.table.resource)
	} else {
		granted = append(granted, app.ResourceIdempotencyTable)
	}
	return s.grantCode(fn, name, arns, granted...)
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

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}
