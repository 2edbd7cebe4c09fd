package idempotency_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
)

// ebEvent is an EventBridge event as a target receives it
// (eb-events-structure): the first delivery of an outbox event.
func ebEvent() map[string]any {
	return map[string]any{
		"version": "0", "id": "11111111-1111-1111-1111-111111111111", "detail-type": "OrderPaid",
		"source": "com.example.orders", "account": "123456789012", "time": "2026-05-06T07:08:09Z",
		"region": "eu-west-1", "resources": []any{},
		"detail": map[string]any{"event_id": "e-1", "aggregate_id": "o-1", "sequence": 2, "payload": map[string]any{"amount_minor": 1999}},
	}
}

// with returns a copy of ev with the fields set (nil deletes a field).
func with(ev map[string]any, fields map[string]any) map[string]any {
	out := maps.Clone(ev)
	for k, v := range fields {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// The deliveries of one outbox event that must hash alike, and the ones
// that must not.
var (
	// A reconciler re-send: the same PutEvents entry accepted again gets a
	// new id and time.
	resent = map[string]any{"id": "22222222-2222-2222-2222-222222222222", "time": "2026-05-06T07:20:00Z"}
	// An archive replay: a new id and time, the replay-name field, and (an
	// archive on another account's bus, a resource added by a rule) the
	// per-delivery account, region and resources.
	replayed = map[string]any{"id": "33333333-3333-3333-3333-333333333333", "time": "2026-05-07T01:00:00Z",
		"replay-name": "backfill-2026-05-07", "account": "210987654321", "region": "eu-central-1", "resources": []any{"arn:aws:events:eu-central-1:210987654321:archive/orders"}}
	otherDetail = map[string]any{"detail": map[string]any{"event_id": "e-1", "aggregate_id": "o-1", "sequence": 2, "payload": map[string]any{"amount_minor": 5}}}
	otherType   = map[string]any{"detail-type": "OrderCancelled"}
	otherSource = map[string]any{"source": "com.example.billing"}
)

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// snsNotification is the JSON an SNS topic writes into an SQS queue (raw
// message delivery off) or POSTs to an HTTP(S) subscriber: a publisher's
// retry of the same message is a new MessageId, Timestamp and Signature.
func snsNotification(t *testing.T, msgID, message string) string {
	t.Helper()
	return mustJSON(t, map[string]any{
		"Type": "Notification", "MessageId": msgID, "TopicArn": "arn:aws:sns:eu-west-1:123456789012:orders",
		"Message": message, "Timestamp": "2026-05-06T07:08:10.000Z", "SignatureVersion": "1", "Signature": "sig-" + msgID,
		"SigningCertURL": "https://sns.eu-west-1.amazonaws.com/cert.pem", "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe",
	})
}

// transports wraps an EventBridge event as each delivery path hands it to a
// handler: an SQS message (the consumer queue), an SNS record (an SNS
// target), an SQS message carrying an SNS notification (SNS fan-out to a
// queue), a Kinesis record (EventBridge's default partition key is the
// event id), an HTTP API request (an API destination or API Gateway
// target), and a direct invoke (a rule's Lambda target) typed
// json.RawMessage or map[string]any.
var transports = []struct {
	name string
	wrap func(t *testing.T, ev map[string]any) any
}{
	{"SQS message", func(t *testing.T, ev map[string]any) any {
		return events.SQSMessage{MessageId: "m-" + ev["id"].(string), ReceiptHandle: "rh", Body: mustJSON(t, ev)}
	}},
	{"SNS record", func(t *testing.T, ev map[string]any) any {
		return events.SNSEventRecord{SNS: events.SNSEntity{MessageID: "sns-" + ev["id"].(string), Message: mustJSON(t, ev)}}
	}},
	{"SQS message carrying an SNS notification", func(t *testing.T, ev map[string]any) any {
		return events.SQSMessage{MessageId: "m", Body: snsNotification(t, "sns-"+ev["id"].(string), mustJSON(t, ev))}
	}},
	{"Kinesis record", func(t *testing.T, ev map[string]any) any {
		return events.KinesisEventRecord{Kinesis: events.KinesisRecord{PartitionKey: ev["id"].(string), Data: []byte(mustJSON(t, ev))}}
	}},
	{"HTTP API request", func(t *testing.T, ev map[string]any) any {
		return events.APIGatewayV2HTTPRequest{RawPath: "/events", Body: mustJSON(t, ev),
			RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "r-" + ev["id"].(string), HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}}
	}},
	{"HTTP API request, base64 body", func(t *testing.T, ev map[string]any) any {
		return events.APIGatewayV2HTTPRequest{RawPath: "/events", IsBase64Encoded: true, Body: base64.StdEncoding.EncodeToString([]byte(mustJSON(t, ev))),
			RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}}
	}},
	{"direct invoke (json.RawMessage)", func(t *testing.T, ev map[string]any) any { return json.RawMessage(mustJSON(t, ev)) }},
	{"direct invoke (map[string]any)", func(t *testing.T, ev map[string]any) any {
		var m map[string]any
		if err := json.Unmarshal([]byte(mustJSON(t, ev)), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}},
}

// TestPayloadHashTakesTheCarriedEventBridgeEvent: whatever carries an
// EventBridge event, its default payload hash is the event's identity
// (source, detail-type, detail). A reconciler re-send and an archive replay
// of one outbox event hash like the first delivery; another detail,
// detail-type or source does not. The hash used to cover the whole SQS body
// (SNS message, Kinesis data, HTTP body), so a re-send or a replay of an
// event a consumer had applied was ErrPayloadMismatch.
func TestPayloadHashTakesTheCarriedEventBridgeEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  map[string]any
		equal bool
	}{
		{"reconciler re-send (new id, time)", resent, true},
		{"archive replay (replay-name, new id, time, account, region, resources)", replayed, true},
		{"detail re-serialized (key order, spacing)", map[string]any{"detail": json.RawMessage(`{ "sequence": 2, "payload": {"amount_minor": 1999}, "aggregate_id": "o-1", "event_id": "e-1" }`)}, true},
		{"another detail", otherDetail, false},
		{"another detail-type", otherType, false},
		{"another source", otherSource, false},
	}
	// The same event hashes alike as an events.EventBridgeEvent (a rule's
	// Lambda target) and in an SQS body (the rule's queue target): moving a
	// consumer behind a queue keeps its records' hashes.
	var direct events.EventBridgeEvent
	if err := json.Unmarshal([]byte(mustJSON(t, ebEvent())), &direct); err != nil {
		t.Fatal(err)
	}
	want, _ := idempotency.PayloadHash(direct)
	if got, _ := idempotency.PayloadHash(transports[0].wrap(t, ebEvent())); got != want {
		t.Errorf("in an SQS body the event hashes %s, as an EventBridgeEvent %s", got, want)
	}
	for _, tr := range transports {
		first, err := idempotency.PayloadHash(tr.wrap(t, ebEvent()))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range tests {
			got, err := idempotency.PayloadHash(tr.wrap(t, with(ebEvent(), tc.edit)))
			if err != nil {
				t.Fatalf("%s, %s: %v", tr.name, tc.name, err)
			}
			if (got == first) != tc.equal {
				t.Errorf("%s, %s: hashes equal = %v, want %v", tr.name, tc.name, got == first, tc.equal)
			}
		}
	}
}

// Numbers in a carried detail are kept exact, as in an EventBridgeEvent's
// detail: 1.10 and 1.1 are different amounts to the hash.
func TestCarriedDetailKeepsNumbersExact(t *testing.T) {
	t.Parallel()
	a, _ := idempotency.PayloadHash(events.SQSMessage{Body: mustJSON(t, with(ebEvent(), map[string]any{"detail": json.RawMessage(`{"n":1.10}`)}))})
	b, _ := idempotency.PayloadHash(events.SQSMessage{Body: mustJSON(t, with(ebEvent(), map[string]any{"detail": json.RawMessage(`{"n":1.1}`)}))})
	if a == b {
		t.Error(`details {"n":1.10} and {"n":1.1} hash alike`)
	}
}

// TestPayloadHashReadsOnlyEventBridgeEvents: a body is read as an
// EventBridge event only when it has the shape EventBridge delivers. Any
// other body is hashed whole, so two bodies that differ in a field the
// event identity leaves out (id, time, an application field) never hash
// alike: a body that merely has keys named source, detail-type and detail
// is not misread.
func TestPayloadHashReadsOnlyEventBridgeEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body map[string]any
	}{
		{"an application field beside the envelope", with(ebEvent(), map[string]any{"amount": 5})},
		{"detail is a string", with(ebEvent(), map[string]any{"detail": `{"event_id":"e-1"}`})},
		{"detail is an array", with(ebEvent(), map[string]any{"detail": []any{1}})},
		{"no detail", with(ebEvent(), map[string]any{"detail": nil})},
		{"no detail-type", with(ebEvent(), map[string]any{"detail-type": nil})},
		{"empty source", with(ebEvent(), map[string]any{"source": ""})},
		{"source is not a string", with(ebEvent(), map[string]any{"source": 7})},
		{"no version", with(ebEvent(), map[string]any{"version": nil})},
		{"no account", with(ebEvent(), map[string]any{"account": nil})},
		{"time is a number", with(ebEvent(), map[string]any{"time": 1778051289})},
		{"resources is an object", with(ebEvent(), map[string]any{"resources": map[string]any{}})},
		{"replay-name is a number", with(ebEvent(), map[string]any{"replay-name": 1})},
		{"only source, detail-type, detail and id", map[string]any{"source": "s", "detail-type": "t", "detail": map[string]any{}, "id": "1"}},
	}
	for _, tc := range tests {
		// The same body with another id: equal hashes would mean the body
		// was read as an event (id left out).
		other := with(tc.body, map[string]any{"id": "99999999-9999-9999-9999-999999999999"})
		for _, tr := range []struct {
			name string
			wrap func(string) any
		}{
			{"SQS", func(b string) any { return events.SQSMessage{Body: b} }},
			{"SNS", func(b string) any { return events.SNSEventRecord{SNS: events.SNSEntity{Message: b}} }},
			{"HTTP", func(b string) any { return events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/", Body: b} }},
		} {
			a, err := idempotency.PayloadHash(tr.wrap(mustJSON(t, tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := idempotency.PayloadHash(tr.wrap(mustJSON(t, other)))
			if a == b {
				t.Errorf("%s, %s: read as an EventBridge event (the id was left out of the hash)", tr.name, tc.name)
			}
		}
	}
	// Not one JSON object: hashed whole.
	for _, body := range []string{`[1]`, `"x"`, `{"a":1} {"b":2}`, `{`, ``} {
		if _, err := idempotency.PayloadHash(events.SQSMessage{Body: body}); err != nil {
			t.Errorf("body %q: %v", body, err)
		}
	}
	// An SNS notification is read only with its notification shape: an
	// extra field, or another Type, is hashed whole.
	msg := mustJSON(t, ebEvent())
	for name, edit := range map[string]map[string]any{
		"an application field":     {"amount": 5},
		"Type is not Notification": {"Type": "SubscriptionConfirmation"},
	} {
		var a, b map[string]any
		_ = json.Unmarshal([]byte(snsNotification(t, "n-1", msg)), &a)
		_ = json.Unmarshal([]byte(snsNotification(t, "n-2", msg)), &b)
		ha, _ := idempotency.PayloadHash(events.SQSMessage{Body: mustJSON(t, with(a, edit))})
		hb, _ := idempotency.PayloadHash(events.SQSMessage{Body: mustJSON(t, with(b, edit))})
		if ha == hb {
			t.Errorf("SNS notification with %s: read as a notification (MessageId left out)", name)
		}
	}
}

// TestStoreReplaysAReSentOrReplayedEventDeliveredBySQS: against Dynoxide, a
// consumer behind an SQS queue (idempotency key: the outbox event_id in the
// detail; default payload hash) runs its effect for the first delivery and
// answers a reconciler re-send and an archive replay of the same event, each
// a new SQS message with a new EventBridge envelope in its body, with the
// stored result (SourceStore), not ErrPayloadMismatch. A forged reuse of
// the event_id with another detail is still refused.
func TestStoreReplaysAReSentOrReplayedEventDeliveredBySQS(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	runs := 0
	effect := func(context.Context) ([]byte, error) { runs++; return []byte("shipment-1"), nil }
	deliver := func(ev map[string]any, msgID string) (idempotency.Result, error) {
		msg := events.SQSMessage{MessageId: msgID, ReceiptHandle: "rh-" + msgID, Body: mustJSON(t, ev),
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
		hash, err := idempotency.PayloadHash(msg)
		if err != nil {
			t.Fatal(err)
		}
		key := ev["detail"].(map[string]any)["event_id"].(string)
		return f.store.Do(ctx, key, hash, effect)
	}
	if res, err := deliver(ebEvent(), "m-1"); err != nil || res.Source != idempotency.SourceRun {
		t.Fatalf("first delivery: %+v %v", res, err)
	}
	tests := []struct {
		name       string
		edit       map[string]any
		wantErr    error
		wantSource idempotency.Source
	}{
		{"reconciler re-send", resent, nil, idempotency.SourceStore},
		{"archive replay", replayed, nil, idempotency.SourceStore},
		{"forged: another detail under the event_id", otherDetail, idempotency.ErrPayloadMismatch, ""},
	}
	for i, tc := range tests {
		res, err := deliver(with(ebEvent(), tc.edit), "m-"+string(rune('a'+i)))
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) || res.Source != tc.wantSource {
			t.Errorf("%s: %+v %v, want source %q err %v", tc.name, res, err, tc.wantSource, tc.wantErr)
			continue
		}
		if tc.wantErr == nil && string(res.Data) != "shipment-1" {
			t.Errorf("%s: data %q, want the stored result", tc.name, res.Data)
		}
	}
	if runs != 1 {
		t.Errorf("effect ran %d times, want 1", runs)
	}
}
