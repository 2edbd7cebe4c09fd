package stack

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// Issue 32 item 1: alarms that can publish.

// topicPolicyStatements returns the statements of every
// AWS::SNS::TopicPolicy of s that names topic (a logical id).
func topicPolicyStatements(t *testing.T, s *synthesized, topic string) []any {
	t.Helper()
	var out []any
	for _, pid := range s.ofType("AWS::SNS::TopicPolicy") {
		p := s.props(t, pid)
		if mentions(t, p["Topics"], topic) {
			out = append(out, policyStatements(p["PolicyDocument"])...)
		}
	}
	return out
}

// GIVEN the default stack, the custom stack (customer managed key) and the
// outbox construct alone in a bare stack (it creates its own topic)
// WHEN the alarm topic's policy is read
// THEN besides the TLS-only Deny it allows sns:Publish on the topic to
// cloudwatch.amazonaws.com, only for alarms of this account and region:
// aws:SourceAccount = the account and aws:SourceArn like
// arn:<partition>:cloudwatch:<region>:<account>:alarm:* (AWS re:Post
// knowledge center cloudwatch-receive-sns-for-alarm-trigger; Amazon SNS
// developer guide sns-access-policy-use-cases). A topic policy replaces
// SNS's default policy, so without this Allow no alarm can publish. No
// other Allow is in the policy.
func TestAlarmTopicLetsTheAccountsAlarmsPublish(t *testing.T) {
	bare := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("BareTopic"), nil)
	if _, err := outboxcdk.New(bare, "Outbox", outboxcdk.Props{EventBus: awsevents.NewEventBus(bare, jsii.String("Bus"), nil), AssetRoot: assetRoot, EventSource: "com.example.test"}); err != nil {
		t.Fatal(err)
	}
	alone, err := synth(&OrdersStack{Stack: bare})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*synthesized{def, custom, alone} {
		name := *s.stack.Stack.StackName()
		topic := topicIn(t, s)
		var allows []any
		for _, st := range topicPolicyStatements(t, s, topic) {
			if get(st, "Effect") == "Allow" {
				allows = append(allows, st)
			}
		}
		if len(allows) != 1 {
			t.Errorf("%s: alarm topic policy has %d Allow statements, want 1 (CloudWatch alarms of this account): %v", name, len(allows), normalize(t, allows))
			continue
		}
		st := allows[0]
		want := map[string]any{
			"Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
			"Action":    "sns:Publish",
			"Resource":  ref(topic),
		}
		for k, v := range want {
			if !jsonEqual(t, get(st, k), v) {
				t.Errorf("%s: alarm topic Allow %s = %v, want %v", name, k, normalize(t, get(st, k)), v)
			}
		}
		if !jsonEqual(t, get(st, "Condition", "StringEquals", "aws:SourceAccount"), ref("AWS::AccountId")) {
			t.Errorf("%s: alarm topic Allow aws:SourceAccount = %v, want the stack's account", name, normalize(t, get(st, "Condition", "StringEquals")))
		}
		src := get(st, "Condition", "ArnLike", "aws:SourceArn")
		for _, part := range []string{":cloudwatch:", "AWS::Partition", "AWS::Region", "AWS::AccountId", ":alarm:*"} {
			if !mentions(t, src, part) {
				t.Errorf("%s: alarm topic Allow aws:SourceArn = %v, want arn:<partition>:cloudwatch:<region>:<account>:alarm:* (missing %q)", name, normalize(t, src), part)
			}
		}
	}
}
