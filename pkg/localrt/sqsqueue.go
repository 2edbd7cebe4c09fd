package localrt

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
)

// SQS queue defaults and limits (Amazon SQS Developer Guide: quotas-messages,
// sqs-visibility-timeout, sqs-dead-letter-queues; API reference
// ReceiveMessage, SetQueueAttributes).
const (
	// DefaultVisibilityTimeout is a queue's default VisibilityTimeout, 30 s
	// (0 s..12 h).
	DefaultVisibilityTimeout = 30 * time.Second
	// MaxVisibilityTimeout is the VisibilityTimeout limit, 12 hours.
	MaxVisibilityTimeout = 12 * time.Hour
	// DefaultRetentionPeriod is a queue's default MessageRetentionPeriod,
	// 4 days (60 s..14 days).
	DefaultRetentionPeriod = 4 * 24 * time.Hour
	// MaxReceiveBatch is ReceiveMessage's MaxNumberOfMessages limit, 10.
	MaxReceiveBatch = 10
	// MaxWaitTime is ReceiveMessage's WaitTimeSeconds limit, 20 s.
	MaxWaitTime = 20 * time.Second
	// MaxMaxReceiveCount is the redrive policy's maxReceiveCount limit.
	MaxMaxReceiveCount = 1000
)

// SQS system attribute names the queue sets on received messages.
const (
	AttrApproximateReceiveCount          = "ApproximateReceiveCount"
	AttrApproximateFirstReceiveTimestamp = "ApproximateFirstReceiveTimestamp"
	AttrSentTimestamp                    = "SentTimestamp"
	AttrSenderID                         = "SenderId"
	AttrDeadLetterQueueSourceArn         = "DeadLetterQueueSourceArn"
)

// RedrivePolicy moves a message to DeadLetterQueue once it has been received
// MaxReceiveCount times without being deleted: the next receive that would
// return it moves it instead (sqs-dead-letter-queues: "when the ReceiveCount
// for a message exceeds the maxReceiveCount").
type RedrivePolicy struct {
	DeadLetterQueue *SQSQueue
	// MaxReceiveCount is 1..1000.
	MaxReceiveCount int
}

// SQSQueueConfig configures an SQSQueue. Zero values take the defaults.
type SQSQueueConfig struct {
	// Name is the queue name; URL and ARN derive from it with Region and
	// Account. Required.
	Name    string
	Region  string
	Account string
	// VisibilityTimeout is how long a received message stays invisible
	// (default 30 s, at most 12 h).
	VisibilityTimeout time.Duration
	// MaximumMessageSize is the body + attributes limit in bytes (default
	// 262,144; 1,024..1,048,576).
	MaximumMessageSize int
	// RetentionPeriod deletes messages this long after they were first sent
	// (default 4 days). A message moved to a DLQ keeps its first send time.
	RetentionPeriod time.Duration
	// Redrive is the queue's redrive policy (nil: none).
	Redrive *RedrivePolicy
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Store, when set, keeps the queue's messages durably (the local stack
	// passes its state journal): NewSQSQueue restores them, and every
	// change — a send, a receive (count, receipt, visibility deadline), a
	// visibility change, a delete, a move to the DLQ, an expiry, a purge —
	// is written before it is answered, so a message acknowledged to its
	// sender survives the process being killed, as an SQS queue is durable.
	// nil: in memory only.
	Store StateStore
}

type sqsMessage struct {
	id           string
	body         string
	md5          string
	attrs        map[string]sqstypes.MessageAttributeValue
	sentAt       time.Time
	firstReceive time.Time
	receiveCount int
	visibleAt    time.Time
	receipt      string
	sourceArn    string
	senderID     string // the SenderId message system attribute (WithSenderID)
	traceHeader  string // the AWSTraceHeader message system attribute, if sent
}

// SQSQueue is an in-memory Amazon SQS standard queue with the behaviour the
// consumer delivery path relies on, and the SDK's exact method signatures:
//
//   - SendMessage refuses what SQS refuses (empty body, characters outside
//     the allowed set, body + attributes over MaximumMessageSize, a wrong
//     QueueUrl);
//   - ReceiveMessage returns up to MaxNumberOfMessages (1..10) visible
//     messages in no guaranteed order, each with a fresh receipt handle, its
//     ApproximateReceiveCount incremented and hidden for the visibility
//     timeout; WaitTimeSeconds long-polls (0..20 s);
//   - a message received MaxReceiveCount times and not deleted moves to the
//     redrive policy's DLQ on the next receive, keeping its id, body,
//     attributes, SenderId and first send time, with DeadLetterQueueSourceArn
//     set to the source queue's ARN;
//   - DeleteMessage with the latest receipt handle deletes; with an older
//     handle of a message received again since, it succeeds and deletes
//     nothing (SQS: "you must provide the most recently received receipt
//     handle … otherwise, the request succeeds, but the message might not be
//     deleted"); a malformed handle is ReceiptHandleIsInvalid;
//   - ChangeMessageVisibility, GetQueueAttributes (approximate counts) and
//     PurgeQueue; messages past RetentionPeriod are deleted.
//
// The messages live in memory; with SQSQueueConfig.Store they are also kept
// durably, as an SQS queue is durable, and a queue built again on the same
// store holds them. Not modelled: FIFO queues, delay queues and message
// timers, occasional duplicate receipt of a standard queue (faults inject
// duplicates instead), server-side encryption, and the 120,000 in-flight
// message quota. Safe for concurrent use.
type SQSQueue struct {
	cfg  SQSQueueConfig
	url  string
	arn  string
	mu   sync.Mutex
	msgs []*sqsMessage
	wake chan struct{}
	rng  *rand.Rand
	sent int64
	// moved counts messages this queue's redrive policy moved to its DLQ.
	moved int64
}

// NewSQSQueue returns a queue — empty, or holding what cfg.Store kept for
// it — or an error for an invalid setting or an unreadable stored message.
func NewSQSQueue(cfg SQSQueueConfig) (*SQSQueue, error) {
	if cfg.Name == "" {
		return nil, errors.New("localrt: SQSQueueConfig.Name is required")
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.Account == "" {
		cfg.Account = DefaultAccount
	}
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if cfg.MaximumMessageSize == 0 {
		cfg.MaximumMessageSize = sqsmsg.DefaultMaxBytes
	}
	if cfg.RetentionPeriod == 0 {
		cfg.RetentionPeriod = DefaultRetentionPeriod
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.VisibilityTimeout < 0 || cfg.VisibilityTimeout > MaxVisibilityTimeout:
		return nil, fmt.Errorf("localrt: queue %s: VisibilityTimeout %s is outside 0..12h", cfg.Name, cfg.VisibilityTimeout)
	case cfg.MaximumMessageSize < sqsmsg.MinMaxBytes || cfg.MaximumMessageSize > sqsmsg.MaxMaxBytes:
		return nil, fmt.Errorf("localrt: queue %s: MaximumMessageSize %d is outside %d..%d", cfg.Name, cfg.MaximumMessageSize, sqsmsg.MinMaxBytes, sqsmsg.MaxMaxBytes)
	case cfg.Redrive != nil && (cfg.Redrive.DeadLetterQueue == nil || cfg.Redrive.MaxReceiveCount < 1 || cfg.Redrive.MaxReceiveCount > MaxMaxReceiveCount):
		return nil, fmt.Errorf("localrt: queue %s: a redrive policy needs a DLQ and MaxReceiveCount 1..%d", cfg.Name, MaxMaxReceiveCount)
	}
	q := &SQSQueue{
		cfg:  cfg,
		url:  fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", cfg.Region, cfg.Account, cfg.Name),
		arn:  fmt.Sprintf("arn:aws:sqs:%s:%s:%s", cfg.Region, cfg.Account, cfg.Name),
		wake: make(chan struct{}),
		rng:  rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)),
	}
	if cfg.Store != nil {
		if err := q.restore(); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// URL is the queue URL: https://sqs.<region>.amazonaws.com/<account>/<name>.
func (q *SQSQueue) URL() string { return q.url }

// ARN is the queue ARN: arn:aws:sqs:<region>:<account>:<name>.
func (q *SQSQueue) ARN() string { return q.arn }

// VisibilityTimeout is the queue's default visibility timeout.
func (q *SQSQueue) VisibilityTimeout() time.Duration { return q.cfg.VisibilityTimeout }

func sqsErr(code, msg string) error {
	return &smithy.GenericAPIError{Code: code, Message: msg, Fault: smithy.FaultClient}
}

func (q *SQSQueue) checkURL(url *string) error {
	if aws.ToString(url) != q.url {
		return sqsErr("AWS.SimpleQueueService.NonExistentQueue", fmt.Sprintf("The specified queue does not exist: %q.", aws.ToString(url)))
	}
	return nil
}

// messageSize is the size SQS counts: body plus each attribute's name, data
// type and value.
func messageSize(body string, attrs map[string]sqstypes.MessageAttributeValue) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// SendMessage stores a message, its SenderId the principal ctx carries
// (WithSenderID; DefaultSenderID when none). Errors (smithy API errors, like SQS):
// MissingParameter (empty body), InvalidMessageContents (a character outside
// the allowed set), InvalidParameterValue (body + attributes over
// MaximumMessageSize, or a DelaySeconds other than 0, which is not modelled),
// AWS.SimpleQueueService.NonExistentQueue (QueueUrl is not this queue).
func (q *SQSQueue) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil {
		return nil, sqsErr("MissingParameter", "The request must contain the parameter MessageBody.")
	}
	if err := q.checkURL(in.QueueUrl); err != nil {
		return nil, err
	}
	body := aws.ToString(in.MessageBody)
	switch err := sqsmsg.Check(body, sqsmsg.MaxMaxBytes); {
	case errors.Is(err, sqsmsg.ErrEmpty):
		return nil, sqsErr("MissingParameter", "The request must contain the parameter MessageBody.")
	case errors.Is(err, sqsmsg.ErrInvalidContents):
		return nil, sqsErr("InvalidMessageContents", "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF ("+err.Error()+")")
	}
	for k, v := range in.MessageAttributes {
		if err := sqsmsg.Check(aws.ToString(v.StringValue), sqsmsg.MaxMaxBytes); errors.Is(err, sqsmsg.ErrInvalidContents) {
			return nil, sqsErr("InvalidParameterValue", fmt.Sprintf("Message attribute %s has invalid characters.", k))
		}
	}
	if size := messageSize(body, in.MessageAttributes); size > q.cfg.MaximumMessageSize {
		return nil, sqsErr("InvalidParameterValue", fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.cfg.MaximumMessageSize))
	}
	if in.DelaySeconds != 0 {
		return nil, sqsErr("InvalidParameterValue", "DelaySeconds is not modelled by the local queue")
	}
	traceHeader, err := systemTraceHeader(in.MessageSystemAttributes)
	if err != nil {
		return nil, err
	}
	sum := md5.Sum([]byte(body))
	m := &sqsMessage{id: uuid.NewString(), body: body, md5: hex.EncodeToString(sum[:]), attrs: maps.Clone(in.MessageAttributes), sentAt: q.cfg.Now(),
		senderID: senderID(ctx), traceHeader: traceHeader}
	if err := q.persist(m); err != nil {
		return nil, err
	}
	q.put(m)
	return &sqs.SendMessageOutput{MessageId: aws.String(m.id), MD5OfMessageBody: aws.String(m.md5)}, nil
}

// AttrAWSTraceHeader is the message system attribute carrying an X-Ray
// trace header; returned with the message when it was sent with one.
const AttrAWSTraceHeader = "AWSTraceHeader"

// systemTraceHeader checks a SendMessage's MessageSystemAttributes as SQS
// does: AWSTraceHeader is the only one supported, its DataType String
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html).
// It returns the header ("" when absent) or an InvalidParameterValue error.
func systemTraceHeader(attrs map[string]sqstypes.MessageSystemAttributeValue) (string, error) {
	var h string
	for k, v := range attrs {
		if k != AttrAWSTraceHeader {
			return "", sqsErr("InvalidParameterValue", fmt.Sprintf("Message system attribute name '%s' is invalid.", k))
		}
		if aws.ToString(v.DataType) != "String" || aws.ToString(v.StringValue) == "" {
			return "", sqsErr("InvalidParameterValue", "Message system attribute AWSTraceHeader must be a non-empty String.")
		}
		h = aws.ToString(v.StringValue)
	}
	return h, nil
}

// put appends m and wakes long pollers.
func (q *SQSQueue) put(m *sqsMessage) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.sent++
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

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

// GetQueueAttributes answers ApproximateNumberOfMessages (visible),
// ApproximateNumberOfMessagesNotVisible (in flight),
// ApproximateNumberOfMessagesDelayed (always 0), QueueArn,
// VisibilityTimeout, MaximumMessageSize, MessageRetentionPeriod and
// RedrivePolicy, whatever names are asked for.
func (q *SQSQueue) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.checkURL(in.QueueUrl); err != nil {
		return nil, err
	}
	visible, inflight := q.Counts()
	attrs := map[string]string{
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inflight),
		"ApproximateNumberOfMessagesDelayed":    "0",
		"QueueArn":                              q.arn,
		"VisibilityTimeout":                     strconv.Itoa(int(q.cfg.VisibilityTimeout / time.Second)),
		"MaximumMessageSize":                    strconv.Itoa(q.cfg.MaximumMessageSize),
		"MessageRetentionPeriod":                strconv.Itoa(int(q.cfg.RetentionPeriod / time.Second)),
	}
	if r := q.cfg.Redrive; r != nil {
		b, _ := json.Marshal(map[string]any{"deadLetterTargetArn": r.DeadLetterQueue.ARN(), "maxReceiveCount": r.MaxReceiveCount})
		attrs["RedrivePolicy"] = string(b)
	}
	return &sqs.GetQueueAttributesOutput{Attributes: attrs}, nil
}

// PurgeQueue deletes every message.
func (q *SQSQueue) PurgeQueue(ctx context.Context, in *sqs.PurgeQueueInput, _ ...func(*sqs.Options)) (*sqs.PurgeQueueOutput, error) {
	if err := q.checkURL(in.QueueUrl); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]string, len(q.msgs))
	for i, m := range q.msgs {
		ids[i] = m.id
	}
	q.msgs = nil
	if err := q.unpersist(ids...); err != nil {
		return nil, err
	}
	return &sqs.PurgeQueueOutput{}, nil
}

// Counts returns the numbers of visible and in-flight messages.
func (q *SQSQueue) Counts() (visible, inflight int) {
	now := q.cfg.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expireLocked(now)
	for _, m := range q.msgs {
		if m.visibleAt.After(now) {
			inflight++
		} else {
			visible++
		}
	}
	return visible, inflight
}

// Len is the number of messages held, visible or in flight.
func (q *SQSQueue) Len() int {
	v, i := q.Counts()
	return v + i
}

// Moved is the number of messages the redrive policy moved to the DLQ.
func (q *SQSQueue) Moved() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.moved
}

// Sent is the number of messages put on the queue (sends and moves) since
// this queue value was built (messages restored from a Store not counted).
func (q *SQSQueue) Sent() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent
}
