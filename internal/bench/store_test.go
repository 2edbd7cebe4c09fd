package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// callRate makes every call once, from the goroutines it was given, and
// counts only the successful ones in the rate and the latencies.
func TestCallRateCountsOnlySuccesses(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[int64]int{}
	r := callRate(context.Background(), 100, 4, func(i int64) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		if i%4 == 0 {
			return errors.New("refused")
		}
		return nil
	})
	if len(seen) != 100 {
		t.Fatalf("%d distinct calls, want 100", len(seen))
	}
	for i, n := range seen {
		if n != 1 || i < 0 || i >= 100 {
			t.Fatalf("call %d made %d times", i, n)
		}
	}
	if r.Transactions != 100 || r.Errors != 25 || r.Latency.N != 75 || r.Concurrency != 4 {
		t.Errorf("result %+v: want 100 calls, 25 errors, 75 latencies, 4 clients", r)
	}
	if want := 75 / r.Elapsed.Seconds(); r.PerSecond != want {
		t.Errorf("rate %.1f/s, want the successes' %.1f/s", r.PerSecond, want)
	}
}
