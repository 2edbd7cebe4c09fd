package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Issue 22's "Done when" figures: what make bench measured beside each
// target, with a verdict. The verdicts compare; they never tune anything.

// Verdict is a figure's outcome.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	// NotMeasured: the run did not measure the figure as the target
	// defines it (a level skipped or run with other settings).
	NotMeasured Verdict = "NOT MEASURED"
)

// Figure is one Done-when figure: the measured value beside its target.
type Figure struct {
	// Key names the figure in the summary line (key=PASS(...)).
	Key string `json:"key"`
	// Name says what is measured, and on which run.
	Name string `json:"name"`
	// Measured and Target are the report's cells; Short is the summary's
	// compact "measured <op> target", e.g. "74<=150".
	Measured string  `json:"measured"`
	Target   string  `json:"target"`
	Short    string  `json:"short"`
	Verdict  Verdict `json:"verdict"`
}

// Targets of issue 22.
const (
	// OrderCostRatio and the slacks: an ordered consumer's p99 may be at
	// most max(OrderCostRatio × the unordered consumer's p99, the
	// unordered p99 + slack): LocalOrderSlackMs locally, AWSOrderSlackMs
	// in the AWS prediction; and at most OrderedP99CapMs at 25 orders/s.
	OrderCostRatio    = 1.5
	LocalOrderSlackMs = 50
	AWSOrderSlackMs   = 100
	OrderedP99CapMs   = 150
	// ClosedLoopP99Ms and StoreRatioTarget: the closed loop of
	// ClosedLoopClients clients.
	ClosedLoopP99Ms   = 1000
	StoreRatioTarget  = 0.80
	ClosedLoopClients = 16
	// CapacityDefaultTarget and CapacityReachTarget: events/s the default
	// configuration sustains, and the rate that must be reachable.
	CapacityDefaultTarget = 1000
	CapacityReachTarget   = 100000
	// RelayCallsTarget: relay calls per 1,000 events at full batches.
	RelayCallsTarget = 145
)

// OrderCostBound is max(ratio × unorderedP99, unorderedP99 + slackMs).
func OrderCostBound(unorderedP99, ratio, slackMs float64) float64 {
	return math.Max(ratio*unorderedP99, unorderedP99+slackMs)
}

// OrderedLatencyFigure compares the worst ordered consumer's p99 (ms) with
// OrderCostBound of the worst unordered consumer's p99, and with capMs
// when capMs > 0. p99 is per consumer, ordered says which consumers keep
// order. NotMeasured when either kind is missing.
func OrderedLatencyFigure(key, name string, p99 map[string]float64, ordered map[string]bool, slackMs, capMs float64) Figure {
	f := Figure{Key: key, Name: name}
	var on, un []string
	worstO, worstU := -1.0, -1.0
	for _, c := range sortedKeys(p99) {
		if ordered[c] {
			on = append(on, fmt.Sprintf("%s %.0f", c, p99[c]))
			worstO = math.Max(worstO, p99[c])
		} else {
			un = append(un, fmt.Sprintf("%s %.0f", c, p99[c]))
			worstU = math.Max(worstU, p99[c])
		}
	}
	f.Target = fmt.Sprintf("≤ max(%.1f × unordered p99, unordered p99 + %.0f ms)", OrderCostRatio, slackMs)
	if capMs > 0 {
		f.Target += fmt.Sprintf(" and ≤ %.0f ms", capMs)
	}
	if worstO < 0 || worstU < 0 {
		f.Verdict, f.Measured, f.Short = NotMeasured, "no ordered or no unordered consumer measured", "n/a"
		return f
	}
	bound := OrderCostBound(worstU, OrderCostRatio, slackMs)
	if capMs > 0 {
		bound = math.Min(bound, capMs)
	}
	f.Measured = fmt.Sprintf("ordered p99 %s ms; unordered p99 %s ms → bound %.0f ms", strings.Join(on, ", "), strings.Join(un, ", "), bound)
	f.Verdict, f.Short = compare(worstO, bound, true, "%.0f")
	return f
}

// AtMost makes a figure passing when measured ≤ target (or ≥ target when
// atLeast). format prints both numbers.
func AtMost(key, name string, measured, target float64, format string) Figure {
	f := Figure{Key: key, Name: name, Measured: fmt.Sprintf(format, measured), Target: "≤ " + fmt.Sprintf(format, target)}
	f.Verdict, f.Short = compare(measured, target, true, format)
	return f
}

// AtLeast is AtMost for a figure that must reach target.
func AtLeast(key, name string, measured, target float64, format string) Figure {
	f := Figure{Key: key, Name: name, Measured: fmt.Sprintf(format, measured), Target: "≥ " + fmt.Sprintf(format, target)}
	f.Verdict, f.Short = compare(measured, target, false, format)
	return f
}

// Unmeasured is a figure the run did not measure, with why.
func Unmeasured(key, name, target, why string) Figure {
	return Figure{Key: key, Name: name, Measured: why, Target: target, Short: "n/a", Verdict: NotMeasured}
}

func compare(v, target float64, atMost bool, format string) (Verdict, string) {
	if math.IsNaN(v) {
		return NotMeasured, "n/a"
	}
	ok := v <= target
	op := "<="
	if !atMost {
		ok, op = v >= target, ">="
	}
	if !ok {
		op = map[string]string{"<=": ">", ">=": "<"}[op]
	}
	s := fmt.Sprintf(format+op+format, v, target)
	if ok {
		return Pass, s
	}
	return Fail, s
}

// DoneWhenSummary is the summary line's part: "done_when=2/7 key=PASS(74<=150) ...",
// passed figures counted over all figures (NOT MEASURED counts as not passed).
func DoneWhenSummary(figs []Figure) string {
	pass := 0
	parts := make([]string, 0, len(figs))
	for _, f := range figs {
		if f.Verdict == Pass {
			pass++
		}
		v := string(f.Verdict)
		if f.Verdict == NotMeasured {
			v = "NOT_MEASURED"
		}
		parts = append(parts, fmt.Sprintf("%s=%s(%s)", f.Key, v, f.Short))
	}
	return fmt.Sprintf("done_when=%d/%d %s", pass, len(figs), strings.Join(parts, " "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
