package localrt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
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
// model what it asks for.
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

type compiler struct{ dialect PatternDialect }

func (c compiler) errf(path, format string, args ...any) error {
	return fmt.Errorf("%w: at %q: %s", ErrInvalidPattern, displayPath(path), fmt.Sprintf(format, args...))
}

func displayPath(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// object compiles the pattern object m found at path prefix into its
// flattened alternatives.
func (c compiler) object(m map[string]any, prefix string) ([]flatRule, error) {
	if len(m) == 0 {
		return nil, c.errf(prefix, "empty object")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rules := []flatRule{{}}
	for _, k := range keys {
		var sub []flatRule
		if k == "$or" {
			alts, ok := m[k].([]any)
			if !ok || len(alts) < 2 {
				return nil, c.errf(prefix, "$or needs an array of at least two objects (not modelled otherwise: Event Ruler would read it as a field name)")
			}
			for i, a := range alts {
				am, ok := a.(map[string]any)
				if !ok {
					return nil, c.errf(prefix, "$or[%d] is not an object", i)
				}
				r, err := c.object(am, prefix)
				if err != nil {
					return nil, err
				}
				sub = append(sub, r...)
			}
		} else {
			path := joinPath(prefix, k)
			switch v := m[k].(type) {
			case map[string]any:
				r, err := c.object(v, path)
				if err != nil {
					return nil, err
				}
				sub = r
			case []any:
				ms, err := c.leaf(v, path)
				if err != nil {
					return nil, err
				}
				sub = []flatRule{{path: ms}}
			default:
				return nil, c.errf(path, "a pattern value must be an object or an array")
			}
		}
		var err error
		if rules, err = c.cross(rules, sub, prefix); err != nil {
			return nil, err
		}
	}
	return rules, nil
}

// cross returns every combination of one rule of a and one of b.
func (c compiler) cross(a, b []flatRule, path string) ([]flatRule, error) {
	if len(a)*len(b) > maxPatternCombinations {
		return nil, c.errf(path, "more than %d $or combinations (local cap, not modelled)", maxPatternCombinations)
	}
	out := make([]flatRule, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			r := make(flatRule, len(x)+len(y))
			for k, v := range x {
				r[k] = v
			}
			for k, v := range y {
				if _, dup := r[k]; dup {
					return nil, c.errf(k, "field given twice (dotted and nested keys, or in and beside $or): not modelled")
				}
				r[k] = v
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// leaf compiles a pattern array of alternatives.
func (c compiler) leaf(alts []any, path string) ([]matcher, error) {
	if len(alts) == 0 {
		return nil, c.errf(path, "empty array")
	}
	out := make([]matcher, 0, len(alts))
	for _, alt := range alts {
		switch a := alt.(type) {
		case string:
			out = append(out, matcher{kind: mExact, value: jsonString(a)})
		case json.Number:
			m := matcher{kind: mExact, value: jsonNumber(a)}
			// Event Ruler adds a numeric equality beside the literal when the
			// number is within its comparable range (JsonRuleCompiler).
			m.num, m.hasNum = comparableNumber(a)
			out = append(out, m)
		case bool:
			out = append(out, matcher{kind: mExact, value: jsonBool(a)})
		case nil:
			out = append(out, matcher{kind: mExact, value: jsonNull})
		case map[string]any:
			m, err := c.operator(a, path)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		default:
			return nil, c.errf(path, "unsupported value %v (strings, numbers, true, false, null or an operator object)", alt)
		}
	}
	return out, nil
}

func (c compiler) operator(op map[string]any, path string) (matcher, error) {
	if len(op) != 1 {
		names := make([]string, 0, len(op))
		for k := range op {
			names = append(names, k)
		}
		sort.Strings(names)
		return matcher{}, c.errf(path, "an operator object has exactly one key, got %q", names)
	}
	for name, arg := range op {
		switch name {
		case "exists":
			b, ok := arg.(bool)
			if !ok {
				return matcher{}, c.errf(path, "exists takes true or false")
			}
			return matcher{kind: mExists, exists: b}, nil
		case "prefix", "suffix":
			kind := mPrefix
			if name == "suffix" {
				kind = mSuffix
			}
			switch a := arg.(type) {
			case string:
				if a == "" {
					return matcher{}, c.errf(path, "%s with an empty string (not modelled: AWS refuses an empty prefix/suffix under anything-but, and documents none here)", name)
				}
				return matcher{kind: kind, str: a}, nil
			case map[string]any:
				s, ok := a["equals-ignore-case"].(string)
				if len(a) != 1 || !ok {
					return matcher{}, c.errf(path, "%s takes a string or {\"equals-ignore-case\": string}", name)
				}
				if c.dialect == LambdaFilter {
					return matcher{}, c.errf(path, "%s with equals-ignore-case is not a documented %s operator", name, c.dialect)
				}
				if s == "" {
					return matcher{}, c.errf(path, "%s equals-ignore-case with an empty string (not modelled)", name)
				}
				return matcher{kind: kind, str: s, ignoreCase: true}, nil
			default:
				return matcher{}, c.errf(path, "%s takes a string", name)
			}
		case "equals-ignore-case":
			s, ok := arg.(string)
			if !ok {
				return matcher{}, c.errf(path, "equals-ignore-case takes a string")
			}
			return matcher{kind: mEqualsIgnoreCase, str: s}, nil
		case "wildcard":
			if c.dialect == LambdaFilter {
				return matcher{}, c.errf(path, "wildcard is not a documented %s operator", c.dialect)
			}
			s, ok := arg.(string)
			if !ok {
				return matcher{}, c.errf(path, "wildcard takes a string")
			}
			w, err := compileWildcard(s)
			if err != nil {
				return matcher{}, c.errf(path, "wildcard %q: %v", s, err)
			}
			return matcher{kind: mWildcard, wildcard: w}, nil
		case "cidr":
			if c.dialect == LambdaFilter {
				return matcher{}, c.errf(path, "cidr is not a documented %s operator", c.dialect)
			}
			s, ok := arg.(string)
			if !ok {
				return matcher{}, c.errf(path, "cidr takes a string")
			}
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return matcher{}, c.errf(path, "cidr %q is not an IPv4 or IPv6 CIDR block: %v", s, err)
			}
			return matcher{kind: mCIDR, cidr: pfx.Masked()}, nil
		case "numeric":
			r, err := c.numeric(arg, path)
			if err != nil {
				return matcher{}, err
			}
			return matcher{kind: mNumeric, numeric: r}, nil
		case "anything-but":
			return c.anythingBut(arg, path)
		default:
			return matcher{}, c.errf(path, "unsupported operator %q", name)
		}
	}
	panic("unreachable")
}

// numeric compiles {"numeric": ["=", n]} or a range of one lower bound
// (">", ">=") and/or one upper bound ("<", "<="), lower bound first as
// every documented example writes it. Bounds are JSON numbers within
// -5.0e9..+5.0e9, the lower below the upper.
func (c compiler) numeric(arg any, path string) (numRange, error) {
	list, ok := arg.([]any)
	if !ok || len(list) == 0 || len(list)%2 != 0 || len(list) > 4 {
		return numRange{}, c.errf(path, "numeric takes [op, number] or [lower-op, number, upper-op, number]")
	}
	var r numRange
	for i := 0; i < len(list); i += 2 {
		op, ok := list[i].(string)
		if !ok {
			return numRange{}, c.errf(path, "numeric operator %v is not a string", list[i])
		}
		n, ok := list[i+1].(json.Number)
		if !ok {
			return numRange{}, c.errf(path, "numeric %s takes a JSON number, got %v", op, list[i+1])
		}
		v, ok := comparableNumber(n)
		if !ok {
			return numRange{}, c.errf(path, "numeric %s %s: values must be numbers between -5.0e9 and +5.0e9 inclusive", op, n)
		}
		switch {
		case op == "=" && len(list) == 2:
			r.eq, r.hasEq = v, true
		case (op == ">" || op == ">=") && i == 0:
			r.low, r.hasLow, r.lowOpen = v, true, op == ">"
		case (op == "<" || op == "<=") && (i == 2 || len(list) == 2):
			r.high, r.hasHigh, r.highOpen = v, true, op == "<"
		default:
			return numRange{}, c.errf(path, "numeric %v: expected [\"=\", n], [\">\"|\">=\", n], [\"<\"|\"<=\", n] or [\">\"|\">=\", n, \"<\"|\"<=\", n]", list)
		}
	}
	if r.hasLow && r.hasHigh && r.low >= r.high {
		return numRange{}, c.errf(path, "numeric %v: the lower bound must be below the upper bound", list)
	}
	return r, nil
}

// anythingBut compiles the anything-but forms: a string, a number, a
// non-empty list of only strings or only numbers, or (EventBridge rules
// only) an object with one of prefix, suffix, equals-ignore-case, wildcard
// taking a string or a non-empty list of strings.
func (c compiler) anythingBut(arg any, path string) (matcher, error) {
	m := matcher{kind: mAnythingBut}
	switch a := arg.(type) {
	case string:
		m.abKind, m.abStrings = abStrings, []string{a}
	case json.Number:
		v, ok := comparableNumber(a)
		if !ok {
			return m, c.errf(path, "anything-but %s: numbers must be between -5.0e9 and +5.0e9 inclusive", a)
		}
		m.abKind, m.abNumbers = abNumbers, []int64{v}
	case []any:
		if len(a) == 0 {
			return m, c.errf(path, "anything-but takes a non-empty list")
		}
		for _, x := range a {
			switch v := x.(type) {
			case string:
				m.abStrings = append(m.abStrings, v)
			case json.Number:
				n, ok := comparableNumber(v)
				if !ok {
					return m, c.errf(path, "anything-but %s: numbers must be between -5.0e9 and +5.0e9 inclusive", v)
				}
				m.abNumbers = append(m.abNumbers, n)
			default:
				return m, c.errf(path, "anything-but lists hold only strings or only numbers, got %v", x)
			}
		}
		if len(m.abStrings) > 0 && len(m.abNumbers) > 0 {
			return m, c.errf(path, "anything-but lists hold only strings or only numbers, not both")
		}
		m.abKind = abStrings
		if len(m.abNumbers) > 0 {
			m.abKind = abNumbers
		}
	case map[string]any:
		if len(a) != 1 {
			return m, c.errf(path, "anything-but object takes exactly one of prefix, suffix, equals-ignore-case, wildcard")
		}
		for sub, v := range a {
			if c.dialect == LambdaFilter {
				return m, c.errf(path, "anything-but %s is not a documented %s operator", sub, c.dialect)
			}
			var vals []string
			switch s := v.(type) {
			case string:
				vals = []string{s}
			case []any:
				if len(s) == 0 {
					return m, c.errf(path, "anything-but %s takes a string or a non-empty list of strings", sub)
				}
				for _, x := range s {
					xs, ok := x.(string)
					if !ok {
						return m, c.errf(path, "anything-but %s takes a string or a non-empty list of strings", sub)
					}
					vals = append(vals, xs)
				}
			default:
				return m, c.errf(path, "anything-but %s takes a string or a non-empty list of strings", sub)
			}
			switch sub {
			case "prefix", "suffix":
				for _, s := range vals {
					if s == "" {
						// AWS: "Null prefix/suffix not allowed".
						return m, c.errf(path, "anything-but %s with an empty string: AWS refuses it (Null prefix/suffix not allowed)", sub)
					}
				}
				m.abKind = abPrefix
				if sub == "suffix" {
					m.abKind = abSuffix
				}
				m.abStrings = vals
			case "equals-ignore-case":
				m.abKind, m.abStrings = abIgnoreCase, vals
			case "wildcard":
				m.abKind = abWildcard
				for _, s := range vals {
					w, err := compileWildcard(s)
					if err != nil {
						return m, c.errf(path, "anything-but wildcard %q: %v", s, err)
					}
					m.abWildcards = append(m.abWildcards, w)
				}
			default:
				return m, c.errf(path, "unsupported operator anything-but %q", sub)
			}
		}
	default:
		return m, c.errf(path, "anything-but takes a string, a number, a list of them, or an object (got %v)", arg)
	}
	return m, nil
}

// ---- values ----

// jsonValue is a leaf value of a flattened event or an exact pattern value.
type jsonValue struct {
	kind byte   // 's' string, 'n' number, 'b' bool, 'z' null
	s    string // the string, the number's JSON text, "true"/"false"
}

func jsonString(s string) jsonValue      { return jsonValue{kind: 's', s: s} }
func jsonNumber(n json.Number) jsonValue { return jsonValue{kind: 'n', s: string(n)} }
func jsonBool(b bool) jsonValue          { return jsonValue{kind: 'b', s: strconv.FormatBool(b)} }

var jsonNull = jsonValue{kind: 'z'}

// comparableNumber converts a JSON number to Event Ruler's comparable
// form: the value scaled to six decimal places (truncated), offset by
// 5.0e9. ok is false outside -5.0e9..+5.0e9.
func comparableNumber(n json.Number) (int64, bool) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < -numericLimit || f > numericLimit {
		return 0, false
	}
	shifted := float64(numericLimit + f)
	return int64(1e6 * shifted), true
}

// ---- matchers ----

type matcherKind int

const (
	mExact matcherKind = iota
	mExists
	mPrefix
	mSuffix
	mEqualsIgnoreCase
	mWildcard
	mCIDR
	mNumeric
	mAnythingBut
)

type abKind int

const (
	abStrings abKind = iota
	abNumbers
	abPrefix
	abSuffix
	abIgnoreCase
	abWildcard
)

type numRange struct {
	eq, low, high          int64
	hasEq, hasLow, hasHigh bool
	lowOpen, highOpen      bool
}

type matcher struct {
	kind  matcherKind
	value jsonValue
	// num is an exact number's comparable form (hasNum: within ±5.0e9).
	num        int64
	hasNum     bool
	exists     bool
	str        string
	ignoreCase bool
	wildcard   wildcard
	cidr       netip.Prefix
	numeric    numRange

	abKind      abKind
	abStrings   []string
	abNumbers   []int64
	abWildcards []wildcard
}

// matches reports whether one event leaf value satisfies m. exists is
// handled by the caller.
func (m *matcher) matches(v jsonValue) bool {
	switch m.kind {
	case mExact:
		if m.hasNum && v.kind == 'n' {
			// By value at six decimal places; an event number outside the
			// comparable range is read as text, which cannot equal an
			// in-range number's text.
			n, ok := comparableNumber(json.Number(v.s))
			return ok && n == m.num
		}
		return v == m.value
	case mExists:
		return m.exists
	case mPrefix:
		if v.kind != 's' {
			return false
		}
		if m.ignoreCase {
			return hasPrefixFold(v.s, m.str)
		}
		return strings.HasPrefix(v.s, m.str)
	case mSuffix:
		if v.kind != 's' {
			return false
		}
		if m.ignoreCase {
			return hasSuffixFold(v.s, m.str)
		}
		return strings.HasSuffix(v.s, m.str)
	case mEqualsIgnoreCase:
		return v.kind == 's' && strings.EqualFold(v.s, m.str)
	case mWildcard:
		return v.kind == 's' && m.wildcard.match(v.s)
	case mCIDR:
		if v.kind != 's' {
			return false
		}
		a, err := netip.ParseAddr(v.s)
		return err == nil && a.Zone() == "" && m.cidr.Contains(a)
	case mNumeric:
		if v.kind != 'n' {
			return false
		}
		n, ok := comparableNumber(json.Number(v.s))
		if !ok {
			return false
		}
		r := m.numeric
		if r.hasEq {
			return n == r.eq
		}
		if r.hasLow && (n < r.low || (r.lowOpen && n == r.low)) {
			return false
		}
		if r.hasHigh && (n > r.high || (r.highOpen && n == r.high)) {
			return false
		}
		return true
	case mAnythingBut:
		return m.anythingBut(v)
	}
	return false
}

// anythingBut reports whether a present leaf passes an anything-but: the
// numeric forms exclude only numbers within ±5.0e9 (Event Ruler reads
// nothing else as a number), the string forms only strings (Event Ruler
// matches them against the quoted value), so a leaf of another kind always
// passes.
func (m *matcher) anythingBut(v jsonValue) bool {
	if m.abKind == abNumbers {
		if v.kind != 'n' {
			return true
		}
		n, ok := comparableNumber(json.Number(v.s))
		if !ok {
			return true
		}
		for _, x := range m.abNumbers {
			if x == n {
				return false
			}
		}
		return true
	}
	if v.kind != 's' {
		return true
	}
	for _, w := range m.abWildcards {
		if w.match(v.s) {
			return false
		}
	}
	for _, x := range m.abStrings {
		var excluded bool
		switch m.abKind {
		case abStrings:
			excluded = v.s == x
		case abPrefix:
			excluded = strings.HasPrefix(v.s, x)
		case abSuffix:
			excluded = strings.HasSuffix(v.s, x)
		case abIgnoreCase:
			excluded = strings.EqualFold(v.s, x)
		}
		if excluded {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, p string) bool {
	for _, r := range p {
		c, n := utf8.DecodeRuneInString(s)
		if n == 0 || !strings.EqualFold(string(c), string(r)) {
			return false
		}
		s = s[n:]
	}
	return true
}

func hasSuffixFold(s, p string) bool {
	for len(p) > 0 {
		r, n := utf8.DecodeLastRuneInString(p)
		c, m := utf8.DecodeLastRuneInString(s)
		if m == 0 || !strings.EqualFold(string(c), string(r)) {
			return false
		}
		p, s = p[:len(p)-n], s[:len(s)-m]
	}
	return true
}

// wildcard is a compiled wildcard pattern: literal segments separated by
// '*' (any run of characters, possibly empty).
type wildcard struct{ parts []string }

// compileWildcard parses s as Event Ruler documents wildcard values: '*'
// matches any characters; consecutive wildcard characters are not
// allowed; "\*" is a literal asterisk and "\\" a literal backslash; a
// backslash escaping anything else is not allowed.
func compileWildcard(s string) (wildcard, error) {
	var parts []string
	var cur strings.Builder
	prevStar := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*':
			if prevStar {
				return wildcard{}, errors.New("consecutive wildcard characters are not allowed")
			}
			parts = append(parts, cur.String())
			cur.Reset()
			prevStar = true
			continue
		case '\\':
			if i+1 >= len(s) || (s[i+1] != '*' && s[i+1] != '\\') {
				return wildcard{}, errors.New("a backslash may only escape '*' or '\\'")
			}
			i++
			cur.WriteByte(s[i])
		default:
			cur.WriteByte(s[i])
		}
		prevStar = false
	}
	parts = append(parts, cur.String())
	return wildcard{parts: parts}, nil
}

func (w wildcard) match(s string) bool {
	if len(w.parts) == 1 {
		return s == w.parts[0]
	}
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// ---- events ----

// arrayPos is one array an event leaf is inside: which array (unique per
// event) and which element.
type arrayPos struct{ array, index int }

type eventField struct {
	value jsonValue
	trail []arrayPos
}

// flattenEvent returns the event's leaves by dotted path.
func flattenEvent(event map[string]any) map[string][]eventField {
	out := map[string][]eventField{}
	arrays := 0
	var walk func(path string, v any, trail []arrayPos)
	walk = func(path string, v any, trail []arrayPos) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(joinPath(path, k), e, trail)
			}
		case []any:
			arrays++
			id := arrays
			for i, e := range x {
				t := make([]arrayPos, len(trail), len(trail)+1)
				copy(t, trail)
				walk(path, e, append(t, arrayPos{id, i}))
			}
		case nil, string, bool, json.Number, float64, float32, int, int64, int32, uint, uint64, uint32:
			if path == "" {
				return
			}
			out[path] = append(out[path], eventField{value: eventValue(x), trail: trail})
		default:
			// Another Go value ([]string, a struct, ...): match it as the
			// JSON it encodes to.
			b, err := json.Marshal(x)
			if err != nil {
				return
			}
			if d, err := decodeJSON(b); err == nil {
				walk(path, d, trail)
			}
		}
	}
	walk("", event, nil)
	return out
}

func eventValue(v any) jsonValue {
	switch x := v.(type) {
	case nil:
		return jsonNull
	case string:
		return jsonString(x)
	case bool:
		return jsonBool(x)
	case json.Number:
		return jsonNumber(x)
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return jsonValue{kind: '?'}
		}
		return jsonValue{kind: 'n', s: string(b)}
	}
}

// consistent reports whether two leaves can be matched together: they are
// not in different elements of one array.
func consistent(a, b []arrayPos) bool {
	for _, x := range a {
		for _, y := range b {
			if x.array == y.array && x.index != y.index {
				return false
			}
		}
	}
	return true
}

// match reports whether the flattened event satisfies every field of r
// with array-consistent choices of leaves.
func (r flatRule) match(fields map[string][]eventField) bool {
	paths := make([]string, 0, len(r))
	for p := range r {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	// candidates per path: indexes into fields[path]; absent means the
	// field is satisfied by absence (exists: false) and binds nothing.
	type choice struct {
		leaves []int
		absent bool
	}
	choices := make([]choice, len(paths))
	for i, p := range paths {
		leaves := fields[p]
		var ch choice
		for li := range leaves {
			for mi := range r[p] {
				m := &r[p][mi]
				if m.kind == mExists && !m.exists {
					continue
				}
				if m.matches(leaves[li].value) {
					ch.leaves = append(ch.leaves, li)
					break
				}
			}
		}
		if len(leaves) == 0 {
			for _, m := range r[p] {
				if m.kind == mExists && !m.exists {
					ch.absent = true
				}
			}
		}
		if len(ch.leaves) == 0 && !ch.absent {
			return false
		}
		choices[i] = ch
	}
	chosen := make([][]arrayPos, 0, len(paths))
	var search func(i int) bool
	search = func(i int) bool {
		if i == len(paths) {
			return true
		}
		if choices[i].absent {
			return search(i + 1)
		}
		for _, li := range choices[i].leaves {
			t := fields[paths[i]][li].trail
			ok := true
			for _, c := range chosen {
				if !consistent(c, t) {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			chosen = append(chosen, t)
			if search(i + 1) {
				return true
			}
			chosen = chosen[:len(chosen)-1]
		}
		return false
	}
	return search(0)
}
