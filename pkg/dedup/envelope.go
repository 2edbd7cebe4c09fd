package dedup

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/jsonstrict"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// DecodeEnvelope returns the outbox envelope carried in an EventBridge
// event's detail, as a consumer Lambda receives it
// ({"version":"0","id":…,"detail-type":…,"source":…,"detail":{…}}).
//
// The detail must be a JSON object that decodes into outbox.Envelope and
// passes Envelope.Validate, and when the event has a detail-type it must
// equal the envelope's event_type. Unknown detail fields are tolerated (a
// tolerant reader: a later optional envelope field must not poison running
// consumers); the published schemas under events/schemas are stricter.
//
// The EventBridge id (ev.ID) is deliberately not used: deduplicate on the
// returned envelope's EventID.
//
// Errors wrap ErrMalformedEvent (and outbox.ErrInvalidEnvelope when the
// envelope fails validation). They are permanent: a handler that returns one
// makes the platform retry and then send the event to its DLQ / on-failure
// destination.
func DecodeEnvelope(ev events.EventBridgeEvent) (outbox.Envelope, error) {
	var env outbox.Envelope
	detail := bytes.TrimSpace(ev.Detail)
	if len(detail) == 0 || detail[0] != '{' {
		return env, fmt.Errorf("%w: event %s (%s): detail is not a JSON object", ErrMalformedEvent, ev.ID, ev.DetailType)
	}
	if err := jsonstrict.Check(detail); err != nil {
		return env, fmt.Errorf("%w: event %s (%s): %w", ErrMalformedEvent, ev.ID, ev.DetailType, err)
	}
	if err := jsonstrict.CheckFields(detail, &env); err != nil {
		return env, fmt.Errorf("%w: event %s (%s): %w", ErrMalformedEvent, ev.ID, ev.DetailType, err)
	}
	if err := json.Unmarshal(detail, &env); err != nil {
		return env, fmt.Errorf("%w: event %s (%s): decode detail: %v", ErrMalformedEvent, ev.ID, ev.DetailType, err)
	}
	if err := env.Validate(); err != nil {
		return env, fmt.Errorf("%w: event %s (%s): %w", ErrMalformedEvent, ev.ID, ev.DetailType, err)
	}
	if ev.DetailType != "" && ev.DetailType != env.EventType {
		return env, fmt.Errorf("%w: event %s: detail-type %q does not match event_type %q", ErrMalformedEvent, ev.ID, ev.DetailType, env.EventType)
	}
	return env, nil
}
