package localrt

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// notifierRule is the rule of testRules whose target is testNotifier.
const notifierRule = "notifier-order-events"

// newRuleDLQ is the DLQ of rule on b as the CDK stack makes it: it accepts
// sends from EventBridge for that rule only (OnlySourceArns).
func newRuleDLQ(t *testing.T, b *Bus, rule string) *SQSQueue {
	t.Helper()
	q := newTestSQSQueue(t, SQSQueueConfig{Name: strings.ReplaceAll(t.Name(), "/", "-") + "-rule-dlq", OnlySourceArns: []string{b.RuleARN(rule)}})
	if err := b.SetDeadLetterQueue(rule, q, q.URL()); err != nil {
		t.Fatal(err)
	}
	return q
}

func attr(m sqstypes.Message, name string) (string, bool) {
	v, ok := m.MessageAttributes[name]
	return aws.ToString(v.StringValue), ok
}

// An event EventBridge cannot deliver to a rule's SQS target lands on the
// target's DLQ as the event JSON with the attributes eb-rule-dlq lists —
// RULE_ARN, TARGET_ARN, ERROR_CODE, ERROR_MESSAGE, EXHAUSTED_RETRY_CONDITION
// (when the retry policy ran out), RETRY_ATTEMPTS — and a target that no
// longer exists or refuses EventBridge ("missing permissions") is not
// retried: its event goes to the DLQ at once (EventBridge user guide,
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html).
// The send is made for the rule (aws:SourceArn), so a DLQ whose policy
// admits the rule only takes it.
func TestBusRuleDLQCarriesEventBridgeAttributes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// target returns the queue the rule targets and the URL it is
		// subscribed under.
		target       func(t *testing.T, b *Bus) (MessageSender, string)
		detail       string
		code         string
		attempts     int
		exhausted    string
		errorMessage string
		dlqRefuses   bool
	}{
		{name: "queue deleted", code: sqsconsumer.RuleErrorNoResource, attempts: 1, errorMessage: "does not exist",
			target: func(t *testing.T, b *Bus) (MessageSender, string) {
				q := newTestSQSQueue(t, SQSQueueConfig{Name: "gone-" + strings.ReplaceAll(t.Name(), "/", "-")})
				// the rule still names a queue that is no longer there
				return q, "https://sqs.eu-west-1.amazonaws.com/000000000000/deleted-notifier"
			}},
		{name: "queue policy refuses EventBridge", code: sqsconsumer.RuleErrorNoPermissions, attempts: 1, errorMessage: "explicit deny",
			target: func(t *testing.T, b *Bus) (MessageSender, string) {
				q := newTestSQSQueue(t, SQSQueueConfig{Name: "policy-" + strings.ReplaceAll(t.Name(), "/", "-"), OnlySourceArns: []string{b.RuleARN("ledger-order-payments")}})
				return q, q.URL()
			}},
		{name: "body refused until the retry policy ran out", code: sqsconsumer.RuleErrorInvalidParameter, attempts: 3,
			exhausted: sqsconsumer.ExhaustedMaximumRetryAttempts, errorMessage: "Message must be shorter than 1024 bytes",
			detail: `{"event_id":"e2","note":"` + strings.Repeat("x", 2000) + `"}`,
			target: func(t *testing.T, b *Bus) (MessageSender, string) {
				q := newTestSQSQueue(t, SQSQueueConfig{Name: "body-" + strings.ReplaceAll(t.Name(), "/", "-"), MaximumMessageSize: 1024})
				return q, q.URL()
			}},
		// SQS refuses a body holding U+FFFF (quotas-messages) on the DLQ
		// as on the target: the event cannot be dead-lettered, and AWS
		// drops it (InvocationsFailedToBeSentToDlq).
		{name: "body no queue takes", code: sqsconsumer.RuleErrorInvalidParameter, attempts: 3, dlqRefuses: true,
			detail: "{\"event_id\":\"e2\",\"note\":\"bad \uFFFF char\"}",
			target: func(t *testing.T, b *Bus) (MessageSender, string) {
				q := newTestSQSQueue(t, SQSQueueConfig{Name: "char-" + strings.ReplaceAll(t.Name(), "/", "-")})
				return q, q.URL()
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTestBus(t, func(c *BusConfig) { c.TargetMaxAttempts = 3 })
			dlq := newRuleDLQ(t, b, notifierRule)
			q, u := tc.target(t, b)
			b.SubscribeQueue(testNotifier, q, u)
			detail := tc.detail
			if detail == "" {
				detail = `{"event_id":"e1"}`
			}
			out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, detail)}})
			if err != nil || out.FailedEntryCount != 0 {
				t.Fatalf("PutEvents: %v %+v", err, out)
			}
			waitIdle(t, b)
			sent, refused := int64(1), int64(0)
			if tc.dlqRefuses {
				sent, refused = 0, 1
			}
			if st := b.Stats(); st.Attempts[testNotifier] != int64(tc.attempts) || st.SentToDLQ[testNotifier] != sent || st.FailedToDLQ[testNotifier] != refused {
				t.Errorf("stats: %d attempts (want %d), %d sent to the DLQ (want %d), %d refused by it (want %d)",
					st.Attempts[testNotifier], tc.attempts, st.SentToDLQ[testNotifier], sent, st.FailedToDLQ[testNotifier], refused)
			}
			if tc.dlqRefuses {
				if dlq.Len() != 0 || len(b.DeadLetters()) != 1 || b.DeadLetters()[0].ErrorCode != tc.code {
					t.Errorf("DLQ %d messages, dead letters %+v", dlq.Len(), b.DeadLetters())
				}
				return
			}
			msgs, err := dlq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq.URL()), MaxNumberOfMessages: 10,
				MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
			if err != nil || len(msgs.Messages) != 1 {
				t.Fatalf("rule DLQ: %v, %d messages, want 1", err, len(msgs.Messages))
			}
			m := msgs.Messages[0]
			if evs := b.Events(); len(evs) != 1 || aws.ToString(m.Body) != string(evs[0]) {
				t.Errorf("DLQ body %s is not the event JSON %s", aws.ToString(m.Body), evs)
			}
			wantTarget := b.queueARN(u)
			for name, want := range map[string]string{
				sqsconsumer.AttrRuleARN:       b.RuleARN(notifierRule),
				sqsconsumer.AttrTargetARN:     wantTarget,
				sqsconsumer.AttrErrorCode:     tc.code,
				sqsconsumer.AttrRetryAttempts: []string{"0", "1", "2"}[tc.attempts-1],
			} {
				if got, _ := attr(m, name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if got, _ := attr(m, sqsconsumer.AttrErrorMessage); !strings.Contains(got, tc.errorMessage) {
				t.Errorf("%s = %q, want it to say %q", sqsconsumer.AttrErrorMessage, got, tc.errorMessage)
			}
			got, ok := attr(m, sqsconsumer.AttrExhaustedRetryCondition)
			if tc.exhausted == "" && ok || got != tc.exhausted {
				t.Errorf("%s = %q (present %v), want %q", sqsconsumer.AttrExhaustedRetryCondition, got, ok, tc.exhausted)
			}
			if s := m.Attributes[AttrSenderID]; s != EventBridgeSenderID {
				t.Errorf("SenderId %q, want the local EventBridge's %q", s, EventBridgeSenderID)
			}
			if dls := b.DeadLetters(); len(dls) != 1 || dls[0].DLQMessageID != aws.ToString(m.MessageId) || dls[0].ErrorCode != tc.code || dls[0].TargetARN != wantTarget {
				t.Errorf("dead letters %+v", dls)
			}
		})
	}
}

// A rule DLQ whose policy admits its rule only (SQSQueueConfig.OnlySourceArns,
// the statement deadletter.AcceptOnlyFrom writes) refuses every other
// sender with AccessDenied — a principal's own send (no aws:SourceArn),
// another rule's, and every request through the AWS front (HTTP 403) —
// and answers its policy in GetQueueAttributes, which
// sqsconsumer.CheckRuleDLQPolicy accepts for that rule only. When the DLQ
// refuses the bus too, the dead letter is counted as FailedToDLQ (on AWS
// it would be dropped).
func TestRuleDLQAcceptsOnlyItsRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newTestBus(t, func(c *BusConfig) { c.TargetMaxAttempts = 1 })
	dlq := newRuleDLQ(t, b, notifierRule)
	send := func(ctx context.Context) error {
		_, err := dlq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(`{"planted":true}`)})
		return err
	}
	for name, c := range map[string]context.Context{
		"a principal":  WithSenderID(ctx, FunctionSenderID("intruder")),
		"another rule": WithSourceARN(ctx, b.RuleARN("ledger-order-payments")),
	} {
		var ae smithy.APIError
		if err := send(c); !errors.As(err, &ae) || ae.ErrorCode() != ErrorCodeAccessDenied {
			t.Errorf("send by %s: %v, want AccessDenied", name, err)
		}
	}
	if err := send(WithSourceARN(ctx, b.RuleARN(notifierRule))); err != nil {
		t.Errorf("send for the rule: %v", err)
	}

	front, err := NewAWSFront(AWSFrontConfig{Queues: []FrontQueue{dlq}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	client := sqs.NewFromConfig(dynoxide.AWSConfig(srv.URL))
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(`{"planted":true}`)})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != ErrorCodeAccessDenied {
		t.Errorf("send through the AWS front: %v, want AccessDenied", err)
	}
	if dlq.Len() != 1 {
		t.Fatalf("the DLQ holds %d messages, want only the rule's", dlq.Len())
	}
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq.URL()), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNamePolicy}})
	if err != nil {
		t.Fatal(err)
	}
	policy := attrs.Attributes[string(sqstypes.QueueAttributeNamePolicy)]
	if err := sqsconsumer.CheckRuleDLQPolicy(policy, dlq.ARN(), b.RuleARN(notifierRule)); err != nil {
		t.Errorf("the DLQ's policy %s does not prove its rule: %v", policy, err)
	}
	if err := sqsconsumer.CheckRuleDLQPolicy(policy, dlq.ARN(), b.RuleARN("ledger-order-payments")); !errors.Is(err, sqsconsumer.ErrRuleDLQNotRestricted) {
		t.Errorf("the DLQ's policy proves another rule: %v", err)
	}

	// A DLQ that refuses the bus: counted, kept in DeadLetters.
	other := newTestSQSQueue(t, SQSQueueConfig{Name: "other-rule-dlq", OnlySourceArns: []string{b.RuleARN("ledger-order-payments")}})
	if err := b.SetDeadLetterQueue(notifierRule, other, other.URL()); err != nil {
		t.Fatal(err)
	}
	if err := b.SetDeadLetterQueue("no-such-rule", other, other.URL()); err == nil {
		t.Error("SetDeadLetterQueue accepted a rule the bus does not have")
	}
	b.SubscribeQueue(testNotifier, dlq, "https://sqs.us-east-1.amazonaws.com/000000000000/deleted")
	if _, err := b.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, `{"event_id":"e3"}`)}}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, b)
	if st := b.Stats(); st.FailedToDLQ[testNotifier] != 1 || st.SentToDLQ[testNotifier] != 0 || other.Len() != 0 || len(b.DeadLetters()) != 1 || b.DeadLetters()[0].DLQMessageID != "" {
		t.Errorf("a DLQ refusing the bus: stats %+v, DLQ %d messages, dead letters %+v", st, other.Len(), b.DeadLetters())
	}
}
