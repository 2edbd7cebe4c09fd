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
	"slices"
	"strconv"
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
	// OnlySourceArns, when set, is the queue policy of an EventBridge
	// rule's DLQ as the CDK stack writes it (deadletter.AcceptOnlyFrom with
	// SourceArns): a Deny of sqs:SendMessage to every request whose
	// aws:SourceArn is none of these ARNs. SendMessage then refuses a call
	// whose context carries no such source (WithSourceARN; a principal's own
	// request never carries one, so every call through the AWS front is
	// refused) with AccessDenied, as SQS refuses it, and GetQueueAttributes
	// answers the statement in Policy. The local bus sends to a rule's DLQ
	// under the rule's ARN. Other queue policies are not modelled (any
	// caller may send to any other local queue: docs/PARITY.md).
	OnlySourceArns []string
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
// AccessDenied (SQSQueueConfig.OnlySourceArns refuses the request's
// aws:SourceArn), MissingParameter (empty body), InvalidMessageContents (a character outside
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
	if err := q.checkSource(ctx); err != nil {
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

// ErrorCodeAccessDenied is the SQS query error code of a request a policy
// refuses (HTTP 403).
const ErrorCodeAccessDenied = "AccessDenied"

// checkSource refuses a send the queue's OnlySourceArns deny: AccessDenied
// with IAM's message for an explicit deny in a resource-based policy.
func (q *SQSQueue) checkSource(ctx context.Context) error {
	if len(q.cfg.OnlySourceArns) == 0 || slices.Contains(q.cfg.OnlySourceArns, sourceARN(ctx)) {
		return nil
	}
	return sqsErr(ErrorCodeAccessDenied, fmt.Sprintf("User: %s is not authorized to perform: sqs:sendmessage on resource: %s with an explicit deny in a resource-based policy", senderID(ctx), q.arn))
}

// policy is the queue policy OnlySourceArns stands for, in the shape the
// CDK stack writes it (deadletter.AcceptOnlyFrom, Sid
// OnlyTheSourceSends); "" without OnlySourceArns.
func (q *SQSQueue) policy() string {
	if len(q.cfg.OnlySourceArns) == 0 {
		return ""
	}
	b, _ := json.Marshal(map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid": "OnlyTheSourceSends", "Effect": "Deny", "Principal": map[string]any{"AWS": "*"},
			"Action": "sqs:SendMessage", "Resource": q.arn,
			"Condition": map[string]any{"ArnNotEquals": map[string]any{"aws:SourceArn": q.cfg.OnlySourceArns}},
		}},
	})
	return string(b)
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

// GetQueueAttributes answers ApproximateNumberOfMessages (visible),
// ApproximateNumberOfMessagesNotVisible (in flight),
// ApproximateNumberOfMessagesDelayed (always 0), QueueArn,
// VisibilityTimeout, MaximumMessageSize, MessageRetentionPeriod,
// RedrivePolicy and Policy (SQSQueueConfig.OnlySourceArns), whatever names
// are asked for.
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
	if p := q.policy(); p != "" {
		attrs["Policy"] = p
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
