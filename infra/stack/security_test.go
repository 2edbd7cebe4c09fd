package stack

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Props of the custom stack that the tests below check.
var (
	customRouteThrottles = map[string]Throttle{"POST /orders": {RateLimit: 5, BurstLimit: 10}, "GET /orders/{id}": {RateLimit: 50, BurstLimit: 80}}
	// the custom stack's consumers scale in provisioned mode (peak 5 × 10)
	customScaling      = outboxcdk.SQSScaling{Provisioned: &outboxcdk.ProvisionedPollers{Minimum: 2, Maximum: 5}}
	customReservations = map[string]int{APIFunction: 7, outboxcdk.RelayFunction: NoReservedConcurrency, outboxcdk.ReconcilerFunction: NoReservedConcurrency, "ledger": 60}
	breakGlassRole     = "arn:aws:iam::123456789012:role/ddb-outbox-break-glass"
	redriveRole        = "arn:aws:iam::123456789012:role/ddb-outbox-redrive"
	replayRole         = "arn:aws:iam::123456789012:role/ops/ddb-outbox-replay"
)

// policyStatements returns the statements of a policy document value.
func policyStatements(doc any) []any {
	l, _ := get(doc, "Statement").([]any)
	return l
}

// GIVEN the default and the custom stack
// WHEN the bus's resource policy is read
// THEN it holds one statement denying events:PutEvents on the bus to every
// principal whose aws:PrincipalArn is not the relay's or the reconciler's
// role (plus the custom stack's break-glass publisher).
func TestBusPolicyDeniesPutEventsToAllButTheOutboxRoles(t *testing.T) {
	for _, c := range []struct {
		name  string
		s     *synthesized
		extra []any
	}{{"default", def, nil}, {"custom", custom, []any{breakGlassRole}}} {
		s := c.s
		busID := s.id(s.stack.Bus)
		p := s.props(t, busID)
		sts := policyStatements(p["Policy"])
		if len(sts) != 1 {
			t.Fatalf("%s: bus policy = %v, want one statement", c.name, p["Policy"])
		}
		st := sts[0]
		allowed := append([]any{
			getAtt(roleOf(t, s, s.id(s.stack.Outbox.Relay)), "Arn"),
			getAtt(roleOf(t, s, s.id(s.stack.Outbox.Reconciler)), "Arn"),
		}, c.extra...)
		want := map[string]any{
			"Sid":       outboxcdk.PublishOnlyStatementID,
			"Effect":    "Deny",
			"Principal": map[string]any{"AWS": "*"},
			"Action":    "events:PutEvents",
			"Condition": map[string]any{"ArnNotEquals": map[string]any{"aws:PrincipalArn": allowed}},
		}
		for k, v := range want {
			if !jsonEqual(t, get(st, k), v) {
				t.Errorf("%s: bus policy %s = %v, want %v", c.name, k, normalize(t, get(st, k)), normalize(t, v))
			}
		}
		// the resource is this bus, by its name (not GetAtt: no self-reference)
		if name, _ := p["Name"].(string); name == "" || !mentions(t, get(st, "Resource"), ":event-bus/") || !mentions(t, get(st, "Resource"), name) {
			t.Errorf("%s: bus policy Resource = %v, want the ARN of bus %v", c.name, get(st, "Resource"), p["Name"])
		}
	}
	// no role but the relay's and the reconciler's may publish
	relay, reconciler := roleOf(t, def, def.id(def.stack.Outbox.Relay)), roleOf(t, def, def.id(def.stack.Outbox.Reconciler))
	for _, st := range statements(t, def) {
		if slices.Contains(st.actions, "events:PutEvents") && st.role != relay && st.role != reconciler {
			t.Errorf("role %s may call events:PutEvents", st.role)
		}
	}
}

// GIVEN the default and the custom stack (with a redrive role)
// WHEN each consumer queue's policy is read
// THEN EventBridge may send for the consumer's rules only (Allow with
// aws:SourceArn), and an explicit Deny refuses sqs:SendMessage (and nothing
// else: the event source mapping must still receive and delete) to any
// request that is neither from one of those rules nor from a redrive role.
func TestConsumerQueuesOnlyAcceptTheirRules(t *testing.T) {
	for _, c := range []struct {
		name    string
		s       *synthesized
		redrive []any
	}{{"default", def, nil}, {"custom", custom, []any{redriveRole}}} {
		s := c.s
		for _, name := range consumerNames {
			q := s.stack.Consumers[name].Queue
			qid := s.id(q)
			var rules []any
			for _, r := range routing.Rules() {
				if r.Consumer == name {
					rules = append(rules, getAtt(s.id(s.stack.Rules[r.Name]), "Arn"))
				}
			}
			if len(rules) == 0 {
				t.Fatalf("consumer %s has no rule", name)
			}
			if r := s.stack.Consumers[name].Resequencer; r != nil {
				// the ordered consumer's sweep tick schedule
				rules = append([]any{getAtt(s.id(r.SweepSchedule), "Arn")}, rules...)
			}
			var sts []any
			for _, pid := range s.ofType("AWS::SQS::QueuePolicy") {
				p := s.props(t, pid)
				if jsonEqual(t, p["Queues"], []any{ref(qid)}) {
					sts = append(sts, policyStatements(p["PolicyDocument"])...)
				}
			}
			var deny, allow []any
			for _, st := range sts {
				switch {
				case get(st, "Sid") == QueueSendersStatementID:
					deny = append(deny, st)
				case get(st, "Effect") == "Allow" && jsonEqual(t, get(st, "Principal"), map[string]any{"Service": "events.amazonaws.com"}):
					allow = append(allow, st)
				}
			}
			// With SSE-KMS the CDK's statements carry no condition, so the
			// identical ones of several rules merge into one.
			if len(allow) != len(rules) && (s.stack.EncryptionKey == nil || len(allow) == 0) {
				t.Errorf("%s %s: %d EventBridge allow statements, want one per rule (%d)", c.name, name, len(allow), len(rules))
			}
			for _, st := range allow {
				// in every key mode: the stack's rule target keeps the
				// condition where the CDK's SqsQueue dropped it with SSE-KMS
				if !slices.ContainsFunc(rules, func(r any) bool {
					return jsonEqual(t, get(st, "Condition", "ArnEquals", "aws:SourceArn"), r)
				}) {
					t.Errorf("%s %s: EventBridge allowed without a rule's aws:SourceArn: %v", c.name, name, get(st, "Condition"))
				}
			}
			if len(deny) != 1 {
				t.Fatalf("%s %s: %d %s statements, want 1", c.name, name, len(deny), QueueSendersStatementID)
			}
			notFrom := map[string]any{"aws:SourceArn": rules}
			if c.redrive != nil {
				notFrom["aws:PrincipalArn"] = c.redrive
			}
			want := map[string]any{
				"Effect":    "Deny",
				"Principal": map[string]any{"AWS": "*"},
				"Action":    "sqs:SendMessage",
				"Resource":  getAtt(qid, "Arn"),
				"Condition": map[string]any{"ArnNotEquals": notFrom},
			}
			for k, v := range want {
				if !jsonEqual(t, get(deny[0], k), v) {
					t.Errorf("%s %s: deny %s = %v, want %v", c.name, name, k, normalize(t, get(deny[0], k)), normalize(t, v))
				}
			}
		}
	}
}

// GIVEN the default stack (defaults) and the custom stack (api 7, relay and
// reconciler unreserved, ledger 60, consumers in provisioned mode with at
// most 5 pollers, quota 1000)
// WHEN each function's ReservedConcurrentExecutions is read
// THEN the default stack reserves nothing (issue 32: a new account's quota
// leaves nothing to reserve; the recommended reservations are opt-in,
// TestReservedConcurrencyIsOptionalEverywhere), the custom one has exactly
// the configured reservations (functions not named: none), and a consumer
// that reserves has at least its SQS mapping's peak concurrency
// (MaximumConcurrency, or MaximumPollers × 10 in provisioned mode).
func TestReservedConcurrency(t *testing.T) {
	check := func(s *synthesized, want map[string]any) {
		t.Helper()
		fns := map[string]string{
			APIFunction:                  s.id(s.stack.APIFunction),
			outboxcdk.RelayFunction:      s.id(s.stack.Outbox.Relay),
			outboxcdk.ReconcilerFunction: s.id(s.stack.Outbox.Reconciler),
		}
		for _, name := range consumerNames {
			fns[name] = s.id(s.stack.Consumers[name].Function)
		}
		for name, id := range fns {
			got := s.props(t, id)["ReservedConcurrentExecutions"]
			if !jsonEqual(t, got, want[name]) {
				t.Errorf("%s %s: ReservedConcurrentExecutions = %v, want %v", *s.stack.StackName(), name, got, want[name])
			}
			if !slices.Contains(consumerNames, name) || got == nil {
				continue
			}
			esm := s.props(t, mappingOf(t, s, id))
			peak, _ := get(esm, "ScalingConfig", "MaximumConcurrency").(float64)
			if pollers, ok := get(esm, "ProvisionedPollerConfig", "MaximumPollers").(float64); ok {
				peak = pollers * config.SQSProvisionedInvokesPerPoller
			}
			if n, ok := got.(float64); !ok || peak == 0 || n < peak {
				t.Errorf("%s %s: reserved concurrency %v below the mapping's peak concurrency %v", *s.stack.StackName(), name, got, peak)
			}
		}
	}
	check(def, map[string]any{APIFunction: nil, "relay": nil, "reconciler": nil, "ledger": nil, "notifier": nil, "fulfilment": nil})
	check(custom, map[string]any{APIFunction: 7, "relay": nil, "reconciler": nil, "ledger": 60, "notifier": nil, "fulfilment": nil})
	if outboxcdk.ReconcilerReservedConcurrency != 1 {
		t.Errorf("ReconcilerReservedConcurrency = %d, want 1", outboxcdk.ReconcilerReservedConcurrency)
	}
}

// GIVEN per-route throttles in the custom stack
// WHEN the stage is read
// THEN its RouteSettings hold exactly them, the stage waits for the routes,
// and the stage-wide default stays; the default stack has no route settings.
func TestRouteThrottles(t *testing.T) {
	id := custom.ofType("AWS::ApiGatewayV2::Stage")[0]
	p := custom.props(t, id)
	want := map[string]any{}
	for k, th := range customRouteThrottles {
		want[k] = map[string]any{"ThrottlingRateLimit": th.RateLimit, "ThrottlingBurstLimit": th.BurstLimit}
	}
	if !jsonEqual(t, p["RouteSettings"], want) {
		t.Errorf("RouteSettings = %v, want %v", p["RouteSettings"], want)
	}
	if get(p, "DefaultRouteSettings", "ThrottlingRateLimit") != float64(DefaultThrottleRate) {
		t.Errorf("stage-wide throttle = %v", p["DefaultRouteSettings"])
	}
	deps := strs(custom.res[id]["DependsOn"])
	for _, r := range custom.ofType("AWS::ApiGatewayV2::Route") {
		if !slices.Contains(deps, any(r)) {
			t.Errorf("stage does not depend on route %s (DependsOn %v)", r, deps)
		}
	}
	if rs := def.props(t, def.ofType("AWS::ApiGatewayV2::Stage")[0])["RouteSettings"]; rs != nil {
		t.Errorf("default stack RouteSettings = %v, want none", rs)
	}
}

// GIVEN the default and the custom stack
// WHEN the alarms are read
// THEN there is an API 4xx-rate and a 5xx-rate alarm (metric math over the
// HTTP API's 4xx/5xx and Count metrics, the configured threshold) and a
// Throttles alarm on every function.
func TestAbuseAlarms(t *testing.T) {
	rateAlarm := func(s *synthesized, metric string) map[string]any {
		t.Helper()
		var found []map[string]any
		for _, id := range s.ofType("AWS::CloudWatch::Alarm") {
			p := s.props(t, id)
			if mentions(t, p["Metrics"], "100 * errors / requests") && mentions(t, p["Metrics"], `"MetricName":"`+metric+`"`) &&
				mentions(t, p["Metrics"], `"MetricName":"Count"`) && mentions(t, p["Metrics"], "AWS/ApiGateway") {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d API %s rate alarms, want 1", len(found), metric)
		}
		return found[0]
	}
	for _, c := range []struct {
		s       *synthesized
		metric  string
		percent float64
	}{
		{def, "4xx", DefaultAPI4xxRatePercent}, {def, "5xx", DefaultAPI5xxRatePercent},
		{custom, "4xx", 25}, {custom, "5xx", DefaultAPI5xxRatePercent},
	} {
		p := rateAlarm(c.s, c.metric)
		if p["Threshold"] != c.percent || p["ComparisonOperator"] != "GreaterThanThreshold" {
			t.Errorf("%s %s rate alarm: %v %v, want > %v", *c.s.stack.StackName(), c.metric, p["ComparisonOperator"], p["Threshold"], c.percent)
		}
	}
	fns := []string{def.id(def.stack.APIFunction), def.id(def.stack.Outbox.Relay), def.id(def.stack.Outbox.Reconciler)}
	for _, name := range consumerNames {
		fns = append(fns, def.id(def.stack.Consumers[name].Function))
	}
	for _, id := range fns {
		if got := alarmsOn(t, def, "AWS/Lambda", "Throttles", ref(id)); len(got) != 1 || got[0]["Threshold"] != float64(1) {
			t.Errorf("function %s: Throttles alarms %v, want one at >= 1", id, got)
		}
	}
	if !mentions(t, def.props(t, def.ofType("AWS::CloudWatch::Dashboard")[0])["DashboardBody"], "Throttles") {
		t.Error("dashboard does not show Throttles")
	}
}

// GIVEN the custom stack with auth mode NONE and cdk-nag AwsSolutions applied
// WHEN its findings and suppressions are read
// THEN nothing is unsuppressed, and the only suppression beyond the default
// stack's is AwsSolutions-APIG4 on the API routes.
func TestAuthNoneKeepsCdkNagOnWithOneSuppression(t *testing.T) {
	for _, e := range customNagErrors {
		t.Error(e)
	}
	suppressed := func(s *synthesized, id string) []string {
		var ids []string
		for _, r := range strs(get(s.res[id], "Metadata", "cdk_nag", "rules_to_suppress")) {
			if r != nil {
				ids = append(ids, get(r, "id").(string))
			}
		}
		return ids
	}
	routes := custom.ofType("AWS::ApiGatewayV2::Route")
	if len(routes) != len(Routes)+1 {
		t.Errorf("%d routes", len(routes))
	}
	for _, id := range routes {
		if got := suppressed(custom, id); !slices.Equal(got, []string{"AwsSolutions-APIG4"}) {
			t.Errorf("custom route %s suppresses %v, want only AwsSolutions-APIG4", id, got)
		}
	}
	for _, id := range def.ofType("AWS::ApiGatewayV2::Route") {
		if got := suppressed(def, id); len(got) != 0 {
			t.Errorf("IAM route %s suppresses %v", id, got)
		}
	}
}

// GIVEN auth mode NONE
// WHEN the stack would be named DefaultStackName (as its id or its
// StackProps.StackName)
// THEN NewOrdersStack refuses it with ErrInvalidProps.
func TestAuthNoneNeedsAnExplicitStackName(t *testing.T) {
	app := awscdk.NewApp(nil)
	if _, err := NewOrdersStack(app, DefaultStackName, OrdersStackProps{AssetRoot: assetRoot, AuthMode: AuthNone}); !errors.Is(err, ErrInvalidProps) {
		t.Errorf("id %s: err = %v, want ErrInvalidProps", DefaultStackName, err)
	}
	_, err := NewOrdersStack(app, "Other", OrdersStackProps{AssetRoot: assetRoot, AuthMode: AuthNone,
		StackProps: awscdk.StackProps{StackName: jsii.String(DefaultStackName)}})
	if !errors.Is(err, ErrInvalidProps) {
		t.Errorf("StackName %s: err = %v, want ErrInvalidProps", DefaultStackName, err)
	}
}

// GIVEN the default stack
// WHEN the functions and the access log group are read
// THEN every function uses Lambda's JSON log format, and the access log
// keeps its retention (the custom stack's is one week).
func TestJSONLogsAndAccessLogRetention(t *testing.T) {
	for _, id := range def.ofType("AWS::Lambda::Function") {
		if got := get(def.props(t, id), "LoggingConfig", "LogFormat"); got != "JSON" {
			t.Errorf("function %s LogFormat = %v, want JSON", id, got)
		}
	}
	accessLog := func(s *synthesized) any {
		stage := s.props(t, s.ofType("AWS::ApiGatewayV2::Stage")[0])
		lg := get(stage, "AccessLogSettings", "DestinationArn", "Fn::GetAtt", 0)
		if lg == nil {
			t.Fatal("stage has no access log group")
		}
		return get(s.props(t, lg.(string)), "RetentionInDays")
	}
	if got := accessLog(def); got != float64(30) {
		t.Errorf("default access log retention = %v, want 30", got)
	}
	if got := accessLog(custom); got != float64(7) {
		t.Errorf("custom access log retention = %v, want 7", got)
	}
}

// GIVEN the default stack
// WHEN its managed policies are read
// THEN the read-only caller policy allows execute-api:Invoke on the GET
// route only and the command caller policy on the four POST routes only,
// each an exact route ARN ({id} as *), and outputs name both.
func TestCallerPolicies(t *testing.T) {
	s := def.stack
	check := func(what string, id string, want []string) {
		t.Helper()
		sts := policyStatements(get(def.props(t, id), "PolicyDocument"))
		if len(sts) != 1 || get(sts[0], "Effect") != "Allow" || get(sts[0], "Action") != "execute-api:Invoke" {
			t.Fatalf("%s statements = %v", what, sts)
		}
		res := strs(get(sts[0], "Resource"))
		var got []string
		for _, r := range res {
			parts, _ := get(r, "Fn::Join", 1).([]any)
			if len(parts) == 0 {
				t.Fatalf("%s resource %v is not a joined ARN", what, r)
			}
			tail, _ := parts[len(parts)-1].(string)
			got = append(got, tail)
			if !mentions(t, r, ":execute-api:") || !mentions(t, r, def.id(s.API)) {
				t.Errorf("%s resource %v is not an execute-api ARN of the API", what, r)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s routes = %v, want %v", what, got, want)
		}
	}
	check("read-only", def.id(s.ReadOnlyCallerPolicy), []string{"/*/GET/orders/*"})
	check("command", def.id(s.CommandCallerPolicy), []string{"/*/POST/orders", "/*/POST/orders/*/cancel", "/*/POST/orders/*/pay", "/*/POST/orders/*/ship"})
	// the two caller policies and the archive's replay policy
	// (TestArchiveKeepsEveryOutboxEvent)
	if n := len(def.ofType("AWS::IAM::ManagedPolicy")); n != 3 {
		t.Errorf("%d managed policies, want 3", n)
	}
	outs, _ := def.json["Outputs"].(map[string]any)
	for k, id := range map[string]string{"ReadOnlyCallerPolicyArn": def.id(s.ReadOnlyCallerPolicy), "CommandCallerPolicyArn": def.id(s.CommandCallerPolicy),
		"ReplayPolicyArn": def.id(s.ReplayPolicy)} {
		if !jsonEqual(t, get(outs, k, "Value"), ref(id)) {
			t.Errorf("output %s = %v, want the policy %s", k, get(outs, k), id)
		}
	}
}

// GIVEN the default stack (retained) and the custom stack (Destroy)
// WHEN the tables are read
// THEN every table has deletion protection in the default stack and none in
// the throw-away one.
func TestDeletionProtection(t *testing.T) {
	for _, c := range []struct {
		s    *synthesized
		want bool
	}{{def, true}, {custom, false}} {
		ids := c.s.ofType("AWS::DynamoDB::Table")
		// orders, outbox, ledger, notifications, shipments, idempotency:
		// the consumers' dedup state lives in their own tables (e622f57)
		if len(ids) != 6 {
			t.Errorf("%d tables, want 6", len(ids))
		}
		for _, id := range ids {
			if got := c.s.props(t, id)["DeletionProtectionEnabled"]; got != c.want {
				t.Errorf("%s table %s DeletionProtectionEnabled = %v, want %v", *c.s.stack.StackName(), id, got, c.want)
			}
		}
	}
}

// GIVEN the custom stack with CustomerManagedKey
// WHEN its tables, queues and key are read
// THEN one rotating KMS key encrypts every table, the alarm topic and every
// queue but the outbox's two on-failure queues and the schedule DLQ
// (metadata only) and the rule DLQs (which must not depend on the key
// their target uses), which are SSE-SQS; its policy lets EventBridge use it
// only for SQS queues of this account and region (no unconditioned grant),
// and every function may use it; the default stack has no key (AWS managed
// keys).
func TestCustomerManagedKey(t *testing.T) {
	keys := custom.ofType("AWS::KMS::Key")
	if len(keys) != 1 {
		t.Fatalf("%d KMS keys, want 1", len(keys))
	}
	key := getAtt(keys[0], "Arn")
	kp := custom.props(t, keys[0])
	if kp["EnableKeyRotation"] != true {
		t.Error("key rotation is off")
	}
	var eb any
	for _, st := range policyStatements(kp["KeyPolicy"]) {
		if get(st, "Sid") == KeyForEventBridgeStatementID {
			eb = st
		}
	}
	// scoped to SQS data keys of this account and region, and the only
	// statement for EventBridge (TestEventBridgeKeyGrantIsScoped)
	if eb == nil || !mentions(t, get(eb, "Condition", "StringLike"), "kms:EncryptionContext:aws:sqs:arn") {
		t.Errorf("EventBridge key statement = %v", eb)
	}
	for _, st := range policyStatements(kp["KeyPolicy"]) {
		// the archive's statements (AWS's key policy for archives, the
		// data key actions only under this bus's encryption context:
		// TestArchiveKeepsEveryOutboxEvent) are the only others
		archive := jsonEqual(t, get(st, "Action"), "kms:DescribeKey") ||
			jsonEqual(t, get(st, "Condition", "StringEquals", "kms:EncryptionContext:aws:events:event-bus:arn"), getAtt(custom.id(custom.stack.Bus), "Arn"))
		if mentions(t, get(st, "Principal"), "events.amazonaws.com") && get(st, "Sid") != KeyForEventBridgeStatementID && !archive {
			t.Errorf("another key statement for EventBridge: %v", normalize(t, st))
		}
	}
	for _, id := range custom.ofType("AWS::DynamoDB::Table") {
		p := custom.props(t, id)
		if !jsonEqual(t, get(p, "SSESpecification", "KMSMasterKeyId"), key) || get(p, "SSESpecification", "SSEType") != "KMS" {
			t.Errorf("table %s SSESpecification = %v, want the stack key", id, p["SSESpecification"])
		}
	}
	ob := custom.stack.Outbox
	sseSQS := []string{custom.id(ob.StreamFailureQueue.Queue), custom.id(ob.ReconcilerFailureQueue.Queue), custom.id(ob.ScheduleDLQ.Queue)}
	for _, q := range custom.stack.RuleDLQs {
		sseSQS = append(sseSQS, custom.id(q.Queue))
	}
	for _, c := range custom.stack.Consumers {
		if c.Resequencer != nil {
			sseSQS = append(sseSQS, custom.id(c.Resequencer.SweepDLQ.Queue)) // like a rule DLQ
		}
	}
	for _, id := range custom.ofType("AWS::SQS::Queue") {
		if slices.Contains(sseSQS, id) {
			// on-failure destinations and the schedule DLQ hold metadata
			// only; a rule DLQ must not fail with its target's key
			// (outboxcdk.NewConsumer): SSE-SQS
			if custom.props(t, id)["SqsManagedSseEnabled"] != true {
				t.Errorf("queue %s is not encrypted with SSE-SQS", id)
			}
			continue
		}
		if got := custom.props(t, id)["KmsMasterKeyId"]; !jsonEqual(t, got, key) {
			t.Errorf("queue %s KmsMasterKeyId = %v, want the stack key", id, got)
		}
	}
	s := custom.stack
	fns := []string{custom.id(s.APIFunction), custom.id(s.Outbox.Relay), custom.id(s.Outbox.Reconciler)}
	for _, name := range consumerNames {
		fns = append(fns, custom.id(s.Consumers[name].Function))
	}
	for _, fn := range fns {
		role := roleOf(t, custom, fn)
		ok := false
		for _, st := range statements(t, custom) {
			if st.role == role && slices.Equal(sortedActions(st.actions), sortedActions(outboxcdk.KeyUseActions)) && jsonEqual(t, st.resources, []any{key}) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("function %s may not use the key", fn)
		}
	}
	if n := len(def.ofType("AWS::KMS::Key")); n != 0 {
		t.Errorf("default stack has %d KMS keys, want 0", n)
	}
}

// GIVEN the default and the custom stack
// WHEN the notifications table and the notifier function are read
// THEN notifications expire: TTL on notifier.TTLAttribute, and the notifier
// is told the retention (90 days by default, in seconds).
func TestNotificationsTTL(t *testing.T) {
	for _, s := range []*synthesized{def, custom} {
		id := s.id(s.stack.Consumers[routing.ConsumerNotifier].Table)
		want := map[string]any{"AttributeName": notifier.TTLAttribute, "Enabled": true}
		if got := s.props(t, id)["TimeToLiveSpecification"]; !jsonEqual(t, got, want) {
			t.Errorf("%s notifications TTL = %v, want %v", *s.stack.StackName(), got, want)
		}
	}
	got := get(def.props(t, def.id(def.stack.Consumers[routing.ConsumerNotifier].Function)), "Environment", "Variables", appenv.EnvNotificationRetentionSeconds)
	if got != fmt.Sprint(int64(appenv.DefaultNotificationRetention/time.Second)) {
		t.Errorf("%s = %v, want the default retention in seconds", appenv.EnvNotificationRetentionSeconds, got)
	}
}

// GIVEN the consumers' environment
// WHEN a consumer runs on AWS
// THEN it expects the stack's account (config.EnvExpectedEventAccount is
// the AWS::AccountId pseudo parameter).
func TestConsumersExpectTheStackAccount(t *testing.T) {
	for _, s := range []*synthesized{def, custom} {
		for _, name := range consumerNames {
			got := get(s.props(t, s.id(s.stack.Consumers[name].Function)), "Environment", "Variables", config.EnvExpectedEventAccount)
			if !jsonEqual(t, got, ref("AWS::AccountId")) {
				t.Errorf("%s %s %s = %v", *s.stack.StackName(), name, config.EnvExpectedEventAccount, got)
			}
		}
	}
}
