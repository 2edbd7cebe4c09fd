// Package retry is the library's one retry schedule, on the kept library
// github.com/cenkalti/backoff: exponential from a base delay, doubling,
// capped, each wait randomized by ±50 % so that retries of many callers
// spread out (AWS Architecture Blog, "Exponential Backoff And Jitter";
// the AWS SDKs do the same). Every retry loop of the library (the relay's
// publisher and marker, the dedup applier and resequencer, the local
// runtime's event source mappings and bus) waits through it.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// RandomizationFactor is the jitter of every wait: ±50 %.
const RandomizationFactor = 0.5

// New returns a fresh exponential backoff from base, doubling, capped at
// most: call NextBackOff for each wait of one retry loop. base ≤ 0 waits
// nothing.
func New(base, most time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     max(base, 0),
		RandomizationFactor: RandomizationFactor,
		Multiplier:          2,
		MaxInterval:         max(most, base, 0),
	}
	b.Reset()
	return b
}

// Delay returns the wait before retry n (1-based) of New(base, most), for
// loops that count their attempts instead of keeping a backoff: base ·
// 2^(n-1), capped at most, randomized by ±50 %. n < 1 and base ≤ 0 wait
// nothing.
func Delay(base, most time.Duration, n int) time.Duration {
	if n < 1 || base <= 0 {
		return 0
	}
	b := New(base, most)
	var d time.Duration
	for range n {
		d = b.NextBackOff()
	}
	return d
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
