package localrt

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
)

// ReceiveMessage returns up to MaxNumberOfMessages (default 1, 1..10)
// visible messages, waiting up to WaitTimeSeconds (0..20) for one. Every
// returned message carries the system attributes ApproximateReceiveCount,
// ApproximateFirstReceiveTimestamp, SentTimestamp and SenderId (and
// DeadLetterQueueSourceArn on a DLQ) and all its message attributes. A
// VisibilityTimeout in the request overrides the queue's for these messages.
// Errors: InvalidParameterValue for out-of-range arguments, a wrong QueueUrl,
// ctx's error, or InternalError when the queue's Store cannot keep the
// receive (the messages then return after their visibility timeout, like a
// lost response).
func (q *SQSQueue) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if in == nil {
		in = &sqs.ReceiveMessageInput{}
	}
	if err := q.checkURL(in.QueueUrl); err != nil {
		return nil, err
	}
	n := int(in.MaxNumberOfMessages)
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxReceiveBatch {
		return nil, sqsErr("InvalidParameterValue", fmt.Sprintf("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", n))
	}
	if in.WaitTimeSeconds < 0 || time.Duration(in.WaitTimeSeconds)*time.Second > MaxWaitTime {
		return nil, sqsErr("InvalidParameterValue", fmt.Sprintf("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", in.WaitTimeSeconds))
	}
	vis := q.cfg.VisibilityTimeout
	if in.VisibilityTimeout != 0 {
		vis = time.Duration(in.VisibilityTimeout) * time.Second
	}
	if vis < 0 || vis > MaxVisibilityTimeout {
		return nil, sqsErr("InvalidParameterValue", "VisibilityTimeout must be between 0 and 43200 seconds")
	}
	var timer <-chan time.Time
	if in.WaitTimeSeconds > 0 {
		t := time.NewTimer(time.Duration(in.WaitTimeSeconds) * time.Second)
		defer t.Stop()
		timer = t.C
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out, wake, next, err := q.receive(n, vis)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 || timer == nil {
			return &sqs.ReceiveMessageOutput{Messages: out}, nil
		}
		// Wait for a send, a message becoming visible again, the wait's end.
		var again <-chan time.Time
		if !next.IsZero() {
			// next is on the queue's clock (cfg.Now), which need not be
			// the wall clock.
			again = time.After(next.Sub(q.cfg.Now()))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer:
			return &sqs.ReceiveMessageOutput{}, nil
		case <-wake:
		case <-again:
		}
	}
}

// receive takes up to n visible messages; it returns them, the channel a
// later send closes, the earliest time an in-flight message becomes
// visible (zero if none), and the Store's error, if any.
func (q *SQSQueue) receive(n int, vis time.Duration) ([]sqstypes.Message, chan struct{}, time.Time, error) {
	now := q.cfg.Now()
	var moved []*sqsMessage
	q.mu.Lock()
	q.expireLocked(now)
	var visible []int
	var next time.Time
	for i, m := range q.msgs {
		if m.visibleAt.After(now) {
			if next.IsZero() || m.visibleAt.Before(next) {
				next = m.visibleAt
			}
			continue
		}
		visible = append(visible, i)
	}
	// A standard queue returns messages in no guaranteed order.
	q.rng.Shuffle(len(visible), func(i, j int) { visible[i], visible[j] = visible[j], visible[i] })
	var out []sqstypes.Message
	var storeErr error
	drop := map[int]bool{}
	for _, i := range visible {
		if len(out) == n {
			break
		}
		m := q.msgs[i]
		if r := q.cfg.Redrive; r != nil && m.receiveCount >= r.MaxReceiveCount {
			drop[i] = true
			moved = append(moved, m)
			continue
		}
		m.receiveCount++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.visibleAt = now.Add(vis)
		m.receipt = uuid.NewString() + "#" + m.id
		out = append(out, m.toSDK())
		if err := q.persist(m); err != nil && storeErr == nil {
			storeErr = err
		}
	}
	if len(drop) > 0 {
		kept := q.msgs[:0]
		for i, m := range q.msgs {
			if !drop[i] {
				kept = append(kept, m)
			}
		}
		q.msgs = kept
		q.moved += int64(len(moved))
	}
	// The move is atomic: the DLQ gets the messages before q's lock is
	// released, so no reader sees them on neither queue. Locking q then its
	// DLQ cannot deadlock: a redrive policy names a queue that already
	// exists, so redrive chains have no cycles.
	// Kept in the DLQ's store before it leaves this one's: a kill in
	// between leaves a duplicate, never a loss.
	for _, m := range moved {
		dm := &sqsMessage{
			id: m.id, body: m.body, md5: m.md5, attrs: m.attrs, sentAt: m.sentAt, sourceArn: q.arn, senderID: m.senderID,
		}
		dlq := q.cfg.Redrive.DeadLetterQueue
		err := dlq.persist(dm)
		if err == nil {
			err = q.unpersist(m.id)
		}
		if err != nil && storeErr == nil {
			storeErr = err
		}
		dlq.put(dm)
	}
	wake := q.wake
	q.mu.Unlock()
	if storeErr != nil {
		return nil, wake, next, storeErr
	}
	return out, wake, next, nil
}

func (m *sqsMessage) toSDK() sqstypes.Message {
	attrs := map[string]string{
		AttrApproximateReceiveCount:          strconv.Itoa(m.receiveCount),
		AttrApproximateFirstReceiveTimestamp: strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		AttrSentTimestamp:                    strconv.FormatInt(m.sentAt.UnixMilli(), 10),
		AttrSenderID:                         m.senderID,
	}
	if m.sourceArn != "" {
		attrs[AttrDeadLetterQueueSourceArn] = m.sourceArn
	}
	if m.traceHeader != "" {
		attrs[AttrAWSTraceHeader] = m.traceHeader
	}
	var ma map[string]sqstypes.MessageAttributeValue
	if len(m.attrs) > 0 {
		ma = make(map[string]sqstypes.MessageAttributeValue, len(m.attrs))
		for k, v := range m.attrs {
			ma[k] = v
		}
	}
	return sqstypes.Message{
		MessageId: aws.String(m.id), ReceiptHandle: aws.String(m.receipt), Body: aws.String(m.body),
		MD5OfBody: aws.String(m.md5), Attributes: attrs, MessageAttributes: ma,
	}
}

// expireLocked drops messages past the retention period (from the Store
// too; one it fails to forget expires again after a restart).
func (q *SQSQueue) expireLocked(now time.Time) {
	kept := q.msgs[:0]
	var expired []string
	for _, m := range q.msgs {
		if now.Sub(m.sentAt) < q.cfg.RetentionPeriod {
			kept = append(kept, m)
		} else {
			expired = append(expired, m.id)
		}
	}
	q.msgs = kept
	_ = q.unpersist(expired...)
}

// find returns the index of the message a receipt handle names, whether the
// handle is well formed, and whether it is the message's latest handle.
func (q *SQSQueue) findLocked(handle string) (idx int, wellFormed, latest bool) {
	_, id, ok := strings.Cut(handle, "#")
	if !ok || id == "" {
		return -1, false, false
	}
	for i, m := range q.msgs {
		if m.id == id {
			return i, true, m.receipt == handle
		}
	}
	return -1, true, false
}

// DeleteMessage deletes the message whose latest receipt handle is given.
// A stale handle (the message was received again since) or the handle of a
// message already deleted succeeds and deletes nothing; a malformed handle
// is ReceiptHandleIsInvalid; InternalError when the Store cannot forget it
// (it is gone now, but would come back after a restart: a duplicate).
func (q *SQSQueue) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.checkURL(in.QueueUrl); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	i, ok, latest := q.findLocked(aws.ToString(in.ReceiptHandle))
	if !ok {
		return nil, sqsErr("ReceiptHandleIsInvalid", fmt.Sprintf("The input receipt handle %q is not a valid receipt handle.", aws.ToString(in.ReceiptHandle)))
	}
	if i >= 0 && latest {
		id := q.msgs[i].id
		q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
		if err := q.unpersist(id); err != nil {
			return nil, err
		}
	}
	return &sqs.DeleteMessageOutput{}, nil
}

// ChangeMessageVisibility sets an in-flight message's remaining visibility
// timeout (0..12 h) from now. Errors: ReceiptHandleIsInvalid for a malformed
// handle, MessageNotInflight when the message is visible, unknown or the
// handle is stale, InvalidParameterValue for an out-of-range timeout.
func (q *SQSQueue) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.checkURL(in.QueueUrl); err != nil {
		return nil, err
	}
	d := time.Duration(in.VisibilityTimeout) * time.Second
	if d < 0 || d > MaxVisibilityTimeout {
		return nil, sqsErr("InvalidParameterValue", "VisibilityTimeout must be between 0 and 43200 seconds")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Now()
	i, ok, latest := q.findLocked(aws.ToString(in.ReceiptHandle))
	if !ok {
		return nil, sqsErr("ReceiptHandleIsInvalid", "The input receipt handle is not a valid receipt handle.")
	}
	if i < 0 || !latest || !q.msgs[i].visibleAt.After(now) {
		return nil, sqsErr("AWS.SimpleQueueService.MessageNotInflight", "The message referred to is not in flight.")
	}
	q.msgs[i].visibleAt = now.Add(d)
	if err := q.persist(q.msgs[i]); err != nil {
		return nil, err
	}
	if d == 0 {
		close(q.wake)
		q.wake = make(chan struct{})
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}
