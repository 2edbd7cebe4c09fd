package sqsconsumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

const (
	testRuleARN  = "arn:aws:events:us-east-1:000000000000:rule/orders-bus/notifier-order-events"
	otherRuleARN = "arn:aws:events:us-east-1:000000000000:rule/orders-bus/ledger-order-payments"
	testSource   = "com.example.orders" // eventBody's source
)

// policyOf is a queue policy document holding stmts.
func policyOf(stmts ...map[string]any) string {
	b, _ := json.Marshal(map[string]any{"Version": "2012-10-17", "Statement": stmts})
	return string(b)
}

// onlyRule is the statement deadletter.AcceptOnlyFrom(SourceArns: the rule)
// writes, as CloudFormation renders it; mut adjusts a copy.
func onlyRule(dlqARN string, mut func(map[string]any)) map[string]any {
	s := map[string]any{
		"Sid": "OnlyTheSourceSends", "Effect": "Deny", "Principal": map[string]any{"AWS": "*"},
		"Action": "sqs:SendMessage", "Resource": dlqARN,
		"Condition": map[string]any{"ArnNotEquals": map[string]any{"aws:SourceArn": testRuleARN}},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

// TestCheckRuleDLQPolicy: only a Deny of sqs:SendMessage on the DLQ to every
// request whose aws:SourceArn is not the rule proves that EventBridge, for
// that rule, sent what the DLQ holds; the Allow EventBridge's user guide
// shows (eb-rule-dlq, "Granting permissions to the dead-letter queue")
// leaves the account's principals free to send, and anything that narrows
// the Deny (another source, IfExists, a second condition, NotPrincipal, a
// principal, another action or queue) proves nothing.
func TestCheckRuleDLQPolicy(t *testing.T) {
	t.Parallel()
	const dlqARN = "arn:aws:sqs:us-east-1:000000000000:notifier-rule-dlq"
	allowEvents := map[string]any{"Effect": "Allow", "Principal": map[string]any{"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
		"Resource": dlqARN, "Condition": map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": testRuleARN}}}
	tlsOnly := map[string]any{"Effect": "Deny", "Principal": map[string]any{"AWS": "*"}, "Action": "sqs:*", "Resource": dlqARN,
		"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}}}
	single, _ := json.Marshal(map[string]any{"Statement": onlyRule(dlqARN, nil)})
	tests := []struct {
		name, policy string
		ok           bool
	}{
		{"the stack's policy", policyOf(allowEvents, tlsOnly, onlyRule(dlqARN, nil)), true},
		{"one statement, not a list", string(single), true},
		{"Principal *, sqs:*, values as a list, key in another case", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["Principal"], s["Action"] = "*", []string{"sqs:ReceiveMessage", "SQS:*"}
			s["Condition"] = map[string]any{"ArnNotLike": map[string]any{"AWS:SourceArn": []string{testRuleARN}}}
		})), true},
		{"resource wildcard", policyOf(onlyRule(dlqARN, func(s map[string]any) { s["Resource"] = "arn:aws:sqs:*:000000000000:notifier-*" })), true},
		{"no policy", "", false},
		{"EventBridge's Allow only", policyOf(allowEvents, tlsOnly), false},
		{"another rule", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["Condition"] = map[string]any{"ArnNotEquals": map[string]any{"aws:SourceArn": otherRuleARN}}
		})), false},
		{"two sources", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["Condition"] = map[string]any{"ArnNotEquals": map[string]any{"aws:SourceArn": []string{testRuleARN, otherRuleARN}}}
		})), false},
		{"wildcard source", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["Condition"] = map[string]any{"ArnNotLike": map[string]any{"aws:SourceArn": "arn:aws:events:us-east-1:000000000000:rule/*"}}
		})), false},
		{"IfExists", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["Condition"] = map[string]any{"ArnNotEqualsIfExists": map[string]any{"aws:SourceArn": testRuleARN}}
		})), false},
		{"a second condition", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["Condition"] = map[string]any{"ArnNotEquals": map[string]any{"aws:SourceArn": testRuleARN}, "Null": map[string]any{"aws:PrincipalArn": "false"}}
		})), false},
		{"NotPrincipal", policyOf(onlyRule(dlqARN, func(s map[string]any) {
			s["NotPrincipal"] = map[string]any{"AWS": "arn:aws:iam::000000000000:role/ops"}
		})), false},
		{"one principal", policyOf(onlyRule(dlqARN, func(s map[string]any) { s["Principal"] = map[string]any{"AWS": "arn:aws:iam::000000000000:role/x"} })), false},
		{"another action", policyOf(onlyRule(dlqARN, func(s map[string]any) { s["Action"] = "sqs:ReceiveMessage" })), false},
		{"another queue", policyOf(onlyRule(dlqARN, func(s map[string]any) { s["Resource"] = "arn:aws:sqs:us-east-1:000000000000:other" })), false},
		{"Allow instead of Deny", policyOf(onlyRule(dlqARN, func(s map[string]any) { s["Effect"] = "Allow" })), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := sqsconsumer.CheckRuleDLQPolicy(tc.policy, dlqARN, testRuleARN)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v\n%s", err, tc.policy)
			}
			if !tc.ok && !errors.Is(err, sqsconsumer.ErrRuleDLQNotRestricted) {
				t.Fatalf("err = %v, want ErrRuleDLQNotRestricted\n%s", err, tc.policy)
			}
		})
	}
	if err := sqsconsumer.CheckRuleDLQPolicy("{not json", dlqARN, testRuleARN); err == nil || errors.Is(err, sqsconsumer.ErrRuleDLQNotRestricted) {
		t.Errorf("a policy that is not JSON: %v", err)
	}
}

// ruleMessage is a rule DLQ message as EventBridge sends it (eb-rule-dlq).
func ruleMessage(ruleARN, targetARN string) map[string]sqstypes.MessageAttributeValue {
	str := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return map[string]sqstypes.MessageAttributeValue{
		sqsconsumer.AttrRuleARN: str(ruleARN), sqsconsumer.AttrTargetARN: str(targetARN),
		sqsconsumer.AttrErrorCode: str(sqsconsumer.RuleErrorNoPermissions), sqsconsumer.AttrErrorMessage: str("access denied"),
		sqsconsumer.AttrRetryAttempts: str("0"),
	}
}

// TestRuleProvenanceProves: a rule DLQ message is the rule's dead letter
// only when its RULE_ARN and TARGET_ARN are the rule's and the consumer
// queue's, no redrive policy moved it there, and its body is an EventBridge
// event of the outbox's source as a consumer decodes it.
func TestRuleProvenanceProves(t *testing.T) {
	t.Parallel()
	const queueARN = "arn:aws:sqs:us-east-1:000000000000:notifier"
	p := sqsconsumer.RuleProvenance{RuleARN: testRuleARN, TargetARN: queueARN, Source: testSource}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	rule := func(ruleARN, targetARN string) *sqsconsumer.RuleDelivery {
		return &sqsconsumer.RuleDelivery{RuleARN: ruleARN, TargetARN: targetARN, ErrorCode: sqsconsumer.RuleErrorNoResource}
	}
	good := eventBody("OrderPaid")
	tests := []struct {
		name string
		d    sqsconsumer.DeadLetter
		why  string // "" when proven
	}{
		{"the rule's dead letter", sqsconsumer.DeadLetter{Body: good, Rule: rule(testRuleARN, queueARN)}, ""},
		{"moved by a redrive policy", sqsconsumer.DeadLetter{Body: good, Rule: rule(testRuleARN, queueARN), SourceQueueARN: queueARN}, "redrive policy"},
		{"no attributes", sqsconsumer.DeadLetter{Body: good}, "not a dead letter of EventBridge"},
		{"another rule", sqsconsumer.DeadLetter{Body: good, Rule: rule(otherRuleARN, queueARN)}, "is not the rule"},
		{"no RULE_ARN", sqsconsumer.DeadLetter{Body: good, Rule: rule("", queueARN)}, "RULE_ARN none given is not the rule"},
		{"another target", sqsconsumer.DeadLetter{Body: good, Rule: rule(testRuleARN, "arn:aws:sqs:us-east-1:000000000000:ledger")}, "is not the queue"},
		{"another source", sqsconsumer.DeadLetter{Body: strings.Replace(good, testSource, "com.attacker", 1), Rule: rule(testRuleARN, queueARN)}, `source "com.attacker"`},
		{"not JSON", sqsconsumer.DeadLetter{Body: "hello", Rule: rule(testRuleARN, queueARN)}, "not an EventBridge event"},
		{"two readings of one key", sqsconsumer.DeadLetter{Body: strings.Replace(good, `"source"`, `"Source":"com.attacker","source"`, 1), Rule: rule(testRuleARN, queueARN)}, "not an EventBridge event"},
		{"detail not an object", sqsconsumer.DeadLetter{Body: strings.Replace(good, `"detail":{"event_id":"e-OrderPaid"}`, `"detail":[1]`, 1), Rule: rule(testRuleARN, queueARN)}, "not a JSON object"},
		{"no id", sqsconsumer.DeadLetter{Body: strings.Replace(good, `"id":"ev-OrderPaid"`, `"id":""`, 1), Rule: rule(testRuleARN, queueARN)}, "no id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ok, why := p.Proves(tc.d)
			if ok != (tc.why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("Proves = %v %q, want proven %v and a reason with %q", ok, why, tc.why == "", tc.why)
			}
		})
	}
	for _, bad := range []sqsconsumer.RuleProvenance{
		{TargetARN: queueARN, Source: testSource},
		{RuleARN: queueARN, TargetARN: queueARN, Source: testSource},
		{RuleARN: testRuleARN, TargetARN: testRuleARN, Source: testSource},
		{RuleARN: testRuleARN, TargetARN: queueARN},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
}

// TestRedriveRuleDLQ: Redrive with a RuleProvenance moves the rule's dead
// letters from the rule DLQ (real local queues) to the consumer queue, as
// the rule delivered them (body only), and lists and leaves the rest with
// why: a forged RULE_ARN, a forged TARGET_ARN, another source. Peek shows
// what each message's attributes say.
func TestRedriveRuleDLQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "notifier"})
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "notifier-rule-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	plant := func(body string, attrs map[string]sqstypes.MessageAttributeValue) {
		t.Helper()
		if _, err := dlq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(dlq.URL()), MessageBody: aws.String(body), MessageAttributes: attrs}); err != nil {
			t.Fatal(err)
		}
	}
	good := eventBody("OrderPaid")
	plant(good, ruleMessage(testRuleARN, q.ARN()))
	plant(eventBody("OrderShipped"), ruleMessage(otherRuleARN, q.ARN()))
	plant(eventBody("OrderCancelled"), ruleMessage(testRuleARN, "arn:aws:sqs:us-east-1:000000000000:ledger"))
	plant(strings.Replace(eventBody("OrderPlaced"), testSource, "com.attacker", 1), ruleMessage(testRuleARN, q.ARN()))

	peeked, err := sqsconsumer.Peek(ctx, dlq, dlq.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || len(peeked) != 4 {
		t.Fatalf("Peek: %v, %d messages", err, len(peeked))
	}
	for _, d := range peeked {
		if d.Rule == nil || d.Reason != sqsconsumer.RuleErrorNoPermissions || d.Error != "access denied" || !strings.HasPrefix(d.From(), "rule arn:aws:events:") {
			t.Errorf("peeked %+v (from %s)", d, d.From())
		}
	}

	var moved []string
	res, err := sqsconsumer.Redrive(ctx, attrFilter{dlq}, dlq.URL(), q, q.URL(), sqsconsumer.RedriveOptions{
		From:      sqsconsumer.RuleProvenance{RuleARN: testRuleARN, TargetARN: q.ARN(), Source: testSource},
		OnMessage: func(d sqsconsumer.DeadLetter) { moved = append(moved, d.Body) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || len(moved) != 1 || moved[0] != good {
		t.Fatalf("moved %d: %v, want the rule's dead letter only", res.Moved, moved)
	}
	whys := map[string]bool{}
	for _, l := range res.Left {
		for _, w := range []string{"RULE_ARN " + otherRuleARN, "TARGET_ARN arn:aws:sqs:us-east-1:000000000000:ledger", `source "com.attacker"`} {
			if strings.Contains(l.Why, w) {
				whys[w] = true
			}
		}
	}
	if len(res.Left) != 3 || len(whys) != 3 {
		t.Errorf("left %+v, want the forged rule, the forged target and the other source, each with why", res.Left)
	}
	if dlq.Len() != 3 {
		t.Errorf("the rule DLQ holds %d messages, want the 3 left", dlq.Len())
	}
	out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != good || len(out.Messages[0].MessageAttributes) != 0 {
		t.Fatalf("consumer queue: %v %+v, want the event as the rule delivers it", err, out)
	}
}
