package localrt

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// storedMessage is an SQSQueue message as its StateStore keeps it: every
// field of sqsMessage (TestSQSMessageFieldsArePersisted fails when one is
// added and not kept here). Times are Unix nanoseconds, zero for none.
type storedMessage struct {
	ID           string                `json:"id"`
	Body         string                `json:"body"`
	MD5          string                `json:"md5"`
	Attributes   map[string]storedAttr `json:"attributes,omitempty"`
	SentAt       int64                 `json:"sent_at"`
	FirstReceive int64                 `json:"first_receive,omitempty"`
	ReceiveCount int                   `json:"receive_count,omitempty"`
	VisibleAt    int64                 `json:"visible_at,omitempty"`
	Receipt      string                `json:"receipt,omitempty"`
	// System holds the message system attributes the queue keeps, by their
	// SQS names (DeadLetterQueueSourceArn, AWSTraceHeader, ...).
	System map[string]string `json:"system,omitempty"`
}

// storedAttr is a message attribute (sqstypes.MessageAttributeValue).
type storedAttr struct {
	DataType         string   `json:"data_type"`
	StringValue      *string  `json:"string,omitempty"`
	BinaryValue      []byte   `json:"binary,omitempty"`
	StringListValues []string `json:"string_list,omitempty"`
	BinaryListValues [][]byte `json:"binary_list,omitempty"`
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func (m *sqsMessage) stored() storedMessage {
	s := storedMessage{ID: m.id, Body: m.body, MD5: m.md5, SentAt: nanos(m.sentAt), FirstReceive: nanos(m.firstReceive),
		ReceiveCount: m.receiveCount, VisibleAt: nanos(m.visibleAt), Receipt: m.receipt}
	if len(m.attrs) > 0 {
		s.Attributes = make(map[string]storedAttr, len(m.attrs))
		for k, v := range m.attrs {
			s.Attributes[k] = storedAttr{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue,
				StringListValues: v.StringListValues, BinaryListValues: v.BinaryListValues}
		}
	}
	sys := map[string]string{}
	if m.sourceArn != "" {
		sys[AttrDeadLetterQueueSourceArn] = m.sourceArn
	}
	if m.traceHeader != "" {
		sys[AttrAWSTraceHeader] = m.traceHeader
	}
	if m.senderID != "" {
		sys[AttrSenderID] = m.senderID
	}
	if len(sys) > 0 {
		s.System = sys
	}
	return s
}

func (s storedMessage) message() *sqsMessage {
	m := &sqsMessage{id: s.ID, body: s.Body, md5: s.MD5, sentAt: fromNanos(s.SentAt), firstReceive: fromNanos(s.FirstReceive),
		receiveCount: s.ReceiveCount, visibleAt: fromNanos(s.VisibleAt), receipt: s.Receipt,
		sourceArn: s.System[AttrDeadLetterQueueSourceArn], traceHeader: s.System[AttrAWSTraceHeader], senderID: s.System[AttrSenderID]}
	if m.senderID == "" {
		// kept before SenderId was: its sender is not known
		m.senderID = DefaultSenderID
	}
	if len(s.Attributes) > 0 {
		m.attrs = make(map[string]sqstypes.MessageAttributeValue, len(s.Attributes))
		for k, v := range s.Attributes {
			m.attrs[k] = sqstypes.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue,
				StringListValues: v.StringListValues, BinaryListValues: v.BinaryListValues}
		}
	}
	return m
}

// storePrefix is the queue's key prefix in its StateStore.
func (q *SQSQueue) storePrefix() string { return "sqs/" + q.arn + "/" }

// persist writes m's current state to the queue's store (none: nothing).
// The error is an SQS InternalError (a server fault: retry).
func (q *SQSQueue) persist(m *sqsMessage) error {
	if q.cfg.Store == nil {
		return nil
	}
	b, err := json.Marshal(m.stored())
	if err == nil {
		err = q.cfg.Store.Put(q.storePrefix()+m.id, b)
	}
	if err != nil {
		return &smithy.GenericAPIError{Code: "InternalError", Fault: smithy.FaultServer,
			Message: fmt.Sprintf("queue %s: the local queue could not keep message %s: %v", q.cfg.Name, m.id, err)}
	}
	return nil
}

// unpersist removes messages from the store.
func (q *SQSQueue) unpersist(ids ...string) error {
	if q.cfg.Store == nil || len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = q.storePrefix() + id
	}
	if err := q.cfg.Store.Delete(keys...); err != nil {
		return &smithy.GenericAPIError{Code: "InternalError", Fault: smithy.FaultServer,
			Message: fmt.Sprintf("queue %s: the local queue could not forget %d message(s): %v", q.cfg.Name, len(ids), err)}
	}
	return nil
}

// restore loads the queue's messages from its store: visible and in-flight
// alike, with their receive counts, receipt handles, visibility deadlines
// (a message in flight when the stack stopped returns when its visibility
// timeout ends, as on SQS), attributes and system attributes; in send
// order. A record that does not decode is an error naming it.
func (q *SQSQueue) restore() error {
	recs := q.cfg.Store.Records(q.storePrefix())
	msgs := make([]*sqsMessage, 0, len(recs))
	for k, b := range recs {
		var s storedMessage
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("localrt: queue %s: stored message %s: %w", q.cfg.Name, k, err)
		}
		msgs = append(msgs, s.message())
	}
	sort.Slice(msgs, func(i, j int) bool {
		if !msgs[i].sentAt.Equal(msgs[j].sentAt) {
			return msgs[i].sentAt.Before(msgs[j].sentAt)
		}
		return msgs[i].id < msgs[j].id
	})
	q.mu.Lock()
	q.msgs = msgs
	q.mu.Unlock()
	return nil
}
