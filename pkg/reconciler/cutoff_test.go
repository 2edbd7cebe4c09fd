package reconciler

import (
	"testing"
	"time"
)

// TestTakeoverCutoff: the takeover's due time is now − (stale age + lag
// margin); a sum that overflows, or reaches before the epoch, makes
// nothing due (cutoff 0) instead of wrapping around to "everything".
func TestTakeoverCutoff(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(10_000_000)
	for _, tc := range []struct {
		name       string
		after, lag time.Duration
		want       int64
	}{
		{"sum", 5 * time.Minute, time.Minute, 10_000_000 - 360_000},
		{"no margin", 5 * time.Minute, 0, 10_000_000 - 300_000},
		{"before the epoch", 5 * time.Minute, 3 * time.Hour, 0},
		{"overflow", time.Duration(1<<62) + 1, time.Duration(1 << 62), 0},
		{"max lag", time.Duration(1<<63 - 1), 1, 0},
		{"negative", -time.Second, 0, 0},
	} {
		if got := takeoverCutoff(now, tc.after, tc.lag); got != tc.want {
			t.Errorf("%s: cutoff %d, want %d", tc.name, got, tc.want)
		}
	}
}
