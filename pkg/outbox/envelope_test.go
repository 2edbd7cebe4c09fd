package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestEnvelopeActor: the actor given in Metadata is carried in the envelope,
// its detail JSON ("actor", omitted when empty) and the stored outbox
// record; an actor that is too long or not printable ASCII is refused.
func TestEnvelopeActor(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:sts::123456789012:assumed-role/checkout/i-0abc"
	tests := []struct {
		name   string
		actor  string
		ok     bool
		inJSON bool
	}{
		{"IAM principal", arn, true, true},
		{"none", "", true, false},
		{"longest", strings.Repeat("a", outbox.MaxActorLen), true, true},
		{"too long", strings.Repeat("a", outbox.MaxActorLen+1), false, false},
		{"space", "a b", false, false},
		{"newline", "a\nb", false, false},
		{"non-ASCII", "jos\u00e9", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: 1},
				outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]any{}}, outbox.Metadata{Actor: tt.actor})
			if !tt.ok {
				if !errors.Is(err, outbox.ErrInvalidEnvelope) {
					t.Fatalf("NewEnvelope: err = %v, want ErrInvalidEnvelope", err)
				}
				return
			}
			if err != nil || env.Actor != tt.actor {
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
			if _, has := m["actor"]; has != tt.inJSON || tt.inJSON && m["actor"] != tt.actor {
				t.Fatalf("detail %s: actor present=%v, want %v", detail, has, tt.inJSON)
			}
			rec, err := outbox.RecordFromItem(outbox.NewRecord(env, 0, 4).Item())
			if err != nil || rec.Envelope.Actor != tt.actor {
				t.Fatalf("record round trip: actor %q, %v", rec.Envelope.Actor, err)
			}
		})
	}
}
