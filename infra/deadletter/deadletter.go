// Package deadletter creates the project's dead-letter queues: standard SQS
// queues encrypted at rest with SQS-managed keys (SSE-SQS) or, when a key is
// given, with that customer managed KMS key (SSE-KMS), reachable only
// over TLS, keeping messages for the SQS maximum of 14 days, each with an
// alarm that fires as soon as one message is visible (promise I5: nothing is
// dropped silently), and taking messages up to the SQS maximum size.
package deadletter

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
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
