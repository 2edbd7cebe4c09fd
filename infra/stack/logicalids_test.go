package stack

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

// GIVEN the default stack, whose consumers outboxcdk.NewConsumer builds
// WHEN the logical ids of the ledger's parts are read
// THEN they are those the stack gave them when it built them itself (the
// template of f091da5), so a deploy replaces no queue, DLQ or rule; and
// stackLogicalID computes the CDK's ids.
func TestConsumerPartsKeepTheirLogicalIDs(t *testing.T) {
	c := def.stack.Consumers[routing.ConsumerLedger]
	for got, want := range map[string]string{
		def.id(c.Queue):                                                       "LedgerConsumerQueue8425CDC4",
		def.id(c.DLQ.Queue):                                                   "LedgerConsumerDLQ5DA9C4F4",
		def.id(c.BacklogAlarm):                                                "LedgerConsumerBacklogAlarm6531D789",
		def.id(c.Construct.ErrorsAlarm):                                       "LedgerErrorsAlarmEA74638D",
		def.id(def.stack.Rules["ledger-order-payments"]):                      "LedgerOrderPaymentsRuleFF6AB92B",
		def.id(def.stack.RuleDLQs["ledger-order-payments"].Queue):             "LedgerOrderPaymentsDLQ025196D8",
		def.id(c.Resequencer.SweepSchedule):                                   "LedgerResequencerSweep1FE468D5",
		def.id(c.Resequencer.SweepDLQ.Queue):                                  "LedgerResequencerSweepDLQCBB085E0",
		def.id(c.Resequencer.AgeAlarm):                                        "LedgerBufferedAgeAlarm47F6EE60",
		stackLogicalID([]string{"LedgerConsumerQueue", "Policy", "Resource"}): "LedgerConsumerQueuePolicy25BDABE5",
		stackLogicalID([]string{"Bus", "Default"}):                            "Bus",
	} {
		if got != want {
			t.Errorf("logical id %s, want %s", got, want)
		}
	}
	if _, ok := def.res["LedgerConsumerQueuePolicy25BDABE5"]; !ok {
		t.Error("the ledger queue's policy changed its logical id")
	}
}
