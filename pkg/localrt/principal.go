package localrt

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Who sends a message: SQS records the sender's principal in the SenderId
// message system attribute — "for a user, the user ID (ABCDEFGHI1JKLMNOPQ23R);
// for an IAM role, the IAM role ID and the session
// (ABCDE1F2GH3I4JK5LMNOP:i-a123b456)" (API_ReceiveMessage). In-process calls
// to a local queue carry no credentials, so the principal travels in the
// call's context instead: WithSenderID sets it, and the SQS event source
// mapping emulator (SQSPoller) sets FunctionSenderID(FunctionName) on every
// invocation, as Lambda runs a function under its execution role's session.

// DefaultSenderID is the SenderId of a message sent with no principal in its
// context: a caller the local runtime cannot name (a request through the
// AWS front, a test, a tool). It has the shape of an IAM user id.
const DefaultSenderID = "AIDAIENQZJOLO23YVJ4VO"

type senderKey struct{}

// WithSenderID returns ctx carrying principal id as the sender of the
// messages a local queue's SendMessage stores under it (their SenderId). An
// empty id leaves ctx as it is.
func WithSenderID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, senderKey{}, id)
}

// senderID is the principal ctx carries, or DefaultSenderID.
func senderID(ctx context.Context) string {
	if id, ok := ctx.Value(senderKey{}).(string); ok && id != "" {
		return id
	}
	return DefaultSenderID
}

// FunctionRoleID returns the IAM role id the local runtime gives the
// execution role of the function named functionName: "AROA" and 17
// characters of [A-Z2-7] derived from the name (the shape of an IAM role's
// unique id), the same on every run, so a tool can name the role a local
// consumer dead-letters under (outboxctl consumer-redrive -sender).
func FunctionRoleID(functionName string) string {
	sum := sha256.Sum256([]byte("ddb-outbox local execution role " + functionName))
	return "AROA" + strings.ToUpper(base32.StdEncoding.EncodeToString(sum[:]))[:17]
}

// FunctionSenderID returns the SenderId of a message the function
// functionName sends: its role id and its session, named after the function
// as Lambda names the execution role's session.
func FunctionSenderID(functionName string) string {
	return FunctionRoleID(functionName) + ":" + functionName
}

// EventBridgeSenderID is the SenderId of the messages the local bus sends
// (to an SQS rule target, and to a rule's DLQ). ❓ Which SenderId SQS
// records for a message EventBridge sends is not documented (API_ReceiveMessage
// describes users' and roles' ids only): this one has the shape of an IAM
// user id, and nothing may rely on its value — the proof that a rule DLQ
// message is EventBridge's is the queue's policy (SQSQueueConfig.OnlySourceArns,
// sqsconsumer.CheckRuleDLQPolicy), not its sender.
const EventBridgeSenderID = "AIDAEVENTBRIDGELOCAL0"

type sourceKey struct{}

// WithSourceARN returns ctx carrying arn as the aws:SourceArn of the
// requests made under it: the ARN of the resource on whose behalf an AWS
// service calls another (IAM global condition keys, aws:SourceArn; it is
// never in a principal's own request). The local bus sends to a rule's
// target and DLQ under the rule's ARN, as EventBridge does. An empty arn
// leaves ctx as it is.
func WithSourceARN(ctx context.Context, arn string) context.Context {
	if arn == "" {
		return ctx
	}
	return context.WithValue(ctx, sourceKey{}, arn)
}

// sourceARN is the aws:SourceArn ctx carries ("" when none: a principal's
// own request).
func sourceARN(ctx context.Context) string {
	s, _ := ctx.Value(sourceKey{}).(string)
	return s
}
