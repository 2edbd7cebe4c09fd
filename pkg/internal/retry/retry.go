// Package retry is the library's one retry schedule, on the kept library
// github.com/cenkalti/backoff: exponential from a base delay, doubling,
// capped, each wait drawn uniformly from [0, that delay] ("full jitter",
// AWS Architecture Blog, "Exponential Backoff And Jitter": of the schedules
// it compares, the one with the least contention work and time; the AWS
// SDK for Go v2's retryer draws the same way). Every retry loop of the
// library (the relay's publisher and marker, the dedup applier and
// resequencer, the local runtime's event source mappings and bus) waits
// through it.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// New returns a fresh exponential backoff from base, doubling, capped at
// most, with full jitter: wait n is uniform in [0, min(most, base·2^(n-1))].
// Call NextBackOff for each wait of one retry loop. base ≤ 0 waits nothing.
//
// cenkalti/backoff draws a wait uniformly from interval·(1 ± factor); with
// factor 1 and half the delay as the interval, that is [0, delay].
func New(base, most time.Duration) *backoff.ExponentialBackOff {
	base = max(base, 0)
	b := &backoff.ExponentialBackOff{
		InitialInterval:     base / 2,
		RandomizationFactor: 1,
		Multiplier:          2,
		MaxInterval:         max(most, base) / 2,
	}
	b.Reset()
	return b
}

// Delay returns the wait before retry n (1-based) of New(base, most), for
// loops that count their attempts instead of keeping a backoff: uniform in
// [0, min(most, base · 2^(n-1))]. n < 1 and base ≤ 0 wait nothing.
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
