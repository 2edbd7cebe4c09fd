package localrt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// ErrInvalidPattern reports an event pattern this matcher does not accept:
// not a JSON object, an empty object or array, or an unknown operator.
var ErrInvalidPattern = errors.New("localrt: invalid event pattern")

// Pattern is a compiled event pattern: the subset of the EventBridge event
// pattern language that Lambda event filtering and EventBridge rules share
// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns.html,
// https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html).
//
// Supported, on events held as generic JSON (map[string]any):
//   - nested objects: {"dynamodb":{"NewImage":{...}}} — the event must hold an
//     object under that key, and the nested pattern must match it;
//   - leaf arrays of alternatives, ORed: exact strings, numbers (compared as
//     decimal numbers, losslessly), booleans, null (["v", 1, true, null]);
//   - {"exists": true|false} (leaf values only), {"prefix": "s"},
//     {"suffix": "s"}, {"equals-ignore-case": "s"},
//     {"anything-but": v | [v...] | {"prefix": "s"} | {"suffix": "s"}}
//     (anything-but requires the field to be present);
//   - "$or": [pattern, ...] at any object level.
//
// A pattern matches when every key matches. When the event value is an array,
// a leaf matches if any element matches. Numeric range operators are not
// supported (they do not apply to DynamoDB data, which carries numbers as
// strings). A Pattern is immutable and safe for concurrent use.
type Pattern struct {
	root map[string]any
	text string
}

// CompilePattern validates and compiles p, which is either a Go value that
// marshals to a JSON object (map[string]any, as returned by
// outbox.StreamFilterPattern and routing.Rule.Pattern) or JSON text ([]byte,
// string or json.RawMessage). It returns an error wrapping ErrInvalidPattern
// when the pattern is malformed or uses an unsupported operator.
func CompilePattern(p any) (*Pattern, error) {
	var raw []byte
	switch v := p.(type) {
	case []byte:
		raw = v
	case json.RawMessage:
		raw = v
	case string:
		raw = []byte(v)
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidPattern, err)
		}
		raw = b
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPattern, err)
	}
	root, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: a pattern is a JSON object", ErrInvalidPattern)
	}
	if err := validateObject(root, ""); err != nil {
		return nil, err
	}
	text, _ := json.Marshal(root)
	return &Pattern{root: root, text: string(text)}, nil
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

// Match reports whether event matches the pattern. Numbers in event should be
// json.Number (decode with UseNumber) or float64/int; use MatchJSON to match
// JSON text losslessly.
func (p *Pattern) Match(event map[string]any) bool {
	return matchObject(p.root, event)
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

var operators = map[string]bool{
	"exists": true, "prefix": true, "suffix": true, "equals-ignore-case": true, "anything-but": true,
}

func validateObject(m map[string]any, path string) error {
	if len(m) == 0 {
		return fmt.Errorf("%w: empty object at %q", ErrInvalidPattern, path)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := path + "/" + k
		if k == "$or" {
			alts, ok := m[k].([]any)
			if !ok || len(alts) < 2 {
				return fmt.Errorf("%w: $or at %q needs an array of at least two objects", ErrInvalidPattern, p)
			}
			for i, a := range alts {
				am, ok := a.(map[string]any)
				if !ok {
					return fmt.Errorf("%w: $or[%d] at %q is not an object", ErrInvalidPattern, i, p)
				}
				if err := validateObject(am, fmt.Sprintf("%s[%d]", p, i)); err != nil {
					return err
				}
			}
			continue
		}
		switch v := m[k].(type) {
		case map[string]any:
			if err := validateObject(v, p); err != nil {
				return err
			}
		case []any:
			if len(v) == 0 {
				return fmt.Errorf("%w: empty array at %q", ErrInvalidPattern, p)
			}
			for _, alt := range v {
				if err := validateAlternative(alt, p); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("%w: value at %q must be an object or an array", ErrInvalidPattern, p)
		}
	}
	return nil
}

func validateAlternative(alt any, path string) error {
	switch a := alt.(type) {
	case string, json.Number, bool, nil:
		return nil
	case map[string]any:
		if len(a) != 1 {
			return fmt.Errorf("%w: operator object at %q must have exactly one key", ErrInvalidPattern, path)
		}
		for op, arg := range a {
			if !operators[op] {
				return fmt.Errorf("%w: unsupported operator %q at %q", ErrInvalidPattern, op, path)
			}
			switch op {
			case "exists":
				if _, ok := arg.(bool); !ok {
					return fmt.Errorf("%w: exists at %q takes true or false", ErrInvalidPattern, path)
				}
			case "prefix", "suffix", "equals-ignore-case":
				if _, ok := arg.(string); !ok {
					return fmt.Errorf("%w: %s at %q takes a string", ErrInvalidPattern, op, path)
				}
			case "anything-but":
				switch b := arg.(type) {
				case string, json.Number, bool:
				case []any:
					if len(b) == 0 {
						return fmt.Errorf("%w: anything-but at %q takes a non-empty list", ErrInvalidPattern, path)
					}
					for _, x := range b {
						switch x.(type) {
						case string, json.Number, bool:
						default:
							return fmt.Errorf("%w: anything-but list at %q holds scalars only", ErrInvalidPattern, path)
						}
					}
				case map[string]any:
					if len(b) != 1 {
						return fmt.Errorf("%w: anything-but object at %q takes one of prefix, suffix", ErrInvalidPattern, path)
					}
					for sub, s := range b {
						if _, ok := s.(string); !ok || (sub != "prefix" && sub != "suffix") {
							return fmt.Errorf("%w: anything-but at %q supports prefix or suffix with a string", ErrInvalidPattern, path)
						}
					}
				default:
					return fmt.Errorf("%w: anything-but at %q has an unsupported argument", ErrInvalidPattern, path)
				}
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: unsupported value %v at %q", ErrInvalidPattern, alt, path)
	}
}

func matchObject(pat map[string]any, ev map[string]any) bool {
	for k, pv := range pat {
		if k == "$or" {
			ok := false
			for _, a := range pv.([]any) {
				if matchObject(a.(map[string]any), ev) {
					ok = true
					break
				}
			}
			if !ok {
				return false
			}
			continue
		}
		val, present := ev[k]
		switch p := pv.(type) {
		case map[string]any:
			sub, ok := val.(map[string]any)
			if !present || !ok || !matchObject(p, sub) {
				return false
			}
		case []any:
			if !matchLeaf(p, val, present) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// matchLeaf reports whether any alternative matches the event value.
func matchLeaf(alts []any, val any, present bool) bool {
	for _, alt := range alts {
		if op, ok := alt.(map[string]any); ok {
			if matchOperator(op, val, present) {
				return true
			}
			continue
		}
		if present && anyElement(val, func(v any) bool { return equalScalar(alt, v) }) {
			return true
		}
	}
	return false
}

// anyElement applies f to val, or to each element when val is an array.
func anyElement(val any, f func(any) bool) bool {
	if arr, ok := val.([]any); ok {
		for _, v := range arr {
			if f(v) {
				return true
			}
		}
		return false
	}
	return f(val)
}

func matchOperator(op map[string]any, val any, present bool) bool {
	for name, arg := range op {
		switch name {
		case "exists":
			_, isObj := val.(map[string]any)
			leafPresent := present && !isObj
			return arg.(bool) == leafPresent
		case "prefix":
			return present && anyElement(val, func(v any) bool {
				s, ok := v.(string)
				return ok && strings.HasPrefix(s, arg.(string))
			})
		case "suffix":
			return present && anyElement(val, func(v any) bool {
				s, ok := v.(string)
				return ok && strings.HasSuffix(s, arg.(string))
			})
		case "equals-ignore-case":
			return present && anyElement(val, func(v any) bool {
				s, ok := v.(string)
				return ok && strings.EqualFold(s, arg.(string))
			})
		case "anything-but":
			if !present {
				return false
			}
			excluded := func(v any) bool {
				switch a := arg.(type) {
				case []any:
					for _, x := range a {
						if equalScalar(x, v) {
							return true
						}
					}
					return false
				case map[string]any:
					s, ok := v.(string)
					if p, has := a["prefix"]; has {
						return ok && strings.HasPrefix(s, p.(string))
					}
					return ok && strings.HasSuffix(s, a["suffix"].(string))
				default:
					return equalScalar(a, v)
				}
			}
			if arr, ok := val.([]any); ok {
				for _, v := range arr {
					if excluded(v) {
						return false
					}
				}
				return true
			}
			return !excluded(val)
		}
	}
	return false
}

// equalScalar compares a pattern scalar with an event value, type-aware:
// numbers are compared numerically and exactly, never through float64.
func equalScalar(p, v any) bool {
	switch a := p.(type) {
	case nil:
		return v == nil
	case string:
		s, ok := v.(string)
		return ok && s == a
	case bool:
		b, ok := v.(bool)
		return ok && a == b
	case json.Number:
		x, ok := toRat(a)
		if !ok {
			return false
		}
		y, ok := toRat(v)
		return ok && x.Cmp(y) == 0
	}
	return false
}

func toRat(v any) (*big.Rat, bool) {
	switch n := v.(type) {
	case json.Number:
		return new(big.Rat).SetString(string(n))
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(n) == nil {
			return nil, false
		}
		return r, true
	case int:
		return new(big.Rat).SetInt64(int64(n)), true
	case int64:
		return new(big.Rat).SetInt64(n), true
	}
	return nil, false
}
