package outboxcdk

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
)

// ReconcilerReservedConcurrency is the reconciler's default reserved
// concurrency (Props.ReconcilerReservedConcurrency): one run at a time. Two
// overlapping sweeps would both look at the same pending records; each
// record is claimed with a conditional write before it is re-sent, so it is
// published once either way, but the second sweep's work is wasted. A
// scheduled run that starts while another is still running is throttled;
// Lambda retries a throttled asynchronous invocation until the event is
// older than the invoke config's maximum event age (the reconcile rate),
// then sends it to ReconcilerFailureQueue.
const ReconcilerReservedConcurrency = 1

// NoReservedConcurrency, as a reserved concurrency, leaves a function
// without a reservation: it shares the account's unreserved pool. Lambda
// keeps at least 100 of an account's concurrency unreserved (Lambda
// developer guide, configuration-concurrency: "You can reserve up to the
// Unreserved account concurrency value minus 100"), so an account whose
// quota is 100 or less can reserve nothing.
const NoReservedConcurrency = -1

// KeyUseActions are the KMS actions a function gets on Props.EncryptionKey:
// kms:GenerateDataKey and kms:Decrypt to send to and receive from an SSE-KMS
// queue (Amazon SQS developer guide, sqs-key-management), kms:Encrypt and
// kms:Decrypt for the table's data through DynamoDB. No wildcard actions.
var KeyUseActions = []string{"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"}

// PublishOnlyStatementID is the Sid of PublishOnlyStatement.
const PublishOnlyStatementID = "OnlyTheOutboxPublishes"

// PublisherRoleArns returns the ARNs (tokens) of the roles that publish to
// the bus: the relay's and the reconciler's.
func (o *Outbox) PublisherRoleArns() []*string {
	return []*string{o.Relay.Role().RoleArn(), o.Reconciler.Role().RoleArn()}
}

// PublishOnlyStatement returns the event bus resource policy statement that
// denies events:PutEvents on Props.EventBus to every principal whose
// aws:PrincipalArn is not one of PublisherRoleArns or extra (for example a
// break-glass role). An explicit Deny in a resource policy binds principals
// of the bus's own account too, whatever their identity policies allow; a
// call without aws:PrincipalArn in its context (a service principal) matches
// ArnNotEquals and is denied as well. The relay and reconciler roles keep the
// access their identity policies grant (PublishActions). Add it to the bus's
// resource policy (infra/stack does); it is not added automatically because
// a bus can be shared with other publishers.
//
// busArn is the statement's Resource; nil means Props.EventBus.EventBusArn().
// A policy set on the bus's own AWS::Events::EventBus resource must not use
// that attribute (the bus would depend on itself): pass an ARN built from
// the bus's literal name instead.
func (o *Outbox) PublishOnlyStatement(busArn *string, extra ...*string) awsiam.PolicyStatement {
	if busArn == nil {
		busArn = o.props.EventBus.EventBusArn()
	}
	allowed := append(o.PublisherRoleArns(), extra...)
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(PublishOnlyStatementID),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings(PublishActions...),
		Resources:  &[]*string{busArn},
		Conditions: &map[string]any{
			"ArnNotEquals": map[string]any{"aws:PrincipalArn": allowed},
		},
	})
}
