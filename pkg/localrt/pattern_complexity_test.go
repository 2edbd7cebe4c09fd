package localrt

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
)

// TestPatternTooComplexAsAWS: EventBridge refuses a pattern whose wildcards
// are too complex with InvalidEventPatternException and its message (AWS
// answer recorded by LocalStack's AWS-validated test_events_patterns.py,
// content_wildcard_complex_EXC, 2025-10-15); the patterns AWS accepted in
// the same suite still compile, and the refusal reaches AddRule and NewBus.
func TestPatternTooComplexAsAWS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, pattern string
		refused       bool
	}{
		{"recorded refused", `{"EventBusArn":[{"wildcard":"*:*:*:*:*:event-bus/*"}]}`, true},
		{"recorded accepted: simplified", `{"EventBusArn":[{"wildcard":"arn:aws:events:us-east-1:*:event-bus/*"}]}`, false},
		{"recorded accepted: repeating", `{"FileName":[{"wildcard":"/Users/*/dir/dir/dir/dir/dir/doc.txt"}]}`, false},
		{"recorded accepted: nonrepeating", `{"FileName":[{"wildcard":"/Users/*/doc.txt"}]}`, false},
		{"reported accepted: four suffixes", `{"detail":{"object":{"key":[{"wildcard":"*.bif"},{"wildcard":"*.tiff"},{"wildcard":"*.tif"},{"wildcard":"*.svs"}]}}}`, false},
		{"reported refused: four paths", `{"detail":{"object":{"key":[{"wildcard":"*/datasync/*.bif"},{"wildcard":"*/datasync/*.tif"},{"wildcard":"*/datasync/*.tiff"},{"wildcard":"*/datasync/*.svs"}]}}}`, true},
		{"anything-but wildcard counts", `{"f":[{"anything-but":{"wildcard":["*:*:*:*:*:x"]}}]}`, true},
		{"alternatives of $or share the field", `{"$or":[{"k":[{"wildcard":"*/d/*.bif"},{"wildcard":"*/d/*.tif"}]},{"k":[{"wildcard":"*/d/*.tiff"},{"wildcard":"*/d/*.svs"}]}]}`, true},
		{"fields are measured apart", `{"a":[{"wildcard":"*/d/*.bif"},{"wildcard":"*/d/*.tif"}],"b":[{"wildcard":"*/d/*.tiff"},{"wildcard":"*/d/*.svs"}]}`, false},
	} {
		_, err := CompilePattern(tc.pattern)
		var ae smithy.APIError
		tooComplex := errors.As(err, &ae) && ae.ErrorCode() == "InvalidEventPatternException" && ae.ErrorMessage() == ErrTooComplexMessage
		if tc.refused != tooComplex || tc.refused && !errors.Is(err, ErrInvalidPattern) || !tc.refused && err != nil {
			t.Errorf("%s: CompilePattern(%s) = %v; refused as too complex: want %v", tc.name, tc.pattern, err, tc.refused)
		}
	}
	// A Lambda filter refuses wildcard for its own reason, before any measure.
	if _, err := CompilePatternFor(`{"a":[{"wildcard":"*:*:*:*:*:x"}]}`, LambdaFilter); errors.As(err, new(smithy.APIError)) || !errors.Is(err, ErrInvalidPattern) {
		t.Errorf("Lambda filter: %v", err)
	}
	b := newTestBus(t, nil)
	err := b.AddRule(Rule{Name: "too-complex", Target: testLedger, Pattern: `{"EventBusArn":[{"wildcard":"*:*:*:*:*:event-bus/*"}]}`})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidEventPatternException" || ae.ErrorMessage() != ErrTooComplexMessage {
		t.Errorf("AddRule(too complex) = %v; want InvalidEventPatternException %q", err, ErrTooComplexMessage)
	}
	if _, err := NewBus(BusConfig{Name: testBus, Rules: []Rule{{Name: "r", Target: testLedger, Pattern: `{"f":[{"wildcard":"*a*a*a*a*a*"}]}`}}}); !errors.As(err, &ae) {
		t.Errorf("NewBus with a too complex rule = %v; want InvalidEventPatternException", err)
	}
}

// TestWildcardComplexityAgreesWithEventRuler checks the local measure
// against Event Ruler's own MachineComplexityEvaluator on the cases in
// testdata (see its header): equal, or higher (harsher) where the file says
// so — never lower, which would accept what AWS refuses.
func TestWildcardComplexityAgreesWithEventRuler(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/wildcard-complexity.event-ruler.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	cases := 0
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(text, "#") {
			continue
		}
		cols := strings.Split(text, "\t")
		want, err := strconv.Atoi(cols[0])
		if err != nil || len(cols) < 2 {
			t.Fatalf("line %d: %q", line, text)
		}
		harsher := len(cols) > 2 && cols[2] == "H"
		ps, err := parseComplexityCase(cols[1])
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		got := wildcardComplexity(ps, 1000)
		if got < want || got > want && !harsher || got == want && harsher {
			t.Errorf("line %d: wildcardComplexity(%s) = %d; Event Ruler: %d (harsher expected: %v)", line, cols[1], got, want, harsher)
		}
		cases++
	}
	if cases < 400 {
		t.Fatalf("only %d cases read", cases)
	}
}

// parseComplexityCase reads one field's patterns as the testdata writes them.
func parseComplexityCase(s string) ([]wildcardPattern, error) {
	var ps []wildcardPattern
	for _, p := range strings.Split(s, "|") {
		m := matcher{kind: mWildcard}
		values := []string{p}
		if rest, ok := strings.CutPrefix(p, "!"); ok {
			m = matcher{kind: mAnythingBut, abKind: abWildcard}
			values = strings.Split(rest, ",")
		}
		for _, v := range values {
			w, err := compileWildcard(v)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", v, err)
			}
			m.wildcard = w
			m.abWildcards = append(m.abWildcards, w)
		}
		wp, ok := wildcardPatternOf(&m)
		if !ok {
			return nil, fmt.Errorf("%q: not a wildcard pattern", p)
		}
		ps = append(ps, wp)
	}
	return ps, nil
}
