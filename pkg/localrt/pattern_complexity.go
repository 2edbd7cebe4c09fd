package localrt

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aws/smithy-go"
)

// MaxWildcardComplexity is the highest wildcard complexity (see
// wildcardComplexity) the local runtime accepts in an EventBridge rule's
// pattern; above it the pattern is refused as AWS refuses it, with
// InvalidEventPatternException and ErrTooComplexMessage.
//
// AWS documents the check (EventBridge user guide, comparison operators,
// wildcard matching: "Rule is too complex") and Event Ruler, the library
// EventBridge runs, documents the measure (README, "Matching with a
// Machine"; MachineComplexityEvaluator) and leaves the threshold to the
// caller: EventBridge's own threshold is not published. What AWS was seen
// to do brackets it:
//
//   - {"wildcard": "*:*:*:*:*:event-bus/*"} (complexity 11) refused,
//     recorded 2025-10-15 by LocalStack's AWS-validated
//     test_events_patterns.py::TestEventPattern::test_event_pattern[content_wildcard_complex_EXC];
//   - "/Users/*/dir/dir/dir/dir/dir/doc.txt" (7) and
//     "arn:aws:events:us-east-1:*:event-bus/*" (3) accepted (same suite,
//     content_wildcard_repeating and content_wildcard_simplified);
//   - one field with "*.bif", "*.tiff", "*.tif", "*.svs" (8) accepted and
//     with "*/datasync/*.bif", "*/datasync/*.tif", "*/datasync/*.tiff",
//     "*/datasync/*.svs" (16) refused, as a user reported deploying them (a
//     report, not a recording).
//
// So AWS's threshold is 8, 9 or 10. The local runtime takes 8, the harshest
// reading: a pattern of complexity 9 or 10 is refused locally and may be
// accepted on AWS (docs/PARITY.md, ❓).
const MaxWildcardComplexity = 8

// ErrTooComplexMessage is EventBridge's message for a pattern whose
// wildcards are too complex, as AWS answered it (recorded: see
// MaxWildcardComplexity), with the error code InvalidEventPatternException.
const ErrTooComplexMessage = "Event pattern is not valid. Reason: Rule is too complex - try using fewer wildcard characters or fewer repeating character sequences after a wildcard character"

// checkWildcardComplexity returns an error wrapping ErrInvalidPattern and a
// smithy.APIError (InvalidEventPatternException, ErrTooComplexMessage) when a
// field of rules holds wildcard patterns whose complexity exceeds
// MaxWildcardComplexity.
//
// Event Ruler measures each byte machine (one per field and position in
// the rule's name-state graph); here the wildcard patterns of every
// alternative ($or) of a field path go into one machine, so a pattern is
// measured at least as complex as Event Ruler measures it (never kinder).
func checkWildcardComplexity(rules []flatRule) error {
	byPath := map[string][]wildcardPattern{}
	for _, r := range rules {
		for path, ms := range r {
			for i := range ms {
				if wp, ok := wildcardPatternOf(&ms[i]); ok {
					byPath[path] = append(byPath[path], wp)
				}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if n := wildcardComplexity(byPath[p], MaxWildcardComplexity+1); n > MaxWildcardComplexity {
			return fmt.Errorf("%w: at %q: wildcard complexity %d, over %d: %w", ErrInvalidPattern, displayPath(p), n, MaxWildcardComplexity,
				&smithy.GenericAPIError{Code: "InvalidEventPatternException", Fault: smithy.FaultClient, Message: ErrTooComplexMessage})
		}
	}
	return nil
}

// wildcardPattern is one pattern Event Ruler counts in a machine's
// complexity (MatchType WILDCARD or ANYTHING_BUT_WILDCARD): its identity
// (equal patterns count once) and its values, each as the byte tokens
// Event Ruler builds the machine from.
type wildcardPattern struct {
	id     string
	values [][]int
}

// wildcardStar is the token of an unescaped '*' in wildcardPattern values;
// the others are bytes (0..255).
const wildcardStar = 256

func wildcardPatternOf(m *matcher) (wildcardPattern, bool) {
	switch {
	case m.kind == mWildcard:
		t := m.wildcard.tokens()
		return wildcardPattern{id: "wildcard:" + fmt.Sprint(t), values: [][]int{t}}, true
	case m.kind == mAnythingBut && m.abKind == abWildcard:
		var ids []string
		var values [][]int
		for _, w := range m.abWildcards {
			t := w.tokens()
			ids = append(ids, fmt.Sprint(t))
			values = append(values, t)
		}
		slices.Sort(ids)
		return wildcardPattern{id: "anything-but-wildcard:" + strings.Join(slices.Compact(ids), "\x00"), values: values}, true
	}
	return wildcardPattern{}, false
}

// tokens is w as Event Ruler's machine reads it: the value in its JSON
// quotes (JsonRuleCompiler compiles '"' + text + '"'), one token per byte,
// wildcardStar for each '*'.
func (w wildcard) tokens() []int {
	t := []int{'"'}
	for i, p := range w.parts {
		if i > 0 {
			t = append(t, wildcardStar)
		}
		for j := 0; j < len(p); j++ {
			t = append(t, int(p[j]))
		}
	}
	return append(t, '"')
}

// complexityNFA is the nondeterministic byte machine Event Ruler builds for
// a field's wildcard patterns (ByteMachine.addPattern): a trie of the
// determinate prefixes (up to the first '*'), then, per pattern, a state
// per token. A '*' leads from state A to a new state B that loops on every
// byte; a byte after a '*' is reachable from B and, for an empty run, from
// A. A pattern's last byte leads to its match.
type complexityNFA struct {
	lit   []map[int][]int // state → byte → next states
	any   [][]int         // state → next states on every byte
	match []int           // state → pattern index, or -1
	child []map[int]int   // determinate trie: state → byte → child
}

func (n *complexityNFA) add(match int) int {
	n.lit = append(n.lit, map[int][]int{})
	n.any = append(n.any, nil)
	n.match = append(n.match, match)
	n.child = append(n.child, map[int]int{})
	return len(n.lit) - 1
}

// wildcardComplexity is Event Ruler's MachineComplexityEvaluator measure of
// one field's wildcard patterns: over every input value, the largest number
// of wildcard rule prefixes the value matches at once — for each set of
// states a value can lead to, the sum over its states (and the wildcard
// states one more byte reaches from them) of the number of distinct
// patterns whose match each can still reach. It stops counting at limit.
// Checked against Event Ruler's own results (TestWildcardComplexityAgreesWithEventRuler).
func wildcardComplexity(patterns []wildcardPattern, limit int) int {
	n := &complexityNFA{}
	root := n.add(-1)
	// Equal patterns share one match (Event Ruler's weights count distinct
	// patterns), but each occurrence builds its own path after its first
	// '*', as ByteMachine.addPattern does for a pattern given twice.
	ends := map[string]int{}
	bytes := map[int]bool{}
	for _, p := range patterns {
		end, ok := ends[p.id]
		if !ok {
			end = n.add(len(ends))
			ends[p.id] = end
		}
		for _, toks := range p.values {
			cur, prev := root, -1
			determinate := true
			for i, t := range toks {
				last := i == len(toks)-1
				if t == wildcardStar {
					b := n.add(-1)
					n.any[cur] = append(n.any[cur], b)
					n.any[b] = append(n.any[b], b)
					prev, cur = cur, b
					determinate = false
					continue
				}
				bytes[t] = true
				var next int
				switch {
				case last:
					next = end
				case determinate:
					c, ok := n.child[cur][t]
					if !ok {
						c = n.add(-1)
						n.child[cur][t] = c
					}
					next = c
				default:
					next = n.add(-1)
				}
				if !slices.Contains(n.lit[cur][t], next) {
					n.lit[cur][t] = append(n.lit[cur][t], next)
				}
				if i > 0 && toks[i-1] == wildcardStar && !slices.Contains(n.lit[prev][t], next) {
					n.lit[prev][t] = append(n.lit[prev][t], next)
				}
				prev, cur = cur, next
			}
		}
	}
	if len(ends) == 0 {
		return 0
	}
	weight := n.weights()
	classes := []int{-1} // -1: any byte no pattern names
	for b := range bytes {
		classes = append(classes, b)
	}
	sort.Ints(classes)
	step := func(set []int, b int) []int {
		var next []int
		for _, s := range set {
			next = append(next, n.any[s]...)
			if b >= 0 {
				next = append(next, n.lit[s][b]...)
			}
		}
		slices.Sort(next)
		return slices.Compact(next)
	}
	key := func(set []int) string { return fmt.Sprint(set) }
	visited := map[string]bool{}
	queue := [][]int{}
	for _, b := range classes {
		if next := step([]int{root}, b); len(next) > 0 && !visited[key(next)] {
			visited[key(next)] = true
			queue = append(queue, next)
		}
	}
	maxSize := 0
	for len(queue) > 0 {
		set := queue[0]
		queue = queue[1:]
		size := 0
		for _, s := range set {
			size += weight[s]
			for _, b := range n.any[s] {
				if _, in := slices.BinarySearch(set, b); !in {
					size += weight[b]
				}
			}
		}
		if size >= limit {
			return limit
		}
		maxSize = max(maxSize, size)
		for _, b := range classes {
			if next := step(set, b); len(next) > 0 && !visited[key(next)] {
				visited[key(next)] = true
				queue = append(queue, next)
			}
		}
	}
	return maxSize
}

// weights returns, per state, the number of patterns whose match the state
// can reach (itself included).
func (n *complexityNFA) weights() []int {
	reach := make([]map[int]bool, len(n.lit))
	var visit func(s int) map[int]bool
	visit = func(s int) map[int]bool {
		if reach[s] != nil {
			return reach[s]
		}
		r := map[int]bool{}
		reach[s] = r // the only cycles are a wildcard state's loops
		if n.match[s] >= 0 {
			r[n.match[s]] = true
		}
		for _, next := range n.any[s] {
			if next != s {
				for p := range visit(next) {
					r[p] = true
				}
			}
		}
		for _, nexts := range n.lit[s] {
			for _, next := range nexts {
				for p := range visit(next) {
					r[p] = true
				}
			}
		}
		return r
	}
	w := make([]int, len(n.lit))
	for s := range n.lit {
		w[s] = len(visit(s))
	}
	return w
}
