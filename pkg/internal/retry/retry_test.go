package retry

import (
	"context"
	"testing"
	"time"
)

// TestDelay: the wait before retry n is uniform in [0, min(most,
// base·2^(n-1))]: never above the capped delay, and spread over the whole
// range (full jitter), not bunched near it.
func TestDelay(t *testing.T) {
	t.Parallel()
	base, most := 100*time.Millisecond, time.Second
	const draws = 2000
	for n, ceiling := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		var sum time.Duration
		low, high := 0, 0
		for range draws {
			d := Delay(base, most, n)
			if d < 0 || d > ceiling {
				t.Fatalf("Delay(%d) = %s, want within [0, %s]", n, d, ceiling)
			}
			sum += d
			if d < ceiling/4 {
				low++
			}
			if d > ceiling*3/4 {
				high++
			}
		}
		// Uniform on [0, ceiling]: mean ceiling/2, a quarter of the draws in
		// each outer quarter. Bounds far outside sampling noise (2,000 draws).
		if mean := sum / draws; mean < ceiling*2/5 || mean > ceiling*3/5 {
			t.Errorf("Delay(%d): mean %s, want about %s", n, mean, ceiling/2)
		}
		if low < draws/6 || high < draws/6 {
			t.Errorf("Delay(%d): %d draws below a quarter and %d above three quarters of %s, want about %d each", n, low, high, ceiling, draws/4)
		}
	}
	if d := Delay(0, most, 3); d != 0 {
		t.Fatalf("Delay with no base = %s", d)
	}
	if d := Delay(base, most, 0); d != 0 {
		t.Fatalf("Delay(0) = %s", d)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err == nil {
		t.Fatal("Sleep outlived its context")
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
