package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// RuleDLQAPI is what RedriveRuleDLQ calls on a rule's DLQ, with the SDK's
// signatures: *sqs.Client and *localrt.SQSQueue satisfy it.
type RuleDLQAPI interface {
	sqsconsumer.QueueAPI
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// TargetQueueAPI is what RedriveRuleDLQ calls on the consumer queue: its
// ARN, and the sends. *sqs.Client and *localrt.SQSQueue satisfy it.
type TargetQueueAPI interface {
	sqsconsumer.MessageSender
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// RuleDLQRedrive says which rule DLQ RedriveRuleDLQ empties into which
// consumer queue.
type RuleDLQRedrive struct {
	// DLQURL is the rule's DLQ (the target's DeadLetterConfig): the stack
	// output <Rule>RuleDlqUrl, locally <prefix>-<rule>-rule-dlq.
	DLQURL string
	// QueueURL is the consumer queue, the rule's target.
	QueueURL string
	// RuleARN is the rule's ARN (ResolveRule turns a name and a bus into it).
	RuleARN string
	// Source is the events' source (the outbox's EVENT_SOURCE).
	Source string
	// Max bounds the messages moved (0: all); with DryRun, the messages
	// listed (0: 1,000).
	Max int
	// DryRun lists what a redrive would move and leave, and moves nothing.
	DryRun bool
	// AllowUnrestrictedDLQ moves messages on their attributes alone when the
	// DLQ's policy does not refuse every sender but the rule
	// (sqsconsumer.CheckRuleDLQPolicy): then any principal allowed to send
	// to it could have forged RULE_ARN and TARGET_ARN. Off by default.
	AllowUnrestrictedDLQ bool
	// OnChecked, when set, is called once the queues' ARNs and the DLQ's
	// policy are read and accepted, before any message is received (its
	// argument holds TargetARN, DLQARN and PolicyErr). OnMessage is called
	// for every message moved (with DryRun: that would be moved); OnLeft
	// for every message left, with why.
	OnChecked func(RuleDLQResult)
	OnMessage func(sqsconsumer.DeadLetter)
	OnLeft    func(sqsconsumer.LeftMessage)
}

// RuleDLQResult is what RedriveRuleDLQ did.
type RuleDLQResult struct {
	// TargetARN is the consumer queue's ARN (the TARGET_ARN messages must
	// carry); DLQARN the DLQ's.
	TargetARN, DLQARN string
	// PolicyErr is why the DLQ's policy does not prove the senders (nil
	// when it does; set only with AllowUnrestrictedDLQ, else it is the
	// error RedriveRuleDLQ returns).
	PolicyErr error
	// Moved counts the messages sent to the queue and deleted from the DLQ
	// (with DryRun: those that would be).
	Moved int
	// Left are the messages left on the DLQ, each with why.
	Left   []sqsconsumer.LeftMessage
	DryRun bool
}

// ErrRuleDLQNotRestricted is sqsconsumer.ErrRuleDLQNotRestricted: the
// rule DLQ's policy does not prove who sent its messages.
var ErrRuleDLQNotRestricted = sqsconsumer.ErrRuleDLQNotRestricted

// RedriveRuleDLQ moves the events EventBridge could not deliver from a
// rule to its consumer queue — the messages on the rule's DLQ — back to
// that queue, where the consumer applies them (it deduplicates on the
// outbox event_id: a message moved twice is harmless):
//
//  1. GetQueueAttributes QueueArn of the queue (the TARGET_ARN to expect),
//     QueueArn and Policy of the DLQ;
//  2. the trust anchor: the DLQ's policy must deny sqs:SendMessage to every
//     request not made for the rule (sqsconsumer.CheckRuleDLQPolicy; the
//     stack's rule DLQs have it, deadletter.AcceptOnlyFrom), so only
//     EventBridge, for this rule, put messages there; otherwise the run
//     stops with an error wrapping ErrRuleDLQNotRestricted, unless
//     AllowUnrestrictedDLQ;
//  3. sqsconsumer.Redrive with a sqsconsumer.RuleProvenance: a message is
//     moved only when its RULE_ARN is RuleARN, its TARGET_ARN the queue's
//     ARN, no redrive policy moved it there and its body is an EventBridge
//     event of Source; it is sent to the queue (body only) and deleted from
//     the DLQ only after the send succeeded; every other message is left
//     and reported (OnLeft) with why. With DryRun, sqsconsumer.Peek and the
//     same checks, nothing moved.
//
// Errors: a missing field; the queues' attributes unreadable; the policy
// (above); a Redrive error (a receive, a send the queue refused: that
// message stays on the DLQ).
func RedriveRuleDLQ(ctx context.Context, dlq RuleDLQAPI, queue TargetQueueAPI, r RuleDLQRedrive) (RuleDLQResult, error) {
	res := RuleDLQResult{DryRun: r.DryRun}
	if r.DLQURL == "" || r.QueueURL == "" || r.RuleARN == "" || r.Source == "" {
		return res, errors.New("rule-dlq-redrive: the DLQ, the queue, the rule and the source are required")
	}
	qa, err := queue.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.QueueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return res, fmt.Errorf("rule-dlq-redrive: the ARN of %s: %w", r.QueueURL, err)
	}
	res.TargetARN = qa.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	da, err := dlq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.DLQURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn, sqstypes.QueueAttributeNamePolicy}})
	if err != nil {
		return res, fmt.Errorf("rule-dlq-redrive: the ARN and policy of %s: %w", r.DLQURL, err)
	}
	res.DLQARN = da.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if err := sqsconsumer.CheckRuleDLQPolicy(da.Attributes[string(sqstypes.QueueAttributeNamePolicy)], res.DLQARN, r.RuleARN); err != nil {
		if !r.AllowUnrestrictedDLQ || !errors.Is(err, ErrRuleDLQNotRestricted) {
			return res, fmt.Errorf("rule-dlq-redrive: %s: %w", r.DLQURL, err)
		}
		res.PolicyErr = err
	}
	from := sqsconsumer.RuleProvenance{RuleARN: r.RuleARN, TargetARN: res.TargetARN, Source: r.Source}
	if err := from.Validate(); err != nil {
		return res, fmt.Errorf("rule-dlq-redrive: %w", err)
	}
	if r.OnChecked != nil {
		r.OnChecked(res)
	}
	left := func(l sqsconsumer.LeftMessage) {
		res.Left = append(res.Left, l)
		if r.OnLeft != nil {
			r.OnLeft(l)
		}
	}
	if r.DryRun {
		limit := r.Max
		if limit == 0 {
			limit = 1000
		}
		_, err := sqsconsumer.Peek(ctx, dlq, r.DLQURL, sqsconsumer.RedriveOptions{Max: limit, OnMessage: func(d sqsconsumer.DeadLetter) {
			if ok, why := from.Proves(d); !ok {
				left(sqsconsumer.LeftMessage{DeadLetter: d, Why: why})
				return
			}
			res.Moved++
			if r.OnMessage != nil {
				r.OnMessage(d)
			}
		}})
		return res, err
	}
	out, err := sqsconsumer.Redrive(ctx, dlq, r.DLQURL, queue, r.QueueURL, sqsconsumer.RedriveOptions{
		Max: r.Max, From: from, OnMessage: r.OnMessage, OnLeft: left,
	})
	res.Moved = out.Moved
	return res, err
}

// RuleDLQName is the local stack's name of a rule's DLQ:
// <prefix>-<rule>-rule-dlq (KindOf classifies it as KindRuleDLQ).
func RuleDLQName(prefix, rule string) string { return prefix + "-" + rule + ruleDLQSuffix }

const ruleDLQSuffix = "-rule-dlq"

// isRuleDLQ reports whether a queue name has the local stack's rule DLQ
// suffix.
func isRuleDLQ(name string) bool { return strings.HasSuffix(name, ruleDLQSuffix) }
