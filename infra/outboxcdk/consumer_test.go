package outboxcdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// fakeFn and fakeTopic stand in for a function and a topic; Validate
// never calls them.
type (
	fakeFn    struct{ awslambda.IFunction }
	fakeTopic struct{ awssns.ITopic }
)

func validConsumer() ConsumerProps {
	return ConsumerProps{
		EventBus: fakeBus{}, EventSource: "com.example.wallet", AlarmTopic: fakeTopic{},
		Name: "wallet-ledger", Function: fakeFn{}, Ordering: dedup.Ordered, AggregateType: "Wallet",
	}
}

// GIVEN consumer props with one fault each
// WHEN they are validated
// THEN each is refused with ErrInvalidProps and a message naming the fault;
// an ordered consumer narrowed to some event types is refused with why.
func TestConsumerPropsValidate(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*ConsumerProps)
		wantErr string // substring; "" means valid
	}{
		{"valid ordered", func(*ConsumerProps) {}, ""},
		{"valid unordered narrowed", func(p *ConsumerProps) { p.Ordering, p.EventTypes = dedup.Unordered, []string{"AmountDeposited"} }, ""},
		{"ordered with every type named", func(p *ConsumerProps) { p.AggregateEventTypes = []string{"AmountDeposited", "AmountWithdrawn"} }, ""},
		{"ordered narrowed", func(p *ConsumerProps) { p.EventTypes = []string{"AmountDeposited"} }, "stalls that aggregate's gate for ever"},
		{"unordered with aggregate list", func(p *ConsumerProps) { p.Ordering, p.AggregateEventTypes = dedup.Unordered, []string{"A"} }, "AggregateEventTypes is for ordered consumers"},
		{"no ordering", func(p *ConsumerProps) { p.Ordering = "" }, "Ordering"},
		{"no name", func(p *ConsumerProps) { p.Name = "" }, "Name is required"},
		{"name with #", func(p *ConsumerProps) { p.Name = "a#b" }, "contains '#'"},
		{"no function", func(p *ConsumerProps) { p.Function = nil }, "Function is required"},
		{"no bus", func(p *ConsumerProps) { p.EventBus = nil }, "EventBus is required"},
		{"no source", func(p *ConsumerProps) { p.EventSource = "" }, "EventSource is required"},
		{"aws source", func(p *ConsumerProps) { p.EventSource = "aws.wallet" }, `starts with "aws."`},
		{"no topic", func(p *ConsumerProps) { p.AlarmTopic = nil }, "AlarmTopic is required"},
		{"no aggregate", func(p *ConsumerProps) { p.AggregateType = "" }, "AggregateType is required"},
		{"empty type", func(p *ConsumerProps) { p.AggregateEventTypes = []string{""} }, "event type is empty"},
		{"batch", func(p *ConsumerProps) { p.BatchSize = 11 }, "BatchSize 11"},
		{"scaling", func(p *ConsumerProps) { p.Scaling.MaxConcurrency = 1 }, "Scaling"},
		{"event age", func(p *ConsumerProps) { p.MaxEventAge = 25 * time.Hour }, "MaxEventAge"},
		{"retries", func(p *ConsumerProps) { p.RetryAttempts = 186 }, "RetryAttempts"},
		{"retention", func(p *ConsumerProps) { p.DedupRetention = time.Minute }, "DedupRetention"},
		{"backlog below visibility", func(p *ConsumerProps) { p.OldestMessageThreshold = time.Minute }, "OldestMessageThreshold"},
		{"timeout", func(p *ConsumerProps) { p.FunctionTimeout = 1500 * time.Millisecond }, "FunctionTimeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := validConsumer()
			c.mutate(&p)
			err := p.Validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", c.wantErr)
			case c.wantErr != "" && (!errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("error %v, want ErrInvalidProps with %q", err, c.wantErr)
			}
		})
	}
}

// consumerStack is a bare stack with an outbox and two consumers built by
// NewConsumer only, synthesized once with cdk-nag.
type consumerStack struct {
	stack              awscdk.Stack
	ordered, unordered *Consumer
	orderedFn, unordFn awslambda.Function
	topic              string // the outbox's alarm topic logical id
	res                map[string]map[string]any
	nag                []string
	narrowedErr        error
}

var (
	csOnce sync.Once
	cs     *consumerStack
	csErr  error
)

func synthConsumers(t *testing.T) *consumerStack {
	t.Helper()
	csOnce.Do(func() { cs, csErr = buildConsumerStack(t.TempDir()) })
	if csErr != nil {
		t.Fatal(csErr)
	}
	return cs
}

func buildConsumerStack(dir string) (*consumerStack, error) {
	for _, fn := range []string{RelayFunction, ReconcilerFunction, "wallet-ledger", "mailer"} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			return nil, err
		}
	}
	st := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Wallet"), nil)
	bus := awsevents.NewEventBus(st, jsii.String("Bus"), nil)
	ob, err := New(st, "Outbox", Props{EventBus: bus, EventSource: "com.example.wallet", AssetRoot: dir})
	if err != nil {
		return nil, err
	}
	s := &consumerStack{stack: st}
	fn := func(name string) (awslambda.Function, error) {
		return gofunc.New(st, name, gofunc.Props{AssetDir: filepath.Join(dir, name)})
	}
	if s.orderedFn, err = fn("wallet-ledger"); err != nil {
		return nil, err
	}
	if s.unordFn, err = fn("mailer"); err != nil {
		return nil, err
	}
	if s.ordered, err = NewConsumer(st, "WalletLedger", ConsumerProps{
		Outbox: ob, Name: "wallet-ledger", Function: s.orderedFn, Ordering: dedup.Ordered, AggregateType: "Wallet",
		DedupRetention: 48 * time.Hour,
	}); err != nil {
		return nil, err
	}
	if s.unordered, err = NewConsumer(st, "Mailer", ConsumerProps{
		Outbox: ob, Name: "mailer", Function: s.unordFn, Ordering: dedup.Unordered, AggregateType: "Wallet",
		EventTypes: []string{"AmountDeposited"},
		Scaling:    SQSScaling{Provisioned: &ProvisionedPollers{Minimum: 2, Maximum: 4}},
	}); err != nil {
		return nil, err
	}
	_, s.narrowedErr = NewConsumer(st, "Narrowed", ConsumerProps{
		Outbox: ob, Name: "narrowed", Function: s.orderedFn, Ordering: dedup.Ordered, AggregateType: "Wallet",
		EventTypes: []string{"AmountDeposited"},
	})
	awscdk.Aspects_Of(st).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	tmpl := assertions.Template_FromStack(st, nil)
	raw, err := json.Marshal(*tmpl.ToJSON())
	if err != nil {
		return nil, err
	}
	var doc struct{ Resources map[string]map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	s.res = doc.Resources
	s.topic = s.id(ob.AlarmTopic)
	ann := assertions.Annotations_FromStack(st)
	for _, f := range *ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		s.nag = append(s.nag, fmt.Sprintf("%s: %v", *f.Id, f.Entry.Data))
	}
	for _, f := range *ann.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		s.nag = append(s.nag, fmt.Sprintf("warning %s: %v", *f.Id, f.Entry.Data))
	}
	return s, nil
}

// id is the logical id of c (or of its default child) in the template.
func (s *consumerStack) id(c interface{ Node() constructs.Node }) string {
	el, ok := c.(awscdk.CfnElement)
	if !ok {
		el = c.Node().DefaultChild().(awscdk.CfnElement)
	}
	return s.stack.Resolve(el.LogicalId()).(string)
}

func (s *consumerStack) props(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := s.res[id]
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

// jsonOf returns v as normalized JSON, for comparisons.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	var x any
	_ = json.Unmarshal(b, &x)
	b, _ = json.Marshal(x)
	return string(b)
}

func getAtt(id, attr string) map[string]any { return map[string]any{"Fn::GetAtt": []any{id, attr}} }
func ref(id string) map[string]any          { return map[string]any{"Ref": id} }

// grants returns, per resource (JSON), the sorted actions the IAM policies
// attached to role give it.
func (s *consumerStack) grants(role string) map[string][]string {
	out := map[string][]string{}
	for _, r := range s.res {
		if r["Type"] != "AWS::IAM::Policy" {
			continue
		}
		p := r["Properties"].(map[string]any)
		if jsonOf(p["Roles"]) != jsonOf([]any{ref(role)}) {
			continue
		}
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			m := st.(map[string]any)
			actions := asList(m["Action"])
			for _, res := range asList(m["Resource"]) {
				k := jsonOf(res)
				for _, a := range actions {
					out[k] = append(out[k], a.(string))
				}
				sort.Strings(out[k])
				out[k] = slices.Compact(out[k])
			}
		}
	}
	return out
}

func asList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func sorted(a []string) []string {
	out := slices.Clone(a)
	sort.Strings(out)
	return out
}

// GIVEN a bare stack with an outbox, an ordered and an unordered consumer
// built by NewConsumer only, and cdk-nag's AwsSolutions checks
// WHEN it is synthesized
// THEN cdk-nag finds nothing, and the narrowed ordered consumer was refused
// with ErrInvalidProps.
func TestConsumerIsCdkNagCleanAndRefusesANarrowedOrderedRule(t *testing.T) {
	s := synthConsumers(t)
	for _, e := range s.nag {
		t.Error(e)
	}
	if !errors.Is(s.narrowedErr, ErrInvalidProps) || !strings.Contains(s.narrowedErr.Error(), "every event type of its aggregate") {
		t.Errorf("narrowed ordered consumer: err = %v, want ErrInvalidProps explaining the rule", s.narrowedErr)
	}
}

// GIVEN the consumer stack
// WHEN each consumer's resources are read from the template
// THEN the state table has pkg/dedup's shape (key, buffer index, TTL,
// PITR, on-demand, encryption); the rule matches by aggregate_type (ordered)
// or the given types (unordered) and targets the queue with a DLQ; the
// queue redrives to its DLQ, both encrypted; the mapping reports batch item
// failures with the scaling asked for; the ordered consumer has its sweep
// schedule on its queue and the unordered none; the queue's policy denies
// any sender but its rules.
func TestConsumerResources(t *testing.T) {
	s := synthConsumers(t)
	for _, c := range []struct {
		name    string
		c       *Consumer
		fn      awslambda.Function
		pattern map[string]any
		scaling map[string]any
	}{
		{"ordered", s.ordered, s.orderedFn,
			map[string]any{"source": []any{"com.example.wallet"}, "detail": map[string]any{"aggregate_type": []any{"Wallet"}}},
			map[string]any{"ScalingConfig": map[string]any{"MaximumConcurrency": config.DefaultConsumerMaxConcurrency}}},
		{"unordered", s.unordered, s.unordFn,
			map[string]any{"source": []any{"com.example.wallet"}, "detail-type": []any{"AmountDeposited"}},
			map[string]any{"ProvisionedPollerConfig": map[string]any{"MinimumPollers": 2, "MaximumPollers": 4}}},
	} {
		table := s.props(t, s.id(c.c.Table))
		for k, v := range map[string]any{
			"KeySchema":                        []any{map[string]any{"AttributeName": dedup.AttrPK, "KeyType": "HASH"}},
			"BillingMode":                      "PAY_PER_REQUEST",
			"TimeToLiveSpecification":          map[string]any{"AttributeName": dedup.TTLAttribute, "Enabled": true},
			"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			"SSESpecification":                 map[string]any{"SSEEnabled": true},
			"DeletionProtectionEnabled":        true,
			"GlobalSecondaryIndexes": []any{map[string]any{
				"IndexName": dedup.BufferIndex,
				"KeySchema": []any{
					map[string]any{"AttributeName": dedup.AttrBufferShard, "KeyType": "HASH"},
					map[string]any{"AttributeName": dedup.AttrBufferedAt, "KeyType": "RANGE"},
				},
				"Projection": map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": toAny(dedup.BufferIndexAttributes)},
			}},
		} {
			if jsonOf(table[k]) != jsonOf(v) {
				t.Errorf("%s table %s = %s, want %s", c.name, k, jsonOf(table[k]), jsonOf(v))
			}
		}
		rule := s.props(t, s.id(c.c.Rule))
		if jsonOf(rule["EventPattern"]) != jsonOf(c.pattern) {
			t.Errorf("%s rule pattern %s, want %s", c.name, jsonOf(rule["EventPattern"]), jsonOf(c.pattern))
		}
		target := rule["Targets"].([]any)[0].(map[string]any)
		if jsonOf(target["Arn"]) != jsonOf(getAtt(s.id(c.c.Queue), "Arn")) ||
			jsonOf(target["DeadLetterConfig"]) != jsonOf(map[string]any{"Arn": getAtt(s.id(c.c.RuleDLQ.Queue), "Arn")}) {
			t.Errorf("%s rule target %s, want the queue with the rule DLQ", c.name, jsonOf(target))
		}
		queue := s.props(t, s.id(c.c.Queue))
		if jsonOf(queue["RedrivePolicy"]) != jsonOf(map[string]any{"deadLetterTargetArn": getAtt(s.id(c.c.DLQ.Queue), "Arn"), "maxReceiveCount": config.DefaultConsumerMaxReceiveCount}) ||
			queue["VisibilityTimeout"] != float64(config.ConsumerVisibilityTimeoutFactor*int(config.DefaultConsumerTimeout/time.Second)) ||
			queue["SqsManagedSseEnabled"] != true || s.props(t, s.id(c.c.DLQ.Queue))["SqsManagedSseEnabled"] != true {
			t.Errorf("%s queue %s", c.name, jsonOf(queue))
		}
		var esms []map[string]any
		for _, r := range s.res {
			if p, _ := r["Properties"].(map[string]any); r["Type"] == "AWS::Lambda::EventSourceMapping" && jsonOf(p["FunctionName"]) == jsonOf(ref(s.id(c.fn))) {
				esms = append(esms, p)
			}
		}
		if len(esms) != 1 {
			t.Fatalf("%s: %d event source mappings, want 1", c.name, len(esms))
		}
		want := map[string]any{"EventSourceArn": getAtt(s.id(c.c.Queue), "Arn"), "BatchSize": config.DefaultConsumerBatchSize,
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"}}
		for k, v := range c.scaling {
			want[k] = v
		}
		for k, v := range want {
			if jsonOf(esms[0][k]) != jsonOf(v) {
				t.Errorf("%s mapping %s = %s, want %s", c.name, k, jsonOf(esms[0][k]), jsonOf(v))
			}
		}
		senders := []any{getAtt(s.id(c.c.Rule), "Arn")}
		if c.name == "ordered" {
			sweep := s.props(t, s.id(c.c.Sweep))
			if sweep["ScheduleExpression"] != "rate(1 minute)" || jsonOf(get(sweep, "Targets", 0, "Arn")) != jsonOf(getAtt(s.id(c.c.Queue), "Arn")) {
				t.Errorf("sweep = %s, want every minute to the queue", jsonOf(sweep))
			}
			senders = append([]any{getAtt(s.id(c.c.Sweep), "Arn")}, senders...)
		} else if c.c.Sweep != nil || c.c.SweepDLQ != nil || c.c.BufferedAgeAlarm != nil {
			t.Error("the unordered consumer has a sweep")
		}
		var deny []any
		for _, r := range s.res {
			p, _ := r["Properties"].(map[string]any)
			if r["Type"] != "AWS::SQS::QueuePolicy" || jsonOf(p["Queues"]) != jsonOf([]any{ref(s.id(c.c.Queue))}) {
				continue
			}
			for _, st := range get(p, "PolicyDocument", "Statement").([]any) {
				if get(st, "Sid") == QueueSendersStatementID {
					deny = append(deny, st)
				}
			}
		}
		if len(deny) != 1 || jsonOf(get(deny[0], "Condition")) != jsonOf(map[string]any{"ArnNotEquals": map[string]any{"aws:SourceArn": senders}}) ||
			get(deny[0], "Effect") != "Deny" || get(deny[0], "Action") != "sqs:SendMessage" {
			t.Errorf("%s queue sender deny = %s, want one denying all but %s", c.name, jsonOf(deny), jsonOf(senders))
		}
	}
}

// get walks v by map keys and list indexes; nil when a step is missing.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// GIVEN the consumer stack
// WHEN each consumer function's role policies are read
// THEN they allow exactly the published actions, each on its own resource:
// ConsumerStateActions on the state table, ConsumerBufferQueryActions on
// its buffer index (ordered only), ConsumerDLQActions on the DLQ,
// ConsumerQueueActions on the queue; besides them only the function's log
// group and X-Ray (infra/gofunc).
func TestConsumerGrantsArePublishedActionsOnly(t *testing.T) {
	s := synthConsumers(t)
	for _, c := range []struct {
		name string
		c    *Consumer
		fn   awslambda.Function
	}{{"ordered", s.ordered, s.orderedFn}, {"unordered", s.unordered, s.unordFn}} {
		tableArn := getAtt(s.id(c.c.Table), "Arn")
		want := map[string][]string{
			jsonOf(tableArn): sorted(ConsumerStateActions),
			jsonOf(getAtt(s.id(c.c.DLQ.Queue), "Arn")): sorted(ConsumerDLQActions),
			jsonOf(getAtt(s.id(c.c.Queue), "Arn")):     sorted(ConsumerQueueActions),
		}
		if c.name == "ordered" {
			want[jsonOf(map[string]any{"Fn::Join": []any{"", []any{tableArn, "/index/" + dedup.BufferIndex}}})] = sorted(ConsumerBufferQueryActions)
		}
		role := s.id(c.fn.Role())
		for res, actions := range s.grants(role) {
			w, ok := want[res]
			switch {
			case ok:
				if !slices.Equal(actions, w) {
					t.Errorf("%s: %v on %s, want %v", c.name, actions, res, w)
				}
				delete(want, res)
			case res == `"*"` && slices.Equal(actions, []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}):
			case res == jsonOf(getAtt(get(s.props(t, s.id(c.fn)), "LoggingConfig", "LogGroup", "Ref").(string), "Arn")) && slices.Equal(actions, []string{"logs:CreateLogStream", "logs:PutLogEvents"}):
			default:
				t.Errorf("%s: role allows %v on %s, which is no published consumer grant", c.name, actions, res)
			}
		}
		for res, actions := range want {
			t.Errorf("%s: role lacks %v on %s", c.name, actions, res)
		}
	}
}

// GIVEN the consumer stack
// WHEN the consumer functions' environments are read
// THEN each has the variables the runtime reads (names from pkg/config):
// its state table, the event source, its DLQ's URL, the stack's account,
// and the dedup retention where it was set.
func TestConsumerSetsTheRuntimeEnvironment(t *testing.T) {
	s := synthConsumers(t)
	for _, c := range []struct {
		name  string
		c     *Consumer
		fn    awslambda.Function
		extra map[string]any
	}{
		{"ordered", s.ordered, s.orderedFn, map[string]any{config.EnvDedupRetentionSeconds: "172800"}},
		{"unordered", s.unordered, s.unordFn, nil},
	} {
		want := map[string]any{
			config.EnvConsumerTable:        ref(s.id(c.c.Table)),
			config.EnvConsumerName:         c.c.Props().Name,
			config.EnvEventSource:          "com.example.wallet",
			config.EnvConsumerDLQURL:       ref(s.id(c.c.DLQ.Queue)),
			config.EnvExpectedEventAccount: ref("AWS::AccountId"),
		}
		for k, v := range c.extra {
			want[k] = v
		}
		got, _ := get(s.props(t, s.id(c.fn)), "Environment", "Variables").(map[string]any)
		if jsonOf(got) != jsonOf(want) {
			t.Errorf("%s env = %s, want %s", c.name, jsonOf(got), jsonOf(want))
		}
	}
}

// GIVEN the consumer stack
// WHEN the alarms under each consumer are read
// THEN the ordered consumer has 10 (errors, backlog, DLQ, buffered age,
// sweep DLQ and its two delivery alarms, rule DLQ and its two), the
// unordered 6, each listed in Consumer.Alarms and notifying the outbox's
// alarm topic on ALARM and OK; the buffered-age alarm reads the consumer's
// metric.
func TestConsumerAlarmsNotifyTheTopic(t *testing.T) {
	s := synthConsumers(t)
	for _, c := range []struct {
		name string
		c    *Consumer
		n    int
	}{{"ordered", s.ordered, 10}, {"unordered", s.unordered, 6}} {
		if len(c.c.Alarms) != c.n {
			t.Errorf("%s: %d alarms, want %d", c.name, len(c.c.Alarms), c.n)
		}
		for _, a := range c.c.Alarms {
			p := s.props(t, s.id(a))
			for _, k := range []string{"AlarmActions", "OKActions"} {
				if jsonOf(p[k]) != jsonOf([]any{ref(s.topic)}) {
					t.Errorf("%s alarm %s %s = %s, want the alarm topic", c.name, s.id(a), k, jsonOf(p[k]))
				}
			}
		}
	}
	p := s.props(t, s.id(s.ordered.BufferedAgeAlarm))
	if p["MetricName"] != config.MetricOldestBufferedAge || p["Namespace"] != config.MetricNamespace ||
		jsonOf(p["Dimensions"]) != jsonOf([]any{map[string]any{"Name": config.MetricDimensionConsumer, "Value": "wallet-ledger"}}) ||
		p["Threshold"] != config.DefaultBufferedAgeAlarm.Seconds() {
		t.Errorf("buffered age alarm = %s", jsonOf(p))
	}
}

func toAny(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

// GIVEN a consumer function with a 60 s timeout
// WHEN its props give FunctionTimeout below that, equal to it, or none
// THEN Validate refuses the lower one (the queue's visibility timeout would
// be derived from a timeout the function outruns: Lambda refuses a mapping
// whose queue's visibility timeout is below the function's timeout) and
// accepts the others.
func TestConsumerPropsFunctionTimeoutNotBelowTheFunctions(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Timeouts"), nil)
	fn, err := gofunc.New(st, "slow", gofunc.Props{AssetDir: dir, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		timeout time.Duration
		ok      bool
	}{{5 * time.Second, false}, {59 * time.Second, false}, {time.Minute, true}, {0, true}, {2 * time.Minute, true}} {
		p := validConsumer()
		p.Function, p.FunctionTimeout = fn, c.timeout
		err := p.Validate()
		if c.ok != (err == nil) || (err != nil && (!errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), "below the function's own timeout"))) {
			t.Errorf("FunctionTimeout %s: %v", c.timeout, err)
		}
	}
}
