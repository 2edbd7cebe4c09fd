package localrt

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The queue is a drop-in for the SQS client where the runtime receives.
var (
	_ SQSReceiveAPI = (*sqs.Client)(nil)
	_ SQSReceiveAPI = (*SQSQueue)(nil)
	_ MessageSender = (*SQSQueue)(nil)
)

// testClock is a settable clock for SQSQueueConfig.Now.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestSQSQueue(t *testing.T, cfg SQSQueueConfig) *SQSQueue {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = strings.ReplaceAll(t.Name(), "/", "-")
	}
	q, err := NewSQSQueue(cfg)
	if err != nil {
		t.Fatalf("NewSQSQueue: %v", err)
	}
	return q
}

func sendBody(t *testing.T, q *SQSQueue, body string) string {
	t.Helper()
	out, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatalf("SendMessage(%.40q): %v", body, err)
	}
	return aws.ToString(out.MessageId)
}

// receiveN is a short-poll ReceiveMessage of up to n messages.
func receiveN(t *testing.T, q *SQSQueue, n int32) []sqstypes.Message {
	t.Helper()
	out, err := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: n})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

func deleteHandle(t *testing.T, q *SQSQueue, handle *string) {
	t.Helper()
	if _, err := q.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: handle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
}

func TestSQSQueueSendReceiveDelete(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "orders", Region: "eu-west-1", Account: "123456789012"})
	// Queue URL and ARN formats: SQS Developer Guide, sqs-queue-message-identifiers.
	if q.URL() != "https://sqs.eu-west-1.amazonaws.com/123456789012/orders" || q.ARN() != "arn:aws:sqs:eu-west-1:123456789012:orders" {
		t.Fatalf("URL %s ARN %s", q.URL(), q.ARN())
	}
	ctx := context.Background()
	body := `{"detail-type":"OrderPlaced"}`
	out, err := q.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.URL()), MessageBody: aws.String(body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum([]byte(body))
	// SendMessage answers the MessageId and the MD5 digest of the body (API_SendMessage).
	if aws.ToString(out.MessageId) == "" || aws.ToString(out.MD5OfMessageBody) != hex.EncodeToString(sum[:]) {
		t.Fatalf("SendMessage output %+v", out)
	}
	msgs := receiveN(t, q, 10)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if aws.ToString(m.MessageId) != aws.ToString(out.MessageId) || aws.ToString(m.Body) != body ||
		aws.ToString(m.MD5OfBody) != hex.EncodeToString(sum[:]) || aws.ToString(m.ReceiptHandle) == "" {
		t.Fatalf("received %+v", m)
	}
	if m.Attributes[AttrApproximateReceiveCount] != "1" || m.Attributes[AttrSentTimestamp] == "" || m.Attributes[AttrApproximateFirstReceiveTimestamp] == "" {
		t.Errorf("system attributes %v", m.Attributes)
	}
	if v := m.MessageAttributes["k"]; aws.ToString(v.StringValue) != "v" || aws.ToString(v.DataType) != "String" {
		t.Errorf("message attributes %v", m.MessageAttributes)
	}
	deleteHandle(t, q, m.ReceiptHandle)
	if q.Len() != 0 {
		t.Fatalf("Len after delete = %d", q.Len())
	}
	// Deleting again with the same handle is not an error (API_DeleteMessage:
	// deleting an already deleted message succeeds).
	deleteHandle(t, q, m.ReceiptHandle)
	if got := receiveN(t, q, 10); len(got) != 0 {
		t.Fatalf("received %d after delete", len(got))
	}
}

// A received message stays invisible for the visibility timeout, then is
// received again with ApproximateReceiveCount + 1 and a new receipt handle;
// DeleteMessage with the older handle succeeds but deletes nothing.
// SQS Developer Guide, sqs-visibility-timeout; API_DeleteMessage: "you must
// provide the most recently received ReceiptHandle for the message
// (otherwise, the request succeeds, but the message will not be deleted)".
func TestSQSQueueVisibilityTimeout(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 30 * time.Second, Now: clock.Now})
	id := sendBody(t, q, "m")

	first := receiveN(t, q, 10)
	if len(first) != 1 || first[0].Attributes[AttrApproximateReceiveCount] != "1" {
		t.Fatalf("first receive %+v", first)
	}
	if v, i := q.Counts(); v != 0 || i != 1 {
		t.Fatalf("Counts after receive = %d visible, %d in flight; want 0, 1", v, i)
	}
	clock.Advance(29 * time.Second)
	if got := receiveN(t, q, 10); len(got) != 0 {
		t.Fatalf("received %d messages 29 s into a 30 s visibility timeout", len(got))
	}
	clock.Advance(time.Second)
	second := receiveN(t, q, 10)
	if len(second) != 1 {
		t.Fatalf("message did not come back after the visibility timeout")
	}
	if aws.ToString(second[0].MessageId) != id || second[0].Attributes[AttrApproximateReceiveCount] != "2" {
		t.Fatalf("second receive id %s count %s", aws.ToString(second[0].MessageId), second[0].Attributes[AttrApproximateReceiveCount])
	}
	if aws.ToString(second[0].ReceiptHandle) == aws.ToString(first[0].ReceiptHandle) {
		t.Fatal("second receive reused the receipt handle")
	}
	if second[0].Attributes[AttrApproximateFirstReceiveTimestamp] != first[0].Attributes[AttrApproximateFirstReceiveTimestamp] {
		t.Error("ApproximateFirstReceiveTimestamp changed on the second receive")
	}

	deleteHandle(t, q, first[0].ReceiptHandle) // stale: succeeds, deletes nothing
	if q.Len() != 1 {
		t.Fatalf("a stale receipt handle deleted the message")
	}
	deleteHandle(t, q, second[0].ReceiptHandle)
	if q.Len() != 0 {
		t.Fatalf("the latest receipt handle did not delete the message")
	}
}

// A malformed receipt handle is ReceiptHandleIsInvalid (API_DeleteMessage,
// API_ChangeMessageVisibility errors).
func TestSQSQueueMalformedReceiptHandle(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{})
	sendBody(t, q, "m")
	receiveN(t, q, 1)
	ctx := context.Background()
	for _, h := range []string{"", "garbage", "abc#"} {
		_, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: aws.String(h)})
		if apiCode(err) != "ReceiptHandleIsInvalid" {
			t.Errorf("DeleteMessage(%q) = %v, want ReceiptHandleIsInvalid", h, err)
		}
		_, err = q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: aws.String(h)})
		if apiCode(err) != "ReceiptHandleIsInvalid" {
			t.Errorf("ChangeMessageVisibility(%q) = %v, want ReceiptHandleIsInvalid", h, err)
		}
	}
	if q.Len() != 1 {
		t.Fatalf("Len = %d", q.Len())
	}
}

// With a redrive policy of maxReceiveCount 3 a message is delivered 3 times;
// the receive after that moves it to the DLQ with the same MessageId, body
// and message attributes, and the DLQ sets DeadLetterQueueSourceArn.
// SQS Developer Guide, sqs-dead-letter-queues ("when the ReceiveCount for a
// message exceeds the maxReceiveCount for a queue, Amazon SQS moves the
// message to a dead-letter queue (with its original message ID)");
// API_ReceiveMessage (DeadLetterQueueSourceArn).
func TestSQSQueueRedriveAfterMaxReceiveCount(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "dlq", Now: clock.Now})
	src := newTestSQSQueue(t, SQSQueueConfig{Name: "src", VisibilityTimeout: time.Second, Now: clock.Now,
		Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 3}})
	out, err := src.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(src.URL()), MessageBody: aws.String(`{"n":1}`),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"trace": {DataType: aws.String("String"), StringValue: aws.String("t1")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.MessageId)

	var counts []string
	for range 10 {
		msgs := receiveN(t, src, 10)
		for _, m := range msgs {
			counts = append(counts, m.Attributes[AttrApproximateReceiveCount])
		}
		clock.Advance(time.Second) // the visibility timeout passes without a delete
	}
	if strings.Join(counts, ",") != "1,2,3" {
		t.Fatalf("receive counts %v, want exactly 3 deliveries 1,2,3", counts)
	}
	if src.Len() != 0 || src.Moved() != 1 {
		t.Fatalf("source queue Len %d Moved %d, want 0 and 1", src.Len(), src.Moved())
	}
	got := receiveN(t, dlq, 10)
	if len(got) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(got))
	}
	m := got[0]
	if aws.ToString(m.MessageId) != id || aws.ToString(m.Body) != `{"n":1}` {
		t.Errorf("DLQ message id %s body %s, want %s {\"n\":1}", aws.ToString(m.MessageId), aws.ToString(m.Body), id)
	}
	if m.Attributes[AttrDeadLetterQueueSourceArn] != src.ARN() {
		t.Errorf("DeadLetterQueueSourceArn = %q, want %q", m.Attributes[AttrDeadLetterQueueSourceArn], src.ARN())
	}
	if v := m.MessageAttributes["trace"]; aws.ToString(v.StringValue) != "t1" {
		t.Errorf("message attributes lost on the move: %v", m.MessageAttributes)
	}
}

// SendMessage refuses what SQS refuses. Body characters: SQS Developer Guide,
// quotas-messages ("#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD |
// #x10000 to #x10FFFF"; others → InvalidMessageContents). Size: body plus
// message attribute names, types and values count toward MaximumMessageSize
// (quotas-messages, sqs-message-metadata); over it → InvalidParameterValue
// (API_SendMessage). Empty body → MissingParameter.
func TestSQSQueueSendMessageRefuses(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{MaximumMessageSize: 1024})
	attr := func(v string) map[string]sqstypes.MessageAttributeValue {
		// 1 (name) + 6 ("String") + len(v) bytes.
		return map[string]sqstypes.MessageAttributeValue{"a": {DataType: aws.String("String"), StringValue: aws.String(v)}}
	}
	tests := []struct {
		name  string
		url   string
		body  string
		attrs map[string]sqstypes.MessageAttributeValue
		code  string
	}{
		{"plain", "", `{"a":1}`, nil, ""},
		{"tab LF CR, U+FFFD, astral", "", "a\tb\nc\rd\uFFFD\U0001F600", nil, ""},
		{"U+FFFE", "", "a\uFFFEb", nil, "InvalidMessageContents"},
		{"U+FFFF", "", "a\uFFFFb", nil, "InvalidMessageContents"},
		{"NUL", "", "a\x00b", nil, "InvalidMessageContents"},
		{"ESC", "", "a\x1bb", nil, "InvalidMessageContents"},
		{"invalid UTF-8", "", "a\xffb", nil, "InvalidMessageContents"},
		{"empty", "", "", nil, "MissingParameter"},
		{"body at limit", "", strings.Repeat("x", 1024), nil, ""},
		{"body over limit", "", strings.Repeat("x", 1025), nil, "InvalidParameterValue"},
		{"body+attributes at limit", "", strings.Repeat("x", 1000), attr(strings.Repeat("v", 17)), ""},
		{"body+attributes over limit", "", strings.Repeat("x", 1000), attr(strings.Repeat("v", 18)), "InvalidParameterValue"},
		{"unknown queue", "https://sqs.us-east-1.amazonaws.com/000000000000/nope", "m", nil, "AWS.SimpleQueueService.NonExistentQueue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url
			if url == "" {
				url = q.URL()
			}
			out, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(tc.body), MessageAttributes: tc.attrs})
			if apiCode(err) != tc.code || (tc.code == "") != (err == nil) {
				t.Fatalf("SendMessage = %v, want code %q", err, tc.code)
			}
			if tc.code != "" && out != nil {
				t.Fatalf("refused send returned output %+v", out)
			}
		})
	}
}

// MaxNumberOfMessages is 1..10, default 1 (API_ReceiveMessage). The SDK's
// int32 field sends nothing for 0, so 0 means the default; 11 and negative
// values are InvalidParameterValue, as is WaitTimeSeconds over 20.
func TestSQSQueueReceiveArguments(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{})
	for range 12 {
		sendBody(t, q, "m")
	}
	tests := []struct {
		name string
		in   sqs.ReceiveMessageInput
		want int    // messages returned
		code string // or error code
	}{
		{"0 is the default 1", sqs.ReceiveMessageInput{MaxNumberOfMessages: 0}, 1, ""},
		{"10", sqs.ReceiveMessageInput{MaxNumberOfMessages: 10}, 10, ""},
		{"11", sqs.ReceiveMessageInput{MaxNumberOfMessages: 11}, 0, "InvalidParameterValue"},
		{"-1", sqs.ReceiveMessageInput{MaxNumberOfMessages: -1}, 0, "InvalidParameterValue"},
		{"WaitTimeSeconds 21", sqs.ReceiveMessageInput{WaitTimeSeconds: 21}, 0, "InvalidParameterValue"},
		{"VisibilityTimeout over 12 h", sqs.ReceiveMessageInput{VisibilityTimeout: 43201}, 0, "InvalidParameterValue"},
	}
	for _, tc := range tests { // sequential: they share the queue's 12 messages
		in := tc.in
		in.QueueUrl = aws.String(q.URL())
		out, err := q.ReceiveMessage(context.Background(), &in)
		if apiCode(err) != tc.code || (tc.code == "") != (err == nil) {
			t.Errorf("%s: err = %v, want code %q", tc.name, err, tc.code)
			continue
		}
		if err == nil && len(out.Messages) != tc.want {
			t.Errorf("%s: %d messages, want %d", tc.name, len(out.Messages), tc.want)
		}
	}
}

// Long polling returns as soon as a message is available instead of waiting
// WaitTimeSeconds (SQS Developer Guide, sqs-short-and-long-polling), and
// returns an empty response when the wait ends with none.
func TestSQSQueueLongPoll(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{})
	ctx := context.Background()
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String("late")})
	}()
	start := time.Now()
	out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), WaitTimeSeconds: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "late" {
		t.Fatalf("long poll got %+v", out.Messages)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("long poll took %s after the send; it must return when the message arrives", d)
	}

	start = time.Now()
	out, err = q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("empty long poll: %v %+v", err, out)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("empty 1 s long poll took %s", d)
	}
}

// ChangeMessageVisibility with VisibilityTimeout 0 makes the message visible
// at once (API_ChangeMessageVisibility, sqs-visibility-timeout: "terminate
// the visibility timeout"); a message not in flight is
// AWS.SimpleQueueService.MessageNotInflight.
func TestSQSQueueChangeMessageVisibility(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: time.Hour, Now: clock.Now})
	sendBody(t, q, "m")
	ctx := context.Background()
	first := receiveN(t, q, 1)
	if len(first) != 1 {
		t.Fatal("no message")
	}
	change := func(h *string, secs int32) error {
		_, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: h, VisibilityTimeout: secs})
		return err
	}
	if err := change(first[0].ReceiptHandle, 0); err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, q, 1)
	if len(again) != 1 || again[0].Attributes[AttrApproximateReceiveCount] != "2" {
		t.Fatalf("after ChangeMessageVisibility 0: %+v", again)
	}
	// Extending: 10 s from now, not from the receive.
	if err := change(again[0].ReceiptHandle, 10); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Second)
	if n := len(receiveN(t, q, 1)); n != 0 {
		t.Fatal("visible before the changed timeout")
	}
	clock.Advance(time.Second)
	third := receiveN(t, q, 1)
	if len(third) != 1 {
		t.Fatal("not visible after the changed timeout")
	}
	if err := change(again[0].ReceiptHandle, 0); apiCode(err) != "AWS.SimpleQueueService.MessageNotInflight" {
		t.Errorf("stale handle: %v, want MessageNotInflight", err)
	}
	if err := change(third[0].ReceiptHandle, 43201); apiCode(err) != "InvalidParameterValue" {
		t.Errorf("43201 s: %v, want InvalidParameterValue", err)
	}
}

// GetQueueAttributes: ApproximateNumberOfMessages counts visible messages,
// ApproximateNumberOfMessagesNotVisible in-flight ones; RedrivePolicy is the
// JSON {"deadLetterTargetArn","maxReceiveCount"} (API_GetQueueAttributes,
// API_SetQueueAttributes).
func TestSQSQueueGetQueueAttributes(t *testing.T) {
	t.Parallel()
	dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "attrs-dlq"})
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "attrs", VisibilityTimeout: 45 * time.Second, Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 5}})
	for range 3 {
		sendBody(t, q, "m")
	}
	receiveN(t, q, 1)
	out, err := q.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL()),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	a := out.Attributes
	want := map[string]string{
		"ApproximateNumberOfMessages": "2", "ApproximateNumberOfMessagesNotVisible": "1", "ApproximateNumberOfMessagesDelayed": "0",
		"QueueArn": q.ARN(), "VisibilityTimeout": "45", "MaximumMessageSize": "262144", "MessageRetentionPeriod": "345600",
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	var rp struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     int    `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(a["RedrivePolicy"]), &rp); err != nil || rp.DeadLetterTargetArn != dlq.ARN() || rp.MaxReceiveCount != 5 {
		t.Errorf("RedrivePolicy %q (%v)", a["RedrivePolicy"], err)
	}
	if _, err := q.PurgeQueue(context.Background(), &sqs.PurgeQueueInput{QueueUrl: aws.String(q.URL())}); err != nil || q.Len() != 0 {
		t.Errorf("PurgeQueue: %v, Len %d", err, q.Len())
	}
}

// Messages older than MessageRetentionPeriod are deleted; a message moved to
// a DLQ keeps its original enqueue time (SQS Developer Guide,
// sqs-dead-letter-queues: "The expiration of a message is always based on
// its original enqueue timestamp").
func TestSQSQueueRetention(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	q := newTestSQSQueue(t, SQSQueueConfig{RetentionPeriod: time.Minute, Now: clock.Now})
	sendBody(t, q, "old")
	clock.Advance(30 * time.Second)
	sendBody(t, q, "new")
	clock.Advance(30 * time.Second)
	msgs := receiveN(t, q, 10)
	if len(msgs) != 1 || aws.ToString(msgs[0].Body) != "new" {
		t.Fatalf("after 60 s with 60 s retention got %d messages %v, want only \"new\"", len(msgs), msgs)
	}

	dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "ret-dlq", RetentionPeriod: time.Minute, Now: clock.Now})
	src := newTestSQSQueue(t, SQSQueueConfig{Name: "ret-src", VisibilityTimeout: time.Second, Now: clock.Now,
		Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 1}})
	sendBody(t, src, "moved")
	receiveN(t, src, 1)
	clock.Advance(50 * time.Second)
	receiveN(t, src, 1) // moves it
	if dlq.Len() != 1 {
		t.Fatalf("DLQ Len = %d, want 1", dlq.Len())
	}
	clock.Advance(10 * time.Second) // 60 s after the first send, 10 s after the move
	if dlq.Len() != 0 {
		t.Fatal("the DLQ kept a message past the retention period counted from its first send")
	}
}

// A long poll waiting for an in-flight message measures the time to its
// return on the queue's clock, not the wall clock: with a settable clock far
// from the wall clock it must wait, not spin. (Ten wake-ups a second would
// already be plenty; a spin makes thousands.)
func TestSQSQueueLongPollWithTestClockDoesNotSpin(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	frozen := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	q := newTestSQSQueue(t, SQSQueueConfig{VisibilityTimeout: 30 * time.Second, Now: func() time.Time {
		mu.Lock()
		calls++
		mu.Unlock()
		return frozen
	}})
	sendBody(t, q, "m")
	if len(receiveN(t, q, 1)) != 1 {
		t.Fatal("no message")
	}
	mu.Lock()
	calls = 0
	mu.Unlock()
	out, err := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("long poll: %v %+v", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls > 20 {
		t.Fatalf("a 1 s long poll read the clock %d times: it spins", calls)
	}
}

// SendMessage keeps the message as it was sent: a caller reusing its
// MessageAttributes map afterwards (as SDK callers may) does not change the
// stored message (API_SendMessage: SQS stores a copy).
func TestSQSQueueSendCopiesAttributes(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{})
	attrs := map[string]sqstypes.MessageAttributeValue{"reason": {DataType: aws.String("String"), StringValue: aws.String("first")}}
	if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String("m"), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	attrs["reason"] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("second")}
	attrs["extra"] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("x")}
	got := receiveN(t, q, 1)
	if len(got) != 1 {
		t.Fatal("no message")
	}
	if a := got[0].MessageAttributes; len(a) != 1 || aws.ToString(a["reason"].StringValue) != "first" {
		t.Fatalf("stored attributes changed after the send: %v", a)
	}
}

// Moving a message to the DLQ is atomic: no observer sees it on neither
// queue (SQS moves a message, sqs-dead-letter-queues). The devstack drain
// relies on it: a source queue read as empty means its messages are done
// or already on the DLQ. Reading the source first and the DLQ second can
// count a message twice, never zero times.
func TestSQSQueueRedriveMoveIsAtomic(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "atomic-dlq", Now: clock.Now})
	src := newTestSQSQueue(t, SQSQueueConfig{Name: "atomic", VisibilityTimeout: time.Second, Now: clock.Now,
		Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 1}})
	const n = 3000
	for range n {
		sendBody(t, src, "m")
	}
	for range n / 10 {
		receiveN(t, src, 10)
	}
	clock.Advance(time.Second)
	stop := make(chan struct{})
	lost := make(chan int)
	go func() {
		seen := 0
		for {
			select {
			case <-stop:
				lost <- seen
				return
			default:
			}
			if src.Len()+dlq.Len() < n {
				seen++
			}
		}
	}()
	for range n/10 + 1 {
		receiveN(t, src, 10)
	}
	close(stop)
	if seen := <-lost; seen > 0 {
		t.Errorf("%d observations found messages on neither queue during the move", seen)
	}
	if src.Len() != 0 || dlq.Len() != n {
		t.Fatalf("source %d, DLQ %d; want 0 and %d", src.Len(), dlq.Len(), n)
	}
}
