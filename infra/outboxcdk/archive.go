package outboxcdk

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
)

// KeepArchiveForever, as Props.ArchiveRetentionDays, keeps archived events
// without a limit (an AWS::Events::Archive with RetentionDays 0).
const KeepArchiveForever = -1

// NoArchive, as Props.ArchiveRetentionDays, creates no archive (the
// outbox's events are then kept nowhere once their records expire).
const NoArchive = -2

// ReplayActions are what GrantReplay grants on the outbox's archive: start
// a replay from it and describe it. ReplayReadActions on replays and the
// bus's rules, ReplayListActions on "*" (list actions take no resource).
var (
	ReplayActions     = []string{"events:DescribeArchive", "events:StartReplay"}
	ReplayReadActions = []string{"events:DescribeReplay", "events:CancelReplay", "events:DescribeRule"}
	ReplayListActions = []string{"events:ListReplays"}
)

// addArchive archives every event of Props.EventSource published on
// Props.EventBus (an EventBridge archive on the bus, pattern
// {"source":[EventSource]}), kept Props.ArchiveRetentionDays, encrypted
// with Props.EncryptionKey when set (else an AWS owned key). EventBridge
// writes to an archive itself: no role gets write access.
func (o *Outbox) addArchive() {
	days := o.props.ArchiveRetentionDays
	if days == NoArchive {
		return
	}
	props := &awsevents.ArchiveProps{
		SourceEventBus: o.props.EventBus,
		EventPattern:   &awsevents.EventPattern{Source: jsii.Strings(o.props.EventSource)},
		Description:    jsii.String(fmt.Sprintf("ddb-outbox: every event of source %s, for audit and to backfill consumers (outboxctl backfill)", o.props.EventSource)),
		KmsKey:         o.props.EncryptionKey,
	}
	if days > 0 {
		props.Retention = awscdk.Duration_Days(jsii.Number(days))
	}
	// With a customer managed key the CDK adds AWS's documented key policy
	// for archives (EventBridge user guide, encryption-archives):
	// kms:DescribeKey, and kms:GenerateDataKey, kms:Decrypt, kms:ReEncrypt*
	// only under the encryption context of this bus
	// (kms:EncryptionContext:aws:events:event-bus:arn).
	o.Archive = awsevents.NewArchive(o.Construct, jsii.String("Archive"), props)
}

// ReplayStatements are the statements an operator's role needs to run
// outboxctl backfill and replays against this outbox: ReplayActions on the
// archive, ReplayReadActions on the account's replays and the bus's rules,
// ReplayListActions on "*" (a list action takes no resource), and with an
// EncryptionKey kms:Decrypt on it (❓ AWS does not say whether a replay of
// a customer-key archive needs it of the caller). None when the construct
// has no archive (NoArchive).
func (o *Outbox) ReplayStatements() []awsiam.PolicyStatement {
	if o.Archive == nil {
		return nil
	}
	stack := awscdk.Stack_Of(o.Construct)
	replays := stack.FormatArn(&awscdk.ArnComponents{Service: jsii.String("events"), Resource: jsii.String("replay"), ResourceName: jsii.String("*")})
	rules := stack.FormatArn(&awscdk.ArnComponents{Service: jsii.String("events"), Resource: jsii.String("rule"),
		ResourceName: jsii.String(*o.props.EventBus.EventBusName() + "/*")})
	st := func(actions []string, resources ...*string) awsiam.PolicyStatement {
		return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{Actions: jsii.Strings(actions...), Resources: &resources})
	}
	out := []awsiam.PolicyStatement{
		st(ReplayActions, o.Archive.ArchiveArn()),
		st(ReplayReadActions, replays, rules),
		st(ReplayListActions, jsii.String("*")),
	}
	if k := o.props.EncryptionKey; k != nil {
		out = append(out, st([]string{"kms:Decrypt"}, k.KeyArn()))
	}
	return out
}

// GrantReplay adds ReplayStatements to grantee's policy (a role of this
// stack; for a role of another account or stack, attach ReplayStatements
// with an awsiam.Policy naming it, as infra/stack does).
func (o *Outbox) GrantReplay(grantee awsiam.IGrantable) {
	for _, st := range o.ReplayStatements() {
		grantee.GrantPrincipal().AddToPrincipalPolicy(st)
	}
}
