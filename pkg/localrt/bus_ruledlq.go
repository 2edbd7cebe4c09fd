package localrt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// A rule target's DLQ (EventBridge user guide, eb-rule-dlq:
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html):
// an event EventBridge could not deliver to the target — its retry policy
// ran out, or at once for "missing permissions to a target" or "a target
// resource that no longer exists" — is sent to the standard SQS queue named
// in the target's DeadLetterConfig, the event JSON as the body and the
// message attributes RULE_ARN, TARGET_ARN, ERROR_CODE, ERROR_MESSAGE,
// EXHAUSTED_RETRY_CONDITION and RETRY_ATTEMPTS (names in sqsconsumer). An
// event the DLQ refuses too is dropped, counted in
// InvocationsFailedToBeSentToDlq.

// ruleDLQ is a rule's dead-letter queue (SetDeadLetterQueue).
type ruleDLQ struct {
	q   MessageSender
	url string
}

// SetDeadLetterQueue makes the SQS queue at url (sent to through q) the DLQ
// of rule's target, as the target's DeadLetterConfig does: every event the
// bus gives up delivering to that target is sent there (see deliver), under
// the rule's ARN as aws:SourceArn (WithSourceARN: a queue whose
// SQSQueueConfig.OnlySourceArns names the rule accepts it) and
// EventBridgeSenderID. It returns an error for a rule the bus does not
// have. Without a DLQ an event given up is only kept in DeadLetters, where
// AWS drops it.
func (b *Bus) SetDeadLetterQueue(rule string, q MessageSender, url string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.rules {
		if r.rule.Name == rule {
			if b.dlqs == nil {
				b.dlqs = map[string]ruleDLQ{}
			}
			b.dlqs[rule] = ruleDLQ{q: q, url: url}
			return nil
		}
	}
	return fmt.Errorf("localrt: bus %s has no rule %q", b.cfg.Name, rule)
}

// targetARN is the ARN of a rule target: its queue's (from the queue URL),
// the event bus's, or, for a handler, a Lambda function named after the
// consumer.
func (b *Bus) targetARN(consumer string, t busTarget) string {
	if t.queue != nil {
		return b.queueARN(t.url)
	}
	if t.bus != nil {
		return t.busARN
	}
	return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", b.cfg.Region, b.cfg.Account, consumer)
}

// queueARN derives a queue's ARN from its URL:
// https://sqs.<region>.amazonaws.com/<account>/<name> gives
// arn:aws:sqs:<region>:<account>:<name>; another host (a local endpoint)
// takes the bus's region.
func (b *Bus) queueARN(u string) string {
	region, account, name := b.cfg.Region, b.cfg.Account, ""
	if p, err := url.Parse(u); err == nil {
		parts := strings.Split(strings.Trim(p.Path, "/"), "/")
		if len(parts) == 2 {
			account, name = parts[0], parts[1]
		}
		if h := strings.Split(p.Hostname(), "."); len(h) == 4 && h[0] == "sqs" && h[2] == "amazonaws" {
			region = h[1]
		}
	}
	if name == "" {
		name = queueName(u)
	}
	return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, account, name)
}

// deliveryFailure classifies a failed delivery attempt as EventBridge
// reports it in a DLQ message's ERROR_CODE, and whether EventBridge retries
// it. Documented (eb-rule-dlq): missing permissions and a target that no
// longer exists are not retried. ❓ The mapping of each SQS error to an
// ERROR_CODE is this runtime's reading of the sample codes the page lists
// (NO_RESOURCE for a deleted queue, NO_PERMISSIONS for a policy or KMS
// refusal, THROTTLING, TIMEOUT, INVALID_PARAMETER for a body SQS refuses,
// ERROR_FROM_TARGET otherwise), not a recording. For an event bus target
// (SubscribeBus) likewise: a bus that does not exist is NO_RESOURCE, a
// refused source NO_PERMISSIONS, and an entry the bus refuses as invalid
// (InvalidArgument, MalformedDetail) INVALID_PARAMETER, none retried — the
// same event would be refused again.
func deliveryFailure(err error) (code string, retried bool) {
	var ae smithy.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return sqsconsumer.RuleErrorTimeout, true
	case errors.Is(err, context.Canceled):
		return sqsconsumer.RuleErrorInternal, true
	case !errors.As(err, &ae):
		return sqsconsumer.RuleErrorFromTarget, true
	}
	switch c := ae.ErrorCode(); {
	case c == "AWS.SimpleQueueService.NonExistentQueue" || c == "QueueDoesNotExist" || c == "ResourceNotFoundException":
		return sqsconsumer.RuleErrorNoResource, false
	case c == ErrorCodeNotAuthorizedForSource:
		return sqsconsumer.RuleErrorNoPermissions, false
	case c == ErrorCodeInvalidArgument || c == ErrorCodeMalformedDetail:
		return sqsconsumer.RuleErrorInvalidParameter, false
	case c == ErrorCodeAccessDenied || c == "AccessDeniedException" || c == "KMS.AccessDeniedException" ||
		strings.HasPrefix(c, "Kms") && c != "KmsThrottled" || strings.HasPrefix(c, "KMS.") && c != "KMS.ThrottlingException":
		return sqsconsumer.RuleErrorNoPermissions, false
	case c == "RequestThrottled" || c == "KmsThrottled" || c == "KMS.ThrottlingException" || c == "ThrottlingException":
		return sqsconsumer.RuleErrorThrottling, true
	case c == "InvalidMessageContents" || c == "InvalidParameterValue" || c == "MissingParameter":
		return sqsconsumer.RuleErrorInvalidParameter, true
	}
	return sqsconsumer.RuleErrorFromTarget, true
}

// dlqSendTimeout bounds one send to a rule's DLQ.
const dlqSendTimeout = 10 * time.Second

// sendToDLQ sends dl's event to the rule's DLQ, if it has one, with the
// attributes EventBridge sets (eb-rule-dlq), under the rule's ARN and
// EventBridgeSenderID; exhausted is the retry-policy limit that ended the
// delivery ("" when it was not retried: the attribute is then left out, ❓
// AWS's page does not say whether it is sent empty or not at all). It
// returns the DLQ message id ("" without a DLQ) or the DLQ's error. The
// send does not end with the bus's context: a Close does not lose a dead
// letter.
func (b *Bus) sendToDLQ(ctx context.Context, dl DeadLetter, exhausted string) (string, error) {
	b.mu.Lock()
	dlq, ok := b.dlqs[dl.Rule]
	b.mu.Unlock()
	if !ok {
		return "", nil
	}
	str := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrs := map[string]sqstypes.MessageAttributeValue{
		sqsconsumer.AttrRuleARN:       str(dl.RuleARN),
		sqsconsumer.AttrTargetARN:     str(dl.TargetARN),
		sqsconsumer.AttrErrorCode:     str(dl.ErrorCode),
		sqsconsumer.AttrErrorMessage:  str(sqsmsg.Sanitize(dl.Error, sqsconsumer.MaxErrorAttributeBytes)),
		sqsconsumer.AttrRetryAttempts: str(fmt.Sprint(max(dl.Attempts-1, 0))),
	}
	if exhausted != "" {
		attrs[sqsconsumer.AttrExhaustedRetryCondition] = str(exhausted)
	}
	cctx, cancel := context.WithTimeout(WithSourceARN(WithSenderID(context.WithoutCancel(ctx), EventBridgeSenderID), dl.RuleARN), dlqSendTimeout)
	defer cancel()
	out, err := dlq.q.SendMessage(cctx, &sqs.SendMessageInput{QueueUrl: aws.String(dlq.url), MessageBody: aws.String(string(dl.EventJSON)), MessageAttributes: attrs})
	if err != nil {
		return "", fmt.Errorf("send to the DLQ of rule %s: %w", dl.Rule, err)
	}
	return aws.ToString(out.MessageId), nil
}
