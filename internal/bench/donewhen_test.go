package bench

import (
	"math"
	"testing"
)

// The Done-when bounds by hand, with issue 22's own figures: at 25
// orders/s the unordered fulfilment's p99 74 ms gives max(1.5 × 74 = 111,
// 74 + 50 = 124) = 124 ms, below the 150 ms cap, so the ledger's 1,064 ms
// fails; the AWS prediction's unordered 716 ms gives max(1,074, 816) =
// 1,074 ms, so an ordered 1,526 ms fails and 1,000 ms passes.
func TestDoneWhenFigures(t *testing.T) {
	t.Parallel()
	ordered := map[string]bool{"ledger": true, "notifier": true}
	if b := OrderCostBound(74, OrderCostRatio, LocalOrderSlackMs); b != 124 {
		t.Errorf("bound for 74 ms = %v, want 124", b)
	}
	for _, tc := range []struct {
		name       string
		p99        map[string]float64
		slack, cap float64
		want       Verdict
		short      string
	}{
		{"issue 22 at 25/s", map[string]float64{"ledger": 1064, "notifier": 1062, "fulfilment": 74}, LocalOrderSlackMs, OrderedP99CapMs, Fail, "1064>124"},
		{"within the bound", map[string]float64{"ledger": 120, "notifier": 90, "fulfilment": 74}, LocalOrderSlackMs, OrderedP99CapMs, Pass, "120<=124"},
		{"capped at 150 ms", map[string]float64{"ledger": 160, "notifier": 90, "fulfilment": 140}, LocalOrderSlackMs, OrderedP99CapMs, Fail, "160>150"},
		{"AWS prediction fails", map[string]float64{"ledger": 1526, "notifier": 1594, "fulfilment": 716}, AWSOrderSlackMs, 0, Fail, "1594>1074"},
		{"AWS prediction passes", map[string]float64{"ledger": 1000, "notifier": 900, "fulfilment": 716}, AWSOrderSlackMs, 0, Pass, "1000<=1074"},
		{"no unordered consumer", map[string]float64{"ledger": 10}, LocalOrderSlackMs, 0, NotMeasured, "n/a"},
	} {
		f := OrderedLatencyFigure("k", tc.name, tc.p99, ordered, tc.slack, tc.cap)
		if f.Verdict != tc.want || f.Short != tc.short {
			t.Errorf("%s: %s %q (%s), want %s %q", tc.name, f.Verdict, f.Short, f.Measured, tc.want, tc.short)
		}
	}
	figs := []Figure{
		AtMost("relay_calls_per_1000", "r", 140, RelayCallsTarget, "%.1f"),
		AtLeast("store_ratio", "s", 0.33, StoreRatioTarget, "%.2f"),
		Unmeasured("x", "x", "t", "skipped"),
	}
	if got, want := DoneWhenSummary(figs), "done_when=1/3 relay_calls_per_1000=PASS(140.0<=145.0) store_ratio=FAIL(0.33<0.80) x=NOT_MEASURED(n/a)"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if f := AtMost("p", "p", math.NaN(), 1, "%.0f"); f.Verdict != NotMeasured {
		t.Errorf("NaN measured: %s", f.Verdict)
	}
}
