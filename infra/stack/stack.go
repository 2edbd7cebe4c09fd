// Package stack is the orders application stack: an HTTP API in front of the
// api function, the orders table, the reusable Outbox construct
// (infra/outboxcdk), an EventBridge custom bus with one rule per consumer
// generated from routing.Rules(), the ledger and notifier consumers with
// their tables, dead-letter queues, alarms and a dashboard.
package stack

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/notifier"
	"github.com/ddb-outbox/ddb-outbox/pkg/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/routing"
)

// Function names: functions/<name> compiled to <AssetRoot>/<name>/bootstrap.
const (
	APIFunction = "api"
)

// Route is one HTTP API route served by the api function.
type Route struct {
	// Method is the HTTP method.
	Method awsapigatewayv2.HttpMethod
	// Path is the route path; {id} is a path parameter.
	Path string
}

// Routes are the HTTP API routes (payload format 2.0, all to the api function).
var Routes = []Route{
	{awsapigatewayv2.HttpMethod_POST, "/orders"},
	{awsapigatewayv2.HttpMethod_POST, "/orders/{id}/pay"},
	{awsapigatewayv2.HttpMethod_POST, "/orders/{id}/ship"},
	{awsapigatewayv2.HttpMethod_POST, "/orders/{id}/cancel"},
	{awsapigatewayv2.HttpMethod_GET, "/orders/{id}"},
}

// Table access granted to the functions (no wildcards).
var (
	// OrdersTableActions: the api reads orders and writes them in the same
	// TransactWriteItems call as the outbox Put.
	OrdersTableActions = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}
	// DedupTableActions: a consumer puts its dedup marker (conditional Put
	// inside its transaction) and may read it back.
	DedupTableActions = []string{"dynamodb:PutItem", "dynamodb:GetItem"}
	// ConsumerTableActions: a consumer's side effect on its own table.
	ConsumerTableActions = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
)

// Consumer is one event consumer: its function, table and rule(s).
type Consumer struct {
	// Function is the consumer's Lambda function.
	Function awslambda.Function
	// Table is the consumer's own side-effect table.
	Table awsdynamodb.Table
}

// OrdersStack is the synthesized application stack and its main parts.
type OrdersStack struct {
	awscdk.Stack

	// Outbox is the outbox construct (table, relay, reconciler, DLQs, alarms).
	Outbox *outboxcdk.Outbox
	// API is the HTTP API and Stage its $default stage.
	API   awsapigatewayv2.HttpApi
	Stage awsapigatewayv2.HttpStage
	// APIFunction serves every route.
	APIFunction awslambda.Function
	// Bus is the custom event bus the outbox publishes to.
	Bus awsevents.EventBus
	// OrdersTable holds the order aggregates; DedupTable the consumers'
	// dedup markers.
	OrdersTable awsdynamodb.Table
	DedupTable  awsdynamodb.Table
	// Consumers by name (routing.ConsumerLedger, routing.ConsumerNotifier).
	Consumers map[string]*Consumer
	// Rules by routing rule name, and their targets' DLQs.
	Rules    map[string]awsevents.Rule
	RuleDLQs map[string]*deadletter.Queue
	// Alarms lists every alarm in the stack, the outbox construct's included.
	Alarms []awscloudwatch.Alarm
	// Dashboard shows the API, outbox and consumer signals and all alarms.
	Dashboard awscloudwatch.Dashboard

	props OrdersStackProps
}

// consumerTables names each consumer's table, its partition key attribute
// and its env var.
var consumerTables = map[string]struct{ id, pk, env string }{
	routing.ConsumerLedger:   {"LedgerTable", ledger.AttrPK, config.EnvLedgerTable},
	routing.ConsumerNotifier: {"NotificationsTable", notifier.AttrPK, config.EnvNotificationsTable},
}

// NewOrdersStack creates the stack id under scope. It returns an error
// wrapping ErrInvalidProps or outboxcdk.ErrInvalidProps for invalid props,
// gofunc.ErrMissingBootstrap when a function has not been built, and an
// error when routing.Rules() names an unknown consumer or uses a pattern key
// the stack cannot express.
func NewOrdersStack(scope constructs.Construct, id string, props OrdersStackProps) (*OrdersStack, error) {
	if err := props.Validate(); err != nil {
		return nil, err
	}
	props.SetDefaults()
	removal := props.removalPolicy()
	sp := props.StackProps
	if sp.Description == nil {
		sp.Description = jsii.String("ddb-outbox: orders API with a DynamoDB transactional outbox relayed to EventBridge")
	}
	st := awscdk.NewStack(scope, jsii.String(id), &sp)
	s := &OrdersStack{
		Stack:     st,
		Consumers: map[string]*Consumer{},
		Rules:     map[string]awsevents.Rule{},
		RuleDLQs:  map[string]*deadletter.Queue{},
		props:     props,
	}

	s.Bus = awsevents.NewEventBus(st, jsii.String("Bus"), &awsevents.EventBusProps{
		Description: jsii.String("ddb-outbox order events"),
	})

	op := props.Outbox
	op.EventBus = s.Bus
	op.AssetRoot = props.AssetRoot
	if props.EventSource != "" {
		op.EventSource = props.EventSource
	}
	op.RemovalPolicy = removal
	op.LogRetention = props.LogRetention
	ob, err := outboxcdk.New(st, "Outbox", op)
	if err != nil {
		return nil, err
	}
	s.Outbox = ob
	source := ob.Props().EventSource

	s.OrdersTable = newTable(st, "OrdersTable", order.AttrPK, order.TTLAttribute, removal)
	s.DedupTable = newTable(st, "DedupTable", dedup.AttrPK, dedup.TTLAttribute, removal)

	fn := func(name, desc string) (awslambda.Function, error) {
		return gofunc.New(st, idOf(name), gofunc.Props{
			AssetDir:      filepath.Join(props.AssetRoot, name),
			Description:   desc,
			LogRetention:  props.LogRetention,
			RemovalPolicy: removal,
		})
	}
	s.APIFunction, err = fn(APIFunction, "Orders HTTP API: validates commands and commits order + outbox event in one transaction.")
	if err != nil {
		return nil, err
	}
	s.APIFunction.AddEnvironment(jsii.String(config.EnvOrdersTable), s.OrdersTable.TableName(), nil)
	grant(s.APIFunction, OrdersTableActions, s.OrdersTable.TableArn())
	ob.GrantWriteEvents(s.APIFunction)

	for _, name := range []string{routing.ConsumerLedger, routing.ConsumerNotifier} {
		t := consumerTables[name]
		cf, err := fn(name, "Event consumer "+name+": applies each order event once (dedup marker + side effect in one transaction).")
		if err != nil {
			return nil, err
		}
		table := newTable(st, t.id, t.pk, "", removal)
		cf.AddEnvironment(jsii.String(config.EnvDedupTable), s.DedupTable.TableName(), nil)
		cf.AddEnvironment(jsii.String(t.env), table.TableName(), nil)
		cf.AddEnvironment(jsii.String(config.EnvEventSource), jsii.String(source), nil)
		grant(cf, DedupTableActions, s.DedupTable.TableArn())
		grant(cf, ConsumerTableActions, table.TableArn())
		s.Consumers[name] = &Consumer{Function: cf, Table: table}
	}

	for _, r := range routing.Rules() {
		c, ok := s.Consumers[r.Consumer]
		if !ok {
			return nil, fmt.Errorf("stack: routing rule %s targets unknown consumer %q", r.Name, r.Consumer)
		}
		pattern, err := eventPattern(r.Pattern(source))
		if err != nil {
			return nil, fmt.Errorf("stack: routing rule %s: %w", r.Name, err)
		}
		cid := idOf(r.Name)
		dlq := deadletter.New(st, cid+"DLQ", "events EventBridge could not deliver to "+r.Consumer+" (rule "+r.Name+")", removal)
		rule := awsevents.NewRule(st, jsii.String(cid+"Rule"), &awsevents.RuleProps{
			EventBus:     s.Bus,
			Description:  jsii.String("Routes " + r.Name + " events to consumer " + r.Consumer + " (routing.Rules)."),
			EventPattern: pattern,
			Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(c.Function, &awseventstargets.LambdaFunctionProps{
				DeadLetterQueue: dlq.Queue,
				MaxEventAge:     awscdk.Duration_Seconds(jsii.Number(props.ConsumerMaxEventAge.Seconds())),
				RetryAttempts:   jsii.Number(props.ConsumerRetryAttempts),
			})},
		})
		s.Rules[r.Name] = rule
		s.RuleDLQs[r.Name] = dlq
	}

	s.addAPI(removal)
	s.addAlarmsAndDashboard()
	s.addOutputs()
	return s, nil
}

// Props returns the stack's effective props (defaults applied).
func (s *OrdersStack) Props() OrdersStackProps { return s.props }

// newTable creates an on-demand table with partition key pk (S), PITR and
// the AWS managed encryption key; ttl names the TTL attribute ("" for none).
// The shape matches the owning package's CreateTableInput (tested).
func newTable(scope constructs.Construct, id, pk, ttl string, removal awscdk.RemovalPolicy) awsdynamodb.Table {
	p := &awsdynamodb.TableProps{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(pk), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:    awsdynamodb.TableEncryption_AWS_MANAGED,
		RemovalPolicy: removal,
	}
	if ttl != "" {
		p.TimeToLiveAttribute = jsii.String(ttl)
	}
	return awsdynamodb.NewTable(scope, jsii.String(id), p)
}

// eventPattern converts a routing pattern ({"source":[...],"detail-type":[...]})
// to the CDK's typed pattern. Any other key is an error, so a richer routing
// pattern cannot be silently dropped.
func eventPattern(p map[string]any) (*awsevents.EventPattern, error) {
	out := &awsevents.EventPattern{}
	for k, v := range p {
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("pattern key %q: want a list, got %T", k, v)
		}
		strs := make([]*string, 0, len(list))
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("pattern key %q: want strings, got %T", k, e)
			}
			strs = append(strs, jsii.String(s))
		}
		switch k {
		case "source":
			out.Source = &strs
		case "detail-type":
			out.DetailType = &strs
		default:
			return nil, fmt.Errorf("pattern key %q is not supported by the stack", k)
		}
	}
	if out.Source == nil || out.DetailType == nil {
		return nil, errors.New("pattern needs source and detail-type")
	}
	return out, nil
}

// accessLog implements awsapigatewayv2.IAccessLogSettings.
type accessLog struct {
	dest   awsapigatewayv2.IAccessLogDestination
	format awsapigateway.AccessLogFormat
}

func (a *accessLog) Destination() awsapigatewayv2.IAccessLogDestination { return a.dest }
func (a *accessLog) Format() awsapigateway.AccessLogFormat              { return a.format }

// accessLogFormat is the JSON access log line, using HTTP API context
// variables only.
const accessLogFormat = `{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","caller":"$context.identity.userArn",` +
	`"requestTime":"$context.requestTime","method":"$context.httpMethod","routeKey":"$context.routeKey","status":"$context.status",` +
	`"protocol":"$context.protocol","responseLength":"$context.responseLength","integrationError":"$context.integrationErrorMessage"}`

func (s *OrdersStack) addAPI(removal awscdk.RemovalPolicy) {
	var auth awsapigatewayv2.IHttpRouteAuthorizer
	switch s.props.AuthMode {
	case AuthNone:
		auth = awsapigatewayv2.NewHttpNoneAuthorizer()
	default:
		auth = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	}
	s.API = awsapigatewayv2.NewHttpApi(s.Stack, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		Description:        jsii.String("ddb-outbox orders API"),
		CreateDefaultStage: jsii.Bool(false),
		DefaultAuthorizer:  auth,
	})
	logs := awslogs.NewLogGroup(s.Stack, jsii.String("HttpApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     s.props.LogRetention,
		RemovalPolicy: removal,
	})
	s.Stage = awsapigatewayv2.NewHttpStage(s.Stack, jsii.String("HttpApiStage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    s.API,
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		AccessLogSettings: &accessLog{
			dest:   awsapigatewayv2.NewLogGroupLogDestination(logs),
			format: awsapigateway.AccessLogFormat_Custom(jsii.String(accessLogFormat)),
		},
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(s.props.ThrottleRate),
			BurstLimit: jsii.Number(s.props.ThrottleBurst),
		},
	})
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("ApiIntegration"), s.APIFunction,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
			PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
		})
	for _, r := range Routes {
		s.API.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{r.Method},
			Integration: integration,
			Authorizer:  auth,
		})
	}
}

func (s *OrdersStack) addAlarmsAndDashboard() {
	five := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}
	s.Alarms = append(s.Alarms, s.Outbox.Alarms...)
	fnAlarm := func(id, desc string, fn awslambda.Function) {
		s.Alarms = append(s.Alarms, awscloudwatch.NewAlarm(s.Stack, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             fn.MetricErrors(five),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
	}
	fnAlarm("ApiErrorsAlarm", "Orders API function invocations failed.", s.APIFunction)
	consumerMetrics := []awscloudwatch.IMetric{}
	for _, name := range []string{routing.ConsumerLedger, routing.ConsumerNotifier} {
		c := s.Consumers[name]
		fnAlarm(idOf(name)+"ErrorsAlarm", "Consumer "+name+" invocations failed (EventBridge retries them).", c.Function)
		consumerMetrics = append(consumerMetrics, c.Function.MetricErrors(five))
	}
	dlqMetrics := []awscloudwatch.IMetric{}
	for _, r := range routing.Rules() {
		q := s.RuleDLQs[r.Name]
		s.Alarms = append(s.Alarms, q.Alarm)
		dlqMetrics = append(dlqMetrics, q.Queue.MetricApproximateNumberOfMessagesVisible(nil))
	}
	if t := s.Outbox.Props().AlarmTopic; t != nil {
		// the outbox construct wired its own alarms already
		action := awscloudwatchactions.NewSnsAction(t)
		for _, a := range s.Alarms[len(s.Outbox.Alarms):] {
			a.AddAlarmAction(action)
			a.AddOkAction(action)
		}
	}

	graph := func(title string, m ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &m, Width: jsii.Number(8)})
	}
	alarms := make([]interfacesawscloudwatch.IAlarmRef, len(s.Alarms))
	for i, a := range s.Alarms {
		alarms[i] = a
	}
	widgets := []awscloudwatch.IWidget{
		awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
			Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24),
		}),
		graph("API requests / 4xx / 5xx", s.API.MetricCount(five), s.API.MetricClientError(five), s.API.MetricServerError(five)),
		graph("API latency p99 (ms)", s.API.MetricLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99")})),
		graph("API function errors", s.APIFunction.MetricErrors(five)),
	}
	widgets = append(widgets, s.Outbox.Widgets()...)
	widgets = append(widgets, graph("Consumer errors", consumerMetrics...), graph("Consumer DLQ depth", dlqMetrics...))
	// the alarm status widget fills the first row; the graphs go three a row
	rows := append([][]awscloudwatch.IWidget{{widgets[0]}}, regroup(widgets[1:])...)
	rowPtrs := make([]*[]awscloudwatch.IWidget, len(rows))
	for i := range rows {
		rowPtrs[i] = &rows[i]
	}
	s.Dashboard = awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		Widgets: &rowPtrs,
	})
}

// regroup splits widgets into rows of three.
func regroup(ws []awscloudwatch.IWidget) [][]awscloudwatch.IWidget {
	var rows [][]awscloudwatch.IWidget
	for i := 0; i < len(ws); i += 3 {
		rows = append(rows, ws[i:min(i+3, len(ws))])
	}
	return rows
}

func (s *OrdersStack) addOutputs() {
	out := func(id string, v *string, desc string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("ApiUrl", s.Stage.Url(), "Base URL of the orders HTTP API ("+string(s.props.AuthMode)+" authorization)")
	out("EventBusName", s.Bus.EventBusName(), "EventBridge bus receiving order events")
	out("OrdersTableName", s.OrdersTable.TableName(), "Orders table")
	out("OutboxTableName", s.Outbox.Table.TableName(), "Outbox table")
	out("DedupTableName", s.DedupTable.TableName(), "Consumers' dedup marker table")
	out("LedgerTableName", s.Consumers[routing.ConsumerLedger].Table.TableName(), "Ledger consumer table")
	out("NotificationsTableName", s.Consumers[routing.ConsumerNotifier].Table.TableName(), "Notifier consumer table")
	out("ParkedQueueUrl", s.Outbox.ParkedQueue.Queue.QueueUrl(), "DLQ of parked outbox records")
	out("DashboardName", s.Dashboard.DashboardName(), "CloudWatch dashboard")
}

// grant adds one IAM statement with actions on arns to g's policy.
func grant(g awsiam.IGrantable, actions []string, arns ...*string) {
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      g,
		Actions:      jsii.Strings(actions...),
		ResourceArns: &arns,
	})
}

// idOf turns a kebab-case name into a CamelCase construct id ("ledger-order-payments" -> "LedgerOrderPayments").
func idOf(name string) string {
	out := make([]byte, 0, len(name))
	up := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '-' || c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}
