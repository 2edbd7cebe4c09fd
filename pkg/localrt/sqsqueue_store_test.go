package localrt

import (
	"context"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/internal/localstate"
)

func openJournal(t *testing.T, path string) *localstate.Journal {
	t.Helper()
	j, err := localstate.Open(path, localstate.Options{Binding: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestSQSQueueKeepsMessagesAcrossRestart: a queue and its DLQ on a state
// journal, stopped and rebuilt on the same journal, hold what they held:
// visible messages, a message in flight with its receive count, receipt
// handle and visibility deadline, a message moved to the DLQ with its
// DeadLetterQueueSourceArn, message attributes and the AWSTraceHeader; a
// deleted message stays deleted.
func TestSQSQueueKeepsMessagesAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")
	clock := newTestClock()
	build := func(j *localstate.Journal) (*SQSQueue, *SQSQueue) {
		dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "orders-dlq", Store: j, Now: clock.Now})
		q := newTestSQSQueue(t, SQSQueueConfig{Name: "orders", Store: j, Now: clock.Now, VisibilityTimeout: 30 * time.Second,
			Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 1}})
		return q, dlq
	}
	j := openJournal(t, path)
	q, _ := build(j)
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(`{"n":2}`),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"kind": {DataType: aws.String("String"), StringValue: aws.String("order")},
			"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
		},
		MessageSystemAttributes: map[string]sqstypes.MessageSystemAttributeValue{
			AttrAWSTraceHeader: {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")},
		},
	}
	first := sendBody(t, q, `{"n":1}`)
	// First receive: the message is in flight, received once.
	got := receiveN(t, q, 1)
	if len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	inflightHandle := got[0].ReceiptHandle
	// Another message, received once and back: the next receive moves it
	// to the DLQ (maxReceiveCount 1).
	toDLQ := sendBody(t, q, "to the DLQ")
	got = receiveN(t, q, 1)
	if len(got) != 1 || aws.ToString(got[0].MessageId) != toDLQ {
		t.Fatalf("received %v, want %s", got, toDLQ)
	}
	if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: got[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if got := receiveN(t, q, 10); len(got) != 0 { // moves it
		t.Fatalf("received %d, want the message moved to the DLQ", len(got))
	}
	deleted := sendBody(t, q, "deleted")
	for _, m := range receiveN(t, q, 10) {
		if aws.ToString(m.MessageId) == deleted {
			deleteHandle(t, q, m.ReceiptHandle)
		}
	}
	out, err := q.SendMessage(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	visible := aws.ToString(out.MessageId)
	if err := j.Close(); err != nil { // the stack stops
		t.Fatal(err)
	}

	j = openJournal(t, path)
	defer j.Close()
	q, dlq := build(j)
	if v, f := q.Counts(); v != 1 || f != 1 {
		t.Fatalf("restored queue: %d visible, %d in flight; want the visible message and the one in flight", v, f)
	}
	if v, f := dlq.Counts(); v != 1 || f != 0 {
		t.Fatalf("restored DLQ: %d visible, %d in flight", v, f)
	}
	got = receiveN(t, q, 10)
	if len(got) != 1 || aws.ToString(got[0].MessageId) != visible || got[0].Attributes[AttrApproximateReceiveCount] != "1" {
		t.Fatalf("received %+v, want only %s, first receive", got, visible)
	}
	if m := got[0]; aws.ToString(m.MessageAttributes["kind"].StringValue) != "order" || string(m.MessageAttributes["blob"].BinaryValue) != "\x00\x01\x02" ||
		m.Attributes[AttrAWSTraceHeader] != "Root=1-5759e988-bd862e3fe1be46a994272793" || aws.ToString(m.Body) != `{"n":2}` {
		t.Fatalf("restored message lost its attributes: %+v", m)
	}
	// The message in flight when the stack stopped comes back when its
	// visibility timeout ends; it had been received once (maxReceiveCount
	// 1), so that receive moves it to the DLQ instead of delivering it: its
	// receive count survived the restart.
	clock.Advance(31 * time.Second)
	if got := receiveN(t, q, 10); len(got) != 0 {
		t.Fatalf("received %+v: the restored message's receive count was lost", got)
	}
	dl := receiveN(t, dlq, 10)
	byID := map[string]sqstypes.Message{}
	for _, m := range dl {
		byID[aws.ToString(m.MessageId)] = m
	}
	if m, ok := byID[first]; !ok || aws.ToString(m.Body) != `{"n":1}` || byID[toDLQ].Attributes[AttrDeadLetterQueueSourceArn] != q.ARN() {
		t.Fatalf("DLQ holds %v; want both messages, with DeadLetterQueueSourceArn %s", byID, q.ARN())
	}
	// The receipt handle given before the restart is stale now (received
	// again since): deleting with it deletes nothing, as on SQS.
	deleteHandle(t, q, inflightHandle)
	// In the DLQ now: the two moved before and after the restart, and the
	// visible one (received once after the restart, back after 31 s).
	if _, ok := byID[deleted]; ok || len(byID) != 3 || q.Len() != 0 {
		t.Fatalf("the deleted message came back, or something is missing: DLQ %v, queue %d", byID, q.Len())
	}
}

// TestSQSQueueRestoresInFlightDeadline: a message in flight when the stack
// stopped stays invisible until its visibility deadline, then returns with
// its receive count + 1 and a new receipt handle; the handle from before
// the restart still deletes it while it is the latest.
func TestSQSQueueRestoresInFlightDeadline(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	clock := newTestClock()
	j := openJournal(t, path)
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "q", Store: j, Now: clock.Now, VisibilityTimeout: 10 * time.Second})
	id := sendBody(t, q, "held")
	h := receiveN(t, q, 1)[0].ReceiptHandle
	_ = j.Close()

	j = openJournal(t, path)
	defer j.Close()
	q = newTestSQSQueue(t, SQSQueueConfig{Name: "q", Store: j, Now: clock.Now, VisibilityTimeout: 10 * time.Second})
	if got := receiveN(t, q, 1); len(got) != 0 {
		t.Fatalf("an in-flight message was visible right after the restart")
	}
	clock.Advance(11 * time.Second)
	got := receiveN(t, q, 1)
	if len(got) != 1 || aws.ToString(got[0].MessageId) != id || got[0].Attributes[AttrApproximateReceiveCount] != strconv.Itoa(2) {
		t.Fatalf("after the deadline: %+v, want %s received a second time", got, id)
	}
	deleteHandle(t, q, h) // stale: deletes nothing
	if q.Len() != 1 {
		t.Fatal("a stale handle deleted the message")
	}
	deleteHandle(t, q, got[0].ReceiptHandle)
	_ = j.Close()
	j2 := openJournal(t, path)
	defer j2.Close()
	if q2 := newTestSQSQueue(t, SQSQueueConfig{Name: "q", Store: j2, Now: clock.Now}); q2.Len() != 0 {
		t.Fatal("a deleted message came back after a restart")
	}
}

// TestSQSMessageFieldsArePersisted: every field of the queue's message is
// kept by its store. A field added to sqsMessage fails here until it is set
// below and kept in storedMessage (message system attributes go in
// storedMessage.System by their SQS names).
func TestSQSMessageFieldsArePersisted(t *testing.T) {
	t.Parallel()
	at := func(s int64) time.Time { return time.Unix(s, 5).UTC() }
	m := &sqsMessage{
		id: "id", body: "body", md5: "md5",
		attrs:  map[string]sqstypes.MessageAttributeValue{"a": {DataType: aws.String("String"), StringValue: aws.String("v")}},
		sentAt: at(1), firstReceive: at(2), receiveCount: 3, visibleAt: at(4), receipt: "r#id",
		sourceArn: "arn:aws:sqs:us-east-1:000000000000:src", traceHeader: "Root=1-2-3", senderID: "AROAEXAMPLEROLEID0001:fn",
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("sqsMessage.%s is not set in this test: set it, and keep it in storedMessage", v.Type().Field(i).Name)
		}
	}
	if back := m.stored().message(); !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip through storedMessage:\n got %+v\nwant %+v", back, m)
	}
}

// TestMemoryQueueKeepsMessagesAcrossRestart: the parked-records queue and
// the on-failure destination (MemoryQueue) on a state journal keep what
// they accepted across a restart, in send order; Purge forgets it.
func TestMemoryQueueKeepsMessagesAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")
	const url = "https://sqs.us-east-1.amazonaws.com/000000000000/parked"
	j := openJournal(t, path)
	q, err := OpenMemoryQueue(url, j)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m" + strconv.Itoa(i)),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{"reason": {DataType: aws.String("String"), StringValue: aws.String("r")}}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = j.Close()
	j = openJournal(t, path)
	q, err = OpenMemoryQueue(url, j)
	if err != nil {
		t.Fatal(err)
	}
	msgs := q.Messages()
	if len(msgs) != 3 || msgs[0].Body != "m0" || msgs[2].Body != "m2" || aws.ToString(msgs[1].Attributes["reason"].StringValue) != "r" {
		t.Fatalf("restored %+v", msgs)
	}
	q.Purge()
	_ = j.Close()
	j = openJournal(t, path)
	defer j.Close()
	if q, _ = OpenMemoryQueue(url, j); q.Len() != 0 {
		t.Fatalf("purged messages came back: %d", q.Len())
	}
}
