package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	contract "github.com/ddb-outbox/ddb-outbox/events"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// roundTrip decodes sample into a new *T (refusing unknown fields),
// re-encodes it, decodes and encodes that again and checks both encodings are
// identical; it also checks that every value of the
// sample survives the round trip (no field is silently dropped by the type,
// e.g. a misspelt key). It returns the decoded value.
func roundTrip[T any](t *testing.T, name string) *T {
	t.Helper()
	raw := contract.Sample(name)
	if raw == nil {
		t.Fatalf("sample %s missing", name)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	first := new(T)
	if err := dec.Decode(first); err != nil {
		t.Fatalf("%s: decode: %v", name, err)
	}
	again, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	second := new(T)
	if err := json.Unmarshal(again, second); err != nil {
		t.Fatal(err)
	}
	if twice, err := json.Marshal(second); err != nil || !bytes.Equal(twice, again) {
		t.Fatalf("%s: encoding is not stable across a round trip:\n%s\n%s", name, again, twice)
	}
	var orig, back any
	_ = json.Unmarshal(raw, &orig)
	_ = json.Unmarshal(again, &back)
	assertSubset(t, name, "$", orig, back)
	return first
}

// assertSubset fails when a value in want is absent from or different in got.
func assertSubset(t *testing.T, name, path string, want, got any) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %s: not an object after round trip", name, path)
			return
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok {
				t.Errorf("%s: %s.%s lost in round trip", name, path, k)
				continue
			}
			assertSubset(t, name, path+"."+k, v, gv)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			t.Errorf("%s: %s: array changed in round trip", name, path)
			return
		}
		for i := range w {
			assertSubset(t, name, path+"["+strconv.Itoa(i)+"]", w[i], g[i])
		}
	default:
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: %s = %v after round trip, want %v", name, path, got, want)
		}
	}
}

func TestSampleAPICreateOrder(t *testing.T) {
	t.Parallel()
	req := roundTrip[lambdaevents.APIGatewayV2HTTPRequest](t, contract.SampleAPICreateOrder)
	if req.Version != "2.0" || req.RequestContext.HTTP.Method != http.MethodPost || req.RawPath != "/orders" || req.RouteKey != "POST /orders" {
		t.Fatalf("not a payload 2.0 POST /orders: %+v", req)
	}
	if req.Headers["idempotency-key"] == "" || req.Headers["content-type"] != "application/json" {
		t.Fatalf("headers = %v (payload 2.0 lower-cases header names)", req.Headers)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(req.Body), &body); err != nil || req.IsBase64Encoded {
		t.Fatalf("body is not JSON text: %v", err)
	}
}

func TestSampleStreamBatch(t *testing.T) {
	t.Parallel()
	ev := roundTrip[lambdaevents.DynamoDBEvent](t, contract.SampleStreamBatch)
	if len(ev.Records) != 4 {
		t.Fatalf("%d records, want 4", len(ev.Records))
	}
	for i, r := range ev.Records {
		if len(r.Change.SequenceNumber) < 21 || r.EventSourceArn == "" || r.Change.ApproximateCreationDateTime.IsZero() || r.EventSource != "aws:dynamodb" {
			t.Errorf("record %d: sequence %q, arn %q, time %v", i, r.Change.SequenceNumber, r.EventSourceArn, r.Change.ApproximateCreationDateTime)
		}
		if _, err := strconv.ParseUint(r.Change.SequenceNumber, 10, 64); err == nil {
			t.Errorf("record %d: sequence number fits in uint64; real ones (21+ digits) do not", i)
		}
	}
	ins, mod, ttl, foreign := ev.Records[0], ev.Records[1], ev.Records[2], ev.Records[3]

	// The outbox INSERT decodes into a valid pending record, byte for byte
	// the shape pkg/outbox writes.
	rec, err := outbox.RecordFromItem(toSDK(t, ins.Change.NewImage))
	if err != nil || ins.EventName != "INSERT" {
		t.Fatalf("outbox INSERT: %v", err)
	}
	if rec.Status != outbox.StatusPending || rec.PendingShard != outbox.PendingShard(rec.Envelope.EventID, 16) || !rec.ExpiresAt.IsZero() {
		t.Fatalf("pending record = %+v", rec)
	}
	if got := outbox.NewRecord(rec.Envelope, 0, 16).Item(); !reflect.DeepEqual(got, toSDK(t, ins.Change.NewImage)) {
		t.Fatalf("sample NewImage differs from outbox.Record.Item():\n got %v\nwant %v", ins.Change.NewImage, got)
	}
	if err := contract.Validate(mustDetail(t, rec.Envelope)); err != nil {
		t.Fatalf("sample envelope does not validate: %v", err)
	}

	// The relay's marking: MODIFY, published, TTL set, out of the pending index.
	marked, err := outbox.RecordFromItem(toSDK(t, mod.Change.NewImage))
	if err != nil || mod.EventName != "MODIFY" || marked.Status != outbox.StatusPublished || marked.PendingShard != "" || marked.ExpiresAt.IsZero() {
		t.Fatalf("MODIFY record = %+v, %v", marked, err)
	}
	// TTL deletion.
	if ttl.EventName != "REMOVE" || ttl.UserIdentity == nil || ttl.UserIdentity.Type != "Service" || ttl.UserIdentity.PrincipalID != "dynamodb.amazonaws.com" || ttl.Change.NewImage != nil {
		t.Fatalf("TTL REMOVE record = %+v", ttl)
	}
	// A foreign item has no event id.
	if _, ok := foreign.Change.NewImage[outbox.AttrEventID]; ok || foreign.EventName != "INSERT" {
		t.Fatal("foreign INSERT carries an event_id")
	}
}

func TestSampleEventBridgeOrderPaid(t *testing.T) {
	t.Parallel()
	ev := roundTrip[lambdaevents.EventBridgeEvent](t, contract.SampleEventBridgeOrderPaid)
	if ev.Version != "0" || ev.Source != "com.ddb-outbox.orders" || ev.DetailType != order.EventOrderPaid || ev.Resources == nil {
		t.Fatalf("event = %+v", ev)
	}
	if err := contract.Validate(ev.Detail); err != nil {
		t.Fatalf("detail does not validate: %v", err)
	}
	env, err := dedup.DecodeEnvelope(*ev)
	if err != nil {
		t.Fatal(err)
	}
	if env.EventID == ev.ID {
		t.Fatal("sample uses the same id for the envelope and the EventBridge event")
	}
	var p order.Paid
	if err := json.Unmarshal(env.Payload, &p); err != nil || p.AmountMinor != 1250 || p.OrderID != env.AggregateID {
		t.Fatalf("payload = %+v, %v", p, err)
	}
}

func TestSampleScheduledEvent(t *testing.T) {
	t.Parallel()
	ev := roundTrip[lambdaevents.EventBridgeEvent](t, contract.SampleScheduledEvent)
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" || len(ev.Resources) != 1 || string(ev.Detail) != "{}" {
		t.Fatalf("scheduled event = %+v", ev)
	}
}

func TestSampleNames(t *testing.T) {
	t.Parallel()
	want := []string{contract.SampleAPICreateOrder, contract.SampleEventBridgeOrderPaid, contract.SampleScheduledEvent, contract.SampleStreamBatch}
	if got := contract.SampleNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("SampleNames = %v, want %v", got, want)
	}
	if contract.Sample("nope.json") != nil {
		t.Fatal("Sample of an unknown name is not nil")
	}
}

// TestEveryOrderEventValidates builds each order event type with
// outbox.NewEnvelope from the internal/orders/order payload structs, as the write side
// does, and validates it against its schema.
func TestEveryOrderEventValidates(t *testing.T) {
	t.Parallel()
	payloads := map[string][]any{
		order.EventOrderPlaced:  {order.Placed{OrderID: "o-1", CustomerID: "c-1", AmountMinor: 1250, Currency: "EUR"}},
		order.EventOrderPaid:    {order.Paid{OrderID: "o-1", AmountMinor: 1250, Currency: "EUR"}},
		order.EventOrderShipped: {order.Shipped{OrderID: "o-1"}},
		order.EventOrderCancelled: {
			order.Cancelled{OrderID: "o-1", Reason: "customer request", WasPaid: true, RefundMinor: 1250, Currency: "EUR"},
			order.Cancelled{OrderID: "o-1", WasPaid: false, Currency: "EUR"},
		},
	}
	if len(payloads) != len(order.EventTypes) {
		t.Fatalf("test covers %d event types, order emits %d", len(payloads), len(order.EventTypes))
	}
	for _, typ := range order.EventTypes {
		if _, err := contract.Schema(typ, order.EventVersion); err != nil {
			t.Fatalf("no schema for %s: %v", typ, err)
		}
		for i, p := range payloads[typ] {
			c, _ := p.(order.Cancelled)
			seq := order.ExpectedSequences(typ, c.WasPaid)[0]
			for _, meta := range []outbox.Metadata{{}, {CorrelationID: "corr", CausationID: "cause"},
				{Actor: "arn:aws:sts::123456789012:assumed-role/checkout/i-0abc"}, {Actor: "local:alice"}} {
				env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: seq},
					outbox.Event{Type: typ, Version: order.EventVersion, Payload: p}, meta)
				if err != nil {
					t.Fatal(err)
				}
				if err := contract.Validate(mustDetail(t, env)); err != nil {
					t.Errorf("%s #%d (%+v): %v", typ, i, meta, err)
				}
			}
		}
	}
	if got := len(contract.Schemas()); got != len(order.EventTypes) {
		t.Fatalf("%d schemas published, want %d", got, len(order.EventTypes))
	}
}

func TestBrokenEnvelopesFail(t *testing.T) {
	t.Parallel()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: 2},
		outbox.Event{Type: order.EventOrderPaid, Version: 1, Payload: order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"}},
		outbox.Metadata{CorrelationID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := contract.Validate(mustDetail(t, env)); err != nil {
		t.Fatalf("baseline does not validate: %v", err)
	}
	tests := brokenEnvelopeCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var m map[string]any
			if err := json.Unmarshal(mustDetail(t, env), &m); err != nil {
				t.Fatal(err)
			}
			tt.mutate(m)
			b, _ := json.Marshal(m)
			if err := contract.Validate(b); !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
	cancelled := func(wasPaid bool, refund int64) []byte {
		e, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: 3},
			outbox.Event{Type: order.EventOrderCancelled, Version: 1, Payload: order.Cancelled{OrderID: "o-1", WasPaid: wasPaid, RefundMinor: refund, Currency: "EUR"}},
			outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		return mustDetail(t, e)
	}
	// Optional actor accepted; bounds accepted.
	for name, mutate := range map[string]func(m map[string]any){
		"actor":                 func(m map[string]any) { m["actor"] = "arn:aws:iam::123456789012:user/ops" },
		"longest actor":         func(m map[string]any) { m["actor"] = strings.Repeat("a", outbox.MaxActorLen) },
		"amount MaxAmountMinor": func(m map[string]any) { m["payload"].(map[string]any)["amount_minor"] = order.MaxAmountMinor },
	} {
		var m map[string]any
		if err := json.Unmarshal(mustDetail(t, env), &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, _ := json.Marshal(m)
		if err := contract.Validate(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	placed := func(customer string) []byte {
		e, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: 1},
			outbox.Event{Type: order.EventOrderPlaced, Version: 1, Payload: order.Placed{OrderID: "o-1", CustomerID: customer, AmountMinor: 1, Currency: "EUR"}},
			outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		return mustDetail(t, e)
	}
	for _, c := range []string{"c\u202e1", "c 1", "josé", strings.Repeat("c", order.MaxCustomerIDLen+1)} {
		if err := contract.Validate(placed(c)); !errors.Is(err, contract.ErrInvalidEvent) {
			t.Errorf("customer_id %q: %v", c, err)
		}
	}
	if err := contract.Validate(placed("crm:4711")); err != nil {
		t.Errorf("customer_id crm:4711: %v", err)
	}
	if err := contract.Validate(cancelled(true, 0)); !errors.Is(err, contract.ErrInvalidEvent) {
		t.Errorf("paid cancellation without refund: %v", err)
	}
	if err := contract.Validate(cancelled(false, 10)); !errors.Is(err, contract.ErrInvalidEvent) {
		t.Errorf("unpaid cancellation with refund: %v", err)
	}
	if err := contract.Validate([]byte(`[]`)); !errors.Is(err, contract.ErrInvalidEvent) {
		t.Errorf("array: %v", err)
	}
}

// brokenEnvelopeCases mutate a valid OrderPaid v1 detail (sequence 2) into
// documents the schemas must refuse; want is the Go validator's error. The
// Ajv check (TestSchemasHoldInAjvStrict) must refuse them too.
var brokenEnvelopeCases = []struct {
	name   string
	mutate func(m map[string]any)
	want   error
}{
	{"missing event_id", func(m map[string]any) { delete(m, "event_id") }, contract.ErrInvalidEvent},
	{"missing occurred_at", func(m map[string]any) { delete(m, "occurred_at") }, contract.ErrInvalidEvent},
	{"missing payload field", func(m map[string]any) { delete(m["payload"].(map[string]any), "currency") }, contract.ErrInvalidEvent},
	{"extra envelope field", func(m map[string]any) { m["bus_event_id"] = "x" }, contract.ErrInvalidEvent},
	{"extra payload field", func(m map[string]any) { m["payload"].(map[string]any)["discount"] = 5 }, contract.ErrInvalidEvent},
	{"sequence is a string", func(m map[string]any) { m["sequence"] = "2" }, contract.ErrInvalidEvent},
	{"sequence zero", func(m map[string]any) { m["sequence"] = 0 }, contract.ErrInvalidEvent},
	{"amount is a float", func(m map[string]any) { m["payload"].(map[string]any)["amount_minor"] = 1.5 }, contract.ErrInvalidEvent},
	{"bad currency", func(m map[string]any) { m["payload"].(map[string]any)["currency"] = "euro" }, contract.ErrInvalidEvent},
	{"event_id not a uuid", func(m map[string]any) { m["event_id"] = "evt-1" }, contract.ErrInvalidEvent},
	{"occurred_at not a date-time", func(m map[string]any) { m["occurred_at"] = "yesterday" }, contract.ErrInvalidEvent},
	{"wrong aggregate_type", func(m map[string]any) { m["aggregate_type"] = "Invoice" }, contract.ErrInvalidEvent},
	{"payload not an object", func(m map[string]any) { m["payload"] = "{}" }, contract.ErrInvalidEvent},
	{"unknown version", func(m map[string]any) { m["event_version"] = 2 }, contract.ErrUnknownSchema},
	{"unknown type", func(m map[string]any) { m["event_type"] = "OrderLost" }, contract.ErrUnknownSchema},
	{"version is a string", func(m map[string]any) { m["event_version"] = "1" }, contract.ErrInvalidEvent},
	{"actor empty", func(m map[string]any) { m["actor"] = "" }, contract.ErrInvalidEvent},
	{"actor with a space", func(m map[string]any) { m["actor"] = "a b" }, contract.ErrInvalidEvent},
	{"actor with a newline", func(m map[string]any) { m["actor"] = "a\nb" }, contract.ErrInvalidEvent},
	{"actor too long", func(m map[string]any) { m["actor"] = strings.Repeat("a", outbox.MaxActorLen+1) }, contract.ErrInvalidEvent},
	{"actor not a string", func(m map[string]any) { m["actor"] = 5 }, contract.ErrInvalidEvent},
	{"OrderPaid at sequence 1", func(m map[string]any) { m["sequence"] = 1 }, contract.ErrInvalidEvent},
	{"sequence MaxInt64", func(m map[string]any) { m["sequence"] = int64(math.MaxInt64) }, contract.ErrInvalidEvent},
	{"amount over MaxAmountMinor", func(m map[string]any) { m["payload"].(map[string]any)["amount_minor"] = order.MaxAmountMinor + 1 }, contract.ErrInvalidEvent},
}

func mustDetail(t *testing.T, env outbox.Envelope) []byte {
	t.Helper()
	b, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// toSDK converts a Lambda stream image (S and N attributes only, as outbox
// items use) to SDK attribute values.
func toSDK(t *testing.T, img map[string]lambdaevents.DynamoDBAttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out := make(map[string]types.AttributeValue, len(img))
	for k, v := range img {
		switch v.DataType() {
		case lambdaevents.DataTypeString:
			out[k] = &types.AttributeValueMemberS{Value: v.String()}
		case lambdaevents.DataTypeNumber:
			out[k] = &types.AttributeValueMemberN{Value: v.Number()}
		default:
			t.Fatalf("attribute %s: unexpected type %v", k, v.DataType())
		}
	}
	return out
}

// TestIntegersWithinSafeRange: the contract (outbox.Envelope.CheckNumbers)
// is that every number in a published detail lies within ±(2^53-1). Every
// integer or number property of every schema must therefore be bounded
// (maximum/minimum, const or enum) inside that range, and the order
// domain's own bounds must be inside it.
func TestIntegersWithinSafeRange(t *testing.T) {
	t.Parallel()
	if order.MaxAmountMinor > outbox.MaxSafeInteger || order.MaxEventsPerOrder > outbox.MaxSafeInteger {
		t.Fatalf("order bounds %d, %d beyond 2^53-1", order.MaxAmountMinor, order.MaxEventsPerOrder)
	}
	const safe = float64(outbox.MaxSafeInteger)
	var walk func(t *testing.T, path string, v any) int
	walk = func(t *testing.T, path string, v any) int {
		n := 0
		switch s := v.(type) {
		case map[string]any:
			if typ, _ := s["type"].(string); typ == "integer" || typ == "number" {
				n++
				bounded := func(kw string, within func(float64) bool) bool {
					x, ok := s[kw].(float64)
					return ok && within(x)
				}
				_, isConst := s["const"]
				_, isEnum := s["enum"]
				if !isConst && !isEnum {
					if !bounded("maximum", func(x float64) bool { return x <= safe }) {
						t.Errorf("%s: %s without a maximum <= 2^53-1", path, typ)
					}
					if !bounded("minimum", func(x float64) bool { return x >= -safe }) {
						t.Errorf("%s: %s without a minimum >= -(2^53-1)", path, typ)
					}
				}
			}
			for k, c := range s {
				n += walk(t, path+"/"+k, c)
			}
		case []any:
			for i, c := range s {
				n += walk(t, path+"/"+strconv.Itoa(i), c)
			}
		}
		return n
	}
	total := 0
	for _, name := range contract.Schemas() {
		raw, err := schemaJSON(name)
		if err != nil {
			t.Fatal(err)
		}
		total += walk(t, name, raw)
	}
	if total == 0 {
		t.Fatal("no integer properties found: the walk is broken")
	}
}

func schemaJSON(name string) (any, error) {
	b, err := os.ReadFile("schemas/" + name + ".json")
	if err != nil {
		return nil, err
	}
	var v any
	return v, json.Unmarshal(b, &v)
}
