package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// frontFixture is an AWSFront over a consumer queue with a DLQ, a
// MemoryQueue and a bus, served over HTTP, with real SDK clients pointed at
// it (dummy credentials).
type frontFixture struct {
	q, dlq *SQSQueue
	parked *MemoryQueue
	bus    *Bus
	sqs    *sqs.Client
	eb     *eventbridge.Client
	url    string
}

func newFrontFixture(t *testing.T, ddbEndpoint string) frontFixture {
	t.Helper()
	dlq, err := NewSQSQueue(SQSQueueConfig{Name: "t-ledger-dlq"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewSQSQueue(SQSQueueConfig{Name: "t-ledger", Redrive: &RedrivePolicy{DeadLetterQueue: dlq, MaxReceiveCount: 2}})
	if err != nil {
		t.Fatal(err)
	}
	parked := NewMemoryQueue("https://sqs.us-east-1.amazonaws.com/000000000000/t-parked")
	bus, err := NewBus(BusConfig{Name: "t-bus", Rules: testRules()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close(context.Background()) })
	front, err := NewAWSFront(AWSFrontConfig{Queues: []FrontQueue{q, dlq, parked}, EventBridge: bus, DynamoDB: ddbEndpoint})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	cfg := dynoxide.AWSConfig(srv.URL)
	return frontFixture{q: q, dlq: dlq, parked: parked, bus: bus, url: srv.URL,
		sqs: sqs.NewFromConfig(cfg), eb: eventbridge.NewFromConfig(cfg)}
}

// TestAWSFrontSQS drives every served SQS operation through the real SDK
// client and checks the in-process queue saw it.
func TestAWSFrontSQS(t *testing.T) {
	f := newFrontFixture(t, "")
	ctx := context.Background()
	// The front's own URL form names the same queue as the AWS-shaped one.
	localURL := f.url + "/000000000000/t-ledger"

	got, err := f.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("t-ledger")})
	if err != nil || aws.ToString(got.QueueUrl) != f.q.URL() {
		t.Fatalf("GetQueueUrl = %v, %v; want %s", got, err, f.q.URL())
	}
	list, err := f.sqs.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("t-l")})
	if err != nil || len(list.QueueUrls) != 2 || list.QueueUrls[0] != f.q.URL() || list.QueueUrls[1] != f.dlq.URL() {
		t.Fatalf("ListQueues(t-l) = %v, %v; want the queue and its DLQ", list, err)
	}

	sent, err := f.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(localURL), MessageBody: aws.String(`{"n":1}`),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"reason": {DataType: aws.String("String"), StringValue: aws.String("why")}}})
	if err != nil || aws.ToString(sent.MessageId) == "" {
		t.Fatalf("SendMessage = %v, %v", sent, err)
	}
	if f.q.Len() != 1 {
		t.Fatalf("queue holds %d messages after SendMessage, want 1", f.q.Len())
	}
	recv, err := f.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.q.URL()), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(recv.Messages) != 1 {
		t.Fatalf("ReceiveMessage = %v, %v; want 1 message", recv, err)
	}
	m := recv.Messages[0]
	if aws.ToString(m.Body) != `{"n":1}` || aws.ToString(m.MessageId) != aws.ToString(sent.MessageId) ||
		m.Attributes[AttrApproximateReceiveCount] != "1" || aws.ToString(m.MessageAttributes["reason"].StringValue) != "why" {
		t.Fatalf("received %+v", m)
	}
	attrs, err := f.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(f.q.URL()),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil || attrs.Attributes["ApproximateNumberOfMessagesNotVisible"] != "1" || len(attrs.Attributes) != 1 {
		t.Fatalf("GetQueueAttributes = %v, %v; want only NotVisible=1", attrs, err)
	}
	if _, err := f.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(f.q.URL()), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	if v, i := f.q.Counts(); v != 1 || i != 0 {
		t.Fatalf("after ChangeMessageVisibility 0: %d visible, %d in flight; want 1, 0", v, i)
	}
	recv, err = f.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.q.URL())})
	if err != nil || len(recv.Messages) != 1 {
		t.Fatalf("second ReceiveMessage = %v, %v", recv, err)
	}
	if _, err := f.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(f.q.URL()), ReceiptHandle: recv.Messages[0].ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	if f.q.Len() != 0 {
		t.Fatalf("queue holds %d messages after DeleteMessage, want 0", f.q.Len())
	}

	// The MemoryQueue: sends and depth, nothing else.
	if _, err := f.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.parked.URL()), MessageBody: aws.String("parked")}); err != nil {
		t.Fatal(err)
	}
	attrs, err = f.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(f.parked.URL())})
	if err != nil || attrs.Attributes["ApproximateNumberOfMessages"] != "1" {
		t.Fatalf("GetQueueAttributes(parked) = %v, %v; want 1 message", attrs, err)
	}

	// Errors keep their SQS codes and types.
	errCases := []struct {
		name, code string
		call       func() error
		typed      func(error) bool
	}{
		{"unknown queue", "AWS.SimpleQueueService.NonExistentQueue",
			func() error {
				_, err := f.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url + "/000000000000/nope"), MessageBody: aws.String("x")})
				return err
			},
			func(err error) bool { var e *sqstypes.QueueDoesNotExist; return errors.As(err, &e) }},
		{"unknown queue name", "AWS.SimpleQueueService.NonExistentQueue",
			func() error {
				_, err := f.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
				return err
			},
			func(err error) bool { var e *sqstypes.QueueDoesNotExist; return errors.As(err, &e) }},
		{"bad body", "InvalidMessageContents",
			func() error {
				_, err := f.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.q.URL()), MessageBody: aws.String("\uFFFE")})
				return err
			},
			func(err error) bool { var e *sqstypes.InvalidMessageContents; return errors.As(err, &e) }},
		{"malformed receipt handle", "ReceiptHandleIsInvalid",
			func() error {
				_, err := f.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(f.q.URL()), ReceiptHandle: aws.String("nohash")})
				return err
			},
			func(err error) bool { var e *sqstypes.ReceiptHandleIsInvalid; return errors.As(err, &e) }},
		{"receive from a send-only queue", "AWS.SimpleQueueService.UnsupportedOperation",
			func() error {
				_, err := f.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.parked.URL())})
				return err
			},
			func(err error) bool { var e *sqstypes.UnsupportedOperation; return errors.As(err, &e) }},
	}
	for _, tc := range errCases {
		err := tc.call()
		if code := apiCode(err); code != tc.code || !tc.typed(err) {
			t.Errorf("%s: err = %v (code %q, %T); want code %q and the SDK's modelled type", tc.name, err, code, err, tc.code)
		}
	}
	if f.parked.Len() != 1 {
		t.Fatalf("a refused send stored something: parked holds %d", f.parked.Len())
	}
}

// TestAWSFrontPutEvents publishes through the real EventBridge client:
// accepted entries reach the bus (and a subscribed consumer) with their
// Time, rejected ones keep their entry error code, and whole-request errors
// their API error code.
func TestAWSFrontPutEvents(t *testing.T) {
	f := newFrontFixture(t, "")
	ctx := context.Background()
	got := make(chan events.EventBridgeEvent, 4)
	f.bus.Subscribe(testLedger, func(_ context.Context, ev events.EventBridgeEvent) error { got <- ev; return nil })
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out, err := f.eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		{EventBusName: aws.String("t-bus"), Source: aws.String("com.ddb-outbox.orders"), DetailType: aws.String("OrderPaid"), Detail: aws.String(`{"event_id":"e1"}`), Time: aws.Time(at)},
		{EventBusName: aws.String("t-bus"), Source: aws.String("com.ddb-outbox.orders"), DetailType: aws.String("OrderPaid"), Detail: aws.String(`[1]`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if out.FailedEntryCount != 1 || aws.ToString(out.Entries[0].EventId) == "" || aws.ToString(out.Entries[1].ErrorCode) != ErrorCodeMalformedDetail {
		t.Fatalf("PutEvents = %+v; want entry 0 accepted, entry 1 MalformedDetail", out)
	}
	select {
	case ev := <-got:
		if ev.ID != aws.ToString(out.Entries[0].EventId) || !ev.Time.Equal(at) || ev.DetailType != "OrderPaid" {
			t.Fatalf("consumer got %+v; want id %s, time %s", ev, aws.ToString(out.Entries[0].EventId), at)
		}
		var d map[string]string
		if err := json.Unmarshal(ev.Detail, &d); err != nil || d["event_id"] != "e1" {
			t.Fatalf("detail %s", ev.Detail)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the accepted event never reached the subscribed consumer")
	}
	_, err = f.eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		{EventBusName: aws.String("no-such-bus"), Source: aws.String("s"), DetailType: aws.String("d"), Detail: aws.String("{}")}}})
	if apiCode(err) != "ResourceNotFoundException" {
		t.Fatalf("PutEvents to an unknown bus: %v; want ResourceNotFoundException", err)
	}
}

// TestAWSFrontProxiesDynamoDB checks that DynamoDB calls through the front
// reach the server behind it.
func TestAWSFrontProxiesDynamoDB(t *testing.T) {
	env := ddbtest.New(t)
	table := ddbtest.Name("front")
	env.CreateTable(t, ddbtest.SimpleTableInput(table))
	f := newFrontFixture(t, env.Endpoint)
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(f.url))
	ctx := context.Background()
	out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil || aws.ToString(out.Table.TableName) != table {
		t.Fatalf("DescribeTable through the front = %v, %v", out, err)
	}
	// Without a DynamoDB endpoint the front refuses DynamoDB targets.
	bare := newFrontFixture(t, "")
	_, err = dynamodb.NewFromConfig(dynoxide.AWSConfig(bare.url), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }).
		DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if apiCode(err) != "UnknownOperationException" {
		t.Fatalf("DescribeTable without a DynamoDB endpoint: %v; want UnknownOperationException", err)
	}
}

// TestRejectDetailTypes checks the rejecting wrapper splices the answers in
// request order and refuses codes the relay would not park on.
func TestRejectDetailTypes(t *testing.T) {
	bus, err := NewBus(BusConfig{Name: "r-bus", Rules: testRules()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bus.Close(context.Background()) }()
	if _, err := RejectDetailTypes(bus, "ThrottlingException", "OrderShipped"); err == nil {
		t.Fatal("a retryable code was accepted")
	}
	if _, err := RejectDetailTypes(bus, ErrorCodeMalformedDetail); err == nil {
		t.Fatal("no detail types was accepted")
	}
	tests := []struct {
		code  string
		types []string
		want  []string // per entry: "" accepted, else the error code
	}{
		{ErrorCodeMalformedDetail, []string{"OrderShipped"}, []string{"", ErrorCodeMalformedDetail, ""}},
		{ErrorCodeInvalidArgument, []string{"OrderShipped", "OrderPaid"}, []string{ErrorCodeInvalidArgument, ErrorCodeInvalidArgument, ""}},
		{ErrorCodeMalformedDetail, []string{"OrderCancelled"}, []string{"", "", ""}},
	}
	for _, tc := range tests {
		r, err := RejectDetailTypes(bus, tc.code, tc.types...)
		if err != nil {
			t.Fatal(err)
		}
		before := bus.Stats().Accepted
		out, err := r.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
			{EventBusName: aws.String("r-bus"), Source: aws.String("s"), DetailType: aws.String("OrderPaid"), Detail: aws.String("{}")},
			{EventBusName: aws.String("r-bus"), Source: aws.String("s"), DetailType: aws.String("OrderShipped"), Detail: aws.String("{}")},
			{EventBusName: aws.String("r-bus"), Source: aws.String("s"), DetailType: aws.String("OrderCreated"), Detail: aws.String("{}")},
		}})
		if err != nil {
			t.Fatal(err)
		}
		failed := 0
		for i, w := range tc.want {
			if w != "" {
				failed++
			}
			if c := aws.ToString(out.Entries[i].ErrorCode); c != w || (w == "") != (aws.ToString(out.Entries[i].EventId) != "") {
				t.Errorf("reject %v: entry %d = %+v; want code %q", tc.types, i, out.Entries[i], w)
			}
		}
		if int(out.FailedEntryCount) != failed || int(bus.Stats().Accepted-before) != 3-failed {
			t.Errorf("reject %v: FailedEntryCount %d, bus accepted %d; want %d failed", tc.types, out.FailedEntryCount, bus.Stats().Accepted-before, failed)
		}
	}
}

// TestAWSFrontRefusesOversizedBodies: a body over the front's bound is
// refused by every service it serves with an error that says so (413),
// never cut short and then reported as malformed JSON.
func TestAWSFrontRefusesOversizedBodies(t *testing.T) {
	f := newFrontFixture(t, "")
	big := `{"Description":"` + strings.Repeat("x", maxRequestBytes) + `"}`
	for _, target := range []string{"AWSEvents.PutEvents", "AWSEvents.ListReplays", "AmazonSQS.SendMessage"} {
		req, _ := http.NewRequest(http.MethodPost, f.url+"/", strings.NewReader(big))
		req.Header.Set("X-Amz-Target", target)
		ct := "application/x-amz-json-1.1"
		if strings.HasPrefix(target, "AmazonSQS.") {
			ct = "application/x-amz-json-1.0"
		}
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || !strings.Contains(string(b), "longer than") || strings.Contains(string(b), "unexpected end of JSON") {
			t.Errorf("%s with a %d-byte body: %d %s; want a refusal naming the size", target, len(big), resp.StatusCode, b)
		}
	}
}

// TestPutEventsTooManyEntriesAnswersAWSText: eleven entries get AWS's code
// and message text, word for word, from the bus and over the wire. The
// expected text is AWS's answer to LocalStack's AWS-validated
// test_events.py::TestEvents::test_put_events_exceed_limit_ten_entries
// (recorded 2025-01-08, test_events.snapshot.json; the bus name
// transformed to <bus-name> there), kept in testdata.
func TestPutEventsTooManyEntriesAnswersAWSText(t *testing.T) {
	t.Parallel()
	recorded, err := os.ReadFile("testdata/putevents-11-entries.aws.txt")
	if err != nil {
		t.Fatal(err)
	}
	f := newFrontFixture(t, "")
	want := strings.ReplaceAll(strings.TrimSuffix(string(recorded), "\n"), "<bus-name>", "t-bus")
	var eleven []ebtypes.PutEventsRequestEntry
	for range 11 {
		eleven = append(eleven, ebtypes.PutEventsRequestEntry{
			Source: aws.String("core.update-account-command"), DetailType: aws.String("core.update-account-command"),
			// Python's json.dumps, as the recording test sent it.
			Detail:       aws.String(`{"command": "update-account", "payload": {"acc_id": "0a787ecb-4015", "sf_id": "baz"}}`),
			EventBusName: aws.String("t-bus"),
		})
	}
	for name, put := range map[string]func() error{
		"bus": func() error {
			_, err := f.bus.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: eleven})
			return err
		},
		"front": func() error {
			_, err := f.eb.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: eleven})
			return err
		},
	} {
		err := put()
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" || ae.ErrorMessage() != want {
			t.Errorf("%s: PutEvents(11 entries) = %v\nwant ValidationException: %s", name, err, want)
		}
		var re *awshttp.ResponseError
		if name == "front" && (!errors.As(err, &re) || re.HTTPStatusCode() != http.StatusBadRequest) {
			t.Errorf("front: status of %v; want 400 as recorded", err)
		}
	}
}

// TestPutEventsNoEntries: an empty Entries list is refused with the
// request-validation wording of AWS's framework (❓ not recorded for
// EventBridge; see entriesCountError), from the bus and over the wire.
func TestPutEventsNoEntries(t *testing.T) {
	t.Parallel()
	f := newFrontFixture(t, "")
	const want = "1 validation error detected: Value '[]' at 'entries' failed to satisfy constraint: Member must have length greater than or equal to 1"
	for name, api := range map[string]PutEventsAPI{"bus": f.bus, "front": f.eb} {
		_, err := api.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{}})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" || ae.ErrorMessage() != want {
			t.Errorf("%s: PutEvents(no entries) = %v; want ValidationException %q", name, err, want)
		}
	}
}
