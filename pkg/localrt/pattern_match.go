package localrt

import (
	"encoding/json"
	"errors"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonValue is a leaf value of a flattened event or an exact pattern value.
type jsonValue struct {
	kind byte   // 's' string, 'n' number, 'b' bool, 'z' null
	s    string // the string, the number's JSON text, "true"/"false"
}

func jsonString(s string) jsonValue { return jsonValue{kind: 's', s: s} }

func jsonNumber(n json.Number) jsonValue { return jsonValue{kind: 'n', s: string(n)} }

func jsonBool(b bool) jsonValue { return jsonValue{kind: 'b', s: strconv.FormatBool(b)} }

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
