package localrt

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SenderId is the principal that sent the message: "for a user, the user ID
// …; for an IAM role, the IAM role ID" and its session
// ("ABCDE1F2GH3I4JK5LMNOP:i-a123b456", API_ReceiveMessage). Locally the
// principal is the one the sender's context carries (WithSenderID), else
// DefaultSenderID. A message the redrive policy moves keeps its SenderId and
// gains DeadLetterQueueSourceArn; a message sent straight to the DLQ has no
// DeadLetterQueueSourceArn, whoever sent it.
func TestSQSQueueSenderID(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	dlq := newTestSQSQueue(t, SQSQueueConfig{Name: "sender-dlq", Now: clock.Now})
	src := newTestSQSQueue(t, SQSQueueConfig{Name: "sender-src", VisibilityTimeout: time.Second, Now: clock.Now,
		Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 1}})
	ctx := context.Background()
	send := func(ctx context.Context, q *SQSQueue, body string) {
		t.Helper()
		if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	const role = "AROAEXAMPLEROLEID0001:ledger"
	send(ctx, dlq, "anonymous")
	send(WithSenderID(ctx, role), dlq, "consumer")
	send(WithSenderID(ctx, "AIDAEXAMPLEUSERID0001"), src, "moved")
	receiveN(t, src, 10) // receive 1 = maxReceiveCount
	clock.Advance(time.Second)
	receiveN(t, src, 10) // moves it
	if src.Moved() != 1 {
		t.Fatalf("redrive policy moved %d", src.Moved())
	}
	got := map[string][2]string{}
	for _, m := range receiveN(t, dlq, 10) {
		got[aws.ToString(m.Body)] = [2]string{m.Attributes[AttrSenderID], m.Attributes[AttrDeadLetterQueueSourceArn]}
	}
	want := map[string][2]string{
		"anonymous": {DefaultSenderID, ""},
		"consumer":  {role, ""},
		"moved":     {"AIDAEXAMPLEUSERID0001", src.ARN()},
	}
	for body, w := range want {
		if got[body] != w {
			t.Errorf("%s: SenderId, DeadLetterQueueSourceArn = %q, want %q", body, got[body], w)
		}
	}
	// An empty principal changes nothing.
	if WithSenderID(ctx, "") != ctx {
		t.Error("WithSenderID with an empty id made a new context")
	}
}

// The SQS event source mapping invokes the function as its execution role's
// session: a message the function sends carries FunctionSenderID, the role
// id (AROA + 17 characters, the shape of an IAM role's unique id) and the
// function name as the session.
func TestSQSPollerInvokesAsTheFunctionRole(t *testing.T) {
	t.Parallel()
	q := newTestSQSQueue(t, SQSQueueConfig{Name: "role-src", VisibilityTimeout: 5 * time.Second})
	out := newTestSQSQueue(t, SQSQueueConfig{Name: "role-out"})
	if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	startSQSPoller(t, SQSPollerConfig{Queue: q, FunctionName: "notifier", FunctionTimeout: time.Second}, func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		_, err := out.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(out.URL()), MessageBody: aws.String(ev.Records[0].Body)})
		return events.SQSEventResponse{}, err
	})
	deadline := time.Now().Add(5 * time.Second)
	for out.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	msgs := receiveN(t, out, 1)
	if len(msgs) != 1 {
		t.Fatal("the function sent nothing")
	}
	if got, want := msgs[0].Attributes[AttrSenderID], FunctionSenderID("notifier"); got != want {
		t.Fatalf("SenderId = %q, want %q", got, want)
	}
	if !regexp.MustCompile(`^AROA[A-Z2-7]{17}:notifier$`).MatchString(FunctionSenderID("notifier")) {
		t.Errorf("FunctionSenderID = %q", FunctionSenderID("notifier"))
	}
	ledger := FunctionRoleID("ledger")
	if FunctionRoleID("notifier") == ledger || FunctionRoleID("ledger") != ledger {
		t.Error("FunctionRoleID is not a stable per-function id")
	}
}
