package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

// Resequencer is what the consumer construct (outboxcdk.Consumer's Sweep,
// SweepDLQ, SweepAlarms, BufferedAgeAlarm) deploys for an ordered
// consumer's resequencer (dedup.Resequencer, docs/ORDERING.md): early events wait in
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
