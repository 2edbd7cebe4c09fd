package idempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/aws/aws-lambda-go/events"
)

// PayloadHash is Wrap's default payload hash: HashJSON of what identifies
// the request in, by event source, never of the delivery's own metadata —
// a redelivery or a re-send changes that metadata, and hashing it would
// refuse a legitimate repeat with ErrPayloadMismatch. For the aws-lambda-go
// event types (values or pointers):
//
//	events.SQSMessage             body. Not messageId, receiptHandle, attributes
//	                              (ApproximateReceiveCount, timestamps, SenderId),
//	                              md5OfBody nor messageAttributes: a redelivery has a
//	                              new receipt handle and receive count, and a redrive
//	                              (sqsconsumer.Redrive, SQS's message move task) is a
//	                              new message without the attributes
//	events.SQSEvent               the body of each record, in order
//	events.EventBridgeEvent       source, detail-type and detail (as a JSON value: key
//	(= CloudWatchEvent, also      order and spacing ignored, numbers kept exact). Not
//	scheduled events)             id, time, version, account, region nor resources: a
//	                              re-send of the same entry gets a new id and time
//	events.SNSEventRecord         Subject and Message. Not MessageId, Timestamp,
//	                              Signature nor MessageAttributes: a publisher's retry is
//	                              a new message
//	events.SNSEvent               each record's, in order
//	events.APIGatewayV2HTTPRequest method (requestContext.http.method), rawPath, the
//	(HTTP API, payload 2.0)       query parameters and the body (with isBase64Encoded).
//	                              Not headers (signature, date, trace id, forwarding),
//	                              the request context's ids and times, nor cookies: a
//	                              client's retry is a new request. The path, not the
//	                              route key: /orders/o-1/pay and /orders/o-2/pay are
//	                              different requests on one route
//	events.APIGatewayProxyRequest httpMethod, path, the query parameters (multi-value when
//	(REST API, payload 1.0)       given) and the body (with isBase64Encoded)
//	events.LambdaFunctionURLRequest method, rawPath, query parameters, body
//	events.ALBTargetGroupRequest  httpMethod, path, query parameters (multi-value when
//	                              given), body
//	events.KinesisEventRecord     partition key and data. Not the sequence number nor
//	                              the arrival time: a producer's retried PutRecord is a
//	                              new record
//	events.KinesisEvent           each record's, in order
//	events.DynamoDBEventRecord    eventName, Keys, NewImage and OldImage. Not the
//	                              sequence number, eventID nor the creation time
//	events.DynamoDBEvent          each record's, in order
//	events.S3EventRecord          eventName, bucket, object key, versionId, eTag and
//	                              sequencer. Not eventTime nor the request ids
//	events.S3Event                each record's, in order
//	anything else                 the whole input: a direct invoke's payload is the
//	                              request
//
// A header that identifies the request (for instance a caller identity) is
// the key function's or WithPayloadHash's to add. Errors: HashJSON's (an
// input that does not encode as JSON).
func PayloadHash(in any) (string, error) {
	return HashJSON(identity(in))
}

// identity returns the part of in PayloadHash hashes.
func identity(in any) any {
	if v := reflect.ValueOf(in); v.Kind() == reflect.Pointer && !v.IsNil() {
		if e := v.Elem(); e.Kind() == reflect.Struct {
			in = e.Interface()
		}
	}
	switch e := in.(type) {
	case events.SQSMessage:
		return struct {
			Body string `json:"sqs_body"`
		}{e.Body}
	case events.SQSEvent:
		return each(e.Records)
	case events.EventBridgeEvent:
		return struct {
			Source     string `json:"source"`
			DetailType string `json:"detail_type"`
			Detail     any    `json:"detail"`
		}{e.Source, e.DetailType, jsonValue(e.Detail)}
	case events.SNSEventRecord:
		return struct {
			Subject string `json:"sns_subject"`
			Message string `json:"sns_message"`
		}{e.SNS.Subject, e.SNS.Message}
	case events.SNSEvent:
		return each(e.Records)
	case events.APIGatewayV2HTTPRequest:
		return httpRequest{e.RequestContext.HTTP.Method, e.RawPath, e.QueryStringParameters, nil, e.Body, e.IsBase64Encoded}
	case events.APIGatewayProxyRequest:
		return httpRequest{e.HTTPMethod, e.Path, e.QueryStringParameters, e.MultiValueQueryStringParameters, e.Body, e.IsBase64Encoded}
	case events.LambdaFunctionURLRequest:
		return httpRequest{e.RequestContext.HTTP.Method, e.RawPath, e.QueryStringParameters, nil, e.Body, e.IsBase64Encoded}
	case events.ALBTargetGroupRequest:
		return httpRequest{e.HTTPMethod, e.Path, e.QueryStringParameters, e.MultiValueQueryStringParameters, e.Body, e.IsBase64Encoded}
	case events.KinesisEventRecord:
		return struct {
			PartitionKey string `json:"partition_key"`
			Data         []byte `json:"data"`
		}{e.Kinesis.PartitionKey, e.Kinesis.Data}
	case events.KinesisEvent:
		return each(e.Records)
	case events.DynamoDBEventRecord:
		return struct {
			EventName string                                   `json:"event_name"`
			Keys      map[string]events.DynamoDBAttributeValue `json:"keys"`
			NewImage  map[string]events.DynamoDBAttributeValue `json:"new_image"`
			OldImage  map[string]events.DynamoDBAttributeValue `json:"old_image"`
		}{e.EventName, e.Change.Keys, e.Change.NewImage, e.Change.OldImage}
	case events.DynamoDBEvent:
		return each(e.Records)
	case events.S3EventRecord:
		return struct {
			EventName string `json:"event_name"`
			Bucket    string `json:"bucket"`
			Key       string `json:"key"`
			VersionID string `json:"version_id"`
			ETag      string `json:"etag"`
			Sequencer string `json:"sequencer"`
		}{e.EventName, e.S3.Bucket.Name, e.S3.Object.Key, e.S3.Object.VersionID, e.S3.Object.ETag, e.S3.Object.Sequencer}
	case events.S3Event:
		return each(e.Records)
	}
	return in
}

// each is the identity of every record, in order.
func each[T any](records []T) []any {
	out := make([]any, len(records))
	for i, r := range records {
		out[i] = identity(r)
	}
	return out
}

// httpRequest is what identifies an HTTP request delivered to Lambda.
type httpRequest struct {
	Method          string              `json:"method"`
	Path            string              `json:"path"`
	Query           map[string]string   `json:"query,omitempty"`
	MultiValueQuery map[string][]string `json:"multi_value_query,omitempty"`
	Body            string              `json:"body"`
	Base64          bool                `json:"base64"`
}

// jsonValue decodes raw as a JSON value (numbers kept as json.Number), so
// that two encodings of one value hash alike; raw bytes that are not JSON
// are hashed as they are.
func jsonValue(raw json.RawMessage) any {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return fmt.Sprintf("raw:%s", raw)
	}
	return v
}
