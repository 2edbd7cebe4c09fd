package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
)

// source is one event source Lambda delivers, as its aws-lambda-go type:
// the first delivery, a redelivery of the same request (what changes
// between the two is what the source changes on a redelivery or a re-send:
// receipt handle and receive count, EventBridge id and time, request id and
// signature), and another request under the same key.
type source[In any] struct {
	name                string
	key                 func(In) (string, error)
	first, again, other In
}

// checkSource wraps a handler for In with the default payload validation
// and checks that the redelivery replays the first result without running
// the handler, and that another request with the key is ErrPayloadMismatch.
func checkSource[In any](t *testing.T, store *idempotency.Store, s source[In]) {
	t.Helper()
	var runs atomic.Int64
	h := idempotency.Wrap(store, s.key, func(_ context.Context, in In) (int64, error) { return runs.Add(1), nil })
	ctx := context.Background()
	if out, err := h(ctx, s.first); err != nil || out != 1 {
		t.Errorf("%s: first delivery: %d %v", s.name, out, err)
		return
	}
	if out, err := h(ctx, s.again); err != nil || out != 1 || runs.Load() != 1 {
		t.Errorf("%s: redelivery: %d %v (handler ran %d times); want the first result replayed", s.name, out, err, runs.Load())
	}
	if _, err := h(ctx, s.other); !errors.Is(err, idempotency.ErrPayloadMismatch) {
		t.Errorf("%s: another request under the key: %v, want ErrPayloadMismatch", s.name, err)
	}
}

func jsonField(field string) func(string) (string, error) {
	return func(body string) (string, error) {
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return "", err
		}
		s, _ := m[field].(string)
		return s, nil
	}
}

// TestDefaultPayloadHashPerEventSource: the default payload hash covers what
// identifies the request for each event source Lambda delivers, not the
// delivery's own metadata. Wrapping a per-message SQS handler used to hash
// the whole message, so every redelivery (a new receipt handle, receive
// count 2) was ErrPayloadMismatch and retried to the DLQ; the same for an
// EventBridge re-send (new id and time), an API retry (new request id,
// signature, trace header) and a Kinesis or SNS re-put.
func TestDefaultPayloadHashPerEventSource(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	later := t0.Add(3 * time.Minute)

	// SQS: one message, and a batch.
	msg := events.SQSMessage{MessageId: "m-1", ReceiptHandle: "rh-1", Body: `{"event_id":"e-1","n":1}`, Md5OfBody: "x",
		Attributes:        map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": "1", "ApproximateFirstReceiveTimestamp": "2", "SenderId": "AIDA1"},
		MessageAttributes: map[string]events.SQSMessageAttribute{"trace": {DataType: "String", StringValue: ptr("t")}},
		EventSource:       "aws:sqs", EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:q", AWSRegion: "eu-west-1"}
	redelivered := msg
	redelivered.ReceiptHandle = "rh-2"
	redelivered.Attributes = map[string]string{"ApproximateReceiveCount": "2", "SentTimestamp": "1", "ApproximateFirstReceiveTimestamp": "2", "SenderId": "AIDA1"}
	redriven := redelivered
	redriven.MessageId, redriven.MessageAttributes = "m-9", nil // a redrive: new message, attributes dropped
	forged := msg
	forged.Body = `{"event_id":"e-1","n":2}`
	checkSource(t, f.store, source[events.SQSMessage]{"SQS message", func(m events.SQSMessage) (string, error) { return jsonField("event_id")(m.Body) }, msg, redelivered, forged})
	checkSource(t, f.store, source[events.SQSMessage]{"SQS message redriven", func(m events.SQSMessage) (string, error) {
		k, err := jsonField("event_id")(m.Body)
		return "r-" + k, err
	}, msg, redriven, forged})
	checkSource(t, f.store, source[events.SQSEvent]{"SQS batch", func(e events.SQSEvent) (string, error) { return "batch-" + e.Records[0].MessageId, nil },
		events.SQSEvent{Records: []events.SQSMessage{msg}}, events.SQSEvent{Records: []events.SQSMessage{redelivered}}, events.SQSEvent{Records: []events.SQSMessage{forged}}})

	// EventBridge (also a scheduled event): a re-send of the outbox entry gets a new id and time.
	eb := events.EventBridgeEvent{Version: "0", ID: "11111111-1111-1111-1111-111111111111", DetailType: "OrderPaid", Source: "com.example.orders",
		AccountID: "123456789012", Time: t0, Region: "eu-west-1", Resources: []string{}, Detail: json.RawMessage(`{"event_id":"e-2","amount":100}`)}
	resent := eb
	resent.ID, resent.Time = "22222222-2222-2222-2222-222222222222", later
	resent.Detail = json.RawMessage(`{ "amount": 100, "event_id": "e-2" }`) // re-serialized: same JSON value
	otherDetail := eb
	otherDetail.Detail = json.RawMessage(`{"event_id":"e-2","amount":999}`)
	otherType := eb
	otherType.DetailType = "OrderCancelled"
	ebKey := func(e events.EventBridgeEvent) (string, error) { return jsonField("event_id")(string(e.Detail)) }
	checkSource(t, f.store, source[events.EventBridgeEvent]{"EventBridge detail", ebKey, eb, resent, otherDetail})
	checkSource(t, f.store, source[events.EventBridgeEvent]{"EventBridge detail-type", func(e events.EventBridgeEvent) (string, error) { k, err := ebKey(e); return "t-" + k, err }, eb, resent, otherType})

	// SNS: a publisher's retry is a new message (MessageId, Timestamp, Signature).
	sns := events.SNSEventRecord{EventSource: "aws:sns", EventVersion: "1.0", EventSubscriptionArn: "arn:aws:sns:eu-west-1:123456789012:t:sub",
		SNS: events.SNSEntity{MessageID: "sns-1", Type: "Notification", TopicArn: "arn:aws:sns:eu-west-1:123456789012:t", Subject: "paid",
			Message: `{"event_id":"e-3"}`, Timestamp: t0, Signature: "sig-1", SignatureVersion: "1", SigningCertURL: "https://c", UnsubscribeURL: "https://u"}}
	republished := sns
	republished.SNS.MessageID, republished.SNS.Timestamp, republished.SNS.Signature = "sns-2", later, "sig-2"
	otherSNS := sns
	otherSNS.SNS.Subject = "cancelled"
	snsKey := func(e events.SNSEvent) (string, error) { return jsonField("event_id")(e.Records[0].SNS.Message) }
	checkSource(t, f.store, source[events.SNSEvent]{"SNS", snsKey,
		events.SNSEvent{Records: []events.SNSEventRecord{sns}}, events.SNSEvent{Records: []events.SNSEventRecord{republished}}, events.SNSEvent{Records: []events.SNSEventRecord{otherSNS}}})

	// HTTP API (payload 2.0): a client's retry is a new request (request
	// id, time, signature, trace header).
	v2 := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /orders/{id}/pay", RawPath: "/orders/o-1/pay", RawQueryString: "a=1",
		Headers:               map[string]string{"idempotency-key": "k-4", "authorization": "AWS4-HMAC-SHA256 sig-1", "x-amzn-trace-id": "Root=1", "x-amz-date": "20260506T070809Z"},
		QueryStringParameters: map[string]string{"a": "1"}, PathParameters: map[string]string{"id": "o-1"}, Body: `{"amount":1}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "r-1", Time: "06/May/2026:07:08:09 +0000", TimeEpoch: t0.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/orders/o-1/pay", SourceIP: "198.51.100.1"}}}
	v2retry := v2
	v2retry.Headers = map[string]string{"idempotency-key": "k-4", "authorization": "AWS4-HMAC-SHA256 sig-2", "x-amzn-trace-id": "Root=2", "x-amz-date": "20260506T071109Z"}
	v2retry.RequestContext.RequestID, v2retry.RequestContext.TimeEpoch, v2retry.RequestContext.HTTP.SourceIP = "r-2", later.UnixMilli(), "198.51.100.2"
	v2other := v2
	v2other.RawPath, v2other.RequestContext.HTTP.Path, v2other.PathParameters = "/orders/o-2/pay", "/orders/o-2/pay", map[string]string{"id": "o-2"}
	checkSource(t, f.store, source[events.APIGatewayV2HTTPRequest]{"API Gateway HTTP API", func(r events.APIGatewayV2HTTPRequest) (string, error) { return r.Headers["idempotency-key"], nil }, v2, v2retry, v2other})

	// REST API (payload 1.0).
	v1 := events.APIGatewayProxyRequest{Resource: "/orders", Path: "/orders", HTTPMethod: "POST", Body: `{"amount":1}`,
		Headers:        map[string]string{"Idempotency-Key": "k-5", "X-Amzn-Trace-Id": "Root=1"},
		RequestContext: events.APIGatewayProxyRequestContext{RequestID: "r-1", RequestTimeEpoch: t0.UnixMilli()}}
	v1retry := v1
	v1retry.Headers = map[string]string{"Idempotency-Key": "k-5", "X-Amzn-Trace-Id": "Root=2"}
	v1retry.RequestContext = events.APIGatewayProxyRequestContext{RequestID: "r-2", RequestTimeEpoch: later.UnixMilli()}
	v1other := v1
	v1other.Body = `{"amount":2}`
	checkSource(t, f.store, source[events.APIGatewayProxyRequest]{"API Gateway REST API", func(r events.APIGatewayProxyRequest) (string, error) { return r.Headers["Idempotency-Key"], nil }, v1, v1retry, v1other})

	// Lambda function URL.
	url := events.LambdaFunctionURLRequest{Version: "2.0", RawPath: "/charge", Body: `{"amount":1}`, Headers: map[string]string{"idempotency-key": "k-6", "x-amzn-trace-id": "Root=1"},
		RequestContext: events.LambdaFunctionURLRequestContext{RequestID: "r-1", TimeEpoch: t0.UnixMilli(), HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: "POST", Path: "/charge"}}}
	urlRetry := url
	urlRetry.Headers = map[string]string{"idempotency-key": "k-6", "x-amzn-trace-id": "Root=2"}
	urlRetry.RequestContext.RequestID, urlRetry.RequestContext.TimeEpoch = "r-2", later.UnixMilli()
	urlOther := url
	urlOther.RequestContext.HTTP.Method = "PUT"
	checkSource(t, f.store, source[events.LambdaFunctionURLRequest]{"Lambda function URL", func(r events.LambdaFunctionURLRequest) (string, error) { return r.Headers["idempotency-key"], nil }, url, urlRetry, urlOther})

	// Application Load Balancer.
	alb := events.ALBTargetGroupRequest{HTTPMethod: "POST", Path: "/charge", Body: `{"amount":1}`, QueryStringParameters: map[string]string{"dry": "0"},
		Headers: map[string]string{"idempotency-key": "k-7", "x-amzn-trace-id": "Root=1"}}
	albRetry := alb
	albRetry.Headers = map[string]string{"idempotency-key": "k-7", "x-amzn-trace-id": "Root=2"}
	albOther := alb
	albOther.QueryStringParameters = map[string]string{"dry": "1"}
	checkSource(t, f.store, source[events.ALBTargetGroupRequest]{"ALB", func(r events.ALBTargetGroupRequest) (string, error) { return r.Headers["idempotency-key"], nil }, alb, albRetry, albOther})

	// Kinesis: a producer's retried PutRecord is a new record (sequence
	// number, arrival time) with the same data and partition key.
	kin := events.KinesisEventRecord{EventID: "shardId-000:1", EventName: "aws:kinesis:record", EventSource: "aws:kinesis",
		Kinesis: events.KinesisRecord{Data: []byte(`{"event_id":"e-8"}`), PartitionKey: "o-8", SequenceNumber: "1", ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: t0}}}
	kinRetry := kin
	kinRetry.EventID, kinRetry.Kinesis.SequenceNumber, kinRetry.Kinesis.ApproximateArrivalTimestamp = "shardId-000:2", "2", events.SecondsEpochTime{Time: later}
	kinOther := kin
	kinOther.Kinesis.PartitionKey = "o-9"
	checkSource(t, f.store, source[events.KinesisEventRecord]{"Kinesis", func(r events.KinesisEventRecord) (string, error) {
		return jsonField("event_id")(string(r.Kinesis.Data))
	}, kin, kinRetry, kinOther})

	// DynamoDB stream record: a retried batch redelivers the same record.
	ddbRec := events.DynamoDBEventRecord{EventID: "ev-10", EventName: "INSERT", EventSource: "aws:dynamodb", AWSRegion: "eu-west-1",
		Change: events.DynamoDBStreamRecord{Keys: map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("a")},
			NewImage: map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("a"), "n": events.NewNumberAttribute("1")}, SequenceNumber: "100", SizeBytes: 10, StreamViewType: "NEW_IMAGE"}}
	ddbOther := ddbRec
	ddbOther.Change.NewImage = map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("a"), "n": events.NewNumberAttribute("2")}
	checkSource(t, f.store, source[events.DynamoDBEventRecord]{"DynamoDB stream", func(r events.DynamoDBEventRecord) (string, error) { return r.EventID, nil }, ddbRec, ddbRec, ddbOther})

	// S3: a duplicate notification of the same object version.
	s3 := events.S3EventRecord{EventName: "ObjectCreated:Put", EventSource: "aws:s3", EventTime: t0,
		S3: events.S3Entity{Bucket: events.S3Bucket{Name: "b"}, Object: events.S3Object{Key: "k.json", VersionID: "v1", ETag: "e1", Sequencer: "0A1"}}}
	s3dup := s3
	s3dup.ResponseElements = map[string]string{"x-amz-request-id": "r-2"}
	s3other := s3
	s3other.S3.Object.ETag, s3other.S3.Object.VersionID, s3other.S3.Object.Sequencer = "e2", "v2", "0A2"
	checkSource(t, f.store, source[events.S3EventRecord]{"S3", func(r events.S3EventRecord) (string, error) { return r.S3.Bucket.Name + "/" + r.S3.Object.Key, nil }, s3, s3dup, s3other})
}

func ptr[T any](v T) *T { return &v }

// PayloadHash takes pointers to the event types like values, hashes any
// other input whole (a direct invoke's payload is the request), and keeps
// a detail that is not JSON as its bytes.
func TestPayloadHashInputs(t *testing.T) {
	t.Parallel()
	msg := events.SQSMessage{MessageId: "m", ReceiptHandle: "rh", Body: "b"}
	byValue, err := idempotency.PayloadHash(msg)
	if err != nil {
		t.Fatal(err)
	}
	if byPtr, _ := idempotency.PayloadHash(&msg); byPtr != byValue {
		t.Errorf("a pointer hashes %s, the value %s", byPtr, byValue)
	}
	type charge struct{ ID, Amount string }
	whole, _ := idempotency.HashJSON(charge{"c", "1"})
	if got, _ := idempotency.PayloadHash(charge{"c", "1"}); got != whole {
		t.Errorf("another type: %s, want the whole input's hash %s", got, whole)
	}
	a, _ := idempotency.PayloadHash(events.EventBridgeEvent{Detail: json.RawMessage(`not json`)})
	b, _ := idempotency.PayloadHash(events.EventBridgeEvent{Detail: json.RawMessage(`not json!`)})
	c, _ := idempotency.PayloadHash(events.EventBridgeEvent{Detail: json.RawMessage(`{"n":1.10}`)})
	d, _ := idempotency.PayloadHash(events.EventBridgeEvent{Detail: json.RawMessage(`{"n":1.1}`)})
	if a == b || c == d {
		t.Errorf("details that differ hash alike: %v %v", a == b, c == d)
	}
	if _, err := idempotency.PayloadHash(make(chan int)); err == nil {
		t.Error("an input JSON cannot encode: no error")
	}
}
