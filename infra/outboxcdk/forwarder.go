package outboxcdk

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawsevents"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Consumers in a multi-Region outbox (docs/MULTI-REGION.md, choice 3): each
// consumer has one home Region, where its queue and its pkg/dedup state
// (dedup markers, ordering gates, buffer) live in regional tables, never a
// global table (attribute_not_exists is evaluated in one Region, so two
// Regions could both apply an event before either marker replicates).
// Every other Region's bus forwards the consumer's events to the home
// Region's bus (NewConsumerForwarder), so an event published by two Regions
// meets one marker and one gate.

// ErrReplicatedStateTable is wrapped by NewConsumer's error for a state
// table with replicas in other Regions.
var ErrReplicatedStateTable = fmt.Errorf("%w: a consumer's state table must be regional, not a global table with replicas "+
	"(docs/MULTI-REGION.md, choice 3: one home Region per consumer)", ErrInvalidProps)

// replicatedTable reports whether t is a table of this app replicated to
// other Regions: a TableV2 with a replica besides its own Region, or a
// Table with replicationRegions (the CDK adds one "Replica<region>" custom
// resource per replica). An imported table cannot be inspected and
// passes.
func replicatedTable(t awsdynamodb.ITable) bool {
	if t == nil {
		return false
	}
	if v2, ok := t.(awsdynamodb.TableV2); ok {
		if g, ok := v2.Node().DefaultChild().(awsdynamodb.CfnGlobalTable); ok {
			raw, _ := awscdk.Stack_Of(v2).Resolve(g.Replicas()).([]any)
			return len(raw) > 1
		}
		return false
	}
	if tb, ok := t.(awsdynamodb.Table); ok {
		for _, c := range *tb.Node().Children() {
			if strings.HasPrefix(*c.Node().Id(), "Replica") {
				return true
			}
		}
	}
	return false
}

// Forwarder defaults (the EventBridge API limits are those of
// ConsumerProps' MaxEventAge and RetryAttempts).
const (
	// DefaultForwardMaxEventAge is how long EventBridge retries delivering
	// an event to the home Region's bus before it goes to the forwarder's
	// DLQ: 24 h, EventBridge's own default and maximum (a home Region that
	// is down for hours still gets its events).
	DefaultForwardMaxEventAge = 24 * time.Hour
	// DefaultForwardRetryAttempts: 185, EventBridge's default and maximum.
	DefaultForwardRetryAttempts = MaxConsumerRetryAttempts
)

// ConsumerForwarderProps configures NewConsumerForwarder.
type ConsumerForwarderProps struct {
	// Bus is this Region's event bus (the outbox's). Required.
	Bus awsevents.IEventBus
	// HomeRegion is the consumers' home Region, not the stack's own
	// (config.ValidRegionName). Required.
	HomeRegion string
	// HomeBusName is the name of the event bus in HomeRegion, of this
	// stack's account (a literal name: the home stack is in another Region,
	// so no CloudFormation reference can carry it). Required.
	HomeBusName string
	// Pattern selects the events to forward: the home consumers' rule
	// pattern (ConsumerProps.EventPattern) or, when several consumers share
	// the home Region, one pattern covering them all (e.g. Source only):
	// a forwarder per consumer with overlapping patterns would deliver an
	// event once per forwarder to the home bus. Its Source must be set (the
	// outbox's EventSource). The forwarder adds Region = the stack's
	// Region (see NewConsumerForwarder). Required.
	Pattern *awsevents.EventPattern
	// Description names what is forwarded, for the rule and alarm
	// descriptions (e.g. "order events for the consumers homed in
	// eu-west-1"). Default "outbox events".
	Description string
	// RoleName, when set, is the physical name of the forwarder's role
	// (IAM is global: unique per account), so the home Region's stack can
	// name it without a cross-Region reference (ForwarderRoleArn): a home
	// bus whose policy lets only the outbox's roles publish
	// (Outbox.PublishOnlyStatement) must list it among the extra
	// publishers. Default: a CDK-generated name.
	RoleName string
	// MaxEventAge and RetryAttempts are the target's retry policy.
	// Defaults DefaultForwardMaxEventAge and DefaultForwardRetryAttempts;
	// limits as ConsumerProps'.
	MaxEventAge   time.Duration
	RetryAttempts int
	// RemovalPolicy of the DLQ. Default RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// DeadLetterOperatorArns may delete from the DLQ
	// (deadletter.Queue.KeepMessagesFromAllBut).
	DeadLetterOperatorArns []string
}

// ConsumerForwarder is an EventBridge rule on this Region's bus that sends
// the consumers' events to their home Region's bus.
type ConsumerForwarder struct {
	constructs.Construct
	// Rule is the forwarding rule; Role the role EventBridge assumes to
	// call events:PutEvents on the home bus (its only permission).
	Rule awsevents.Rule
	Role awsiam.Role
	// HomeBusArn is the target's ARN:
	// arn:<partition>:events:<HomeRegion>:<account>:event-bus/<HomeBusName>.
	HomeBusArn *string
	// DLQ receives the events EventBridge could not deliver to the home bus
	// after the retry policy (without it they would be dropped).
	DLQ *deadletter.Queue
	// Alarms: the DLQ's depth alarm and the rule's delivery alarms
	// (RuleDeliveryAlarms); they notify whatever NotifyAlarms covers the
	// scope (the stack's alarm topic).
	Alarms []awscloudwatch.Alarm
}

// busNamePattern is EventBridge's rule for a custom event bus name.
var busNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,256}$`)

// ForwarderRoleArn returns the ARN (a token of the stack's partition and
// account) of the role named roleName: the forwarder role of another
// Region, for the home bus's list of extra publishers.
func ForwarderRoleArn(scope constructs.Construct, roleName string) *string {
	return awscdk.Stack_Of(scope).FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("iam"), Region: jsii.String(""), Resource: jsii.String("role"), ResourceName: jsii.String(roleName),
		ArnFormat: awscdk.ArnFormat_SLASH_RESOURCE_NAME,
	})
}

// NewConsumerForwarder creates, as id under scope, the rule that forwards
// the events of props.Pattern from this Region's bus to the home Region's
// bus (EventBridge user guide, "Sending and receiving events between AWS
// Regions": a rule whose target is the event bus in the other Region, with
// a role allowed events:PutEvents on it), with a retry policy and a DLQ on
// the target.
//
// One hop only: forwarders exist only outside the home Region, and the
// home Region has none for these events, so a forwarded event arrives on a
// bus with no rule that forwards it again; NewConsumerForwarder refuses a
// home bus in the stack's own Region. As a second guard the pattern also
// requires the event's region field to be the stack's Region (an event the
// relay put here carries it). ❓ Whether an event delivered from another
// Region's bus keeps its original region field is not stated on the
// EventBridge pages read (2026-12-07); either way the first guard holds.
//
// It returns an error wrapping ErrInvalidProps for a missing or malformed
// field, a home bus in this Region, or a stack whose Region is a token.
func NewConsumerForwarder(scope constructs.Construct, id string, props ConsumerForwarderProps) (*ConsumerForwarder, error) {
	if props.MaxEventAge == 0 {
		props.MaxEventAge = DefaultForwardMaxEventAge
	}
	if props.RetryAttempts == 0 {
		props.RetryAttempts = DefaultForwardRetryAttempts
	}
	if props.Description == "" {
		props.Description = "outbox events"
	}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if props.Bus == nil {
		bad("Bus is required")
	}
	if props.Pattern == nil || props.Pattern.Source == nil || len(*props.Pattern.Source) == 0 {
		bad("Pattern with a Source is required: forward the outbox's events only")
	}
	region := awscdk.Stack_Of(scope).Region()
	if region == nil || *awscdk.Token_IsUnresolved(region) {
		bad("the stack's Region is a token: a forwarder needs a stack with a concrete Region")
	}
	switch err := config.ValidRegionName(props.HomeRegion); {
	case err != nil:
		bad("HomeRegion: %v", err)
	case region != nil && props.HomeRegion == *region:
		bad("HomeRegion %s is this stack's Region: the home Region gets its events from its own bus, and a forwarder there could loop", props.HomeRegion)
	}
	if !busNamePattern.MatchString(props.HomeBusName) || props.HomeBusName == "default" {
		bad("HomeBusName %q is not a custom event bus name (1..256 characters of A-Z, a-z, 0-9, '.', '_', '-')", props.HomeBusName)
	}
	if props.MaxEventAge < MinConsumerMaxEventAge || props.MaxEventAge > MaxConsumerMaxEventAge || props.MaxEventAge%time.Second != 0 {
		bad("MaxEventAge %s is outside %s..%s or not whole seconds", props.MaxEventAge, MinConsumerMaxEventAge, MaxConsumerMaxEventAge)
	}
	if props.RetryAttempts < 1 || props.RetryAttempts > MaxConsumerRetryAttempts {
		bad("RetryAttempts %d is outside 1..%d", props.RetryAttempts, MaxConsumerRetryAttempts)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: consumer forwarder %s: %s", ErrInvalidProps, id, strings.Join(errs, "; "))
	}

	f := &ConsumerForwarder{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	home := awscdk.Stack_Of(scope).FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("events"), Region: jsii.String(props.HomeRegion),
		Resource: jsii.String("event-bus"), ResourceName: jsii.String(props.HomeBusName),
	})
	f.HomeBusArn = home
	rp := &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("events.amazonaws.com"), nil),
		Description: jsii.String("EventBridge forwards " + props.Description + " to the bus " + props.HomeBusName + " in " + props.HomeRegion),
	}
	if props.RoleName != "" {
		rp.RoleName = jsii.String(props.RoleName)
	}
	f.Role = awsiam.NewRole(f.Construct, jsii.String("Role"), rp)
	f.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(PublishActions...),
		Resources: &[]*string{home},
	}))
	f.DLQ = deadletter.New(f.Construct, "DLQ", props.Description+" EventBridge could not forward to "+props.HomeBusName+" in "+props.HomeRegion, props.RemovalPolicy, nil)

	pattern := *props.Pattern
	pattern.Region = jsii.Strings(*region)
	f.Rule = awsevents.NewRule(f.Construct, jsii.String("Rule"), &awsevents.RuleProps{
		EventBus:     props.Bus,
		Description:  jsii.String("Forwards " + props.Description + " published in " + *region + " to the home Region's bus."),
		EventPattern: &pattern,
		Targets: &[]awsevents.IRuleTarget{&busTarget{
			arn: home, role: f.Role, dlq: f.DLQ.Queue, maxEventAge: props.MaxEventAge, retryAttempts: props.RetryAttempts,
		}},
	})
	operators := make([]*string, len(props.DeadLetterOperatorArns))
	for i, a := range props.DeadLetterOperatorArns {
		operators[i] = jsii.String(a)
	}
	f.DLQ.AcceptOnlyFrom(deadletter.Senders{SourceArns: []*string{f.Rule.RuleArn()}})
	f.DLQ.RefuseRedriveSources()
	f.DLQ.KeepMessagesFromAllBut(operators)
	f.Alarms = append([]awscloudwatch.Alarm{f.DLQ.Alarm},
		RuleDeliveryAlarms(f.Construct, "Rule", f.Rule, props.Bus.EventBusName(), "the forwarder of "+props.Description)...)
	return f, nil
}

// busTarget is an EventBridge rule target that puts the event on an event
// bus (another Region's) with role, a retry policy and a target DLQ; the DLQ
// allows events.amazonaws.com sqs:SendMessage for this rule only
// (aws:SourceArn), as queueTarget does.
type busTarget struct {
	arn           *string
	role          awsiam.IRole
	dlq           awssqs.IQueue
	maxEventAge   time.Duration
	retryAttempts int
}

// Bind implements awsevents.IRuleTarget.
func (b *busTarget) Bind(rule interfacesawsevents.IRuleRef, _ *string) *awsevents.RuleTargetConfig {
	b.dlq.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("events.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sqs:SendMessage"),
		Resources:  &[]*string{b.dlq.QueueArn()},
		Conditions: &map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": rule.RuleRef().RuleArn}},
	}))
	return &awsevents.RuleTargetConfig{
		Arn:              b.arn,
		Role:             b.role,
		DeadLetterConfig: &awsevents.CfnRule_DeadLetterConfigProperty{Arn: b.dlq.QueueArn()},
		RetryPolicy: &awsevents.CfnRule_RetryPolicyProperty{
			MaximumEventAgeInSeconds: jsii.Number(b.maxEventAge.Seconds()),
			MaximumRetryAttempts:     jsii.Number(b.retryAttempts),
		},
	}
}
