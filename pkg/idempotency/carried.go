package idempotency

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
)

// eventIdentity is what identifies an EventBridge event, however it is
// delivered: its source, detail-type and detail (a JSON value). A
// reconciler re-send or an archive replay of the same PutEvents entry is a
// new envelope (id, time, replay-name, possibly account, region and
// resources differ) with the same identity.
type eventIdentity struct {
	Source     string `json:"source"`
	DetailType string `json:"detail_type"`
	Detail     any    `json:"detail"`
}

// snsIdentity is what identifies an SNS notification: its subject and
// message (the message's eventIdentity when it carries an EventBridge
// event, else its text).
type snsIdentity struct {
	Subject string `json:"sns_subject"`
	Message any    `json:"sns_message"`
}

// jsonKind is the JSON type a field must have.
type jsonKind int

const (
	kindString         jsonKind = iota // a string
	kindNonEmptyString                 // a string other than ""
	kindObject                         // an object
	kindStringsOrNull                  // an array of strings, or null
)

// field is one top-level field of a JSON shape.
type field struct {
	kind     jsonKind
	required bool
}

// eventBridgeShape is the event a target receives, as
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html
// lists it (every field present in every event; resources may be empty,
// and aws-lambda-go encodes an empty list as null), plus the replay-name
// field EventBridge adds to a replayed event
// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-archive.html:
// the managed rule that keeps replayed events out of archives matches
// {"replay-name":[{"exists":false}]}).
var eventBridgeShape = map[string]field{
	"version":     {kindString, true},
	"id":          {kindString, true},
	"detail-type": {kindNonEmptyString, true},
	"source":      {kindNonEmptyString, true},
	"account":     {kindString, true},
	"time":        {kindString, true},
	"region":      {kindString, true},
	"resources":   {kindStringsOrNull, true},
	"detail":      {kindObject, true},
	"replay-name": {kindString, false},
}

// snsNotificationShape is the notification SNS writes into a subscribed SQS
// queue (raw message delivery off) or POSTs to an HTTP(S) endpoint
// (https://docs.aws.amazon.com/sns/latest/dg/sns-sqs-as-subscriber.html,
// https://docs.aws.amazon.com/sns/latest/dg/http-notification-json.html);
// SequenceNumber is a FIFO topic's.
var snsNotificationShape = map[string]field{
	"Type":              {kindNonEmptyString, true}, // "Notification", checked below
	"MessageId":         {kindString, true},
	"TopicArn":          {kindString, true},
	"Message":           {kindString, true},
	"Timestamp":         {kindString, true},
	"Subject":           {kindString, false},
	"SignatureVersion":  {kindString, false},
	"Signature":         {kindString, false},
	"SigningCertURL":    {kindString, false},
	"UnsubscribeURL":    {kindString, false},
	"MessageAttributes": {kindObject, false},
	"SequenceNumber":    {kindString, false},
}

// carriedIdentity returns the identity of what text carries: an
// EventBridge event (eventIdentity) or an SNS notification (snsIdentity,
// whose message may carry an EventBridge event in turn). ok is false when
// text is neither: then the caller hashes text itself.
//
// text carries an EventBridge event when it is exactly one JSON object
// whose fields are those of eventBridgeShape, nothing else, each of its
// type: source and detail-type non-empty strings, detail an object, the
// other required fields present. Strict on purpose: reading an
// application's body as an event would leave its other fields out of the
// hash, so a body that differs only there would replay another request's
// result. A field EventBridge may add in future makes a body not an event
// here: its hash then covers the whole body again, which refuses a re-send
// (ErrPayloadMismatch) but never replays a wrong result.
func carriedIdentity(text []byte) (any, bool) {
	obj, ok := jsonObject(text)
	if !ok {
		return nil, false
	}
	if id, ok := eventBridgeIdentity(obj); ok {
		return id, true
	}
	if hasShape(obj, snsNotificationShape) && obj["Type"] == "Notification" {
		subject, _ := obj["Subject"].(string)
		return notificationIdentity(subject, obj["Message"].(string)), true
	}
	return nil, false
}

// notificationIdentity is the identity of an SNS notification with subject
// and message.
func notificationIdentity(subject, message string) snsIdentity {
	if obj, ok := jsonObject([]byte(message)); ok {
		if id, ok := eventBridgeIdentity(obj); ok {
			return snsIdentity{subject, id}
		}
	}
	return snsIdentity{subject, message}
}

// eventBridgeIdentity returns obj's identity when obj has eventBridgeShape.
func eventBridgeIdentity(obj map[string]any) (eventIdentity, bool) {
	if !hasShape(obj, eventBridgeShape) {
		return eventIdentity{}, false
	}
	return eventIdentity{obj["source"].(string), obj["detail-type"].(string), obj["detail"]}, true
}

// bodyIdentity is what identifies an HTTP or other text body: what it
// carries, or the text itself.
func bodyIdentity(body string, isBase64 bool) any {
	text := []byte(body)
	if isBase64 {
		b, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return body
		}
		text = b
	}
	if id, ok := carriedIdentity(text); ok {
		return id
	}
	return body
}

// hasShape reports whether obj has exactly the fields of shape (every
// required one, no other) with their kinds.
func hasShape(obj map[string]any, shape map[string]field) bool {
	for name, v := range obj {
		f, ok := shape[name]
		if !ok || !f.kind.accepts(v) {
			return false
		}
	}
	for name, f := range shape {
		if _, ok := obj[name]; f.required && !ok {
			return false
		}
	}
	return true
}

func (k jsonKind) accepts(v any) bool {
	switch k {
	case kindString:
		_, ok := v.(string)
		return ok
	case kindNonEmptyString:
		s, ok := v.(string)
		return ok && s != ""
	case kindObject:
		_, ok := v.(map[string]any)
		return ok
	case kindStringsOrNull:
		if v == nil {
			return true
		}
		list, ok := v.([]any)
		for _, e := range list {
			if _, isString := e.(string); !isString {
				return false
			}
		}
		return ok
	}
	return false
}

// jsonObject decodes text as exactly one JSON object (numbers kept as
// json.Number, so they hash exactly as written).
func jsonObject(text []byte) (map[string]any, bool) {
	text = bytes.TrimSpace(text)
	if len(text) == 0 || text[0] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || dec.More() {
		return nil, false
	}
	return obj, obj != nil
}
