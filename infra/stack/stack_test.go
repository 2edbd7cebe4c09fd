package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The templates are synthesized once per test process (the first costs
// seconds: it starts the jsii kernel).
var (
	assetRoot string
	def       *synthesized // default props, cdk-nag applied
	custom    *synthesized // AuthNone and tuned outbox props
	dropIn    *synthesized // the Outbox construct alone in a bare stack
	dropInOb  *outboxcdk.Outbox
	dropInFn  string // logical id of the drop-in writer function
	// primary is the primary Region's stack of a two-Region deployment
	// (issue 34), checked role by role against app.Permissions WithRegions
	primary   *synthesized
	nagErrors []string
	// customNagErrors are the cdk-nag findings of the custom (auth NONE,
	// customer managed key) stack
	customNagErrors []string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		code = 1
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "ddb-outbox-assets-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	if err := fakeAssets(dir); err != nil {
		return 1, err
	}
	assetRoot = dir
	app := awscdk.NewApp(nil)

	st, err := NewOrdersStack(app, "Default", OrdersStackProps{AssetRoot: dir})
	if err != nil {
		return 1, err
	}
	awscdk.Aspects_Of(st.Stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	if def, err = synth(st); err != nil {
		return 1, err
	}
	ann := assertions.Annotations_FromStack(st.Stack)
	for _, f := range *ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		nagErrors = append(nagErrors, fmt.Sprintf("%s: %v", *f.Id, f.Entry.Data))
	}
	for _, f := range *ann.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		nagErrors = append(nagErrors, fmt.Sprintf("warning %s: %v", *f.Id, f.Entry.Data))
	}

	pst, err := NewOrdersStack(awscdk.NewApp(nil), "Primary", OrdersStackProps{
		AssetRoot:  dir,
		StackProps: awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String("eu-west-1")}},
		MultiRegion: &outboxcdk.MultiRegionProps{
			Regions:       []string{"eu-west-1", "eu-central-1"},
			PrimaryRegion: "eu-west-1",
			TableName:     "ddb-outbox-outbox",
		},
	})
	if err != nil {
		return 1, err
	}
	if primary, err = synth(pst); err != nil {
		return 1, err
	}

	// one app per stack: an app cannot change after its first synthesis
	cst, err := NewOrdersStack(awscdk.NewApp(nil), "Custom", OrdersStackProps{
		AssetRoot:                   dir,
		AuthMode:                    AuthNone,
		EventSource:                 "com.example.custom",
		Destroy:                     true,
		RouteThrottles:              customRouteThrottles,
		ReservedConcurrency:         customReservations,
		ConsumerScaling:             customScaling,
		AccountConcurrency:          1000,
		API4xxRatePercent:           25,
		AccessLogRetention:          awslogs.RetentionDays_ONE_WEEK,
		PublisherArns:               []string{breakGlassRole},
		RedriveRoleArns:             []string{redriveRole},
		ReplayRoleArns:              []string{replayRole},
		CustomerManagedKey:          true,
		NotificationsTTLAttribute:   "expires_at",
		FulfilmentProviderURL:       customProviderURL,
		FulfilmentProviderSecretArn: customProviderSecret,
		TelemetryLayerArn:           telemetryLayer,
		Outbox: outboxcdk.Props{
			BatchSize:              500,
			MaxBatchingWindow:      30 * time.Second,
			RetryAttempts:          3,
			MaxRecordAge:           10 * time.Minute,
			ParallelizationFactor:  1,
			PendingShards:          32,
			ReconcileRate:          10 * time.Minute,
			ReconcileAfter:         11 * time.Minute,
			OldestPendingThreshold: 30 * time.Minute,
			ArchiveRetentionDays:   30,
		},
	})
	if err != nil {
		return 1, err
	}
	awscdk.Aspects_Of(cst.Stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	if custom, err = synth(cst); err != nil {
		return 1, err
	}
	cann := assertions.Annotations_FromStack(cst.Stack)
	for _, f := range *cann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		customNagErrors = append(customNagErrors, fmt.Sprintf("%s: %v", *f.Id, f.Entry.Data))
	}
	for _, f := range *cann.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		customNagErrors = append(customNagErrors, fmt.Sprintf("warning %s: %v", *f.Id, f.Entry.Data))
	}

	bare := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("DropIn"), nil)
	bus := awsevents.NewEventBus(bare, jsii.String("TeamBus"), nil)
	topic := awssns.NewTopic(bare, jsii.String("Alerts"), nil)
	dropInOb, err = outboxcdk.New(bare, "TeamOutbox", outboxcdk.Props{
		EventBus:               bus,
		EventSource:            appenv.EventSource,
		AssetRoot:              dir,
		AlarmTopic:             topic,
		OldestPendingThreshold: 20 * time.Minute,
	})
	if err != nil {
		return 1, err
	}
	writer, err := gofunc.New(bare, "Writer", gofunc.Props{AssetDir: dir + "/api"})
	if err != nil {
		return 1, err
	}
	dropInOb.GrantWriteEvents(writer)
	if dropIn, err = synth(&OrdersStack{Stack: bare}); err != nil {
		return 1, err
	}
	dropInFn = dropIn.id(writer)
	return m.Run(), nil
}

func TestCdkNagAwsSolutionsHasNoUnsuppressedFindings(t *testing.T) {
	for _, e := range nagErrors {
		t.Error(e)
	}
}

func TestOutboxTable(t *testing.T) {
	id := def.id(def.stack.Outbox.Table)
	p := def.props(t, id)
	want := map[string]any{
		"KeySchema": []any{
			map[string]any{"AttributeName": outbox.AttrPK, "KeyType": "HASH"},
			map[string]any{"AttributeName": outbox.AttrSK, "KeyType": "RANGE"},
		},
		"StreamSpecification":     map[string]any{"StreamViewType": "NEW_IMAGE"},
		"TimeToLiveSpecification": map[string]any{"AttributeName": outbox.TTLAttribute, "Enabled": true},
		"PointInTimeRecoverySpecification": map[string]any{
			"PointInTimeRecoveryEnabled": true,
		},
		"SSESpecification": map[string]any{"SSEEnabled": true},
		"BillingMode":      "PAY_PER_REQUEST",
		"GlobalSecondaryIndexes": []any{map[string]any{
			"IndexName": outbox.PendingIndexName,
			"KeySchema": []any{
				map[string]any{"AttributeName": outbox.AttrPendingShard, "KeyType": "HASH"},
				map[string]any{"AttributeName": outbox.AttrCreatedAt, "KeyType": "RANGE"},
			},
			"Projection": map[string]any{"ProjectionType": "ALL"},
		}},
	}
	for k, v := range want {
		if !jsonEqual(t, p[k], v) {
			t.Errorf("outbox table %s = %v, want %v", k, normalize(t, p[k]), v)
		}
	}
	types := map[string]string{}
	for _, d := range p["AttributeDefinitions"].([]any) {
		types[get(d, "AttributeName").(string)] = get(d, "AttributeType").(string)
	}
	wantTypes := map[string]string{outbox.AttrPK: "S", outbox.AttrSK: "S", outbox.AttrPendingShard: "S", outbox.AttrCreatedAt: "N"}
	if !jsonEqual(t, types, wantTypes) {
		t.Errorf("attribute types = %v, want %v", types, wantTypes)
	}
	// the assertions package agrees
	def.has(t, "AWS::DynamoDB::Table", map[string]any{
		"StreamSpecification": map[string]any{"StreamViewType": "NEW_IMAGE"},
	})
	if got := def.res[id]["DeletionPolicy"]; got != "Retain" {
		t.Errorf("default DeletionPolicy = %v, want Retain", got)
	}
	if got := custom.res[custom.id(custom.stack.Outbox.Table)]["DeletionPolicy"]; got != "Delete" {
		t.Errorf("Destroy: DeletionPolicy = %v, want Delete", got)
	}
}

func TestApplicationTables(t *testing.T) {
	s := def.stack
	cases := []struct {
		name  string
		id    string
		ttl   string
		local *dynamodb.CreateTableInput // the shape the runtime and local stack use
	}{
		{"outbox", def.id(s.Outbox.Table), outbox.TTLAttribute, outbox.CreateTableInput("t")},
		{"orders", def.id(s.OrdersTable), "expires_at", order.CreateTableInput("t")},
		// the ledger's dedup markers expire by expires_at; its entries and
		// balances carry no such attribute
		{"ledger", def.id(s.Consumers[routing.ConsumerLedger].Table), dedup.TTLAttribute, ledger.CreateTableInput("t")},
		{"notifications", def.id(s.Consumers[routing.ConsumerNotifier].Table), notifier.TTLAttribute, notifier.CreateTableInput("t")},
		{"shipments", def.id(s.Consumers[routing.ConsumerFulfilment].Table), "", fulfilment.CreateTableInput("t")},
		{"idempotency", def.id(s.IdempotencyTable), idempotency.TTLAttribute, idempotency.CreateTableInput("t")},
	}
	for _, c := range cases {
		p := def.props(t, c.id)
		if !sameShape(t, p, c.local) {
			t.Errorf("%s table: keys %v / attributes %v / indexes %v differ from its package's CreateTableInput",
				c.name, p["KeySchema"], p["AttributeDefinitions"], p["GlobalSecondaryIndexes"])
		}
		if c.name == "orders" && c.ttl != order.TTLAttribute || c.name == "dedup" && c.ttl != dedup.TTLAttribute {
			t.Errorf("%s TTL attribute constant changed", c.name)
		}
		ttl := get(p, "TimeToLiveSpecification", "AttributeName")
		if c.ttl == "" && ttl != nil || c.ttl != "" && ttl != c.ttl {
			t.Errorf("%s TTL attribute = %v, want %q", c.name, ttl, c.ttl)
		}
	}
	// no shared dedup table: each consumer's state is in its own (e622f57)
	if n := len(def.ofType("AWS::DynamoDB::Table")); n != 6 {
		t.Errorf("%d tables, want 6", n)
	}
}

// sameShape compares a CloudFormation table's key schema, attribute
// definitions and GSIs (name, keys, projection) with a CreateTableInput.
func sameShape(t *testing.T, cfn map[string]any, in *dynamodb.CreateTableInput) bool {
	t.Helper()
	keys := func(ks []ddbtypes.KeySchemaElement) []any {
		var out []any
		for _, k := range ks {
			out = append(out, map[string]any{"AttributeName": *k.AttributeName, "KeyType": string(k.KeyType)})
		}
		return out
	}
	var attrs []any
	for _, a := range in.AttributeDefinitions {
		attrs = append(attrs, map[string]any{"AttributeName": *a.AttributeName, "AttributeType": string(a.AttributeType)})
	}
	var gsis []any
	for _, g := range in.GlobalSecondaryIndexes {
		proj := map[string]any{"ProjectionType": string(g.Projection.ProjectionType)}
		if len(g.Projection.NonKeyAttributes) > 0 {
			proj["NonKeyAttributes"] = g.Projection.NonKeyAttributes
		}
		gsis = append(gsis, map[string]any{
			"IndexName":  *g.IndexName,
			"KeySchema":  keys(g.KeySchema),
			"Projection": proj,
		})
	}
	byName := func(v any) any { // attribute definitions: order-insensitive
		l, _ := normalize(t, v).([]any)
		sort.Slice(l, func(i, j int) bool {
			return get(l[i], "AttributeName").(string) < get(l[j], "AttributeName").(string)
		})
		return l
	}
	return jsonEqual(t, cfn["KeySchema"], keys(in.KeySchema)) &&
		jsonEqual(t, byName(cfn["AttributeDefinitions"]), byName(attrs)) &&
		jsonEqual(t, cfn["GlobalSecondaryIndexes"], gsis)
}

func TestEveryTableEncryptedWithPITRAndNoPhysicalName(t *testing.T) {
	for _, id := range def.ofType("AWS::DynamoDB::Table") {
		p := def.props(t, id)
		if get(p, "SSESpecification", "SSEEnabled") != true {
			t.Errorf("%s: not encrypted with a KMS key: %v", id, p["SSESpecification"])
		}
		if get(p, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled") != true {
			t.Errorf("%s: PITR off", id)
		}
	}
}

func TestNoHardCodedPhysicalNames(t *testing.T) {
	names := map[string]string{
		"AWS::DynamoDB::Table":       "TableName",
		"AWS::Lambda::Function":      "FunctionName",
		"AWS::SQS::Queue":            "QueueName",
		"AWS::IAM::Role":             "RoleName",
		"AWS::Logs::LogGroup":        "LogGroupName",
		"AWS::CloudWatch::Alarm":     "AlarmName",
		"AWS::CloudWatch::Dashboard": "DashboardName",
		"AWS::Events::Rule":          "Name",
		"AWS::ApiGatewayV2::Api":     "Name",
	}
	for typ, prop := range names {
		for _, id := range def.ofType(typ) {
			v, ok := def.props(t, id)[prop]
			if !ok {
				continue
			}
			if typ == "AWS::ApiGatewayV2::Api" {
				continue // required by CloudFormation; the CDK derives it from the construct id
			}
			t.Errorf("%s %s has a physical name %s=%v", typ, id, prop, v)
		}
	}
}

func TestEventSourceMapping(t *testing.T) {
	ids := def.ofType("AWS::Lambda::EventSourceMapping")
	if want := 1 + len(def.stack.Consumers); len(ids) != want {
		t.Fatalf("%d event source mappings, want %d (the relay's and one per consumer)", len(ids), want)
	}
	ob := def.stack.Outbox
	p := def.props(t, mappingOf(t, def, def.id(ob.Relay)))
	want := map[string]any{
		"EventSourceArn":                 getAtt(def.id(ob.Table), "StreamArn"),
		"FunctionName":                   ref(def.id(ob.Relay)),
		"StartingPosition":               "TRIM_HORIZON",
		"BatchSize":                      outboxcdk.DefaultBatchSize,
		"MaximumBatchingWindowInSeconds": 0,
		"BisectBatchOnFunctionError":     true,
		"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
		"MaximumRetryAttempts":           outboxcdk.DefaultRetryAttempts,
		"MaximumRecordAgeInSeconds":      int(outboxcdk.DefaultMaxRecordAge / time.Second),
		"ParallelizationFactor":          1,
		"DestinationConfig": map[string]any{"OnFailure": map[string]any{
			"Destination": getAtt(def.id(ob.StreamFailureQueue.Queue), "Arn"),
		}},
	}
	for k, v := range want {
		if !jsonEqual(t, p[k], v) {
			t.Errorf("ESM %s = %v, want %v", k, normalize(t, p[k]), v)
		}
	}
	filters, _ := get(p, "FilterCriteria", "Filters").([]any)
	if len(filters) != 1 {
		t.Fatalf("FilterCriteria.Filters = %v, want one filter", filters)
	}
	var pattern any
	if err := json.Unmarshal([]byte(get(filters[0], "Pattern").(string)), &pattern); err != nil {
		t.Fatalf("filter Pattern is not JSON: %v", err)
	}
	if !jsonEqual(t, pattern, outbox.StreamFilterPattern()) {
		t.Errorf("filter pattern = %v, want outbox.StreamFilterPattern() = %v", pattern, normalize(t, outbox.StreamFilterPattern()))
	}
}

func TestEventSourceMappingCustomProps(t *testing.T) {
	p := custom.props(t, mappingOf(t, custom, custom.id(custom.stack.Outbox.Relay)))
	want := map[string]any{
		"BatchSize":                      500,
		"MaximumBatchingWindowInSeconds": 30,
		"MaximumRetryAttempts":           3,
		"MaximumRecordAgeInSeconds":      600,
		"ParallelizationFactor":          1,
	}
	for k, v := range want {
		if !jsonEqual(t, p[k], v) {
			t.Errorf("custom ESM %s = %v, want %v", k, p[k], v)
		}
	}
}

func TestConsumerRulesMatchRouting(t *testing.T) {
	s := def.stack
	busID := def.id(s.Bus)
	onBus := map[string]map[string]any{}
	for _, id := range def.ofType("AWS::Events::Rule") {
		p := def.props(t, id)
		if jsonEqual(t, p["EventBusName"], ref(busID)) {
			onBus[id] = p
		}
	}
	if len(onBus) != len(routing.Rules()) {
		t.Errorf("%d rules on the bus, want one per routing rule (%d)", len(onBus), len(routing.Rules()))
	}
	for _, r := range routing.Rules() {
		id := def.id(s.Rules[r.Name])
		p, ok := onBus[id]
		if !ok {
			t.Errorf("rule %s (%s) is not on the bus", r.Name, id)
			continue
		}
		if !jsonEqual(t, p["EventPattern"], r.Pattern(appenv.EventSource)) {
			t.Errorf("rule %s pattern = %v, want %v", r.Name, p["EventPattern"], normalize(t, r.Pattern(appenv.EventSource)))
		}
		targets, _ := p["Targets"].([]any)
		if len(targets) != 1 {
			t.Fatalf("rule %s has %d targets, want 1", r.Name, len(targets))
		}
		tg := targets[0]
		if !jsonEqual(t, get(tg, "Arn"), getAtt(def.id(s.Consumers[r.Consumer].Queue), "Arn")) {
			t.Errorf("rule %s target = %v, want the queue of consumer %s", r.Name, get(tg, "Arn"), r.Consumer)
		}
		wantRetry := map[string]any{
			"MaximumEventAgeInSeconds": int(DefaultConsumerMaxEventAge / time.Second),
			"MaximumRetryAttempts":     DefaultConsumerRetryAttempts,
		}
		if !jsonEqual(t, get(tg, "RetryPolicy"), wantRetry) {
			t.Errorf("rule %s RetryPolicy = %v, want %v", r.Name, get(tg, "RetryPolicy"), wantRetry)
		}
		if !jsonEqual(t, get(tg, "DeadLetterConfig", "Arn"), getAtt(def.id(s.RuleDLQs[r.Name].Queue), "Arn")) {
			t.Errorf("rule %s DeadLetterConfig = %v", r.Name, get(tg, "DeadLetterConfig"))
		}
	}
	// a custom event source flows into the patterns and the env
	for _, r := range routing.Rules() {
		p := custom.props(t, custom.id(custom.stack.Rules[r.Name]))
		if !jsonEqual(t, p["EventPattern"], r.Pattern("com.example.custom")) {
			t.Errorf("custom rule %s pattern = %v", r.Name, p["EventPattern"])
		}
	}
}

func TestReconcilerSchedule(t *testing.T) {
	check := func(s *synthesized, expr string) {
		t.Helper()
		id := s.id(s.stack.Outbox.ReconcileSchedule)
		p := s.props(t, id)
		if p["ScheduleExpression"] != expr {
			t.Errorf("schedule = %v, want %s", p["ScheduleExpression"], expr)
		}
		if !jsonEqual(t, get(p, "Targets", 0, "Arn"), getAtt(s.id(s.stack.Outbox.Reconciler), "Arn")) {
			t.Errorf("schedule target = %v, want the reconciler", get(p, "Targets", 0, "Arn"))
		}
	}
	check(def, "rate(5 minutes)")
	check(custom, "rate(10 minutes)")
}

func TestFunctionsAreGoOnArm(t *testing.T) {
	ids := def.ofType("AWS::Lambda::Function")
	if len(ids) != 6 {
		t.Errorf("%d functions, want 6", len(ids))
	}
	for _, id := range ids {
		p := def.props(t, id)
		if p["Runtime"] != "provided.al2023" || p["Handler"] != "bootstrap" || !jsonEqual(t, p["Architectures"], []any{"arm64"}) {
			t.Errorf("%s: runtime %v handler %v arch %v", id, p["Runtime"], p["Handler"], p["Architectures"])
		}
	}
}

func TestLogRetentionOnEveryFunction(t *testing.T) {
	for _, id := range def.ofType("AWS::Lambda::Function") {
		lg := get(def.props(t, id), "LoggingConfig", "LogGroup", "Ref")
		if lg == nil {
			t.Errorf("%s has no explicit log group", id)
			continue
		}
		if d := get(def.props(t, lg.(string)), "RetentionInDays"); d != float64(30) {
			t.Errorf("%s log group %s retention = %v, want 30 days", id, lg, d)
		}
	}
	for _, id := range def.ofType("AWS::Logs::LogGroup") {
		if get(def.props(t, id), "RetentionInDays") == nil {
			t.Errorf("log group %s keeps logs forever", id)
		}
	}
}

func TestEnvironmentVariables(t *testing.T) {
	s := def.stack
	ob := s.Outbox
	outboxEnv := map[string]any{
		config.EnvOutboxTable:   ref(def.id(ob.Table)),
		config.EnvPendingShards: strconv.Itoa(config.DefaultPendingShards),
		config.EnvEventSource:   appenv.EventSource,
		config.EnvMaxEntryBytes: strconv.Itoa(config.DefaultMaxEntryBytes),
	}
	publish := map[string]any{
		config.EnvEventBusName:              ref(def.id(s.Bus)),
		config.EnvParkedQueueURL:            ref(def.id(ob.ParkedQueue.Queue)),
		config.EnvPublishedRetentionSeconds: strconv.Itoa(int(config.DefaultPublishedRetention / time.Second)),
	}
	merge := func(ms ...map[string]any) map[string]any {
		out := map[string]any{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	// the consumer construct names its state table in
	// config.EnvConsumerTable: the consumer's own table, or the
	// fulfilment's idempotency table
	consumer := func(name, env string) map[string]any {
		state := ref(def.id(s.Consumers[name].Table))
		if name == routing.ConsumerFulfilment {
			state = ref(def.id(s.IdempotencyTable))
		}
		return map[string]any{
			env:                      ref(def.id(s.Consumers[name].Table)),
			config.EnvConsumerTable:  state,
			config.EnvConsumerName:   name,
			config.EnvEventSource:    appenv.EventSource,
			config.EnvConsumerDLQURL: ref(def.id(s.Consumers[name].DLQ.Queue)),
			// events from another account are refused
			config.EnvExpectedEventAccount: ref("AWS::AccountId"),
		}
	}
	cases := map[string]struct {
		id   string
		want map[string]any
	}{
		"api": {def.id(s.APIFunction), merge(outboxEnv, map[string]any{
			appenv.EnvOrdersTable:   ref(def.id(s.OrdersTable)),
			appenv.EnvAPICallerMode: appenv.APICallerModeIAMOnly,
		})},
		"relay": {def.id(ob.Relay), merge(outboxEnv, publish)},
		"reconciler": {def.id(ob.Reconciler), merge(outboxEnv, publish, map[string]any{
			config.EnvReconcileAfterSeconds:  strconv.Itoa(int(config.DefaultReconcileAfter / time.Second)),
			config.EnvReconcileBudgetSeconds: strconv.Itoa(int(config.DefaultReconcileBudget / time.Second)),
		})},
		// their dedup state lives in their own table: no DEDUP_TABLE_NAME
		"ledger": {def.id(s.Consumers[routing.ConsumerLedger].Function), consumer(routing.ConsumerLedger, appenv.EnvLedgerTable)},
		"notifier": {def.id(s.Consumers[routing.ConsumerNotifier].Function), merge(consumer(routing.ConsumerNotifier, appenv.EnvNotificationsTable), map[string]any{
			appenv.EnvNotificationRetentionSeconds: strconv.Itoa(int(appenv.DefaultNotificationRetention / time.Second)),
		})},
		// no dedup table: its idempotency records live in their own table
		"fulfilment": {def.id(s.Consumers[routing.ConsumerFulfilment].Function), merge(consumer(routing.ConsumerFulfilment, appenv.EnvShipmentsTable), map[string]any{
			appenv.EnvIdempotencyTable:  ref(def.id(s.IdempotencyTable)),
			appenv.EnvProviderURL:       DefaultFulfilmentProviderURL,
			appenv.EnvProviderSecretARN: ref(def.id(s.ProviderSecret)),
		})},
	}
	for name, c := range cases {
		got := get(def.props(t, c.id), "Environment", "Variables")
		if !jsonEqual(t, got, c.want) {
			t.Errorf("%s env = %v\nwant %v", name, got, normalize(t, c.want))
		}
	}
	got := get(custom.props(t, custom.id(custom.stack.Outbox.Relay)), "Environment", "Variables", config.EnvPendingShards)
	if got != "32" {
		t.Errorf("custom %s = %v, want 32", config.EnvPendingShards, got)
	}
	got = get(custom.props(t, custom.id(custom.stack.APIFunction)), "Environment", "Variables", config.EnvEventSource)
	if got != "com.example.custom" {
		t.Errorf("custom api %s = %v", config.EnvEventSource, got)
	}
	// auth mode NONE: the api serves unauthenticated requests as the anonymous caller
	got = get(custom.props(t, custom.id(custom.stack.APIFunction)), "Environment", "Variables", appenv.EnvAPICallerMode)
	if got != appenv.APICallerModeOpenDemo {
		t.Errorf("custom api %s = %v, want %s", appenv.EnvAPICallerMode, got, appenv.APICallerModeOpenDemo)
	}
}

// statement is one IAM policy statement with its role's logical id.
type statement struct {
	role      string
	actions   []string
	resources []any
}

func statements(t *testing.T, s *synthesized) []statement {
	var out []statement
	for _, id := range s.ofType("AWS::IAM::Policy") {
		p := s.props(t, id)
		role, _ := get(p, "Roles", 0, "Ref").(string)
		for _, st := range get(p, "PolicyDocument", "Statement").([]any) {
			if get(st, "Effect") != "Allow" {
				continue
			}
			var acts []string
			for _, a := range strs(get(st, "Action")) {
				acts = append(acts, a.(string))
			}
			out = append(out, statement{role: role, actions: acts, resources: strs(get(st, "Resource"))})
		}
	}
	return out
}

func TestIAMHasNoWildcardActionsAndScopedResources(t *testing.T) {
	for _, s := range []*synthesized{def, custom, dropIn} {
		sts := statements(t, s)
		if len(sts) == 0 {
			t.Fatal("no IAM statements found")
		}
		for _, st := range sts {
			for _, a := range st.actions {
				if strings.Contains(a, "*") {
					t.Errorf("%s: wildcard action %q", st.role, a)
				}
				if a == "cloudwatch:PutMetricData" {
					t.Errorf("%s: PutMetricData granted; metrics go through EMF logs", st.role)
				}
			}
			for _, r := range st.resources {
				// actions without resource-level permissions: the stream event
				// source mapping's ListStreams and X-Ray active tracing's writes
				if r == "*" && !slices.Equal(st.actions, []string{"dynamodb:ListStreams"}) &&
					!slices.Equal(st.actions, []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"}) {
					t.Errorf("%s: resource * for %v", st.role, st.actions)
				}
			}
		}
		for _, id := range s.ofType("AWS::IAM::Role") {
			if mp := s.props(t, id)["ManagedPolicyArns"]; mp != nil {
				t.Errorf("role %s uses managed policies %v", id, mp)
			}
		}
	}
}

// granted reports whether role has a statement allowing exactly actions on
// a resource equal (as JSON) to res.
func granted(t *testing.T, s *synthesized, role string, actions []string, res any) bool {
	for _, st := range statements(t, s) {
		if st.role != role {
			continue
		}
		a := slices.Clone(st.actions)
		sort.Strings(a)
		b := slices.Clone(actions)
		sort.Strings(b)
		if slices.Equal(a, b) && len(st.resources) == 1 && jsonEqual(t, st.resources[0], res) {
			return true
		}
	}
	return false
}

func roleOf(t *testing.T, s *synthesized, fnID string) string {
	return get(s.props(t, fnID), "Role", "Fn::GetAtt", 0).(string)
}

func TestLeastPrivilegeGrants(t *testing.T) {
	s := def.stack
	ob := s.Outbox
	table := getAtt(def.id(ob.Table), "Arn")
	index := map[string]any{"Fn::Join": []any{"", []any{table, "/index/" + outbox.PendingIndexName}}}
	bus := getAtt(def.id(s.Bus), "Arn")
	parked := getAtt(def.id(ob.ParkedQueue.Queue), "Arn")
	relay := roleOf(t, def, def.id(ob.Relay))
	reconciler := roleOf(t, def, def.id(ob.Reconciler))
	api := roleOf(t, def, def.id(s.APIFunction))
	cases := []struct {
		name    string
		role    string
		actions []string
		res     any
	}{
		{"relay publishes", relay, []string{"events:PutEvents"}, bus},
		{"relay marks", relay, []string{"dynamodb:UpdateItem", "dynamodb:PartiQLUpdate"}, table},
		{"relay parks", relay, []string{"sqs:SendMessage"}, parked},
		{"relay reads the stream", relay, []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, getAtt(def.id(ob.Table), "StreamArn")},
		{"reconciler publishes", reconciler, []string{"events:PutEvents"}, bus},
		{"reconciler marks", reconciler, []string{"dynamodb:UpdateItem", "dynamodb:PartiQLUpdate"}, table},
		{"reconciler parks", reconciler, []string{"sqs:SendMessage"}, parked},
		{"reconciler queries the pending index", reconciler, []string{"dynamodb:Query"}, index},
		{"api writes outbox records", api, []string{"dynamodb:PutItem"}, table},
		{"api uses the orders table", api, []string{"dynamodb:GetItem", "dynamodb:PutItem"}, getAtt(def.id(s.OrdersTable), "Arn")},
	}
	for _, c := range cases {
		if !granted(t, def, c.role, c.actions, c.res) {
			t.Errorf("%s: no statement %v on %v", c.name, c.actions, c.res)
		}
	}
	// the api must not read the stream or touch the bus
	for _, st := range statements(t, def) {
		if st.role == api && (mentions(t, st.actions, "events:") || mentions(t, st.actions, "GetRecords")) {
			t.Errorf("api has %v", st.actions)
		}
	}
}

func TestAPIRoutesRequireIAMAuthorization(t *testing.T) {
	check := func(s *synthesized, wantAuth string) {
		t.Helper()
		var keys []string
		for _, id := range s.ofType("AWS::ApiGatewayV2::Route") {
			p := s.props(t, id)
			keys = append(keys, p["RouteKey"].(string))
			if p["AuthorizationType"] != wantAuth {
				t.Errorf("route %v AuthorizationType = %v, want %s", p["RouteKey"], p["AuthorizationType"], wantAuth)
			}
		}
		want := []string{"$default"}
		for _, r := range Routes {
			want = append(want, string(r.Method)+" "+r.Path)
		}
		sort.Strings(keys)
		sort.Strings(want)
		if !slices.Equal(keys, want) {
			t.Errorf("route keys = %v, want %v", keys, want)
		}
	}
	check(def, "AWS_IAM")
	check(custom, "NONE")
	def.has(t, "AWS::ApiGatewayV2::Integration", map[string]any{
		"IntegrationType":      "AWS_PROXY",
		"PayloadFormatVersion": "2.0",
		"IntegrationUri":       getAtt(def.id(def.stack.APIFunction), "Arn"),
	})
	stage := def.props(t, def.ofType("AWS::ApiGatewayV2::Stage")[0])
	if stage["StageName"] != "$default" || stage["AutoDeploy"] != true {
		t.Errorf("stage = %v", stage)
	}
	if get(stage, "AccessLogSettings", "DestinationArn") == nil {
		t.Error("stage has no access log")
	}
	if get(stage, "DefaultRouteSettings", "ThrottlingRateLimit") != float64(DefaultThrottleRate) {
		t.Errorf("stage throttling = %v", stage["DefaultRouteSettings"])
	}
}

func TestQueuesEncryptedAndTLSOnly(t *testing.T) {
	queues := def.ofType("AWS::SQS::Queue")
	// parked, stream on-failure, reconciler on-failure, schedule DLQ, one
	// DLQ per routing rule, a queue and a DLQ per consumer, a sweep
	// schedule DLQ per ordered consumer
	sweeps := 0
	for _, c := range def.stack.Consumers {
		if c.Resequencer != nil {
			sweeps++
		}
	}
	if want := 4 + len(routing.Rules()) + 2*len(def.stack.Consumers) + sweeps; len(queues) != want {
		t.Errorf("%d queues, want %d", len(queues), want)
	}
	for _, id := range queues {
		if def.props(t, id)["SqsManagedSseEnabled"] != true {
			t.Errorf("queue %s is not encrypted", id)
		}
		// an EventBridge event of a 256 KB entry exceeds 256 KiB once
		// wrapped; every queue takes the SQS maximum
		if got := def.props(t, id)["MaximumMessageSize"]; got != float64(deadletter.MaxMessageBytes) {
			t.Errorf("queue %s MaximumMessageSize = %v, want %d", id, got, deadletter.MaxMessageBytes)
		}
		found := false
		for _, pid := range def.ofType("AWS::SQS::QueuePolicy") {
			p := def.props(t, pid)
			if mentions(t, p["Queues"], id) && mentions(t, p["PolicyDocument"], "aws:SecureTransport") {
				found = true
			}
		}
		if !found {
			t.Errorf("queue %s has no TLS-only policy", id)
		}
	}
}

// alarmOn returns the alarms whose metric is (namespace, name) with the given
// dimension value.
func alarmsOn(t *testing.T, s *synthesized, namespace, name string, dim any) []map[string]any {
	var out []map[string]any
	for _, id := range s.ofType("AWS::CloudWatch::Alarm") {
		p := s.props(t, id)
		if p["Namespace"] == namespace && p["MetricName"] == name && jsonEqual(t, get(p, "Dimensions", 0, "Value"), dim) {
			out = append(out, p)
		}
	}
	return out
}

func TestAlarms(t *testing.T) {
	s := def.stack
	ob := s.Outbox
	one := func(what string, ps []map[string]any, cmp string, threshold float64) {
		t.Helper()
		if len(ps) != 1 {
			t.Errorf("%s: %d alarms, want 1", what, len(ps))
			return
		}
		if ps[0]["ComparisonOperator"] != cmp || ps[0]["Threshold"] != threshold {
			t.Errorf("%s: %v %v, want %s %v", what, ps[0]["ComparisonOperator"], ps[0]["Threshold"], cmp, threshold)
		}
	}
	relay := ref(def.id(ob.Relay))
	one("relay errors", alarmsOn(t, def, "AWS/Lambda", "Errors", relay), "GreaterThanOrEqualToThreshold", 1)
	one("iterator age", alarmsOn(t, def, "AWS/Lambda", "IteratorAge", relay), "GreaterThanThreshold",
		float64(outboxcdk.DefaultIteratorAgeThreshold.Milliseconds()))
	table := ref(def.id(ob.Table))
	pending := alarmsOn(t, def, config.MetricNamespace, config.MetricOldestPendingAge, table)
	one("oldest pending age", pending, "GreaterThanThreshold", outboxcdk.DefaultOldestPendingThreshold.Seconds())
	if len(pending) == 1 && get(pending[0], "Dimensions", 0, "Name") != config.MetricDimensionOutboxTable {
		t.Errorf("oldest pending dimension = %v", pending[0]["Dimensions"])
	}
	one("reconciler resent", alarmsOn(t, def, config.MetricNamespace, config.MetricReconcilerResent, table), "GreaterThanThreshold", 0)
	consumerQueues := map[string]bool{}
	for name, c := range s.Consumers {
		id := def.id(c.Queue)
		consumerQueues[id] = true
		one("consumer queue "+name+" oldest message", alarmsOn(t, def, "AWS/SQS", "ApproximateAgeOfOldestMessage", getAtt(id, "QueueName")),
			"GreaterThanThreshold", ConsumerOldestMessageThreshold.Seconds())
	}
	// every dead-letter queue alarms on its first visible message
	for _, id := range def.ofType("AWS::SQS::Queue") {
		if consumerQueues[id] {
			continue
		}
		one("DLQ "+id, alarmsOn(t, def, "AWS/SQS", "ApproximateNumberOfMessagesVisible", getAtt(id, "QueueName")), "GreaterThanThreshold", 0)
	}

	// the dashboard shows the same signals
	dash := def.ofType("AWS::CloudWatch::Dashboard")
	if len(dash) != 1 {
		t.Fatalf("%d dashboards, want 1", len(dash))
	}
	body := def.props(t, dash[0])["DashboardBody"]
	for _, m := range []string{config.MetricOldestPendingAge, config.MetricReconcilerResent, "IteratorAge", "ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "Errors"} {
		if !mentions(t, body, m) {
			t.Errorf("dashboard does not show %s", m)
		}
	}
}

func TestOutputs(t *testing.T) {
	outs, _ := def.json["Outputs"].(map[string]any)
	for _, k := range []string{"ApiUrl", "EventBusName", "OrdersTableName", "OutboxTableName", "LedgerTableName", "NotificationsTableName",
		"LedgerQueueUrl", "LedgerDlqUrl", "NotifierQueueUrl", "NotifierDlqUrl",
		"ShipmentsTableName", "IdempotencyTableName", "FulfilmentQueueUrl", "FulfilmentDlqUrl", "ProviderSecretArn"} {
		if _, ok := outs[k]; !ok {
			t.Errorf("missing output %s", k)
		}
	}
	// each routing rule's ARN and DLQ, what outboxctl rule-dlq-redrive
	// takes (-rule, -dlq)
	for _, r := range routing.Rules() {
		id := idOf(r.Name)
		if !jsonEqual(t, get(outs, id+"RuleArn", "Value"), getAtt(def.id(def.stack.Rules[r.Name]), "Arn")) {
			t.Errorf("output %sRuleArn = %v, want rule %s's ARN", id, get(outs, id+"RuleArn"), r.Name)
		}
		if !jsonEqual(t, get(outs, id+"RuleDlqUrl", "Value"), ref(def.id(def.stack.RuleDLQs[r.Name].Queue))) {
			t.Errorf("output %sRuleDlqUrl = %v, want rule %s's DLQ", id, get(outs, id+"RuleDlqUrl"), r.Name)
		}
	}
}

func TestOutboxConstructDropIn(t *testing.T) {
	ob := dropInOb
	// the writer got the outbox env and exactly PutItem on the table
	env := get(dropIn.props(t, dropInFn), "Environment", "Variables")
	for _, k := range []string{config.EnvOutboxTable, config.EnvPendingShards, config.EnvEventSource, config.EnvMaxEntryBytes} {
		if get(env, k) == nil {
			t.Errorf("writer env lacks %s: %v", k, env)
		}
	}
	if !granted(t, dropIn, roleOf(t, dropIn, dropInFn), outboxcdk.WriteEventsActions, getAtt(dropIn.id(ob.Table), "Arn")) {
		t.Error("writer lacks PutItem on the outbox table")
	}
	// every alarm notifies the topic
	alarms := dropIn.ofType("AWS::CloudWatch::Alarm")
	if len(alarms) != len(ob.Alarms) || len(alarms) < 7 {
		t.Errorf("%d alarms in template, %d in construct", len(alarms), len(ob.Alarms))
	}
	for _, id := range alarms {
		p := dropIn.props(t, id)
		if len(strs(p["AlarmActions"])) != 1 || p["AlarmActions"] == nil {
			t.Errorf("alarm %s actions = %v", id, p["AlarmActions"])
		}
	}
	if got := alarmsOn(t, dropIn, config.MetricNamespace, config.MetricOldestPendingAge, ref(dropIn.id(ob.Table))); len(got) != 1 || got[0]["Threshold"] != float64(1200) {
		t.Errorf("oldest pending alarm = %v", got)
	}
}

func TestStackPropsValidation(t *testing.T) {
	cases := []struct {
		name string
		p    OrdersStackProps
		ok   bool
	}{
		{"defaults", OrdersStackProps{AssetRoot: "x"}, true},
		{"no asset root", OrdersStackProps{}, false},
		{"bad auth", OrdersStackProps{AssetRoot: "x", AuthMode: "COGNITO"}, false},
		{"explicit none", OrdersStackProps{AssetRoot: "x", AuthMode: AuthNone, StackName: "Demo"}, true},
		{"none on the default stack", OrdersStackProps{AssetRoot: "x", AuthMode: AuthNone}, false},
		{"none named like the default", OrdersStackProps{AssetRoot: "x", AuthMode: AuthNone, StackName: DefaultStackName}, false},
		{"route throttle", OrdersStackProps{AssetRoot: "x", RouteThrottles: map[string]Throttle{"POST /orders": {10, 20}}}, true},
		{"unknown route throttle", OrdersStackProps{AssetRoot: "x", RouteThrottles: map[string]Throttle{"DELETE /orders": {10, 20}}}, false},
		{"zero route throttle", OrdersStackProps{AssetRoot: "x", RouteThrottles: map[string]Throttle{"POST /orders": {0, 20}}}, false},
		{"no reservation", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"api": NoReservedConcurrency}}, true},
		{"reconciler concurrency 2", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"reconciler": 2}}, false},
		{"reconciler unreserved", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"reconciler": NoReservedConcurrency}}, true},
		{"consumer below mapping concurrency", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"ledger": 1}}, false},
		{"consumer below its own mapping concurrency", OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{MaxConcurrency: 40}, ReservedConcurrency: map[string]int{"ledger": 30}}, false},
		{"consumer at its own mapping concurrency", OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{MaxConcurrency: 2}, ReservedConcurrency: map[string]int{"ledger": 2}, AccountConcurrency: 1000}, true},
		{"consumer below provisioned peak", OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{Provisioned: &outboxcdk.ProvisionedPollers{Minimum: 2, Maximum: 5}}, ReservedConcurrency: map[string]int{"ledger": 49}}, false},
		// issue 32: no reservation is the default; a consumer without one
		// is no longer refused (AcceptConsumerThrottles is ignored)
		{"consumer unreserved", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"ledger": NoReservedConcurrency}}, true},
		{"nothing reserved", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{AllFunctions: NoReservedConcurrency}}, true},
		{"reservation without a quota", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"api": 5}}, false},
		{"reservation with a quota", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"api": 5}, AccountConcurrency: 105}, true},
		{"both scaling modes", OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{MaxConcurrency: 5, Provisioned: &outboxcdk.ProvisionedPollers{Minimum: 2, Maximum: 5}}}, false},
		{"max concurrency 1", OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{MaxConcurrency: 1}}, false},
		{"alarm topic", OrdersStackProps{AssetRoot: "x", AlarmTopicArn: "arn:aws:sns:eu-west-1:123456789012:ops"}, true},
		{"FIFO alarm topic", OrdersStackProps{AssetRoot: "x", AlarmTopicArn: "arn:aws:sns:eu-west-1:123456789012:ops.fifo"}, false},
		{"alarm topic not an ARN", OrdersStackProps{AssetRoot: "x", AlarmTopicArn: "ops"}, false},
		{"negative account concurrency", OrdersStackProps{AssetRoot: "x", AccountConcurrency: -1}, false},
		{"unknown function", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"mailer": 3}}, false},
		{"concurrency too high", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: map[string]int{"api": 1001}}, false},
		{"4xx rate over 100", OrdersStackProps{AssetRoot: "x", API4xxRatePercent: 101}, false},
		{"wildcard publisher", OrdersStackProps{AssetRoot: "x", PublisherArns: []string{"arn:aws:iam::123456789012:role/*"}}, false},
		{"not an ARN", OrdersStackProps{AssetRoot: "x", RedriveRoleArns: []string{"ops"}}, false},
		{"event age too short", OrdersStackProps{AssetRoot: "x", ConsumerMaxEventAge: 59 * time.Second}, false},
		{"event age too long", OrdersStackProps{AssetRoot: "x", ConsumerMaxEventAge: 25 * time.Hour}, false},
		{"retries too many", OrdersStackProps{AssetRoot: "x", ConsumerRetryAttempts: 186}, false},
		{"negative throttle", OrdersStackProps{AssetRoot: "x", ThrottleRate: -1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.p.Validate()
			if c.ok && err != nil {
				t.Errorf("Validate() = %v", err)
			}
			if !c.ok && !errors.Is(err, ErrInvalidProps) {
				t.Errorf("Validate() = %v, want ErrInvalidProps", err)
			}
		})
	}
}

func TestNewOrdersStackErrors(t *testing.T) {
	app := awscdk.NewApp(nil)
	if _, err := NewOrdersStack(app, "Bad", OrdersStackProps{AssetRoot: assetRoot, Outbox: outboxcdk.Props{BatchSize: 10001}}); !errors.Is(err, outboxcdk.ErrInvalidProps) {
		t.Errorf("batch size 10001: err = %v, want outboxcdk.ErrInvalidProps", err)
	}
	empty := t.TempDir()
	if _, err := NewOrdersStack(app, "Unbuilt", OrdersStackProps{AssetRoot: empty}); !errors.Is(err, gofunc.ErrMissingBootstrap) {
		t.Errorf("missing bootstrap: err = %v, want gofunc.ErrMissingBootstrap", err)
	}
}
