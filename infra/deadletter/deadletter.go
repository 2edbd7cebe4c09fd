// Package deadletter creates the project's dead-letter queues: standard SQS
// queues encrypted at rest with SQS-managed keys (SSE-SQS) or, when a key is
// given, with that customer managed KMS key (SSE-KMS), reachable only
// over TLS, keeping messages for the SQS maximum of 14 days, each with an
// alarm that fires as soon as one message is visible (promise I5: nothing is
// dropped silently), and taking messages up to the SQS maximum size.
//
// A dead-letter queue accepts messages only from its own source
// (Queue.AcceptOnlyFrom): a planted message in a DLQ looks like an ordinary
// dead letter and an operator's redrive would forward it to the consumer.
// Queues that are no SQS queue's redrive target also refuse to be named as
// one (Queue.RefuseRedriveSources).
//
// A dead letter cannot be erased silently: a DLQ denies sqs:DeleteMessage
// and sqs:PurgeQueue to every principal but its operators
// (Queue.KeepMessagesFromAllBut). No function deletes from a DLQ; the
// operators' redrive (outboxctl consumer-redrive, a DLQ redrive) does.
package deadletter

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Retention is how long a dead letter stays in the queue (SQS maximum).
const Retention = 14 * 24 * 60 * 60 // seconds

// MaxMessageBytes is every queue's MaximumMessageSize, set explicitly: the
// SQS maximum, 1,048,576 bytes (1 MiB; the API range is 1,024..1,048,576).
// A dead-letter queue must take whatever its source sends whole: an
// EventBridge event of a 256 KB entry is larger than 256 KiB once wrapped in
// its envelope, and the outbox entry limit may be raised to 1 MiB.
const MaxMessageBytes = 1024 * 1024

// Queue is a dead-letter queue and its alarm.
type Queue struct {
	// Queue is the SQS queue.
	Queue awssqs.Queue
	// Alarm fires when ApproximateNumberOfMessagesVisible (maximum over one
	// minute) is greater than 0, and returns to OK when the queue is drained.
	Alarm awscloudwatch.Alarm
}

// New creates the queue id and its alarm id+"Alarm" under scope. what is a
// short human description used in the alarm description ("parked outbox
// records"). removal is the queue's removal policy ("" means RETAIN). key,
// when not nil, encrypts the queue with that customer managed KMS key
// (SSE-KMS); nil keeps SSE-SQS. Whoever sends to or receives from a
// KMS-encrypted queue also needs kms:GenerateDataKey / kms:Decrypt on the key.
func New(scope constructs.Construct, id, what string, removal awscdk.RemovalPolicy, key awskms.IKey) *Queue {
	if removal == "" {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	enc := awssqs.QueueEncryption_SQS_MANAGED
	if key != nil {
		enc = awssqs.QueueEncryption_KMS
	}
	q := awssqs.NewQueue(scope, jsii.String(id), &awssqs.QueueProps{
		Encryption:          enc,
		EncryptionMasterKey: key,
		EnforceSSL:          jsii.Bool(true),
		RetentionPeriod:     awscdk.Duration_Seconds(jsii.Number(Retention)),
		MaxMessageSizeBytes: jsii.Number(MaxMessageBytes),
		RemovalPolicy:       removal,
	})
	alarm := awscloudwatch.NewAlarm(scope, jsii.String(id+"Alarm"), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String("Dead-letter queue for " + what + " has messages: inspect and redrive them."),
		Metric: q.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period:    awscdk.Duration_Minutes(jsii.Number(1)),
			Statistic: jsii.String("Maximum"),
		}),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	cdknag.NagSuppressions_AddResourceSuppressions(q, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-SQS3"),
		Reason: jsii.String("This queue is itself a dead-letter queue (Lambda on-failure destination, " +
			"EventBridge target DLQ, consumer queue redrive target or parked-records queue); it is alarmed and drained by an operator, a DLQ of a DLQ adds nothing."),
	}}, nil)
	return &Queue{Queue: q, Alarm: alarm}
}

// OnlySourceSendsStatementID is the Sid of the queue policy statement
// AcceptOnlyFrom adds.
const OnlySourceSendsStatementID = "OnlyTheSourceSends"

// Senders are the only senders a dead-letter queue accepts (AcceptOnlyFrom).
type Senders struct {
	// PrincipalArns are IAM principal ARNs (roles; an assumed-role session
	// is matched by its role's ARN, aws:PrincipalArn) that may call
	// sqs:SendMessage: a function that dead-letters itself, or whose
	// execution role Lambda uses for an on-failure destination.
	PrincipalArns []*string
	// SourceArns are resource ARNs (aws:SourceArn) of AWS services'
	// resources that may send: the EventBridge rule whose target DLQ this is.
	SourceArns []*string
}

// AcceptOnlyFrom adds to the queue's policy an explicit Deny of
// sqs:SendMessage (and so SendMessageBatch, which is authorized as
// SendMessage) to every request that comes from none of s. An explicit Deny in
// a queue policy binds principals of the queue's own account too, whatever
// their identity policies allow (IAM policy evaluation logic).
//
// With SourceArns, a request is refused unless its aws:SourceArn is one of
// them (an IAM principal's own request carries no aws:SourceArn) and, when
// PrincipalArns are given too, its aws:PrincipalArn is none of those. With
// PrincipalArns only, a request that carries an aws:PrincipalArn other than
// them is refused; a request without one (no IAM principal: SQS's own move of
// a message to its dead-letter queue after maxReceiveCount receives, which
// the Amazon SQS developer guide describes as done by SQS for the source
// queue, not by a caller) is not matched, so the redrive policy keeps
// working whatever SQS puts in that request's context. Anonymous and
// service-principal requests still need an Allow the queue policy does not
// give. Nothing is added when s is empty.
func (q *Queue) AcceptOnlyFrom(s Senders) {
	if len(s.PrincipalArns) == 0 && len(s.SourceArns) == 0 {
		return
	}
	notFrom := map[string]any{}
	conditions := map[string]any{"ArnNotEquals": notFrom}
	if len(s.SourceArns) > 0 {
		notFrom["aws:SourceArn"] = s.SourceArns
	}
	if len(s.PrincipalArns) > 0 {
		notFrom["aws:PrincipalArn"] = s.PrincipalArns
	}
	if len(s.SourceArns) == 0 {
		conditions["Null"] = map[string]any{"aws:PrincipalArn": "false"}
	}
	q.Queue.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(OnlySourceSendsStatementID),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings("sqs:SendMessage"),
		Resources:  &[]*string{q.Queue.QueueArn()},
		Conditions: &conditions,
	}))
}

// OnlyOperatorsEraseStatementID is the Sid of the queue policy statement
// KeepMessagesFromAllBut adds.
const OnlyOperatorsEraseStatementID = "OnlyOperatorsDeleteOrPurge"

// EraseActions are the SQS actions that remove messages from a queue:
// DeleteMessage (which also authorizes DeleteMessageBatch) and PurgeQueue.
var EraseActions = []string{"sqs:DeleteMessage", "sqs:PurgeQueue"}

// KeepMessagesFromAllBut adds to the queue's policy an explicit Deny of
// EraseActions to every request that carries an aws:PrincipalArn other than
// operators (role ARNs; an assumed-role session is matched by its role's
// ARN). An explicit Deny in a queue policy binds principals of the queue's
// own account too, administrators included, whatever their identity
// policies allow (IAM policy evaluation logic; the Amazon SQS developer
// guide's examples use aws:PrincipalArn in queue policies the same way).
// With no operators every IAM principal is refused: the messages then leave
// only by expiry (deadletter.Retention) or once the policy names an
// operator. A request without aws:PrincipalArn (no IAM principal: an AWS
// service acting for the queue itself) is not matched (Null
// aws:PrincipalArn false), as in AcceptOnlyFrom; anonymous and service
// requests still need an Allow the queue policy does not give. Reading
// (ReceiveMessage) stays allowed: an operator inspects before deciding.
// Who legitimately deletes from a DLQ here: only an operator's redrive
// (outboxctl consumer-redrive deletes after re-sending; an SQS DLQ redrive,
// StartMessageMoveTask, runs with its caller's permissions); no function
// deletes from a DLQ, so none is excepted.
func (q *Queue) KeepMessagesFromAllBut(operators []*string) {
	conditions := map[string]any{"Null": map[string]any{"aws:PrincipalArn": "false"}}
	if len(operators) > 0 {
		conditions["ArnNotEquals"] = map[string]any{"aws:PrincipalArn": operators}
	}
	q.Queue.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(OnlyOperatorsEraseStatementID),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings(EraseActions...),
		Resources:  &[]*string{q.Queue.QueueArn()},
		Conditions: &conditions,
	}))
}

// RefuseRedriveSources sets the queue's RedriveAllowPolicy to denyAll: no
// SQS queue may name it as its dead-letter queue (Amazon SQS developer
// guide, dead-letter queues: the redrive allow policy says which source
// queues may use a queue as their DLQ; a move by a source queue's redrive
// policy is made by SQS, and no AWS page found here says the DLQ's queue
// policy governs it, so the redrive allow policy is the control).
// For the queues that are an EventBridge rule's DLQ or a Lambda on-failure
// destination, which no queue redrives to. A consumer DLQ cannot name its
// one source queue (byQueue) here: the source's RedrivePolicy already
// refers to the DLQ's ARN, and the two references would form a
// CloudFormation dependency cycle.
func (q *Queue) RefuseRedriveSources() {
	q.Queue.Node().DefaultChild().(awssqs.CfnQueue).SetRedriveAllowPolicy(map[string]any{"redrivePermission": "denyAll"})
}
