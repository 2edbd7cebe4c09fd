package stack

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Issue 23 (operations on AWS, security) and issue 22 item 4 (consumers that
// scale), checked on the synthesized templates.

// topicIn returns the logical id of the one SNS topic of s.
func topicIn(t *testing.T, s *synthesized) string {
	t.Helper()
	topics := s.ofType("AWS::SNS::Topic")
	if len(topics) != 1 {
		t.Fatalf("%s: %d SNS topics, want 1 (the alarm topic)", *s.stack.Stack.StackName(), len(topics))
	}
	return topics[0]
}

// checkEveryAlarmNotifies fails for every alarm of s whose ALARM and OK
// actions are not exactly [topic].
func checkEveryAlarmNotifies(t *testing.T, s *synthesized, topic any) {
	t.Helper()
	alarms := append(s.ofType("AWS::CloudWatch::Alarm"), s.ofType("AWS::CloudWatch::CompositeAlarm")...)
	if len(alarms) == 0 {
		t.Fatalf("%s: no alarms", *s.stack.Stack.StackName())
	}
	for _, id := range alarms {
		p := s.props(t, id)
		for _, k := range []string{"AlarmActions", "OKActions"} {
			if !jsonEqual(t, p[k], []any{topic}) {
				t.Errorf("%s: alarm %s %s = %v, want [the alarm topic %v]", *s.stack.Stack.StackName(), id, k, p[k], topic)
			}
		}
	}
}

// GIVEN the default stack, the custom stack (customer managed key), the
// outbox construct alone given a topic, and the construct alone given none
// WHEN their alarms are read
// THEN every AWS::CloudWatch::Alarm notifies the one alarm topic on ALARM and
// on OK; the stacks output the topic's ARN; the construct alone creates its
// own topic; a stack can use an existing topic by ARN instead of creating one.
func TestEveryAlarmNotifiesTheAlarmTopic(t *testing.T) {
	for _, s := range []*synthesized{def, custom} {
		topic := ref(topicIn(t, s))
		checkEveryAlarmNotifies(t, s, topic)
		outs, _ := s.json["Outputs"].(map[string]any)
		if !jsonEqual(t, get(outs, "AlarmTopicArn", "Value"), topic) {
			t.Errorf("%s: output AlarmTopicArn = %v, want the topic", *s.stack.StackName(), get(outs, "AlarmTopicArn"))
		}
	}
	checkEveryAlarmNotifies(t, dropIn, ref(topicIn(t, dropIn)))

	// the construct alone, no topic given: it creates one
	bare := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Bare"), nil)
	if _, err := outboxcdk.New(bare, "Outbox", outboxcdk.Props{EventBus: awsevents.NewEventBus(bare, jsii.String("Bus"), nil), AssetRoot: assetRoot, EventSource: "com.example.test"}); err != nil {
		t.Fatal(err)
	}
	alone, err := synth(&OrdersStack{Stack: bare})
	if err != nil {
		t.Fatal(err)
	}
	checkEveryAlarmNotifies(t, alone, ref(topicIn(t, alone)))

	// an existing topic by ARN: nothing created, every alarm notifies it
	const existing = "arn:aws:sns:eu-west-1:123456789012:ops-alarms"
	st, err := NewOrdersStack(awscdk.NewApp(nil), "ExistingTopic", OrdersStackProps{AssetRoot: assetRoot, AlarmTopicArn: existing})
	if err != nil {
		t.Fatal(err)
	}
	imported, err := synth(st)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(imported.ofType("AWS::SNS::Topic")); n != 0 {
		t.Errorf("stack with AlarmTopicArn created %d topics", n)
	}
	checkEveryAlarmNotifies(t, imported, existing)
}

// GIVEN the default stack (no customer managed key) and the custom stack
// (one)
// WHEN the alarm topic is read
// THEN it accepts TLS requests only; with the key it is encrypted with it
// and the key policy lets CloudWatch alarms of this account and region use
// it (CloudWatch cannot publish to a topic under the AWS managed key aws/sns,
// so the default topic stays unencrypted, cdk-nag's finding suppressed with
// its reason).
func TestAlarmTopicEncryptionFollowsTheKeyMode(t *testing.T) {
	for _, s := range []*synthesized{def, custom} {
		topic := topicIn(t, s)
		tls := false
		for _, pid := range s.ofType("AWS::SNS::TopicPolicy") {
			p := s.props(t, pid)
			if mentions(t, p["Topics"], topic) && mentions(t, p["PolicyDocument"], "aws:SecureTransport") {
				tls = true
			}
		}
		if !tls {
			t.Errorf("%s: alarm topic has no TLS-only policy", *s.stack.StackName())
		}
	}
	if k := def.props(t, topicIn(t, def))["KmsMasterKeyId"]; k != nil {
		t.Errorf("default alarm topic KmsMasterKeyId = %v, want none", k)
	}
	key := custom.ofType("AWS::KMS::Key")[0]
	if k := custom.props(t, topicIn(t, custom))["KmsMasterKeyId"]; !jsonEqual(t, k, getAtt(key, "Arn")) {
		t.Errorf("custom alarm topic KmsMasterKeyId = %v, want the stack key", k)
	}
	var cw any
	for _, st := range policyStatements(custom.props(t, key)["KeyPolicy"]) {
		if get(st, "Sid") == outboxcdk.KeyForCloudWatchStatementID {
			cw = st
		}
	}
	if cw == nil || !jsonEqual(t, get(cw, "Principal"), map[string]any{"Service": "cloudwatch.amazonaws.com"}) ||
		!jsonEqual(t, sortedActions(toStrings(strs(get(cw, "Action")))), sortedActions(outboxcdk.CloudWatchKeyActions)) ||
		!jsonEqual(t, get(cw, "Condition", "StringEquals", "aws:SourceAccount"), ref("AWS::AccountId")) ||
		!mentions(t, get(cw, "Condition", "ArnLike", "aws:SourceArn"), ":alarm:*") {
		t.Errorf("key statement for CloudWatch = %v", normalize(t, cw))
	}
}

// toStrings converts a list of JSON strings.
func toStrings(l []any) []string {
	out := make([]string, 0, len(l))
	for _, v := range l {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// GIVEN every EventBridge rule of the default, custom and drop-in templates
// (the consumer rules on the custom bus, the reconciler's schedule on the
// default bus)
// WHEN the alarms are read
// THEN each rule has one alarm on AWS/Events FailedInvocations and one on
// InvocationsFailedToBeSentToDlq (Sum >= 1), with the dimensions EventBridge
// publishes for it (RuleName, plus EventBusName on a custom bus), and a
// target DLQ that is alarmed at one visible message.
func TestEveryRuleAlarmsOnFailedDeliveries(t *testing.T) {
	for _, s := range []*synthesized{def, custom, dropIn} {
		rules := s.ofType("AWS::Events::Rule")
		if len(rules) == 0 {
			t.Fatal("no rules")
		}
		for _, id := range rules {
			rp := s.props(t, id)
			want := []any{map[string]any{"Name": "RuleName", "Value": ref(id)}}
			if bus := rp["EventBusName"]; bus != nil {
				want = append([]any{map[string]any{"Name": "EventBusName", "Value": bus}}, want...)
			}
			for _, metric := range []string{outboxcdk.MetricFailedInvocations, outboxcdk.MetricInvocationsFailedToBeSentToDlq} {
				var found []map[string]any
				for _, aid := range s.ofType("AWS::CloudWatch::Alarm") {
					p := s.props(t, aid)
					if p["Namespace"] != "AWS/Events" || p["MetricName"] != metric {
						continue
					}
					dims, _ := p["Dimensions"].([]any)
					sort.Slice(dims, func(i, j int) bool { return fmt.Sprint(get(dims[i], "Name")) < fmt.Sprint(get(dims[j], "Name")) })
					if jsonEqual(t, dims, want) {
						found = append(found, p)
					}
				}
				if len(found) != 1 || found[0]["Threshold"] != float64(1) || found[0]["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || found[0]["Statistic"] != "Sum" {
					t.Errorf("%s rule %s: %s alarms %v, want one at Sum >= 1 with dimensions %v", *s.stack.StackName(), id, metric, found, want)
				}
			}
			targets, _ := rp["Targets"].([]any)
			for i, tg := range targets {
				dlq, _ := get(tg, "DeadLetterConfig", "Arn", "Fn::GetAtt", 0).(string)
				if dlq == "" || s.res[dlq]["Type"] != "AWS::SQS::Queue" {
					t.Errorf("%s rule %s target %d has no DLQ: %v", *s.stack.StackName(), id, i, get(tg, "DeadLetterConfig"))
					continue
				}
				if a := alarmsOn(t, s, "AWS/SQS", "ApproximateNumberOfMessagesVisible", getAtt(dlq, "QueueName")); len(a) != 1 {
					t.Errorf("%s rule %s: DLQ %s has %d depth alarms, want 1", *s.stack.StackName(), id, dlq, len(a))
				}
			}
		}
	}
}

// denyOf returns the queue policy statements of queue qid in s whose Sid is
// deadletter.OnlySourceSendsStatementID.
func denyOf(t *testing.T, s *synthesized, qid string) []any {
	t.Helper()
	var out []any
	for _, pid := range s.ofType("AWS::SQS::QueuePolicy") {
		p := s.props(t, pid)
		if !jsonEqual(t, p["Queues"], []any{ref(qid)}) {
			continue
		}
		for _, st := range policyStatements(p["PolicyDocument"]) {
			if get(st, "Sid") == deadletter.OnlySourceSendsStatementID {
				out = append(out, st)
			}
		}
	}
	return out
}

// checkOnlySourceSends fails unless queue qid's policy holds one Deny of
// sqs:SendMessage to every principal whose request matches none of the
// senders: by aws:SourceArn (sources), or by aws:PrincipalArn for requests
// that carry one (principals).
func checkOnlySourceSends(t *testing.T, s *synthesized, what, qid string, principals, sources []any) {
	t.Helper()
	sts := denyOf(t, s, qid)
	if len(sts) != 1 {
		t.Errorf("%s %s: %d %s statements, want 1", *s.stack.StackName(), what, len(sts), deadletter.OnlySourceSendsStatementID)
		return
	}
	notFrom := map[string]any{}
	cond := map[string]any{"ArnNotEquals": notFrom}
	if sources != nil {
		notFrom["aws:SourceArn"] = sources
	}
	if principals != nil {
		notFrom["aws:PrincipalArn"] = principals
	}
	if sources == nil {
		cond["Null"] = map[string]any{"aws:PrincipalArn": "false"}
	}
	want := map[string]any{
		"Effect":    "Deny",
		"Principal": map[string]any{"AWS": "*"},
		"Action":    "sqs:SendMessage",
		"Resource":  getAtt(qid, "Arn"),
		"Condition": cond,
	}
	for k, v := range want {
		if !jsonEqual(t, get(sts[0], k), v) {
			t.Errorf("%s %s: deny %s = %v, want %v", *s.stack.StackName(), what, k, normalize(t, get(sts[0], k)), normalize(t, v))
		}
	}
}

// GIVEN the default and the custom stack and the construct alone
// WHEN each dead-letter queue's policy and attributes are read
// THEN every DLQ denies sqs:SendMessage to all but its own source: a
// consumer DLQ to all but the consumer's role (a request without a
// principal ARN, SQS's own redrive move, is not matched), a rule DLQ to all
// but its rule, the parked-records queue to all but the relay's and the
// reconciler's roles, the stream and reconciler on-failure queues to all but
// the relay's and the reconciler's role, the schedule's DLQ to all but the
// schedule; every DLQ but the consumer DLQs (SQS redrive targets) refuses to
// be any queue's redrive target; and no DLQ is left without the statement.
func TestDLQsAcceptOnlyTheirSource(t *testing.T) {
	for _, s := range []*synthesized{def, custom} {
		st := s.stack
		ob := st.Outbox
		relay := getAtt(roleOf(t, s, s.id(ob.Relay)), "Arn")
		reconciler := getAtt(roleOf(t, s, s.id(ob.Reconciler)), "Arn")
		checked := map[string]bool{}
		check := func(what, qid string, principals, sources []any, redriveTarget bool) {
			t.Helper()
			checked[qid] = true
			checkOnlySourceSends(t, s, what, qid, principals, sources)
			allow := get(s.props(t, qid), "RedriveAllowPolicy")
			if redriveTarget {
				if allow != nil {
					t.Errorf("%s %s: RedriveAllowPolicy = %v on a consumer DLQ", *st.StackName(), what, allow)
				}
			} else if !jsonEqual(t, allow, map[string]any{"redrivePermission": "denyAll"}) {
				t.Errorf("%s %s: RedriveAllowPolicy = %v, want denyAll", *st.StackName(), what, allow)
			}
		}
		for name, c := range st.Consumers {
			check("consumer "+name+" DLQ", s.id(c.DLQ.Queue), []any{getAtt(roleOf(t, s, s.id(c.Function)), "Arn")}, nil, true)
		}
		for name, q := range st.RuleDLQs {
			check("rule "+name+" DLQ", s.id(q.Queue), nil, []any{getAtt(s.id(st.Rules[name]), "Arn")}, false)
		}
		for name, c := range st.Consumers {
			if r := c.Resequencer; r != nil {
				check("consumer "+name+" sweep DLQ", s.id(r.SweepDLQ.Queue), nil, []any{getAtt(s.id(r.SweepSchedule), "Arn")}, false)
			}
		}
		check("parked-records queue", s.id(ob.ParkedQueue.Queue), []any{relay, reconciler}, nil, false)
		check("stream on-failure queue", s.id(ob.StreamFailureQueue.Queue), []any{relay}, nil, false)
		check("reconciler on-failure queue", s.id(ob.ReconcilerFailureQueue.Queue), []any{reconciler}, nil, false)
		schedule := s.id(ob.ReconcileSchedule)
		scheduleDLQ, _ := get(s.props(t, schedule), "Targets", 0, "DeadLetterConfig", "Arn", "Fn::GetAtt", 0).(string)
		if scheduleDLQ == "" {
			t.Errorf("%s: the reconciler's schedule has no target DLQ", *st.StackName())
		} else {
			check("schedule DLQ", scheduleDLQ, nil, []any{getAtt(schedule, "Arn")}, false)
		}
		// the class: every queue that is not a consumer queue is a DLQ
		consumerQueues := map[string]bool{}
		for _, c := range st.Consumers {
			consumerQueues[s.id(c.Queue)] = true
		}
		for _, qid := range s.ofType("AWS::SQS::Queue") {
			if !consumerQueues[qid] && !checked[qid] {
				t.Errorf("%s: dead-letter queue %s is not checked here: give it AcceptOnlyFrom", *st.StackName(), qid)
			}
		}
	}
}

// GIVEN the custom stack with a customer managed key
// WHEN the key policy is read
// THEN no statement lets events.amazonaws.com use the key without a
// condition or with wildcard actions: the only one (KeyForEventBridgeStatementID)
// allows kms:Decrypt and kms:GenerateDataKey for data keys of SQS queues of
// this account and region (kms:EncryptionContext:aws:sqs:arn). Besides it,
// only the archive's two statements, which the CDK writes as AWS documents
// them for archives (encryption-archives: kms:DescribeKey, and
// kms:Decrypt, kms:GenerateDataKey, kms:ReEncrypt* only under this bus's
// encryption context), checked exactly by TestArchiveKeepsEveryOutboxEvent.
func TestEventBridgeKeyGrantIsScoped(t *testing.T) {
	key := custom.ofType("AWS::KMS::Key")[0]
	var eb []any
	bus := getAtt(custom.id(custom.stack.Bus), "Arn")
	for _, st := range policyStatements(custom.props(t, key)["KeyPolicy"]) {
		archive := jsonEqual(t, get(st, "Action"), "kms:DescribeKey") ||
			jsonEqual(t, get(st, "Action"), []any{"kms:Decrypt", "kms:GenerateDataKey", "kms:ReEncrypt*"}) &&
				jsonEqual(t, get(st, "Condition", "StringEquals", "kms:EncryptionContext:aws:events:event-bus:arn"), bus)
		if mentions(t, get(st, "Principal"), "events.amazonaws.com") && !archive {
			eb = append(eb, st)
		}
	}
	if len(eb) != 1 {
		t.Fatalf("%d key statements for events.amazonaws.com, want 1: %v", len(eb), normalize(t, eb))
	}
	st := eb[0]
	if get(st, "Sid") != KeyForEventBridgeStatementID {
		t.Errorf("statement Sid = %v", get(st, "Sid"))
	}
	if got := sortedActions(toStrings(strs(get(st, "Action")))); !slices.Equal(got, sortedActions([]string{"kms:Decrypt", "kms:GenerateDataKey"})) {
		t.Errorf("EventBridge key actions = %v", got)
	}
	cond := get(st, "Condition", "StringLike", "kms:EncryptionContext:aws:sqs:arn")
	if !mentions(t, cond, ":sqs:") || !mentions(t, cond, "AWS::AccountId") || !mentions(t, cond, "AWS::Region") || !strings.HasSuffix(fmt.Sprint(normalize(t, cond)), ":*]]]") {
		t.Errorf("EventBridge key condition = %v, want kms:EncryptionContext:aws:sqs:arn like arn:<partition>:sqs:<region>:<account>:*", normalize(t, get(st, "Condition")))
	}
}

// GIVEN the default stack
// WHEN the consumers' SQS event source mappings are read
// THEN their MaximumConcurrency carries 1,000 events/s even if each message
// took 17 ms alone, at 80 % use (issue 22: the default configuration
// sustains >= 1,000 events/s); the functions reserve nothing by default
// (issue 32), and a consumer that reserves (RecommendedReservations) is
// checked against its mapping's peak by TestReservedConcurrency.
func TestConsumerMappingsCarryTheTargetRate(t *testing.T) {
	const target, perMessage, utilisation = 1000.0, 0.017, 0.8
	for name, c := range def.stack.Consumers {
		fn := def.id(c.Function)
		mc, _ := get(def.props(t, mappingOf(t, def, fn)), "ScalingConfig", "MaximumConcurrency").(float64)
		if mc/perMessage*utilisation < target {
			t.Errorf("%s: MaximumConcurrency %v carries %.0f events/s at %.0f %% use, want >= %.0f", name, mc, mc/perMessage*utilisation, utilisation*100, target)
		}
		if want := math.Ceil(target * perMessage / utilisation); mc != want {
			t.Errorf("%s: MaximumConcurrency %v, want the sizing ceil(%v × %v ÷ %v) = %v", name, mc, target, perMessage, utilisation, want)
		}
		if r, ok := def.props(t, fn)["ReservedConcurrentExecutions"].(float64); ok && r < mc {
			t.Errorf("%s: reserved concurrency %v below MaximumConcurrency %v", name, r, mc)
		}
	}
	if rec := (OrdersStackProps{}).RecommendedReservations(); rec["ledger"] != config.DefaultConsumerMaxConcurrency {
		t.Errorf("recommended reservation of a consumer = %d, want its peak %d", rec["ledger"], config.DefaultConsumerMaxConcurrency)
	}
}
