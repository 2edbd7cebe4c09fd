package localrt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrInvalidPattern reports an event pattern this matcher does not accept:
// one AWS refuses at creation (PutRule, CreateEventSourceMapping), or one
// using a part of the pattern language the local runtime does not model.
// The error text names the operator and the path.
var ErrInvalidPattern = errors.New("localrt: invalid event pattern")

// PatternDialect selects which AWS service's pattern rules CompilePatternFor
// applies. The language is the same (Lambda: "For filter rules, Lambda
// supports the same set of syntax and rules as Amazon EventBridge"), but
// the services document different operator sets and size limits.
type PatternDialect int

const (
	// EventBridgeRule is an EventBridge event bus rule's EventPattern:
	// every operator of the EventBridge comparison-operator table
	// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern-operators.html),
	// at most MaxEventBridgePatternChars characters (the "Event pattern
	// size" quota, https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html).
	EventBridgeRule PatternDialect = iota
	// LambdaFilter is a Lambda event source mapping filter
	// (FilterCriteria.Filters[].Pattern): only the operators of the table in
	// "Filter rule syntax"
	// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-syntax):
	// null, empty, equals, equals-ignore-case, and, or, $or, anything-but
	// (values), numeric, exists, prefix, suffix. cidr, wildcard, the
	// anything-but object forms and prefix/suffix with equals-ignore-case
	// are not documented there and are refused. At most
	// MaxLambdaFilterPatternChars characters (API_Filter.Pattern).
	LambdaFilter
)

func (d PatternDialect) String() string {
	if d == LambdaFilter {
		return "Lambda event filter"
	}
	return "EventBridge rule"
}

const (
	// MaxEventBridgePatternChars is EventBridge's default "Event pattern
	// size" quota, in characters (adjustable to 4096 on request; the local
	// runtime enforces the default).
	MaxEventBridgePatternChars = 2048
	// MaxLambdaFilterPatternChars is the length limit of Filter.Pattern
	// (https://docs.aws.amazon.com/lambda/latest/api/API_Filter.html).
	MaxLambdaFilterPatternChars = 4096
	// maxPatternCombinations caps the number of flattened alternatives
	// ($or expansion). This is a local safety cap, not an AWS-documented
	// number: a pattern past it is refused as not modelled.
	maxPatternCombinations = 1000

	// numericLimit is the documented numeric matching range: "values
	// between -5.0e9 and +5.0e9 inclusive, with 15 digits of precision, or
	// six digits to the right of the decimal point"
	// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-content-based-filtering.html#filtering-numeric-matching).
	numericLimit = 5.0e9
)

// Pattern is a compiled event pattern in the EventBridge event pattern
// language (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns.html,
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-content-based-filtering.html),
// as EventBridge rules and Lambda event filtering
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html)
// apply it.
//
// Matching follows the documented model, which is Event Ruler's
// (https://github.com/aws/event-ruler, the library EventBridge runs):
//
//   - Pattern and event are flattened to dotted field paths: {"a":{"b":..}}
//     and {"a.b":..} are the same field, in the pattern and in the event
//     (Event Ruler README, "Compiled rules and JSON keys with dots").
//   - Only leaf values (strings, numbers, true, false, null) are fields. An
//     array in the event contributes each element at the array's path, so
//     a pattern on an array of objects applies to each element
//     ("Arrays in Amazon EventBridge event patterns"; Event Ruler "JSON
//     Array Matching"); fields matched in objects of different elements of
//     the same array do not combine (array-consistent matching). An empty
//     array or object contributes no field.
//   - A pattern matches when every field path matches; a field matches when
//     any value at that path matches any alternative of its array.
//   - {"exists": false} matches when the event has no leaf at that path,
//     whether or not the parent object exists; {"exists": true} when it has
//     one (so not for [] or an object value) — "Exists matching only works
//     on leaf nodes".
//   - Exact values: strings character by character; true, false, null as
//     literals; numbers by value when both are within -5.0e9..+5.0e9,
//     compared at six decimal places (300, 300.0 and 3.0e2 are equal), and
//     by their JSON text otherwise. The user guide says the opposite ("For
//     numbers, EventBridge uses string representation. For example, 300,
//     300.0, and 3.0e2 are not considered equal"); AWS's TestEventPattern
//     answered true for [300] against 300.0, and Event Ruler compiles a
//     number in a rule to a numeric equality beside its literal
//     (JsonRuleCompiler): the recording is followed (docs/PATTERNS.md).
//   - prefix, suffix, equals-ignore-case, wildcard and cidr match string
//     values only; numeric matches JSON numbers only, in -5.0e9..+5.0e9,
//     compared at six decimal places (values are scaled by 1e6 and
//     truncated, as Event Ruler's ComparableNumber does).
//   - anything-but matches a present leaf that is not excluded. Its string
//     forms (a string, a string list, prefix, suffix, equals-ignore-case,
//     wildcard) exclude only strings, so they match null, true, false and
//     numbers; its numeric forms exclude only numbers within ±5.0e9, so they
//     match every other leaf (recorded on AWS for null and numbers; Event
//     Ruler's ByteMachine for the rest). A field without a leaf (absent, []
//     or an object) matches no anything-but.
//   - "$or": [obj, obj, ...] (two or more objects) ORs sub-patterns at any
//     object level.
//
// A Pattern is immutable and safe for concurrent use.
type Pattern struct {
	rules   []flatRule
	text    string
	dialect PatternDialect
}

// flatRule is one alternative of a pattern after $or expansion: field
// path → the field's alternatives (ORed).
type flatRule map[string][]matcher

// CompilePattern validates and compiles p as an EventBridge rule pattern
// (CompilePatternFor(p, EventBridgeRule)).
func CompilePattern(p any) (*Pattern, error) { return CompilePatternFor(p, EventBridgeRule) }

// CompilePatternFor validates and compiles p, which is either a Go value
// that marshals to a JSON object (map[string]any, as returned by
// outbox.StreamFilterPattern and a Rule.Pattern) or JSON text
// ([]byte, string or json.RawMessage), under the rules of dialect d. It
// returns an error wrapping ErrInvalidPattern, naming the operator and the
// path, when AWS would refuse the pattern or the local runtime does not
// model what it asks for. An EventBridge rule pattern whose wildcards are
// too complex (see MaxWildcardComplexity) is refused with an error that
// also wraps a smithy.APIError carrying AWS's code and message
// (InvalidEventPatternException, ErrTooComplexMessage).
func CompilePatternFor(p any, d PatternDialect) (*Pattern, error) {
	var raw []byte
	switch v := p.(type) {
	case []byte:
		raw = v
	case json.RawMessage:
		raw = v
	case string:
		raw = []byte(v)
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // AWS receives ">", not "\u003e"
		if err := enc.Encode(p); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidPattern, err)
		}
		raw = bytes.TrimRight(buf.Bytes(), "\n")
	}
	limit := MaxEventBridgePatternChars
	if d == LambdaFilter {
		limit = MaxLambdaFilterPatternChars
	}
	if n := utf8.RuneCount(raw); n > limit {
		return nil, fmt.Errorf("%w: %d characters, the %s limit is %d", ErrInvalidPattern, n, d, limit)
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPattern, err)
	}
	root, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: a pattern is a JSON object", ErrInvalidPattern)
	}
	c := compiler{dialect: d}
	rules, err := c.object(root, "")
	if err != nil {
		return nil, err
	}
	if d == EventBridgeRule {
		if err := checkWildcardComplexity(rules); err != nil {
			return nil, err
		}
	}
	text, _ := json.Marshal(root)
	return &Pattern{rules: rules, text: string(text), dialect: d}, nil
}

// MustCompilePattern is CompilePattern that panics on error. Use it only for
// patterns fixed at compile time (tests, package-level values).
func MustCompilePattern(p any) *Pattern {
	c, err := CompilePattern(p)
	if err != nil {
		panic(err)
	}
	return c
}

// String returns the pattern as compact JSON (keys sorted).
func (p *Pattern) String() string { return p.text }

// Dialect returns the dialect the pattern was compiled for.
func (p *Pattern) Dialect() PatternDialect { return p.dialect }

// Match reports whether event matches the pattern. Numbers in event should be
// json.Number (decode with UseNumber) so that their JSON text is kept; a
// float64 or int is matched by the text encoding/json gives it, and any
// other Go value as the JSON it encodes to. Use MatchJSON to match JSON
// text.
func (p *Pattern) Match(event map[string]any) bool {
	fields := flattenEvent(event)
	for _, r := range p.rules {
		if r.match(fields) {
			return true
		}
	}
	return false
}

// MatchJSON decodes event (a JSON object) with numbers kept as json.Number
// and reports whether it matches. It returns an error when event is not a
// JSON object.
func (p *Pattern) MatchJSON(event []byte) (bool, error) {
	v, err := decodeJSON(event)
	if err != nil {
		return false, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false, errors.New("localrt: event is not a JSON object")
	}
	return p.Match(m), nil
}

// MatchAny reports whether event matches at least one of patterns (filters
// of one event source mapping are ORed). An empty list matches everything.
func MatchAny(patterns []*Pattern, event map[string]any) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p.Match(event) {
			return true
		}
	}
	return false
}

// decodeJSON decodes one JSON value keeping numbers as json.Number.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// ---- compilation ----

// ---- values ----

// ---- matchers ----

// ---- events ----
