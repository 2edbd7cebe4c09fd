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
// a redelivery, a re-send or a replay changes that metadata, and hashing it
// would refuse a legitimate repeat with ErrPayloadMismatch. The package
// documentation ("What the key and the hash cover") lists, per
// aws-lambda-go event type (values or pointers), what is hashed and what is
// not; a body, message or record data that carries an EventBridge event
// (or an SNS notification) is hashed as that event's source, detail-type
// and detail.
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
		if id, ok := carriedIdentity([]byte(e.Body)); ok {
			return id
		}
		return struct {
			Body string `json:"sqs_body"`
		}{e.Body}
	case events.SQSEvent:
		return each(e.Records)
	case events.EventBridgeEvent:
		return eventIdentity{e.Source, e.DetailType, jsonValue(e.Detail)}
	case events.SNSEventRecord:
		return notificationIdentity(e.SNS.Subject, e.SNS.Message)
	case events.SNSEvent:
		return each(e.Records)
	case events.APIGatewayV2HTTPRequest:
		return httpRequest{e.RequestContext.HTTP.Method, e.RawPath, e.QueryStringParameters, nil, bodyIdentity(e.Body, e.IsBase64Encoded), e.IsBase64Encoded}
	case events.APIGatewayProxyRequest:
		return httpRequest{e.HTTPMethod, e.Path, e.QueryStringParameters, e.MultiValueQueryStringParameters, bodyIdentity(e.Body, e.IsBase64Encoded), e.IsBase64Encoded}
	case events.LambdaFunctionURLRequest:
		return httpRequest{e.RequestContext.HTTP.Method, e.RawPath, e.QueryStringParameters, nil, bodyIdentity(e.Body, e.IsBase64Encoded), e.IsBase64Encoded}
	case events.ALBTargetGroupRequest:
		return httpRequest{e.HTTPMethod, e.Path, e.QueryStringParameters, e.MultiValueQueryStringParameters, bodyIdentity(e.Body, e.IsBase64Encoded), e.IsBase64Encoded}
	case events.KinesisEventRecord:
		// EventBridge's Kinesis target puts the event id in the partition
		// key unless the rule sets PartitionKeyPath (API_KinesisParameters):
		// a carried event is its identity alone.
		if id, ok := carriedIdentity(e.Kinesis.Data); ok {
			return id
		}
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
	case json.RawMessage:
		if id, ok := carriedIdentity(e); ok {
			return id
		}
	case map[string]any:
		if b, err := json.Marshal(e); err == nil {
			if id, ok := carriedIdentity(b); ok {
				return id
			}
		}
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
	Body            any                 `json:"body"` // the text, or what it carries (bodyIdentity)
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
