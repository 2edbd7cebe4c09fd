package dedup

import "testing"

// TestDecisionTableIsExhaustive: every observation an ordered Apply can
// make (applied or not × behind/next/ahead × events waiting or not)
// matches exactly one row of the decision table, and the rows say what
// docs/ORDERING.md says they do.
func TestDecisionTableIsExhaustive(t *testing.T) {
	t.Parallel()
	want := map[observation]action{
		{applied: true, pos: behind}: actDuplicate, {applied: true, pos: behind, waiting: true}: actDuplicate,
		{applied: true, pos: next}: actAdopt, {applied: true, pos: next, waiting: true}: actAdopt,
		{applied: true, pos: ahead}: actBufferApplied, {applied: true, pos: ahead, waiting: true}: actBufferApplied,
		{pos: behind}: actDuplicate, {pos: behind, waiting: true}: actDuplicate,
		{pos: next}: actRetry, {pos: next, waiting: true}: actApply,
		{pos: ahead}: actBuffer, {pos: ahead, waiting: true}: actBuffer,
	}
	for o, act := range want {
		matches := 0
		for _, r := range decisions {
			if r.applied == o.applied && r.pos == o.pos && (r.waiting == nil || *r.waiting == o.waiting) {
				matches++
			}
		}
		if matches != 1 {
			t.Errorf("%s matches %d rows, want 1", o, matches)
		}
		got, why, err := decide(o)
		if err != nil || got != act || why == "" {
			t.Errorf("decide(%s) = %s %q %v, want %s", o, got, why, err, act)
		}
	}
	if len(want) != 2*3*2 {
		t.Fatalf("the test enumerates %d observations, want all 12", len(want))
	}
}

// TestPositionOf: where a sequence stands against the gate.
func TestPositionOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		seq, last int64
		want      position
	}{{1, 0, next}, {2, 0, ahead}, {1, 1, behind}, {3, 5, behind}, {6, 5, next}, {9, 5, ahead}} {
		if got := positionOf(tc.seq, tc.last); got != tc.want {
			t.Errorf("positionOf(%d, %d) = %s, want %s", tc.seq, tc.last, got, tc.want)
		}
	}
}
