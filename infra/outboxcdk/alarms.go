package outboxcdk

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Every alarm notifies someone (DESIGN.md, "Known traps": every alarm needs
// an action). The notification is structural: NotifyAlarms adds an aspect
// to a scope that, at synthesis, gives every CloudWatch alarm under it the
// topic as its ALARM and OK action, so an alarm added later by any code
// cannot be left without one.

// KeyForCloudWatchStatementID is the Sid of the key policy statement
// NewAlarmTopic adds to a customer managed key that encrypts the topic.
const KeyForCloudWatchStatementID = "CloudWatchAlarmsPublishToTheAlarmTopic"

// AlarmsPublishStatementID is the Sid of the topic policy statement
// NewAlarmTopic adds: CloudWatch alarms of the account may publish.
const AlarmsPublishStatementID = "CloudWatchAlarmsOfThisAccountPublish"

// CloudWatchKeyActions are the KMS actions CloudWatch alarms need on the key
// of an encrypted SNS topic they publish to, as the Amazon SNS developer
// guide gives them for AWS services that publish to an encrypted topic
// (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html,
// "Enable compatibility between event sources from AWS services and
// encrypted topics": kms:Decrypt and kms:GenerateDataKey*). The wildcard is
// AWS's own: an alarm that cannot publish fails silently (only its history
// shows it), so the statement is AWS's documented one, not a narrower guess.
var CloudWatchKeyActions = []string{"kms:Decrypt", "kms:GenerateDataKey*"}

// topicArnPattern matches the ARN of a standard SNS topic (CloudWatch alarm
// actions cannot publish to a FIFO topic).
var topicArnPattern = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$`)

// ValidAlarmTopicArn returns nil when arn is the complete ARN of a standard
// SNS topic (arn:<partition>:sns:<region>:<12-digit account>:<name>, name
// 1..256 characters of A–Z, a–z, 0–9, - and _), or an error saying what is
// wrong.
func ValidAlarmTopicArn(arn string) error {
	if !topicArnPattern.MatchString(arn) {
		if strings.HasSuffix(arn, ".fifo") {
			return fmt.Errorf("alarm topic %q is a FIFO topic: CloudWatch alarm actions need a standard topic", arn)
		}
		return fmt.Errorf("alarm topic %q is not a standard SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)", arn)
	}
	return nil
}

// alarmsOfThisAccount returns the conditions that limit a statement for
// cloudwatch.amazonaws.com to alarms of the stack's account and region:
// aws:SourceAccount = the account and aws:SourceArn like
// arn:<partition>:cloudwatch:<region>:<account>:alarm:* (the confused-deputy
// conditions AWS shows for this principal: AWS re:Post knowledge center,
// https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger,
// and the Amazon SNS developer guide,
// https://docs.aws.amazon.com/sns/latest/dg/sns-access-policy-use-cases.html).
func alarmsOfThisAccount() *map[string]any {
	return &map[string]any{
		"StringEquals": map[string]any{"aws:SourceAccount": awscdk.Aws_ACCOUNT_ID()},
		"ArnLike": map[string]any{"aws:SourceArn": awscdk.Fn_Join(jsii.String(""), &[]*string{
			jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":cloudwatch:"), awscdk.Aws_REGION(),
			jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":alarm:*"),
		})},
	}
}

// NewAlarmTopic creates the SNS topic id under scope that alarms notify:
// a standard topic that only accepts TLS requests (EnforceSSL) and whose
// policy allows cloudwatch.amazonaws.com to call sns:Publish on it for
// alarms of this account and region only (statement
// AlarmsPublishStatementID, conditions aws:SourceAccount and aws:SourceArn
// arn:<partition>:cloudwatch:<region>:<account>:alarm:*). A topic policy
// replaces SNS's default policy (which lets the owner account publish): a
// topic policy holding only the TLS Deny would leave every alarm unable to
// publish, its history saying "Failed to execute action ... not authorized
// to perform: SNS:Publish" (AWS re:Post knowledge center,
// cloudwatch-receive-sns-for-alarm-trigger). `outboxctl alarms test`
// checks it on a deployed stack.
//
// With key (a customer managed key of the same stack) the topic is
// encrypted with it and the key policy lets cloudwatch.amazonaws.com use it
// (KMS actions CloudWatchKeyActions, same conditions); CloudWatch cannot
// publish to a topic encrypted with the AWS managed key aws/sns, so without
// a customer managed key the topic is not encrypted at rest (its messages
// are alarm state changes: names, descriptions and metric values, no event
// data; cdk-nag AwsSolutions-SNS2 is suppressed with that reason). An
// imported key keeps its own policy, which must allow the same.
func NewAlarmTopic(scope constructs.Construct, id string, key awskms.IKey) awssns.Topic {
	topic := awssns.NewTopic(scope, jsii.String(id), &awssns.TopicProps{
		DisplayName: jsii.String("ddb-outbox alarms"),
		EnforceSSL:  jsii.Bool(true),
		MasterKey:   key,
	})
	topic.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(AlarmsPublishStatementID),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  &[]*string{topic.TopicArn()},
		Conditions: alarmsOfThisAccount(),
	}))
	if key != nil {
		key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String(KeyForCloudWatchStatementID),
			Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
			Actions:    jsii.Strings(CloudWatchKeyActions...),
			Resources:  jsii.Strings("*"),
			Conditions: alarmsOfThisAccount(),
		}), nil)
		return topic
	}
	cdknag.NagSuppressions_AddResourceSuppressions(topic, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-SNS2"),
		Reason: jsii.String("CloudWatch alarms cannot publish to a topic encrypted with the AWS managed key aws/sns, and the stack " +
			"uses no customer managed key in this mode (set CustomerManagedKey to encrypt the topic with it). The topic only " +
			"carries alarm state changes (alarm names, descriptions, metric values), no event data; publishing requires TLS."),
	}}, nil)
	return topic
}

// NotifyAlarms makes every CloudWatch alarm (AWS::CloudWatch::Alarm and
// AWS::CloudWatch::CompositeAlarm) under scope notify topic on ALARM and on
// OK (so whoever was paged also learns that it recovered; INSUFFICIENT_DATA
// is not notified: every alarm here treats missing data as not breaching).
// It adds a CDK aspect, applied at synthesis to the alarms that exist then,
// those created after this call included. Alarms under one of except are
// skipped: a construct that notifies its own alarms (an Outbox given the
// same topic) must not get the action twice.
func NotifyAlarms(scope constructs.IConstruct, topic awssns.ITopic, except ...constructs.IConstruct) {
	skip := make([]string, 0, len(except))
	for _, c := range except {
		skip = append(skip, *c.Node().Path()+"/")
	}
	awscdk.Aspects_Of(scope).Add(&alarmNotifier{action: awscloudwatchactions.NewSnsAction(topic), topicArn: topic.TopicArn(), skip: skip}, nil)
}

// alarmNotifier is the aspect NotifyAlarms adds.
type alarmNotifier struct {
	action   awscloudwatch.IAlarmAction
	topicArn *string
	skip     []string
}

// Visit adds the action to an alarm construct: through the L2 Alarm or
// CompositeAlarm when there is one (it renders its actions itself), else on
// the CloudFormation resource.
func (a *alarmNotifier) Visit(node constructs.IConstruct) {
	path := *node.Node().Path()
	for _, s := range a.skip {
		if strings.HasPrefix(path+"/", s) {
			return
		}
	}
	switch n := node.(type) {
	case awscloudwatch.Alarm:
		n.AddAlarmAction(a.action)
		n.AddOkAction(a.action)
	case awscloudwatch.CompositeAlarm:
		n.AddAlarmAction(a.action)
		n.AddOkAction(a.action)
	case awscloudwatch.CfnAlarm:
		if isL2Alarm(node.Node().Scope()) {
			return
		}
		n.SetAlarmActions(appendArn(n.AlarmActions(), a.topicArn))
		n.SetOkActions(appendArn(n.OkActions(), a.topicArn))
	case awscloudwatch.CfnCompositeAlarm:
		if isL2Alarm(node.Node().Scope()) {
			return
		}
		n.SetAlarmActions(appendArn(n.AlarmActions(), a.topicArn))
		n.SetOkActions(appendArn(n.OkActions(), a.topicArn))
	}
}

// isL2Alarm reports whether c is an L2 alarm construct (which renders its
// CloudFormation resource's actions).
func isL2Alarm(c constructs.IConstruct) bool {
	switch c.(type) {
	case awscloudwatch.Alarm, awscloudwatch.CompositeAlarm:
		return true
	}
	return false
}

// appendArn returns list with arn appended.
func appendArn(list *[]*string, arn *string) *[]*string {
	var out []*string
	if list != nil {
		out = append(out, *list...)
	}
	out = append(out, arn)
	return &out
}

// EventBridge metrics in namespace AWS/Events that show an event a rule
// could not deliver (Amazon EventBridge user guide, eb-monitoring). Both
// are sent only when not zero. Metrics of a rule on the default event bus
// have the dimension RuleName only; those of a rule on a custom bus have
// EventBusName and RuleName.
const (
	EventsNamespace = "AWS/Events"
	// MetricFailedInvocations counts invocations of a rule's target that
	// failed permanently (not retried ones, not those sent to the DLQ).
	MetricFailedInvocations = "FailedInvocations"
	// MetricInvocationsFailedToBeSentToDlq counts events a rule could not
	// move to its target's DLQ (permissions, an unavailable queue or KMS
	// key, size): dropped for good.
	MetricInvocationsFailedToBeSentToDlq = "InvocationsFailedToBeSentToDlq"
	// DimensionRuleName and DimensionEventBusName are the metrics'
	// dimensions.
	DimensionRuleName     = "RuleName"
	DimensionEventBusName = "EventBusName"
)

// RuleDeliveryAlarms creates, under scope, the two alarms every EventBridge
// rule needs so that a drop only a metric shows is seen: id+"FailedInvocationsAlarm"
// (MetricFailedInvocations) and id+"DlqFailuresAlarm"
// (MetricInvocationsFailedToBeSentToDlq), each firing on one event in five
// minutes (Sum >= 1, one period; missing data, the normal case, is not
// breaching). bus is the rule's custom event bus name, or nil for a rule on
// the default bus (the metrics' dimensions differ, see EventsNamespace).
// what names the rule in the alarm descriptions.
func RuleDeliveryAlarms(scope constructs.Construct, id string, rule awsevents.IRule, bus *string, what string) []awscloudwatch.Alarm {
	dims := map[string]*string{DimensionRuleName: rule.RuleName()}
	if bus != nil {
		dims[DimensionEventBusName] = bus
	}
	metric := func(name string) awscloudwatch.Metric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(EventsNamespace),
			MetricName:    jsii.String(name),
			DimensionsMap: &dims,
			Statistic:     jsii.String("Sum"),
			Period:        awscdk.Duration_Minutes(jsii.Number(5)),
		})
	}
	alarm := func(suffix, metricName, desc string) awscloudwatch.Alarm {
		return awscloudwatch.NewAlarm(scope, jsii.String(id+suffix), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             metric(metricName),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	return []awscloudwatch.Alarm{
		alarm("FailedInvocationsAlarm", MetricFailedInvocations,
			"EventBridge could not deliver an event of "+what+" to its target after its retries."),
		alarm("DlqFailuresAlarm", MetricInvocationsFailedToBeSentToDlq,
			"EventBridge could not put an undeliverable event of "+what+" on the target's DLQ: the event is lost (check the DLQ's policy, KMS key and size)."),
	}
}
