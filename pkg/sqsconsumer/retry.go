package sqsconsumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// VisibilityChanger is the SQS method Handler calls to bring a failed
// message back sooner than the queue's visibility timeout, with the exact
// signature of (*sqs.Client).ChangeMessageVisibility. The Lambda SQS event
// source mapping's execution role already holds sqs:ChangeMessageVisibility
// on the source queue (Lambda developer guide, with-sqs: required
// permissions).
type VisibilityChanger interface {
	ChangeMessageVisibility(ctx context.Context, params *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// RetryDelays is a Config.RetryDelay: the delay before receive n+1 of a
// message that failed its receive n (n = ApproximateReceiveCount) is base ×
// 2^(n-1), capped at max. Transient failures (a hot-key conflict, an event
// that arrived before the one it follows) are retried in seconds instead of
// after the whole visibility timeout, and the queue's maxReceiveCount still
// bounds the attempts.
func RetryDelays(base, maxDelay time.Duration) func(receiveCount int, err error) time.Duration {
	return func(n int, _ error) time.Duration {
		d := base
		for i := 1; i < n && d < maxDelay; i++ {
			d *= 2
		}
		return min(d, maxDelay)
	}
}

// QueueURLFromARN turns an SQS queue ARN (the eventSourceARN of a Lambda SQS
// event, arn:aws:sqs:<region>:<account>:<name>) into its queue URL,
// https://sqs.<region>.amazonaws.com/<account>/<name>. It returns an error
// for anything else.
func QueueURLFromARN(arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return "", fmt.Errorf("sqsconsumer: %q is not an SQS queue ARN", arn)
	}
	host := "amazonaws.com"
	if strings.HasPrefix(parts[1], "aws-cn") {
		host = "amazonaws.com.cn"
	}
	return fmt.Sprintf("https://sqs.%s.%s/%s/%s", parts[3], host, parts[4], parts[5]), nil
}

// retryLater shortens a failed message's visibility timeout to the
// configured delay; on any error the message simply returns after the
// queue's own visibility timeout (nothing is lost).
func (h *Handler) retryLater(ctx context.Context, m events.SQSMessage, err error) {
	if h.cfg.RetryDelay == nil || h.cfg.Queue == nil || m.ReceiptHandle == "" {
		return
	}
	url, uerr := QueueURLFromARN(m.EventSourceARN)
	if uerr != nil {
		h.log.WarnContext(ctx, "sqsconsumer: cannot shorten the visibility timeout", "message_id", m.MessageId, "error", uerr)
		return
	}
	d := h.cfg.RetryDelay(ReceiveCount(m), err)
	s := d.Round(time.Second) / time.Second
	if d <= 0 || s > 43200 {
		return
	}
	secs := int32(s) //nolint:gosec // G115: 1..43200, checked in int64 above
	cctx, cancel := context.WithTimeout(ctx, h.cfg.SendTimeout)
	defer cancel()
	if _, cerr := h.cfg.Queue.ChangeMessageVisibility(cctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: aws.String(m.ReceiptHandle), VisibilityTimeout: secs,
	}); cerr != nil {
		h.log.WarnContext(ctx, "sqsconsumer: could not shorten the visibility timeout; the message returns after the queue's",
			"message_id", m.MessageId, "error", cerr)
	}
}
