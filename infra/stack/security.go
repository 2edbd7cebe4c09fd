package stack

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// Sids of the resource policy statements this file adds.
const (
	// QueueSendersStatementID denies sqs:SendMessage on a consumer queue to
	// everyone but its rules and the redrive roles.
	QueueSendersStatementID = outboxcdk.QueueSendersStatementID
	// KeyForEventBridgeStatementID lets EventBridge use the stack's KMS key
	// for the consumer queues and the rule DLQs.
	KeyForEventBridgeStatementID = "EventBridgeEncryptsForThisAccount"
)

// restrictPublishers sets the bus's resource policy (the Policy property of
// AWS::Events::EventBus, one document owned by the bus, so two copies of the
// stack never collide on a statement id): outboxcdk's PublishOnlyStatement,
// an explicit Deny of events:PutEvents to every principal but the relay's
// and the reconciler's roles and OrdersStackProps.PublisherArns.
func (s *OrdersStack) restrictPublishers() {
	extra := make([]*string, len(s.props.PublisherArns))
	for i, a := range s.props.PublisherArns {
		extra[i] = jsii.String(a)
	}
	// multi-Region, primary: the other Regions' forwarder roles
	extra = append(extra, s.forwarderPublishers()...)
	cfn := s.Bus.Node().DefaultChild().(awsevents.CfnEventBus)
	// the bus's ARN from its literal (CDK-generated) name, not GetAtt Arn:
	// the bus's own policy cannot refer to the bus
	arn := s.Stack.FormatArn(&awscdk.ArnComponents{
		Service:      jsii.String("events"),
		Resource:     jsii.String("event-bus"),
		ResourceName: cfn.Name(),
	})
	s.BusPolicy = awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{
		Statements: &[]awsiam.PolicyStatement{s.Outbox.PublishOnlyStatement(arn, extra...)},
	})
	cfn.SetPolicy(s.BusPolicy)
}

// EventBridgeKeyActions are the KMS actions EventBridge needs on the key of
// an SSE-KMS queue it sends to (Amazon SQS developer guide,
// sqs-key-management, "Configure KMS permissions for AWS services").
var EventBridgeKeyActions = []string{"kms:Decrypt", "kms:GenerateDataKey"}

// SQSEncryptionContextKey is the encryption context key Amazon SQS binds a
// queue's data keys to (value: the queue's ARN). ❓ Not found stated in
// the AWS documentation kept here; two SQS emulators that model SSE-KMS
// (fakecloud and one in Go) use it: docs/SECURITY-MODEL.md.
const SQSEncryptionContextKey = "aws:sqs:arn"

// allowEventBridgeToUseKey lets EventBridge use the stack's KMS key to send
// to the consumer queues (EventBridgeKeyActions), only for SQS queues of
// this account and region: the key policy condition
// kms:EncryptionContext:aws:sqs:arn like
// arn:<partition>:sqs:<region>:<account>:*, which KMS evaluates on the
// request SQS makes for the sender. Not aws:SourceArn or aws:SourceAccount:
// the Amazon SNS developer guide (sns-key-management) states that adding
// them to a KMS key policy is not supported for EventBridge-to-encrypted
// topics, and the same delivery to an SQS queue is assumed to carry them
// no more (docs/SECURITY-MODEL.md); a rule ARN would also make a
// dependency cycle (key → rule → queue → key). The rule DLQs are SSE-SQS
// (outboxcdk.NewConsumer), so an event this statement failed to cover would still reach
// them, alarmed. A key imported by ARN keeps its own policy (the statement
// is not added); its policy must allow the same.
func (s *OrdersStack) allowEventBridgeToUseKey() {
	if s.EncryptionKey == nil {
		return
	}
	s.EncryptionKey.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(KeyForEventBridgeStatementID),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("events.amazonaws.com"), nil)},
		Actions:    jsii.Strings(EventBridgeKeyActions...),
		Resources:  jsii.Strings("*"),
		Conditions: &map[string]any{"StringLike": map[string]any{
			"kms:EncryptionContext:" + SQSEncryptionContextKey: s.Stack.FormatArn(&awscdk.ArnComponents{
				Service: jsii.String("sqs"), Resource: jsii.String("*"), ArnFormat: awscdk.ArnFormat_NO_RESOURCE_NAME,
			}),
		}},
	}), nil)
}

// RouteArn returns the execute-api ARN of route r on every stage of the API:
// arn:<partition>:execute-api:<region>:<account>:<api-id>/*/<METHOD>/<path>
// with each {parameter} of the path as * (API Gateway developer guide,
// "Control access for invoking an API").
func (s *OrdersStack) RouteArn(r Route) *string {
	path := r.Path
	for {
		i, j := strings.IndexByte(path, '{'), strings.IndexByte(path, '}')
		if i < 0 || j < i {
			break
		}
		path = path[:i] + "*" + path[j+1:]
	}
	return s.API.ArnForExecuteApi(jsii.String(string(r.Method)), jsii.String(path), jsii.String("*"))
}

// addCallerPolicies creates the route-scoped managed policies for API
// callers: ReadOnlyCallerPolicy (execute-api:Invoke on the GET routes) and
// CommandCallerPolicy (on the POST routes). They are attached to nothing.
func (s *OrdersStack) addCallerPolicies() {
	policy := func(id, desc, method string) awsiam.ManagedPolicy {
		var arns []*string
		for _, r := range Routes {
			if string(r.Method) == method {
				arns = append(arns, s.RouteArn(r))
			}
		}
		p := awsiam.NewManagedPolicy(s.Stack, jsii.String(id), &awsiam.ManagedPolicyProps{
			Description: jsii.String(desc),
			Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Actions:   jsii.Strings("execute-api:Invoke"),
				Resources: &arns,
			})},
		})
		cdknag.NagSuppressions_AddResourceSuppressions(p, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String("AwsSolutions-IAM5"),
			Reason: jsii.String("execute-api ARNs of exact routes: the * segments are the stage (the API has only $default) " +
				"and the {id} path parameter of the route, which IAM can express only as a wildcard."),
			AppliesTo: &[]any{&cdknag.RegexAppliesTo{Regex: jsii.String("/^Resource::arn:<AWS::Partition>:execute-api:.*$/g")}},
		}}, nil)
		return p
	}
	s.ReadOnlyCallerPolicy = policy("ReadOnlyCallerPolicy", "ddb-outbox orders API: read orders (GET routes)", "GET")
	s.CommandCallerPolicy = policy("CommandCallerPolicy", "ddb-outbox orders API: create, pay, ship and cancel orders (POST routes)", "POST")
}

// addAbuseAlarms adds the alarms that show abuse or overload: the API's 4xx
// rate (throttled requests answer 429 and count as 4xx) and 5xx rate, each
// as a percentage of the API's requests over five minutes, two of three
// periods; and each function's Lambda Throttles (an invocation refused
// because the function hit its reserved concurrency).
func (s *OrdersStack) addAbuseAlarms() {
	five := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}
	rate := func(id, what string, errs awscloudwatch.IMetric, threshold float64) awscloudwatch.Alarm {
		expr := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String("IF(requests > 0, 100 * errors / requests, 0)"),
			Label:      jsii.String("API " + what + " rate (%)"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{
				"requests": s.API.MetricCount(five),
				"errors":   errs,
			},
			Period: awscdk.Duration_Minutes(jsii.Number(5)),
		})
		return awscloudwatch.NewAlarm(s.Stack, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("More than " + trimFloat(threshold) + "% of the orders API's requests were answered " + what + "."),
			Metric:             expr,
			Threshold:          jsii.Number(threshold),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(3),
			DatapointsToAlarm:  jsii.Number(2),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	s.API4xxRateAlarm = rate("Api4xxRateAlarm", "4xx (client errors, throttling included)", s.API.MetricClientError(five), s.props.API4xxRatePercent)
	s.API5xxRateAlarm = rate("Api5xxRateAlarm", "5xx (server errors)", s.API.MetricServerError(five), s.props.API5xxRatePercent)
	s.Alarms = append(s.Alarms, s.API4xxRateAlarm, s.API5xxRateAlarm)
	fns := []struct {
		name string
		fn   awslambda.Function
	}{
		{APIFunction, s.APIFunction},
		{"relay", s.Outbox.Relay},
		{"reconciler", s.Outbox.Reconciler},
	}
	for _, name := range s.homedConsumers() {
		fns = append(fns, struct {
			name string
			fn   awslambda.Function
		}{name, s.Consumers[name].Function})
	}
	for _, f := range fns {
		s.Alarms = append(s.Alarms, awscloudwatch.NewAlarm(s.Stack, jsii.String(idOf(f.name)+"ThrottlesAlarm"), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("Function " + f.name + " was throttled: it reached its reserved concurrency, or (unreserved) the account's unreserved concurrency ran out."),
			Metric:             f.fn.MetricThrottles(five),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
	}
}

// trimFloat formats a percentage in its shortest form ("10", "0.5").
func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// ReplayRolesConditionID is the logical id of the CloudFormation condition
// that attaches ReplayPolicy only in the replay roles' account, when the
// account the stack deploys to is not known at synth.
const ReplayRolesConditionID = "ReplayRolesInThisAccount"

// addReplayPolicy creates ReplayPolicy, the managed policy of the
// operators who replay the outbox's archive (outboxctl backfill and
// replays), and attaches it to the roles of roleArns (role ARNs of one
// account, paths allowed: OrdersStackProps.Validate). IAM attaches a
// managed policy by role name, in the policy's account, so the roles are
// imported by ARN (awsiam.Role_FromRoleArn, which takes the name after the
// path) and attached only in their account: when the deploying account is
// known at synth (OrdersStackProps.DeployAccount, StackProps.Env), Validate
// has already refused any other; when it is not, the Roles property is
// Fn::If on the condition ReplayRolesConditionID (AWS::AccountId = the
// roles' account), so that a deploy to another account attaches nothing
// to a same-named role there. None when the outbox has no archive.
func (s *OrdersStack) addReplayPolicy(roleArns []string) {
	sts := s.Outbox.ReplayStatements()
	if len(sts) == 0 {
		return
	}
	names := make([]*string, 0, len(roleArns))
	for i, arn := range roleArns {
		role := awsiam.Role_FromRoleArn(s.Stack, jsii.String(fmt.Sprintf("ReplayRole%d", i)), jsii.String(arn), &awsiam.FromRoleArnOptions{Mutable: jsii.Bool(false)})
		names = append(names, role.RoleName())
	}
	s.ReplayPolicy = awsiam.NewManagedPolicy(s.Stack, jsii.String("ReplayPolicy"), &awsiam.ManagedPolicyProps{
		Description: jsii.String("ddb-outbox: replay the outbox's archive to one consumer's rule (outboxctl backfill, replays)"),
		Statements:  &sts,
	})
	if len(names) > 0 {
		var roles any = names
		if s.props.deployAccount() == "" {
			cond := awscdk.NewCfnCondition(s.Stack, jsii.String(ReplayRolesConditionID), &awscdk.CfnConditionProps{
				Expression: awscdk.Fn_ConditionEquals(awscdk.Aws_ACCOUNT_ID(), jsii.String(s.props.replayAccount())),
			})
			roles = awscdk.Fn_ConditionIf(cond.LogicalId(), names, awscdk.Aws_NO_VALUE())
		}
		s.ReplayPolicy.Node().DefaultChild().(awsiam.CfnManagedPolicy).AddPropertyOverride(jsii.String("Roles"), roles)
	}
	// a stack of a concrete Region (multi-Region mode) names its Region
	// literally; the single-Region stack's suppression is unchanged
	region := "<AWS::Region>"
	if s.props.MultiRegion != nil {
		region = "(<AWS::Region>|[a-z0-9-]+)"
	}
	cdknag.NagSuppressions_AddResourceSuppressions(s.ReplayPolicy, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("replay names are chosen when a backfill starts (replay/*), the consumer rule a backfill names is " +
			"deployed later by another team (rule/<this bus>/*: only this bus's rules), and events:ListReplays " +
			"takes no resource (*); StartReplay itself is scoped to this outbox's archive."),
		AppliesTo: &[]any{
			&cdknag.RegexAppliesTo{Regex: jsii.String("/^Resource::arn:<AWS::Partition>:events:" + region + ":<AWS::AccountId>:(replay/\\*|rule/<.*>/\\*)$/g")},
			"Resource::*",
		},
	}}, nil)
}
