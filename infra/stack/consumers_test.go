package stack

import (
	"slices"
	"sort"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// mappingOf returns the logical id of the one event source mapping whose
// FunctionName is {"Ref": fnID}.
func mappingOf(t *testing.T, s *synthesized, fnID string) string {
	t.Helper()
	var found []string
	for _, id := range s.ofType("AWS::Lambda::EventSourceMapping") {
		if jsonEqual(t, s.props(t, id)["FunctionName"], ref(fnID)) {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		t.Fatalf("function %s has %d event source mappings, want 1", fnID, len(found))
	}
	return found[0]
}

// GIVEN the default stack
// WHEN a consumer function is looked up in the template
// THEN an SQS event source mapping with partial batch responses feeds it from
// a queue whose visibility timeout is at least six times the function
// timeout and whose redrive policy moves a message to an alarmed DLQ after
// maxReceiveCount receives; the function dead-letters to that DLQ itself.
func TestConsumersAreFedBySQSWithRedriveToAlarmedDLQ(t *testing.T) {
	if len(def.stack.Consumers) != len(routing.Consumers()) {
		t.Fatalf("%d consumers, want one per routing consumer %v", len(def.stack.Consumers), routing.Consumers())
	}
	for name, c := range def.stack.Consumers {
		fnID := def.id(c.Function)
		esm := def.props(t, mappingOf(t, def, fnID))
		queueID, _ := get(esm, "EventSourceArn", "Fn::GetAtt", 0).(string)
		if def.res[queueID]["Type"] != "AWS::SQS::Queue" || queueID != def.id(c.Queue) {
			t.Errorf("%s: mapping source = %v, want its SQS queue %s", name, esm["EventSourceArn"], def.id(c.Queue))
			continue
		}
		for k, v := range map[string]any{
			"BatchSize":             config.DefaultConsumerBatchSize,
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
			"ScalingConfig":         map[string]any{"MaximumConcurrency": config.DefaultConsumerMaxConcurrency},
		} {
			if !jsonEqual(t, esm[k], v) {
				t.Errorf("%s: mapping %s = %v, want %v", name, k, esm[k], v)
			}
		}

		q := def.props(t, queueID)
		fnTimeout, _ := def.props(t, fnID)["Timeout"].(float64)
		if fnTimeout != ConsumerTimeout.Seconds() {
			t.Errorf("%s: function timeout %v s, want %v s", name, fnTimeout, ConsumerTimeout.Seconds())
		}
		vis, _ := q["VisibilityTimeout"].(float64)
		if fnTimeout == 0 || vis < config.ConsumerVisibilityTimeoutFactor*fnTimeout {
			t.Errorf("%s: queue visibility timeout %v s < %d x function timeout %v s", name, vis, config.ConsumerVisibilityTimeoutFactor, fnTimeout)
		}
		dlqID, _ := get(q, "RedrivePolicy", "deadLetterTargetArn", "Fn::GetAtt", 0).(string)
		if dlqID == "" || dlqID != def.id(c.DLQ.Queue) {
			t.Errorf("%s: RedrivePolicy = %v, want the consumer DLQ", name, q["RedrivePolicy"])
			continue
		}
		// a message keeps its enqueue time in a standard DLQ: the DLQ must
		// keep messages longer than the source queue
		srcRet, _ := q["MessageRetentionPeriod"].(float64)
		dlqRet, _ := def.props(t, dlqID)["MessageRetentionPeriod"].(float64)
		if srcRet == 0 || dlqRet <= srcRet {
			t.Errorf("%s: retention queue %v s, DLQ %v s; want both set and the DLQ's longer", name, srcRet, dlqRet)
		}
		if got := get(q, "RedrivePolicy", "maxReceiveCount"); got != float64(config.DefaultConsumerMaxReceiveCount) {
			t.Errorf("%s: maxReceiveCount = %v, want %d", name, got, config.DefaultConsumerMaxReceiveCount)
		}
		alarms := alarmsOn(t, def, "AWS/SQS", "ApproximateNumberOfMessagesVisible", getAtt(dlqID, "QueueName"))
		if len(alarms) != 1 || alarms[0]["Threshold"] != float64(0) || alarms[0]["ComparisonOperator"] != "GreaterThanThreshold" {
			t.Errorf("%s: DLQ %s alarms = %v, want one firing at 1 visible message", name, dlqID, alarms)
		}
		if got := get(def.props(t, fnID), "Environment", "Variables", config.EnvConsumerDLQURL); !jsonEqual(t, got, ref(dlqID)) {
			t.Errorf("%s: %s = %v, want the DLQ's URL", name, config.EnvConsumerDLQURL, got)
		}
		if !granted(t, def, roleOf(t, def, fnID), []string{"sqs:SendMessage"}, getAtt(dlqID, "Arn")) {
			t.Errorf("%s: no sqs:SendMessage on its DLQ", name)
		}
	}
}

// GIVEN the three synthesized templates
// WHEN every EventBridge rule target is inspected
// THEN no consumer function is a direct (asynchronous) target, and every
// function that any rule invokes asynchronously has an on-failure
// destination, so no failing event is discarded after Lambda's retries.
func TestNoAsyncLambdaTargetWithoutOnFailureDestination(t *testing.T) {
	for _, s := range []*synthesized{def, custom, dropIn} {
		consumers := map[string]bool{}
		if s.stack.Consumers != nil {
			for _, c := range s.stack.Consumers {
				consumers[s.id(c.Function)] = true
			}
		}
		onFailure := map[string]bool{}
		for _, id := range s.ofType("AWS::Lambda::EventInvokeConfig") {
			p := s.props(t, id)
			fn, _ := get(p, "FunctionName", "Ref").(string)
			if get(p, "DestinationConfig", "OnFailure", "Destination") != nil {
				onFailure[fn] = true
			}
		}
		for _, id := range s.ofType("AWS::Events::Rule") {
			targets, _ := s.props(t, id)["Targets"].([]any)
			for _, tg := range targets {
				arnOf, _ := get(tg, "Arn", "Fn::GetAtt", 0).(string)
				if s.res[arnOf]["Type"] != "AWS::Lambda::Function" {
					continue
				}
				if consumers[arnOf] {
					t.Errorf("rule %s invokes consumer %s directly (asynchronously); it must go through its queue", id, arnOf)
				}
				if !onFailure[arnOf] {
					t.Errorf("rule %s invokes %s asynchronously without an on-failure destination", id, arnOf)
				}
			}
		}
	}
}

// GIVEN the default (IAM) and custom (NONE) stacks
// WHEN the $default route is looked up
// THEN it exists, uses the stack's authorization and targets the api
// function's integration, so unmatched requests get the function's JSON
// 404/405 on AWS as locally.
func TestDefaultRouteSendsUnmatchedRequestsToTheAPIFunction(t *testing.T) {
	for _, c := range []struct {
		s    *synthesized
		auth string
	}{{def, "AWS_IAM"}, {custom, "NONE"}} {
		var route map[string]any
		for _, id := range c.s.ofType("AWS::ApiGatewayV2::Route") {
			if p := c.s.props(t, id); p["RouteKey"] == "$default" {
				route = p
			}
		}
		if route == nil {
			t.Fatal("no $default route")
		}
		if route["AuthorizationType"] != c.auth {
			t.Errorf("$default AuthorizationType = %v, want %s", route["AuthorizationType"], c.auth)
		}
		integ, _ := get(route, "Target", "Fn::Join", 1, 1, "Ref").(string)
		if integ == "" || !jsonEqual(t, get(c.s.props(t, integ), "IntegrationUri"), getAtt(c.s.id(c.s.stack.APIFunction), "Arn")) {
			t.Errorf("$default target = %v, want the api function's integration", route["Target"])
		}
	}
}

// sortedActions returns a copy of a sorted.
func sortedActions(a []string) []string {
	out := slices.Clone(a)
	sort.Strings(out)
	return slices.Compact(out)
}

// GIVEN the default stack
// WHEN the ordered consumers' EventBridge rules are read from the template
// THEN the ledger's and the notifier's rules match every order event type
// (an ordered consumer advances its sequence past the events it does not
// act on, docs/ORDERING.md), and the unordered fulfilment consumer's rule
// still matches payments and cancellations only.
func TestOrderedConsumerRulesMatchEveryOrderEvent(t *testing.T) {
	all := []string{"OrderCancelled", "OrderPaid", "OrderPlaced", "OrderShipped"}
	want := map[string][]string{
		routing.ConsumerLedger:     all,
		routing.ConsumerNotifier:   all,
		routing.ConsumerFulfilment: {"OrderCancelled", "OrderPaid"},
	}
	for _, r := range routing.Rules() {
		p := def.props(t, def.id(def.stack.Rules[r.Name]))
		raw, _ := get(p, "EventPattern", "detail-type").([]any)
		var got []string
		for _, v := range raw {
			s, _ := v.(string)
			got = append(got, s)
		}
		sort.Strings(got)
		if !slices.Equal(got, want[r.Consumer]) {
			t.Errorf("rule %s (consumer %s) matches %v, want %v", r.Name, r.Consumer, got, want[r.Consumer])
		}
	}
}
