package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	contract "github.com/ddb-outbox/ddb-outbox/events"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestEnvelopeTraceContext: the writer's W3C trace context given in
// Metadata is carried in the envelope, its detail JSON (omitted when empty)
// and the stored outbox record; a malformed one is refused at write time
// (ValidateForPublish) but tolerated by readers (Validate); a detail with
// and without the fields both satisfy the published schema.
func TestEnvelopeTraceContext(t *testing.T) {
	t.Parallel()
	const tp = "00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01"
	tests := []struct {
		name    string
		tp, ts  string
		ok      bool
		present bool
	}{
		{"none (tracing off)", "", "", true, false},
		{"traceparent", tp, "", true, true},
		{"traceparent and tracestate", tp, "xray=1,vendor=a b", true, true},
		{"longest tracestate", tp, strings.Repeat("a", outbox.MaxTraceStateLen), true, true},
		{"tracestate too long", tp, strings.Repeat("a", outbox.MaxTraceStateLen+1), false, false},
		{"tracestate alone", "", "vendor=a", false, false},
		{"tracestate control char", tp, "a\nb", false, false},
		{"upper case", strings.ToUpper(tp), "", false, false},
		{"version ff", "ff" + tp[2:], "", false, false},
		{"zero trace id", "00-" + strings.Repeat("0", 32) + "-53995c3f42cd8ad8-01", "", false, false},
		{"zero parent id", "00-665b7c01a3e2f4b5c6d7e8f901234567-" + strings.Repeat("0", 16) + "-01", "", false, false},
		{"short", tp[:54], "", false, false},
		{"bad separator", strings.Replace(tp, "-", "_", 1), "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			meta := outbox.Metadata{TraceParent: tt.tp, TraceState: tt.ts}
			env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: 1},
				outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]any{"order_id": "o-1", "customer_id": "c-1", "amount_minor": 1, "currency": "EUR"}}, meta)
			if !tt.ok {
				if !errors.Is(err, outbox.ErrInvalidEnvelope) {
					t.Fatalf("NewEnvelope: err = %v, want ErrInvalidEnvelope", err)
				}
				if verr := env.Validate(); verr != nil {
					t.Fatalf("Validate (reader) refused a bad trace field: %v", verr)
				}
				return
			}
			if err != nil || env.TraceParent != tt.tp || env.TraceState != tt.ts {
				t.Fatalf("NewEnvelope = %+v, %v", env, err)
			}
			detail, err := env.Detail()
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(detail, &m); err != nil {
				t.Fatal(err)
			}
			if _, has := m["traceparent"]; has != tt.present {
				t.Fatalf("detail %s: traceparent present=%v, want %v", detail, has, tt.present)
			}
			if _, has := m["tracestate"]; has != (tt.ts != "") {
				t.Fatalf("detail %s: tracestate present=%v, want %v", detail, has, tt.ts != "")
			}
			if err := contract.Validate(detail); err != nil {
				t.Fatalf("schema refuses %s: %v", detail, err)
			}
			item := outbox.NewRecord(env, 0, 4).Item()
			if _, has := item[outbox.AttrTraceParent]; has != tt.present {
				t.Fatalf("item: %s present=%v, want %v", outbox.AttrTraceParent, has, tt.present)
			}
			rec, err := outbox.RecordFromItem(item)
			if err != nil || rec.Envelope.TraceParent != tt.tp || rec.Envelope.TraceState != tt.ts {
				t.Fatalf("record round trip: %q %q, %v", rec.Envelope.TraceParent, rec.Envelope.TraceState, err)
			}
		})
	}
}

// TestEnvelopeDecodesTraceFieldsTolerantly: a detail whose traceparent or
// tracestate is not a JSON string (a forged event) decodes with the field
// empty and every other field intact; string values are kept as they are.
func TestEnvelopeDecodesTraceFieldsTolerantly(t *testing.T) {
	t.Parallel()
	const base = `{"event_id":"e-1","event_type":"OrderPlaced","event_version":1,"aggregate_type":"Order","aggregate_id":"o-1","sequence":1,"occurred_at":"2024-05-06T07:08:09Z","actor":"me","payload":{"a":1}`
	for _, tt := range []struct{ fields, tp, ts string }{
		{`,"traceparent":123,"tracestate":{"a":1}`, "", ""},
		{`,"traceparent":null,"tracestate":["x"]`, "", ""},
		{`,"traceparent":true`, "", ""},
		{`,"traceparent":"garbage","tracestate":"a=1"`, "garbage", "a=1"},
		{``, "", ""},
	} {
		var env outbox.Envelope
		if err := json.Unmarshal([]byte(base+tt.fields+"}"), &env); err != nil {
			t.Fatalf("%s: %v", tt.fields, err)
		}
		if env.TraceParent != tt.tp || env.TraceState != tt.ts || env.EventID != "e-1" || env.Actor != "me" || env.Sequence != 1 || string(env.Payload) != `{"a":1}` || env.Validate() != nil {
			t.Fatalf("%s: decoded %+v", tt.fields, env)
		}
	}
	var env outbox.Envelope
	if err := json.Unmarshal([]byte(`{"event_id":5}`), &env); err == nil {
		t.Fatal("a wrongly typed required field decoded without error")
	}
}
