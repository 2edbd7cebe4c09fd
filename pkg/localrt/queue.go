package localrt

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"
)

// MessageSender is the one SQS method the local runtime calls, with the exact
// signature of (*sqs.Client).SendMessage, so a real client, a MemoryQueue or
// a test fake can be used. Implementations must be safe for concurrent use.
type MessageSender interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// MaxSQSMessageBytes is the SQS message body limit, 262,144 bytes (256 KiB),
// that MemoryQueue enforces.
const MaxSQSMessageBytes = 256 * 1024

// QueueMessage is one message stored by a MemoryQueue.
type QueueMessage struct {
	// MessageID is the id SendMessage returned (UUID v4).
	MessageID string
	// QueueURL is the QueueUrl of the request.
	QueueURL string
	// Body is the message body as sent.
	Body string
	// Attributes are the message attributes as sent (may be nil).
	Attributes map[string]sqstypes.MessageAttributeValue
	// MessageGroupID and DeduplicationID are copied from the request (FIFO).
	MessageGroupID  string
	DeduplicationID string
	// SentAt is when SendMessage stored the message.
	SentAt time.Time
}

// MemoryQueue is an in-memory SQS queue implementing MessageSender. It stands
// in locally for the relay's parked-records DLQ and the event source
// mapping's on-failure destination, and keeps every message for inspection.
// The zero value is not usable; call NewMemoryQueue. Safe for concurrent use.
type MemoryQueue struct {
	url  string
	mu   sync.Mutex
	msgs []QueueMessage
}

// NewMemoryQueue returns an empty queue. When url is not empty, SendMessage
// refuses requests whose QueueUrl differs (AWS.SimpleQueueService.NonExistentQueue).
func NewMemoryQueue(url string) *MemoryQueue { return &MemoryQueue{url: url} }

// URL returns the queue URL given to NewMemoryQueue.
func (q *MemoryQueue) URL() string { return q.url }

// SendMessage stores the message and returns a fresh MessageId and the hex
// MD5 of the body, like SQS. It returns a smithy API error with code
// "MissingParameter" when MessageBody is empty, "InvalidParameterValue" when
// the body exceeds MaxSQSMessageBytes, and
// "AWS.SimpleQueueService.NonExistentQueue" when QueueUrl does not match.
func (q *MemoryQueue) SendMessage(ctx context.Context, params *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if params == nil || aws.ToString(params.MessageBody) == "" {
		return nil, &smithy.GenericAPIError{Code: "MissingParameter", Message: "The request must contain the parameter MessageBody.", Fault: smithy.FaultClient}
	}
	url := aws.ToString(params.QueueUrl)
	if q.url != "" && url != q.url {
		return nil, &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue", Message: fmt.Sprintf("The specified queue does not exist: %q.", url), Fault: smithy.FaultClient}
	}
	body := aws.ToString(params.MessageBody)
	if len(body) > MaxSQSMessageBytes {
		return nil, &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", MaxSQSMessageBytes), Fault: smithy.FaultClient}
	}
	id := uuid.NewString()
	sum := md5.Sum([]byte(body))
	q.mu.Lock()
	q.msgs = append(q.msgs, QueueMessage{
		MessageID:       id,
		QueueURL:        url,
		Body:            body,
		Attributes:      params.MessageAttributes,
		MessageGroupID:  aws.ToString(params.MessageGroupId),
		DeduplicationID: aws.ToString(params.MessageDeduplicationId),
		SentAt:          time.Now(),
	})
	q.mu.Unlock()
	return &sqs.SendMessageOutput{MessageId: aws.String(id), MD5OfMessageBody: aws.String(hex.EncodeToString(sum[:]))}, nil
}

// Messages returns a copy of the stored messages in send order.
func (q *MemoryQueue) Messages() []QueueMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]QueueMessage(nil), q.msgs...)
}

// Len returns the number of stored messages.
func (q *MemoryQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

// Purge removes every stored message and returns them.
func (q *MemoryQueue) Purge() []QueueMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.msgs
	q.msgs = nil
	return m
}
