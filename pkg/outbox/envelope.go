package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Envelope is the published form of an event: what the relay sends as the
// EventBridge Detail and what consumers receive under "detail". Field names
// are part of the public contract (see events/schemas).
type Envelope struct {
	// EventID is a time-ordered unique id (UUIDv7). Consumers deduplicate on
	// it, never on the EventBridge envelope id.
	EventID string `json:"event_id"`
	// EventType is the event name, e.g. "OrderPlaced"; also the DetailType.
	EventType string `json:"event_type"`
	// EventVersion is the schema version of Payload, starting at 1.
	EventVersion int `json:"event_version"`
	// AggregateType names the kind of aggregate, e.g. "Order".
	AggregateType string `json:"aggregate_type"`
	// AggregateID identifies the aggregate instance.
	AggregateID string `json:"aggregate_id"`
	// Sequence is the aggregate's version after the change (1, 2, ...),
	// gap-free per aggregate.
	Sequence int64 `json:"sequence"`
	// OccurredAt is when the change was made, UTC, RFC 3339 with nanoseconds.
	OccurredAt time.Time `json:"occurred_at"`
	// CorrelationID ties the events of one request or workflow together.
	CorrelationID string `json:"correlation_id,omitempty"`
	// CausationID is the id of the command or event that caused this one.
	CausationID string `json:"causation_id,omitempty"`
	// Actor is who made the change, when known: the authenticated caller
	// identity the write side was given (for the orders API, the IAM
	// principal ARN API Gateway authenticated, e.g.
	// "arn:aws:sts::123456789012:assumed-role/checkout/i-0abc"). Optional;
	// at most MaxActorLen bytes of printable ASCII. It is an audit fact set
	// by the producer, not proof of origin: a consumer trusts it only as far
	// as it trusts the path the event came by (see docs/SECURITY-MODEL.md).
	Actor string `json:"actor,omitempty"`
	// Payload is the event body, always a JSON object.
	Payload json.RawMessage `json:"payload"`
}

// Aggregate identifies the aggregate a change applies to and its version
// after the change.
type Aggregate struct {
	Type     string
	ID       string
	Sequence int64
}

// Event is what domain code returns from a change: a type, a schema version
// and a payload that marshals to a JSON object.
type Event struct {
	Type    string
	Version int
	Payload any
}

// Metadata carries tracing ids and the actor onto every envelope of a
// change.
type Metadata struct {
	CorrelationID string
	CausationID   string
	// Actor becomes Envelope.Actor (optional; see there).
	Actor string
}

// MaxActorLen is the maximum Envelope.Actor length in bytes: 2048, the
// maximum length of an IAM ARN.
const MaxActorLen = 2048

// Errors returned by envelope construction and validation.
var (
	// ErrInvalidEnvelope reports a missing or malformed envelope field.
	ErrInvalidEnvelope = errors.New("outbox: invalid envelope")
)

// NewEnvelope builds an envelope with a fresh UUIDv7 event id and the current
// UTC time. It returns ErrInvalidEnvelope (wrapped) when a field is missing or
// the payload does not marshal to a JSON object.
func NewEnvelope(agg Aggregate, ev Event, meta Metadata) (Envelope, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Envelope{}, fmt.Errorf("outbox: new event id: %w", err)
	}
	payload, err := json.Marshal(ev.Payload)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: payload of %s: %v", ErrInvalidEnvelope, ev.Type, err)
	}
	env := Envelope{
		EventID:       id.String(),
		EventType:     ev.Type,
		EventVersion:  ev.Version,
		AggregateType: agg.Type,
		AggregateID:   agg.ID,
		Sequence:      agg.Sequence,
		OccurredAt:    time.Now().UTC(),
		CorrelationID: meta.CorrelationID,
		CausationID:   meta.CausationID,
		Actor:         meta.Actor,
		Payload:       payload,
	}
	return env, env.Validate()
}

// Validate checks that every required field is set, that Payload is a JSON
// object and that Actor, when set, is at most MaxActorLen bytes of printable
// ASCII. It returns an error wrapping ErrInvalidEnvelope.
func (e Envelope) Validate() error {
	switch {
	case e.EventID == "":
		return fmt.Errorf("%w: event_id is empty", ErrInvalidEnvelope)
	case e.EventType == "":
		return fmt.Errorf("%w: event_type is empty", ErrInvalidEnvelope)
	case len(e.EventType) > 128:
		// EventBridge DetailType is at most 128 characters.
		return fmt.Errorf("%w: event_type longer than 128 characters", ErrInvalidEnvelope)
	case e.EventVersion < 1:
		return fmt.Errorf("%w: event_version must be >= 1", ErrInvalidEnvelope)
	case e.AggregateType == "" || e.AggregateID == "":
		return fmt.Errorf("%w: aggregate_type and aggregate_id are required", ErrInvalidEnvelope)
	case e.Sequence < 1:
		return fmt.Errorf("%w: sequence must be >= 1", ErrInvalidEnvelope)
	case e.OccurredAt.IsZero():
		return fmt.Errorf("%w: occurred_at is zero", ErrInvalidEnvelope)
	case len(e.Actor) > MaxActorLen || !printableASCII(e.Actor):
		return fmt.Errorf("%w: actor must be at most %d bytes of printable ASCII", ErrInvalidEnvelope, MaxActorLen)
	}
	if !isJSONObject(e.Payload) {
		return fmt.Errorf("%w: payload of %s is not a JSON object", ErrInvalidEnvelope, e.EventType)
	}
	return nil
}

// Detail returns the envelope as the EventBridge Detail: a compact JSON object.
func (e Envelope) Detail() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("outbox: encode envelope %s: %w", e.EventID, err)
	}
	return b, nil
}

// printableASCII reports whether s holds only bytes 0x21..0x7e (true for "").
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// isJSONObject reports whether b is one valid JSON object.
func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '{' {
		return false
	}
	return json.Valid(b)
}

// EntrySize returns the size in bytes EventBridge counts for a PutEvents entry
// with a Time set: 14 bytes for Time plus the UTF-8 bytes of Source,
// DetailType, Detail and each Resources element. Source:
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html
func EntrySize(source, detailType string, detail []byte, resources ...string) int {
	n := 14 + len(source) + len(detailType) + len(detail)
	for _, r := range resources {
		n += len(r)
	}
	return n
}
