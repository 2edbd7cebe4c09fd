package sqsconsumer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
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

// RedriveOptions bound a Peek or Redrive.
type RedriveOptions struct {
	// Max is the most messages to handle (0: until the queue reads empty).
	Max int
	// OnMessage, when set, is called for every message handled (Redrive:
	// after it was sent to the target and deleted from the DLQ).
	OnMessage func(DeadLetter)
}

func toDeadLetter(m sqstypes.Message) DeadLetter {
	d := DeadLetter{MessageID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), ReceiveCount: m.Attributes["ApproximateReceiveCount"]}
	if v, ok := m.MessageAttributes[AttrReason]; ok {
		d.Reason = aws.ToString(v.StringValue)
	} else {
		d.Reason = ReasonMaxReceiveCount
	}
	if v, ok := m.MessageAttributes[AttrError]; ok {
		d.Error = aws.ToString(v.StringValue)
	}
	return d
}

// Redrive moves messages from the DLQ at dlqURL back to the consumer queue at
// targetURL, where the consumer receives them again (it deduplicates, so a
// message redriven twice is harmless): ReceiveMessage from the DLQ,
// SendMessage of the same body (message attributes dropped, so the
// consumer sees the message as the rule delivered it), then DeleteMessage
// from the DLQ. A message whose send fails is left on the DLQ (its
// visibility is reset so the next run sees it) and the error returned;
// nothing is deleted before its copy is sent. It returns the number moved.
//
// Each body is moved once per run: a message whose body this run already
// moved (the consumer refused it again at once, before its cause was fixed)
// is left on the DLQ and the run ends, so a redrive never loops between the
// queue and its DLQ.
func Redrive(ctx context.Context, dlq QueueAPI, dlqURL string, target MessageSender, targetURL string, opts RedriveOptions) (int, error) {
	moved := 0
	seen := map[[32]byte]bool{}
	for opts.Max == 0 || moved < opts.Max {
		n := int32(10)
		if opts.Max > 0 {
			n = int32(min(10, opts.Max-moved))
		}
		out, err := dlq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: n, VisibilityTimeout: 60, WaitTimeSeconds: receiveWaitSeconds,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return moved, fmt.Errorf("redrive: receive from %s: %w", dlqURL, err)
		}
		if len(out.Messages) == 0 {
			return moved, nil
		}
		var errs []error
		again := 0
		for _, m := range out.Messages {
			sum := sha256.Sum256([]byte(aws.ToString(m.Body)))
			if seen[sum] {
				again++
				_, _ = dlq.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				continue
			}
			seen[sum] = true
			if _, err := target.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(targetURL), MessageBody: m.Body}); err != nil {
				errs = append(errs, fmt.Errorf("redrive message %s: send to %s: %w", aws.ToString(m.MessageId), targetURL, err))
				_, _ = dlq.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				continue
			}
			if _, err := dlq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				// The copy was sent: a leftover on the DLQ is a harmless duplicate.
				errs = append(errs, fmt.Errorf("redrive message %s: delete from %s: %w", aws.ToString(m.MessageId), dlqURL, err))
			}
			moved++
			if opts.OnMessage != nil {
				opts.OnMessage(toDeadLetter(m))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return moved, err
		}
		if again > 0 {
			return moved, nil // back already: the cause is not fixed
		}
	}
	return moved, nil
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
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
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
