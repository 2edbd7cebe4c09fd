package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/jsonstrict"
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
	// TraceParent is the W3C Trace Context traceparent of the request that
	// wrote the event ("00-<32 hex trace id>-<16 hex span id>-<2 hex
	// flags>", https://www.w3.org/TR/trace-context/#traceparent-header),
	// stored in the outbox record in the same transaction. Optional (added
	// compatibly in v1, like Actor): empty when tracing was off. The relay
	// and consumers continue the order's trace from it (pkg/outboxtrace). On
	// Lambda its trace id is the X-Ray trace id of the API invocation.
	TraceParent string `json:"traceparent,omitempty"`
	// TraceState is the W3C tracestate that came with TraceParent
	// (vendor entries, at most MaxTraceStateLen bytes). Optional.
	TraceState string `json:"tracestate,omitempty"`
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
	// TraceParent and TraceState become the envelope's (optional; see
	// there): the writer's span context, e.g. from outboxtrace.Capture.
	TraceParent string
	TraceState  string
}

// MaxTraceStateLen is the maximum Envelope.TraceState length in bytes: 512,
// what W3C Trace Context asks every vendor to propagate
// (https://www.w3.org/TR/trace-context/#tracestate-limits).
const MaxTraceStateLen = 512

// MaxActorLen is the maximum Envelope.Actor length in bytes: 2048, the
// maximum length of an IAM ARN.
const MaxActorLen = 2048

// Errors returned by envelope construction and validation.
var (
	// ErrInvalidEnvelope reports a missing or malformed envelope field.
	ErrInvalidEnvelope = errors.New("outbox: invalid envelope")
	// ErrUnsafeNumber reports a number in the envelope (sequence,
	// event_version or any number in the payload) outside
	// ±MaxSafeInteger: JavaScript, jq and every parser that reads JSON
	// numbers as IEEE-754 doubles would round it (12345678901234567890
	// reads as 12345678901234567000). Errors wrapping it also wrap
	// ErrInvalidEnvelope. Carry such values as decimal strings.
	ErrUnsafeNumber = errors.New("outbox: number outside the interoperable range ±(2^53-1)")
)

// MaxSafeInteger is 2^53-1 (JavaScript's Number.MAX_SAFE_INTEGER), the
// largest magnitude a published JSON number may have: every integer up to it
// is exact in an IEEE-754 double, so every JSON parser reads the value the
// producer wrote (RFC 8259 section 6, RFC 7493 section 2.2).
const MaxSafeInteger = 1<<53 - 1

// NewEnvelope builds an envelope with a fresh UUIDv7 event id and the current
// UTC time. It returns ErrInvalidEnvelope (wrapped) when a field is missing,
// the payload does not marshal to a JSON object, or a number is beyond
// ±MaxSafeInteger (also ErrUnsafeNumber; see ValidateForPublish): e.g. a
// payload {"bigInt": json.Number("12345678901234567890")} is refused; carry
// such a value as a string. The envelope is returned with an ErrUnsafeNumber
// error (tests use it to forge events consumers must refuse).
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
		TraceParent:   meta.TraceParent,
		TraceState:    meta.TraceState,
		Payload:       payload,
	}
	return env, env.ValidateForPublish()
}

// Validate checks that every required field is set, that Payload is a JSON
// object and that Actor, when set, is at most MaxActorLen bytes of printable
// ASCII. It returns an error wrapping ErrInvalidEnvelope. Consumers decode
// with it (dedup.DecodeEnvelope), so it stays tolerant of numbers a
// producer should not have written (CheckNumbers): their own checks refuse
// those with a precise reason (order.CheckEvent).
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

// ValidateForPublish is Validate plus CheckNumbers: what the write side
// requires of an envelope before it may become an outbox record. NewEnvelope
// and Writer.Build (so Writer.Write) call it, so an unsafe number is refused
// at write time, before anything is sent, and never reaches a published
// detail.
func (e Envelope) ValidateForPublish() error {
	if err := e.Validate(); err != nil {
		return err
	}
	if err := e.CheckTrace(); err != nil {
		return err
	}
	return e.CheckNumbers()
}

// CheckTrace checks the optional trace fields as the write side must store
// them: TraceParent empty or "<2 hex version>-<32 hex trace id>-<16 hex
// parent id>-<2 hex flags>" in lower case with a non-zero trace id and parent
// id and a version other than ff; TraceState empty when TraceParent is, at
// most MaxTraceStateLen bytes of printable ASCII or spaces. It returns an
// error wrapping ErrInvalidEnvelope. Readers (Validate, consumers) do not
// call it: a bad trace field never fails an event, it is only ignored.
func (e Envelope) CheckTrace() error {
	if e.TraceParent == "" {
		if e.TraceState != "" {
			return fmt.Errorf("%w: tracestate without traceparent", ErrInvalidEnvelope)
		}
		return nil
	}
	if !validTraceParent(e.TraceParent) {
		return fmt.Errorf("%w: traceparent %q is not W3C Trace Context", ErrInvalidEnvelope, truncateText(e.TraceParent, 64))
	}
	if len(e.TraceState) > MaxTraceStateLen {
		return fmt.Errorf("%w: tracestate longer than %d bytes", ErrInvalidEnvelope, MaxTraceStateLen)
	}
	for i := 0; i < len(e.TraceState); i++ {
		if c := e.TraceState[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: tracestate must be printable ASCII", ErrInvalidEnvelope)
		}
	}
	return nil
}

// validTraceParent reports whether s is a W3C traceparent as the schemas
// describe it.
func validTraceParent(s string) bool {
	if len(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] == "ff" {
		return false
	}
	for i, c := range []byte(s) {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s[3:35] != strings.Repeat("0", 32) && s[36:52] != strings.Repeat("0", 16)
}

// CheckNumbers checks the publishing contract for numbers: every number the
// detail holds (Sequence, EventVersion, and each number anywhere in Payload,
// whatever its spelling: 1e16 and 9007199254740992.0 count) lies within
// ±MaxSafeInteger. It returns an error wrapping ErrUnsafeNumber and
// ErrInvalidEnvelope that names the first number beyond. Payload must be
// valid JSON (Validate checks it first).
func (e Envelope) CheckNumbers() error {
	switch {
	case e.Sequence > MaxSafeInteger || e.Sequence < -MaxSafeInteger:
		return fmt.Errorf("%w: %w: sequence %d", ErrInvalidEnvelope, ErrUnsafeNumber, e.Sequence)
	case e.EventVersion > MaxSafeInteger || e.EventVersion < -MaxSafeInteger:
		return fmt.Errorf("%w: %w: event_version %d", ErrInvalidEnvelope, ErrUnsafeNumber, e.EventVersion)
	}
	if err := checkNumbers(e.Payload); err != nil {
		return fmt.Errorf("%w: %w: payload of %s: %v", ErrInvalidEnvelope, ErrUnsafeNumber, e.EventType, err)
	}
	return nil
}

// checkNumbers returns an error naming the first number in the JSON text b
// whose magnitude exceeds MaxSafeInteger. b must be valid JSON.
func checkNumbers(b []byte) error {
	if !bytes.ContainsAny(b, "0123456789") {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n, ok := tok.(json.Number); ok && !safeNumber(string(n)) {
			return fmt.Errorf("%s (at byte %d) is beyond ±%d", truncateText(string(n), 64), dec.InputOffset(), int64(MaxSafeInteger))
		}
	}
}

// safeNumber reports whether the JSON number literal n has a magnitude of at
// most MaxSafeInteger.
func safeNumber(n string) bool {
	if !strings.ContainsAny(n, ".eE") {
		v, err := strconv.ParseInt(n, 10, 64)
		return err == nil && v >= -MaxSafeInteger && v <= MaxSafeInteger
	}
	// A fraction or exponent: compare the value exactly (1e16 and
	// 9007199254740992.0 are beyond; 9007199254740991.5 is beyond too).
	f, ok := new(big.Float).SetPrec(0).SetString(n)
	if !ok {
		return false
	}
	return f.Abs(f).Cmp(big.NewFloat(MaxSafeInteger)) <= 0
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Detail returns the envelope as the EventBridge Detail: a compact JSON object.
func (e Envelope) Detail() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("outbox: encode envelope %s: %w", e.EventID, err)
	}
	return b, nil
}

// UnmarshalJSON decodes an envelope as encoding/json does, except that the
// optional trace fields are read tolerantly: a traceparent or tracestate
// that is not a JSON string (a number, an object, null: only a forged or
// foreign event has one) decodes as "" instead of failing the whole
// envelope, as docs/TRACING.md promises every reader (a bad trace field is
// ignored, never a reason to dead-letter an event). String values are kept
// as they are: Validate does not judge them, CheckTrace does on the write
// side.
func (e *Envelope) UnmarshalJSON(b []byte) error {
	type plain Envelope // no UnmarshalJSON: no recursion
	v := struct {
		*plain
		TraceParent json.RawMessage `json:"traceparent"`
		TraceState  json.RawMessage `json:"tracestate"`
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	e.TraceParent, e.TraceState = jsonStringOrEmpty(v.TraceParent), jsonStringOrEmpty(v.TraceState)
	return nil
}

// jsonStringOrEmpty returns the string the JSON text b holds, or "" when b
// is absent or not a JSON string.
func jsonStringOrEmpty(b json.RawMessage) string {
	var s string
	if len(b) == 0 || b[0] != '"' || json.Unmarshal(b, &s) != nil {
		return ""
	}
	return s
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

// ErrAmbiguousPayload is wrapped by DecodePayload's errors for a payload
// that JSON readers would read differently.
var ErrAmbiguousPayload = errors.New("outbox: ambiguous payload")

// DecodePayload decodes the envelope's payload into v (a pointer) the way a
// consumer should read what another service produced: it refuses, with an
// error wrapping ErrAmbiguousPayload, a payload whose objects hold two keys
// equal under Unicode case folding (duplicates included: encoding/json
// keeps the last, JSON Schema validators and EventBridge patterns see the
// first) or a top-level key that matches a field of v only
// case-insensitively ("Amount_Minor" for the field tagged "amount_minor");
// other unknown keys are left alone (a tolerant reader). Then it returns
// json.Unmarshal's error, if any.
func (e Envelope) DecodePayload(v any) error {
	if err := jsonstrict.Check(e.Payload); err != nil {
		return fmt.Errorf("%w: %w", ErrAmbiguousPayload, err)
	}
	if err := jsonstrict.CheckFields(e.Payload, v); err != nil {
		return fmt.Errorf("%w: %w", ErrAmbiguousPayload, err)
	}
	return json.Unmarshal(e.Payload, v)
}
