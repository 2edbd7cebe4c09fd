package retry

import (
	"context"
	"testing"
	"time"
)

// TestDelay: the wait before retry n is base·2^(n-1), capped, within ±50 %.
func TestDelay(t *testing.T) {
	t.Parallel()
	base, most := 100*time.Millisecond, time.Second
	for n, mid := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 50 {
			d := Delay(base, most, n)
			if d < mid/2 || d > mid*3/2 {
				t.Fatalf("Delay(%d) = %s, want within ±50 %% of %s", n, d, mid)
			}
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
