package localrt

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// TestBusHandsTheTraceHeaderToSQSTargets: like EventBridge, the bus gives an
// SQS target the entry's TraceHeader as the AWSTraceHeader message system
// attribute, not inside the event (eb-related-service-xray); an entry
// without one gives none.
func TestBusHandsTheTraceHeaderToSQSTargets(t *testing.T) {
	t.Parallel()
	b := newTestBus(t, nil)
	q := newTestSQSQueue(t, SQSQueueConfig{})
	b.SubscribeQueue(testNotifier, q, q.URL())
	const h = "Root=1-665b7c01-a3e2f4b5c6d7e8f901234567;Parent=53995c3f42cd8ad8;Sampled=1"
	traced := entry(testPlaced, `{"event_id":"e1"}`)
	traced.TraceHeader = aws.String(h)
	out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{traced, entry(testPlaced, `{"event_id":"e2"}`)}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	waitIdle(t, b)
	msgs := receiveN(t, q, 10)
	if len(msgs) != 2 {
		t.Fatalf("queue holds %d messages, want 2", len(msgs))
	}
	for _, m := range msgs {
		got, has := m.Attributes[AttrAWSTraceHeader]
		switch e1 := strings.Contains(aws.ToString(m.Body), `"e1"`); {
		case e1 && got != h:
			t.Errorf("traced event: AWSTraceHeader %q, want %q", got, h)
		case !e1 && has:
			t.Errorf("untraced event: AWSTraceHeader %q, want none", got)
		}
		if strings.Contains(aws.ToString(m.Body), "Root=") {
			t.Errorf("trace header inside the event body: %s", aws.ToString(m.Body))
		}
	}
}

// TestSQSQueueMessageSystemAttributes: AWSTraceHeader is the only message
// system attribute SQS takes (API_SendMessage); any other is refused.
func TestSQSQueueMessageSystemAttributes(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{})
	_, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String("x"),
		MessageSystemAttributes: map[string]sqstypes.MessageSystemAttributeValue{"Other": {DataType: aws.String("String"), StringValue: aws.String("v")}}})
	if err == nil || !strings.Contains(err.Error(), "InvalidParameterValue") {
		t.Fatalf("SendMessage with a system attribute other than AWSTraceHeader: %v", err)
	}
}

// TestBusRefusesTraceHeaderOutOfBounds: PutEventsRequestEntry.TraceHeader
// has length constraints 1..500
// (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsRequestEntry.html);
// like EventBridge, which validates them on the request, the bus refuses
// the whole call with ValidationException and routes nothing; 500
// characters pass.
func TestBusRefusesTraceHeaderOutOfBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		h    string
		ok   bool
	}{
		{"500 characters", strings.Repeat("a", 500), true},
		{"501 characters", strings.Repeat("a", 501), false},
		{"empty", "", false},
	} {
		b := newTestBus(t, nil)
		e := entry(testPlaced, `{"event_id":"e1"}`)
		e.TraceHeader = aws.String(tt.h)
		out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry(testPlaced, `{"event_id":"e0"}`), e}})
		if tt.ok {
			if err != nil || out.FailedEntryCount != 0 {
				t.Errorf("%s: PutEvents = %+v, %v", tt.name, out, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "ValidationException") || !strings.Contains(err.Error(), "entries.2.member.traceHeader") {
			t.Errorf("%s: PutEvents error = %v, want ValidationException on entries.2.member.traceHeader", tt.name, err)
		}
		if got := b.Stats().Accepted; got != 0 {
			t.Errorf("%s: %d events accepted", tt.name, got)
		}
	}
}
