package localrt

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
)

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
