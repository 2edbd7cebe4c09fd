// Package events is the published event contract of ddb-outbox: one JSON
// Schema (draft 2020-12) per event type and version under schemas/, and
// sample Lambda inputs under samples/, embedded so tests in any package can
// validate what they emit and decode what AWS would send.
//
// The package name clashes with github.com/aws/aws-lambda-go/events; import
// it under another name:
//
//	import contract "github.com/ddb-outbox/ddb-outbox/events"
//
//	if err := contract.Validate(detail); err != nil { … }
//
// # Schemas
//
// schemas/<EventType>.v<version>.json describes the FULL outbox envelope (the
// EventBridge detail), not only the payload: event_id (lower-case UUID),
// event_type, event_version, aggregate_type "Order", aggregate_id, sequence
// (the exact values the order state machine emits: OrderPlaced 1, OrderPaid
// 2, OrderShipped 3, OrderCancelled 2 or 3; see order.ExpectedSequences),
// occurred_at (RFC 3339 date-time), optional correlation_id, causation_id
// and actor (who made the change: printable ASCII, at most 2048 bytes), and
// payload (amounts at most order.MaxAmountMinor, customer_id in
// [A-Za-z0-9._:@-]{1,128}, reason at most 512). Unknown properties are
// refused at every level (additionalProperties false): adding a payload
// field is a new version. Optional envelope metadata (actor was the first)
// may be added within a version: every consumer decodes envelopes
// tolerantly (dedup.DecodeEnvelope), so running consumers keep working,
// and documents valid before stay valid. Formats (date-time, uuid) are
// asserted. The schemas cannot express every rule consumers enforce
// (order.CheckEvent: known ISO 4217 code, order_id = aggregate_id, no
// control or format characters in reason).
//
// # Numbers
//
// Every number in a published detail lies within ±(2^53-1)
// (outbox.MaxSafeInteger, JavaScript's Number.MAX_SAFE_INTEGER), so
// JavaScript, jq and every JSON parser that reads numbers as IEEE-754
// doubles reads exactly what the producer wrote. The write side enforces it:
// outbox.NewEnvelope and outbox.Writer refuse an envelope with a number
// beyond (outbox.ErrUnsafeNumber) before anything is sent; a producer with a
// larger value carries it as a decimal string. The order domain stays well
// inside: amounts are at most order.MaxAmountMinor (1e15), sequence at most
// order.MaxEventsPerOrder (3), event_version 1; every integer property of
// every schema carries such a bound (TestIntegersWithinSafeRange).
//
// # Second validator
//
// validate.mjs checks every schema and every sample envelope with Ajv
// (draft 2020-12, ajv-formats) in strict mode, warnings as errors, plus the
// envelopes the order domain emits and the broken ones the Go validator
// refuses; TestSchemasHoldInAjvStrict runs it (skipped only when node is not
// installed; ajv comes from make deps).
//
// # Samples
//
//   - api-create-order.json: API Gateway HTTP API payload 2.0, POST /orders.
//   - stream-batch.json: a DynamoDB Streams batch as Lambda delivers it to the
//     relay: an outbox INSERT, the relay's MODIFY (marked published), a TTL
//     REMOVE (userIdentity Service/dynamodb.amazonaws.com) and a foreign
//     item's INSERT without event_id.
//   - eventbridge-order-paid.json: an OrderPaid event as a consumer receives it.
//   - scheduled-event.json: the EventBridge scheduled event that triggers the
//     reconciler.
package events

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed schemas/*.json samples/*.json
var files embed.FS

// Sample names (file names under samples/).
const (
	SampleAPICreateOrder       = "api-create-order.json"
	SampleStreamBatch          = "stream-batch.json"
	SampleEventBridgeOrderPaid = "eventbridge-order-paid.json"
	SampleScheduledEvent       = "scheduled-event.json"
)

// Errors returned by Schema and Validate.
var (
	// ErrUnknownSchema: no schema exists for the event type and version.
	ErrUnknownSchema = errors.New("events: no schema for event type and version")
	// ErrInvalidEvent: the document does not satisfy its schema (or is not a
	// JSON object naming an event_type and event_version).
	ErrInvalidEvent = errors.New("events: event does not match its schema")
)

// schemaBaseURL is the common prefix of every schema's $id.
const schemaBaseURL = "https://github.com/ddb-outbox/ddb-outbox/events/schemas/"

var (
	compileOnce sync.Once
	compiled    map[string]*jsonschema.Schema // key "<type>.v<version>"
	compileErr  error
)

func schemaKey(eventType string, version int) string {
	return fmt.Sprintf("%s.v%d", eventType, version)
}

// compileAll compiles every embedded schema once, with format assertion on.
func compileAll() (map[string]*jsonschema.Schema, error) {
	compileOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		names, err := fs.Glob(files, "schemas/*.json")
		if err != nil {
			compileErr = err
			return
		}
		for _, n := range names {
			b, _ := files.ReadFile(n)
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				compileErr = fmt.Errorf("events: parse %s: %w", n, err)
				return
			}
			if err := c.AddResource(schemaBaseURL+path.Base(n), doc); err != nil {
				compileErr = fmt.Errorf("events: add %s: %w", n, err)
				return
			}
		}
		out := make(map[string]*jsonschema.Schema, len(names))
		for _, n := range names {
			s, err := c.Compile(schemaBaseURL + path.Base(n))
			if err != nil {
				compileErr = fmt.Errorf("events: compile %s: %w", n, err)
				return
			}
			out[strings.TrimSuffix(path.Base(n), ".json")] = s
		}
		compiled = out
	})
	return compiled, compileErr
}

// Schema returns the compiled schema of an event type and version, e.g.
// Schema("OrderPaid", 1). It returns ErrUnknownSchema (wrapped) when none is
// published, or an error if the embedded schemas do not compile.
func Schema(eventType string, version int) (*jsonschema.Schema, error) {
	all, err := compileAll()
	if err != nil {
		return nil, err
	}
	s, ok := all[schemaKey(eventType, version)]
	if !ok {
		return nil, fmt.Errorf("%w: %s v%d", ErrUnknownSchema, eventType, version)
	}
	return s, nil
}

// Schemas returns the "<EventType>.v<version>" names of every published
// schema, sorted.
func Schemas() []string {
	all, _ := compileAll()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Validate checks one envelope (the EventBridge detail, as JSON bytes)
// against the schema named by its own event_type and event_version. It
// returns nil when it conforms, an error wrapping ErrUnknownSchema when no
// schema exists for that type and version, and an error wrapping
// ErrInvalidEvent (with the validator's details) otherwise.
func Validate(envelopeJSON []byte) error {
	var head struct {
		EventType    string `json:"event_type"`
		EventVersion int    `json:"event_version"`
	}
	if err := json.Unmarshal(envelopeJSON, &head); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if head.EventType == "" || head.EventVersion == 0 {
		return fmt.Errorf("%w: event_type and event_version are required", ErrInvalidEvent)
	}
	s, err := Schema(head.EventType, head.EventVersion)
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(envelopeJSON))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("%w: %s v%d: %v", ErrInvalidEvent, head.EventType, head.EventVersion, err)
	}
	return nil
}

// Sample returns the bytes of an embedded sample (a file name under
// samples/, e.g. SampleStreamBatch), or nil when there is no such sample.
func Sample(name string) []byte {
	b, err := files.ReadFile("samples/" + name)
	if err != nil {
		return nil
	}
	return b
}

// SampleNames returns the file names of every embedded sample, sorted.
func SampleNames() []string {
	names, _ := fs.Glob(files, "samples/*.json")
	for i, n := range names {
		names[i] = path.Base(n)
	}
	return names
}
