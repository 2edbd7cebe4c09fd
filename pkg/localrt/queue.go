package localrt

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
)

// MessageSender is the one SQS method the local runtime calls, with the exact
// signature of (*sqs.Client).SendMessage, so a real client, a MemoryQueue or
// a test fake can be used. Implementations must be safe for concurrent use.
type MessageSender interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// MaxSQSMessageBytes is a queue's default MaximumMessageSize, 262,144 bytes
// (256 KiB): the limit a MemoryQueue enforces unless SetMaxMessageBytes
// changes it. Same value as sqsmsg.DefaultMaxBytes.
const MaxSQSMessageBytes = sqsmsg.DefaultMaxBytes

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
// It is never kinder than SQS: SendMessage refuses what SQS refuses (body
// character set, MaximumMessageSize counting message attributes, empty
// values). The zero value is not usable; call NewMemoryQueue, or
// OpenMemoryQueue to keep the messages in a StateStore across restarts.
// Safe for concurrent use.
type MemoryQueue struct {
	url      string
	mu       sync.Mutex
	maxBytes int // MaximumMessageSize in bytes
	msgs     []QueueMessage
	store    StateStore // nil: in memory only
}

// NewMemoryQueue returns an empty queue whose MaximumMessageSize is the SQS
// default, MaxSQSMessageBytes (262,144 bytes). When url is not empty,
// SendMessage refuses requests whose QueueUrl differs
// (AWS.SimpleQueueService.NonExistentQueue).
func NewMemoryQueue(url string) *MemoryQueue {
	return &MemoryQueue{url: url, maxBytes: MaxSQSMessageBytes}
}

// OpenMemoryQueue is NewMemoryQueue whose messages are kept in store: it
// holds what store kept for url, and SendMessage and Purge write store
// before they return, so an accepted message survives the process being
// killed (the parked-records queue and the on-failure destination are SQS
// queues on AWS, durable). It returns an error when a stored message does
// not decode.
func OpenMemoryQueue(url string, store StateStore) (*MemoryQueue, error) {
	q := NewMemoryQueue(url)
	q.store = store
	recs := store.Records(q.storePrefix())
	for k, b := range recs {
		var m QueueMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("localrt: queue %s: stored message %s: %w", url, k, err)
		}
		q.msgs = append(q.msgs, m)
	}
	sort.Slice(q.msgs, func(i, j int) bool {
		if !q.msgs[i].SentAt.Equal(q.msgs[j].SentAt) {
			return q.msgs[i].SentAt.Before(q.msgs[j].SentAt)
		}
		return q.msgs[i].MessageID < q.msgs[j].MessageID
	})
	return q, nil
}

func (q *MemoryQueue) storePrefix() string { return "memq/" + q.url + "/" }

// SetMaxMessageBytes sets the queue's MaximumMessageSize attribute, in
// bytes: the most a message (body plus message attributes) may hold. SQS
// accepts 1,024 (sqsmsg.MinMaxBytes) to 1,048,576 (sqsmsg.MaxMaxBytes); a
// value outside that range returns an error (SetQueueAttributes answers
// InvalidAttributeValue) and leaves the limit unchanged. Source: Amazon SQS
// Developer Guide, "Amazon SQS message quotas"; CloudFormation
// AWS::SQS::Queue MaximumMessageSize.
func (q *MemoryQueue) SetMaxMessageBytes(n int) error {
	if n < sqsmsg.MinMaxBytes || n > sqsmsg.MaxMaxBytes {
		return fmt.Errorf("localrt: MaximumMessageSize %d is outside %d..%d bytes", n, sqsmsg.MinMaxBytes, sqsmsg.MaxMaxBytes)
	}
	q.mu.Lock()
	q.maxBytes = n
	q.mu.Unlock()
	return nil
}

// MaxMessageBytes returns the queue's MaximumMessageSize in bytes.
func (q *MemoryQueue) MaxMessageBytes() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.maxBytes
}

// URL returns the queue URL given to NewMemoryQueue.
func (q *MemoryQueue) URL() string { return q.url }

// SendMessage stores the message and returns a fresh MessageId and the hex
// MD5 of the body, like SQS. It refuses the message, storing nothing, with a
// *smithy.GenericAPIError (client fault) whose Code is:
//
//   - "MissingParameter" when MessageBody is empty;
//   - "AWS.SimpleQueueService.NonExistentQueue" when QueueUrl does not match;
//   - "InvalidMessageContents" when the body holds a character outside
//     #x9 | #xA | #xD | #x20–#xD7FF | #xE000–#xFFFD | #x10000–#x10FFFF, or
//     bytes that are not UTF-8 (sqsmsg.Check);
//   - "InternalError" (a server fault) when the queue's store cannot keep
//     the message;
//   - "InvalidParameterValue" when a message attribute has an empty name,
//     data type or value, or a String/Number value with a character outside
//     that set (the API reference: a string attribute value "has the same
//     restrictions on the content as the message body"; ❓ the exact code
//     SQS returns for it is inferred), or when the body plus every
//     attribute's name, data type and value bytes exceed the queue's
//     MaximumMessageSize (see SetMaxMessageBytes).
//
// Source: Amazon SQS API Reference, SendMessage and MessageAttributeValue;
// Developer Guide, "Amazon SQS message quotas".
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
	// Characters first, size second: both are checked on every message.
	if err := sqsmsg.Check(body, len(body)); err != nil {
		return nil, &smithy.GenericAPIError{Code: "InvalidMessageContents", Message: fmt.Sprintf("Invalid characters found. %v", err), Fault: smithy.FaultClient}
	}
	attrBytes, err := checkAttributes(params.MessageAttributes)
	if err != nil {
		return nil, err
	}
	limit := q.MaxMessageBytes()
	if size := len(body) + attrBytes; size > limit {
		return nil, &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes (body %d bytes + message attributes %d bytes).", limit, len(body), attrBytes), Fault: smithy.FaultClient}
	}
	id := uuid.NewString()
	sum := md5.Sum([]byte(body))
	m := QueueMessage{
		MessageID:       id,
		QueueURL:        url,
		Body:            body,
		Attributes:      params.MessageAttributes,
		MessageGroupID:  aws.ToString(params.MessageGroupId),
		DeduplicationID: aws.ToString(params.MessageDeduplicationId),
		SentAt:          time.Now(),
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.store != nil {
		b, err := json.Marshal(m)
		if err == nil {
			err = q.store.Put(q.storePrefix()+id, b)
		}
		if err != nil {
			return nil, &smithy.GenericAPIError{Code: "InternalError", Message: fmt.Sprintf("the local queue could not keep the message: %v", err), Fault: smithy.FaultServer}
		}
	}
	q.msgs = append(q.msgs, m)
	return &sqs.SendMessageOutput{MessageId: aws.String(id), MD5OfMessageBody: aws.String(hex.EncodeToString(sum[:]))}, nil
}

// checkAttributes applies SQS's rules to message attributes and returns the
// bytes they add to the message size: name + data type + value, per
// attribute (MessageAttributeValue: "All parts of the message attribute,
// including Name, Type, and Value, are part of the message size
// restriction").
func checkAttributes(attrs map[string]sqstypes.MessageAttributeValue) (int, error) {
	n := 0
	for name, v := range attrs {
		dataType := aws.ToString(v.DataType)
		invalid := func(reason string) error {
			return &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: fmt.Sprintf("Message (user) attribute '%s' %s.", sqsmsg.Sanitize(name, 256), reason), Fault: smithy.FaultClient}
		}
		switch {
		case name == "":
			return 0, &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Message (user) attribute name must not be empty.", Fault: smithy.FaultClient}
		case dataType == "":
			return 0, invalid("must have a data type")
		case v.BinaryValue != nil:
			if len(v.BinaryValue) == 0 {
				return 0, invalid("must contain a non-empty value")
			}
		default:
			s := aws.ToString(v.StringValue)
			if s == "" {
				return 0, invalid("must contain a non-empty value of type '" + dataType + "'")
			}
			if err := sqsmsg.Check(s, len(s)); err != nil {
				return 0, invalid(fmt.Sprintf("value contains invalid characters: %v", err))
			}
		}
		n += len(name) + len(dataType) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n, nil
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

// Purge removes every stored message and returns them (from the queue's
// store too: one it fails to forget comes back after a restart).
func (q *MemoryQueue) Purge() []QueueMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.msgs
	q.msgs = nil
	if q.store != nil && len(m) > 0 {
		keys := make([]string, len(m))
		for i, x := range m {
			keys[i] = q.storePrefix() + x.MessageID
		}
		_ = q.store.Delete(keys...)
	}
	return m
}
