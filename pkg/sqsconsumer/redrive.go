package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// QueueAPI is the SQS subset Peek and Redrive call, with the SDK's exact
// signatures; *sqs.Client and localrt.SQSQueue satisfy it.
type QueueAPI interface {
	MessageSender
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, params *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, params *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// DeadLetter is one message found on a consumer DLQ.
type DeadLetter struct {
	MessageID string
	// Body is the original message body: the EventBridge event JSON.
	Body string
	// Reason is AttrReason when this package dead-lettered the message
	// ("" when the queue's redrive policy moved it after maxReceiveCount
	// receives: Reason then reads "max_receive_count").
	Reason string
	Error  string
	// ReceiveCount is the message's ApproximateReceiveCount on the DLQ.
	ReceiveCount string
	// SenderID is the SenderId message system attribute: the principal that
	// sent the message ("AIDA…" for an IAM user, "AROA…:<session>" for a
	// role session such as a Lambda function's). A message the redrive
	// policy moved keeps the SenderId of whoever sent it to the source
	// queue.
	SenderID string
	// SourceQueueARN is the DeadLetterQueueSourceArn message system
	// attribute: the ARN of the queue whose redrive policy moved the message
	// ("" for a message sent to the DLQ directly). Only SQS sets it: a
	// sender cannot (SendMessage takes AWSTraceHeader as its only system
	// attribute).
	SourceQueueARN string
	// SentAt is the SentTimestamp message system attribute (zero if absent).
	SentAt time.Time
	// Rule is what the message attributes of an EventBridge rule DLQ
	// message say (RULE_ARN, TARGET_ARN, ERROR_CODE, …; nil when it carries
	// none of RULE_ARN, TARGET_ARN and ERROR_CODE). Reason and Error then
	// default to its ERROR_CODE and ERROR_MESSAGE.
	Rule *RuleDelivery
}

// From names where a message came from, for listings: "queue <arn>" when a
// redrive policy moved it, "rule <RULE_ARN>" for a message carrying
// EventBridge's rule DLQ attributes (what it says, not proven), else
// "sender <SenderId>".
func (d DeadLetter) From() string {
	if d.SourceQueueARN != "" {
		return "queue " + d.SourceQueueARN
	}
	if d.Rule != nil {
		return "rule " + orNone(d.Rule.RuleARN) + " (sender " + orNone(d.SenderID) + ")"
	}
	if d.SenderID == "" {
		return "sender unknown"
	}
	return "sender " + d.SenderID
}

// receiveWaitSeconds is the WaitTimeSeconds of Peek's and Redrive's
// receives: long polling queries every SQS server, so an empty answer means
// the queue is empty; a short poll (0) samples a subset of servers and may
// answer empty while messages remain (SQS Developer Guide,
// sqs-short-and-long-polling). An empty queue costs one wait at the end.
const receiveWaitSeconds = 1

// ReasonMaxReceiveCount is the Reason of a message the queue's redrive policy
// moved (it carries no reason attribute).
const ReasonMaxReceiveCount = "max_receive_count"

// ReasonRuleDelivery is the Reason of a rule DLQ message without an
// ERROR_CODE attribute.
const ReasonRuleDelivery = "rule_delivery_failed"

// SQS message system attribute names Peek and Redrive read
// (API_ReceiveMessage, MessageSystemAttributeNames).
const (
	SysAttrSenderID                 = "SenderId"
	SysAttrDeadLetterQueueSourceArn = "DeadLetterQueueSourceArn"
	SysAttrSentTimestamp            = "SentTimestamp"
	SysAttrApproximateReceiveCount  = "ApproximateReceiveCount"
)

// receiveAttributes are the message system attributes Peek and Redrive ask
// ReceiveMessage for: SQS returns only the ones named.
var receiveAttributes = []sqstypes.MessageSystemAttributeName{
	sqstypes.MessageSystemAttributeNameSenderId,
	sqstypes.MessageSystemAttributeNameDeadLetterQueueSourceArn,
	sqstypes.MessageSystemAttributeNameSentTimestamp,
	sqstypes.MessageSystemAttributeNameApproximateReceiveCount,
}

// ErrNoProvenance: Redrive was given no way to tell the consumer's dead
// letters from anything else sent to its DLQ (RedriveOptions.From nil, or a
// Provenance naming neither a queue nor a sender).
var ErrNoProvenance = errors.New("sqsconsumer: redrive needs the consumer queue's ARN or the consumer's sender id (Provenance), or the rule and target (RuleProvenance)")

// Provenance says which DLQ messages came from the consumer a Redrive sends
// them back to. A DLQ accepts SendMessage from any principal its queue
// policy (or an identity policy in the account) allows, so a message on it
// proves nothing by its body or message attributes; only the system
// attributes SQS itself sets do:
//
//   - DeadLetterQueueSourceArn equal to SourceQueueARN: the consumer queue's
//     redrive policy moved it after maxReceiveCount receives;
//   - SenderId equal to one of SenderIDs, or starting with one of them and
//     ":" (an IAM role id "AROA…" matches its sessions "AROA…:<session>"):
//     the consumer itself dead-lettered it (Handler with Config.DLQ, which
//     runs as the consumer function's execution role; Lambda names the
//     session after the function).
type Provenance struct {
	// SourceQueueARN is the consumer queue's ARN (arn:aws:sqs:<region>:<account>:<name>).
	SourceQueueARN string
	// SenderIDs are the principal ids whose sends to the DLQ are the
	// consumer's own: its execution role's unique id (AWS: aws iam get-role
	// --role-name <role> --query Role.RoleId; locally
	// localrt.FunctionRoleID(<function>)). An IAM role id, not its ARN.
	SenderIDs []string
}

// Validate returns ErrNoProvenance when p names neither a source queue nor a
// sender, or an error for a SourceQueueARN that is not an SQS queue ARN or
// an empty sender id.
func (p Provenance) Validate() error {
	if p.SourceQueueARN == "" && len(p.SenderIDs) == 0 {
		return ErrNoProvenance
	}
	if p.SourceQueueARN != "" {
		if a, err := arn.Parse(p.SourceQueueARN); err != nil || a.Service != "sqs" || a.Resource == "" {
			return fmt.Errorf("sqsconsumer: Provenance.SourceQueueARN %q is not an SQS queue ARN", p.SourceQueueARN)
		}
	}
	for _, id := range p.SenderIDs {
		if strings.TrimSpace(id) == "" {
			return errors.New("sqsconsumer: Provenance.SenderIDs has an empty id")
		}
	}
	return nil
}

// Proves reports whether d came from the consumer p describes, and when not,
// why (naming the sender or the source queue).
func (p Provenance) Proves(d DeadLetter) (bool, string) {
	if d.SourceQueueARN != "" {
		if d.SourceQueueARN == p.SourceQueueARN {
			return true, ""
		}
		return false, "moved to the DLQ from queue " + d.SourceQueueARN + ", not from " + orNone(p.SourceQueueARN)
	}
	for _, id := range p.SenderIDs {
		if d.SenderID == id || strings.HasPrefix(d.SenderID, id+":") {
			return true, ""
		}
	}
	sender := d.SenderID
	if sender == "" {
		sender = "unknown"
	}
	return false, "sent to the DLQ by " + sender + ", not by the consumer (" + orNone(strings.Join(p.SenderIDs, ", ")) + ") nor moved from its queue"
}

func orNone(s string) string {
	if s == "" {
		return "none given"
	}
	return s
}

// RedriveOptions bound a Peek or Redrive.
type RedriveOptions struct {
	// Max bounds the messages handled: Redrive moves at most Max (0: no
	// bound), Peek lists at most Max (0: 100).
	Max int
	// From says which messages Redrive may move (required by Redrive,
	// unused by Peek): a Provenance for a consumer DLQ, a RuleProvenance
	// for an EventBridge rule's DLQ.
	From Prover
	// OnMessage, when set, is called for every message handled (Redrive:
	// after it was sent to the target and deleted from the DLQ).
	OnMessage func(DeadLetter)
	// OnLeft, when set, is called for every message Redrive saw and left on
	// the DLQ, with why.
	OnLeft func(LeftMessage)
	// Now is the clock that dates the start of a Redrive run (default
	// time.Now).
	Now func() time.Time
}

// LeftMessage is a DLQ message a Redrive saw and left where it was.
type LeftMessage struct {
	DeadLetter
	// Why it was left: not proven to come from the consumer (naming its
	// sender), sent to the DLQ during this run (it came back: its cause is
	// not fixed yet), or the target refused it.
	Why string
}

// RedriveResult is what a Redrive run did.
type RedriveResult struct {
	// Moved counts the messages sent to the target and deleted from the DLQ.
	Moved int
	// Left are the messages seen and left on the DLQ, visible again when
	// Redrive returns.
	Left []LeftMessage
}

func toDeadLetter(m sqstypes.Message) DeadLetter {
	d := DeadLetter{
		MessageID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
		ReceiveCount:   m.Attributes[SysAttrApproximateReceiveCount],
		SenderID:       m.Attributes[SysAttrSenderID],
		SourceQueueARN: m.Attributes[SysAttrDeadLetterQueueSourceArn],
	}
	if ms, err := strconv.ParseInt(m.Attributes[SysAttrSentTimestamp], 10, 64); err == nil {
		d.SentAt = time.UnixMilli(ms)
	}
	d.Rule = ruleDelivery(func(name string) (string, bool) {
		v, ok := m.MessageAttributes[name]
		return aws.ToString(v.StringValue), ok
	})
	switch v, ok := m.MessageAttributes[AttrReason]; {
	case ok:
		d.Reason = aws.ToString(v.StringValue)
	case d.Rule != nil && d.Rule.ErrorCode != "":
		d.Reason = d.Rule.ErrorCode
	case d.Rule != nil:
		d.Reason = ReasonRuleDelivery
	default:
		d.Reason = ReasonMaxReceiveCount
	}
	if v, ok := m.MessageAttributes[AttrError]; ok {
		d.Error = aws.ToString(v.StringValue)
	} else if d.Rule != nil {
		d.Error = d.Rule.ErrorMessage
	}
	return d
}

// cameBack reports whether the DLQ message m (d) was sent to the DLQ during
// the run that started at started and sent the copies named in sent: the
// queue's redrive policy moved one of those copies back (it keeps its
// MessageId), or Handler dead-lettered one (AttrSourceMessageID names the
// copy), or SQS dated it after the start. (The attribute is only trusted to
// leave a message, never to move one.)
func cameBack(m sqstypes.Message, d DeadLetter, sent map[string]bool, started time.Time) bool {
	if sent[d.MessageID] {
		return true
	}
	if v, ok := m.MessageAttributes[AttrSourceMessageID]; ok && sent[aws.ToString(v.StringValue)] {
		return true
	}
	return !d.SentAt.IsZero() && d.SentAt.After(started)
}

// redriveVisibility hides a received message from other readers while a
// Redrive run holds it: the messages it leaves stay hidden until the run
// ends (then made visible again), so the run reaches the rest of the queue.
const redriveVisibility = 60

// Redrive moves messages from the DLQ at dlqURL back to the consumer queue at
// targetURL, where the consumer receives them again (it deduplicates, so a
// message redriven twice is harmless): ReceiveMessage from the DLQ with the
// system attributes SenderId, DeadLetterQueueSourceArn and SentTimestamp,
// SendMessage of the same body (message attributes dropped, so the consumer
// sees the message as the rule delivered it), then DeleteMessage from the
// DLQ. Nothing is deleted before its copy is sent.
//
// Only messages opts.From proves to be the consumer's are moved — on a
// consumer DLQ (Provenance) those its queue's redrive policy moved or the
// consumer sent; on an EventBridge rule's DLQ (RuleProvenance) the events
// that rule could not deliver to the queue — and any other (planted by a
// principal allowed to send to the DLQ) is left, reported with its sender
// and why in RedriveResult.Left and opts.OnLeft, never laundered into the
// consumer queue. Only messages dated (SentTimestamp: for a message a
// redrive policy moved, its first send to the source queue) before the run
// started are moved: one sent during the run (a redriven message the consumer refused
// again at once, its cause not fixed: a copy this run sent, come back with
// its MessageId or named by AttrSourceMessageID, or a SentTimestamp after
// the run's start) is left, so a run never loops between the queue and its
// DLQ. Every message present when the run started is handled, whatever its
// body (two messages with one body are both moved).
//
// SentTimestamp is SQS's clock and the run's start the caller's (opts.Now):
// a caller clock behind SQS's leaves (and reports) messages sent just before
// the run; one ahead may move a message that came back within the skew once
// more, which the consumer's deduplication absorbs.
//
// The run ends when the DLQ reads empty (long polling), when a receive
// brings only messages this run already left, after opts.Max moves, or when
// ctx ends. The messages it left are made visible again before it returns.
//
// Errors: ErrNoProvenance (or another opts.From.Validate error) before
// anything is received; a receive error; the target refusing a message (the
// message is left, the batch finished, then the run ends with the error,
// joined with any DeleteMessage error: a leftover copy on the DLQ is a
// harmless duplicate); ctx's error.
func Redrive(ctx context.Context, dlq QueueAPI, dlqURL string, target MessageSender, targetURL string, opts RedriveOptions) (RedriveResult, error) {
	var res RedriveResult
	if opts.From == nil {
		return res, ErrNoProvenance
	}
	if err := opts.From.Validate(); err != nil {
		return res, err
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	// SentTimestamp has whole milliseconds: so does the run's start (a
	// message sent in the run's first millisecond is taken as older; if it
	// came back, it is moved once more, and the consumer deduplicates it).
	started := time.UnixMilli(now().UnixMilli())
	seen := map[string]bool{}
	sent := map[string]bool{} // MessageIds of the copies this run sent to the target
	var hidden []*string      // receipt handles of the messages left, made visible again at the end
	defer func() {
		for _, h := range hidden {
			_, _ = dlq.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: h, VisibilityTimeout: 0})
		}
	}()
	leave := func(m sqstypes.Message, d DeadLetter, why string) {
		hidden = append(hidden, m.ReceiptHandle)
		l := LeftMessage{DeadLetter: d, Why: why}
		res.Left = append(res.Left, l)
		if opts.OnLeft != nil {
			opts.OnLeft(l)
		}
	}
	for opts.Max == 0 || res.Moved < opts.Max {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("redrive %s: %w", dlqURL, err)
		}
		n := int32(10)
		if opts.Max > 0 {
			n = int32(min(10, opts.Max-res.Moved)) //nolint:gosec // G115: <= 10
		}
		out, err := dlq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: n, VisibilityTimeout: redriveVisibility, WaitTimeSeconds: receiveWaitSeconds,
			MessageSystemAttributeNames: receiveAttributes,
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return res, fmt.Errorf("redrive: receive from %s: %w", dlqURL, err)
		}
		if len(out.Messages) == 0 {
			return res, nil
		}
		var errs []error
		fresh := 0
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				// Left earlier in this run and visible again (the run
				// outlasted its visibility): still left.
				hidden = append(hidden, m.ReceiptHandle)
				continue
			}
			seen[id] = true
			fresh++
			d := toDeadLetter(m)
			if ok, why := opts.From.Proves(d); !ok {
				leave(m, d, why)
				continue
			}
			if cameBack(m, d, sent, started) {
				leave(m, d, "sent to the DLQ during this run (it came back: its cause is not fixed)")
				continue
			}
			copied, err := target.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(targetURL), MessageBody: m.Body})
			if err != nil {
				err = fmt.Errorf("redrive message %s: send to %s: %w", id, targetURL, err)
				errs = append(errs, err)
				leave(m, d, err.Error())
				continue
			}
			if copied != nil && copied.MessageId != nil {
				sent[aws.ToString(copied.MessageId)] = true
			}
			if _, err := dlq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				// The copy was sent: a leftover on the DLQ is a harmless duplicate.
				errs = append(errs, fmt.Errorf("redrive message %s: delete from %s: %w", id, dlqURL, err))
			}
			res.Moved++
			if opts.OnMessage != nil {
				opts.OnMessage(d)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return res, err
		}
		if fresh == 0 {
			return res, nil // only messages this run already left: nothing more to move
		}
	}
	return res, nil
}

// Peek lists up to opts.Max messages (0: 100) of the DLQ at dlqURL without
// removing them: each is received and made visible again at once.
func Peek(ctx context.Context, dlq QueueAPI, dlqURL string, opts RedriveOptions) ([]DeadLetter, error) {
	limit := opts.Max
	if limit == 0 {
		limit = 100
	}
	var out []DeadLetter
	var handles []*string
	defer func() {
		for _, h := range handles {
			_, _ = dlq.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: h, VisibilityTimeout: 0})
		}
	}()
	for len(out) < limit {
		res, err := dlq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: int32(min(10, limit-len(out))), VisibilityTimeout: 30, WaitTimeSeconds: receiveWaitSeconds, //nolint:gosec // G115: MaxNumberOfMessages <= 10
			MessageSystemAttributeNames: receiveAttributes,
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return out, fmt.Errorf("peek %s: %w", dlqURL, err)
		}
		if len(res.Messages) == 0 {
			break
		}
		for _, m := range res.Messages {
			handles = append(handles, m.ReceiptHandle)
			d := toDeadLetter(m)
			out = append(out, d)
			if opts.OnMessage != nil {
				opts.OnMessage(d)
			}
		}
	}
	return out, nil
}
