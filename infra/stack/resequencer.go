package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// Resequencer is what the stack deploys for an ordered consumer's
// resequencer (dedup.Resequencer, docs/ORDERING.md): early events wait in
// the dedup table's buffer; the schedule puts a scheduled event on the
// consumer's queue every config.ResequencerSweepInterval, on which the
// consumer sweeps the buffer (dedup.IsSweepTick): it drains what a crash
// left behind and emits config.MetricOldestBufferedAge, which AgeAlarm
// watches.
type Resequencer struct {
	// SweepSchedule sends the scheduled event to the consumer's queue,
	// the function's only trigger (no asynchronous invocation: a consumer
	// is fed by its queue); it is one of the consumer's Rules, the senders
	// its queue policy allows.
	SweepSchedule awsevents.Rule
	// SweepDLQ receives ticks EventBridge could not put on the queue; with
	// SweepAlarms (FailedInvocations, InvocationsFailedToBeSentToDlq) it
	// is what every rule of the stack has (outboxcdk.RuleDeliveryAlarms).
	SweepDLQ    *deadletter.Queue
	SweepAlarms []awscloudwatch.Alarm
	// AgeAlarm fires when an event has waited longer than
	// config.DefaultBufferedAgeAlarm for its predecessor: a gap that does
	// not close (the missing event is parked, dead-lettered or lost
	// upstream). Created with the other alarms.
	AgeAlarm awscloudwatch.Alarm
}

// addStateIndex adds the resequencer's sparse buffer index to a consumer's
// own table, which holds its dedup state beside its effects: the shape of
// dedup.WithStateIndex.
func addStateIndex(table awsdynamodb.Table) {
	table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:        jsii.String(dedup.BufferIndex),
		PartitionKey:     &awsdynamodb.Attribute{Name: jsii.String(dedup.AttrBufferShard), Type: awsdynamodb.AttributeType_STRING},
		SortKey:          &awsdynamodb.Attribute{Name: jsii.String(dedup.AttrBufferedAt), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
		NonKeyAttributes: jsii.Strings(dedup.BufferIndexAttributes...),
	})
}

// stateIndexArn is the ARN of a consumer table's buffer index (a token).
func stateIndexArn(table awsdynamodb.Table) *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{table.TableArn(), jsii.String("/index/" + dedup.BufferIndex)})
}

// ordered reports whether consumer name is an ordered consumer (a routing
// rule to it has Ordered).
func ordered(name string) bool {
	for _, r := range routing.Rules() {
		if r.Consumer == name && r.Ordered {
			return true
		}
	}
	return false
}

// addResequencer creates the sweep schedule of ordered consumer c: a rule
// on the default bus (schedules run there only) whose target is c's queue.
// A tick that cannot be delivered is not retried past the next one
// (MaxEventAge one interval): ticks carry no data.
func (s *OrdersStack) addResequencer(name string, c *Consumer) {
	id := idOf(name) + "ResequencerSweep"
	dlq := deadletter.New(s.Stack, id+"DLQ", "resequencer sweep ticks EventBridge could not deliver to the "+name+" queue", s.props.removalPolicy(), nil)
	rule := awsevents.NewRule(s.Stack, jsii.String(id), &awsevents.RuleProps{
		Description: jsii.String(fmt.Sprintf("Sends consumer %s's queue a resequencer sweep tick: it drains buffered events a crash left and reports the oldest buffered age.", name)),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(config.ResequencerSweepInterval.Seconds()))),
		Targets: &[]awsevents.IRuleTarget{&queueTarget{
			queue: c.Queue, dlq: dlq.Queue,
			// a tick carries no data: not retried past the next one
			maxEventAge: max(config.ResequencerSweepInterval, MinConsumerMaxEventAge), retryAttempts: 2,
		}},
	})
	dlq.AcceptOnlyFrom(deadletter.Senders{SourceArns: []*string{rule.RuleArn()}})
	dlq.RefuseRedriveSources()
	dlq.KeepMessagesFromAllBut(s.dlqOperators())
	c.Resequencer = &Resequencer{SweepSchedule: rule, SweepDLQ: dlq,
		SweepAlarms: outboxcdk.RuleDeliveryAlarms(s.Stack, id, rule, nil, "consumer "+name+"'s resequencer sweep schedule")}
	c.Rules = append(c.Rules, rule)
}

// addResequencerAlarm creates c's OldestBufferedAgeSeconds alarm.
func (s *OrdersStack) addResequencerAlarm(name string, c *Consumer) awscloudwatch.Alarm {
	m := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(config.MetricNamespace),
		MetricName:    jsii.String(config.MetricOldestBufferedAge),
		DimensionsMap: &map[string]*string{config.MetricDimensionConsumer: jsii.String(name)},
		Statistic:     jsii.String("Maximum"),
		Period:        awscdk.Duration_Minutes(jsii.Number(5)),
	})
	c.Resequencer.AgeAlarm = awscloudwatch.NewAlarm(s.Stack, jsii.String(idOf(name)+"BufferedAgeAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String(fmt.Sprintf("Consumer %s: an event has waited over %s in the resequencer buffer for its predecessor "+
			"(parked, dead-lettered or lost upstream). outboxctl consumer-buffered lists them; redriving the missing event drains them.",
			name, config.DefaultBufferedAgeAlarm)),
		Metric:             m,
		Threshold:          jsii.Number(config.DefaultBufferedAgeAlarm.Seconds()),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	return c.Resequencer.AgeAlarm
}
