package fulfilment_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
)

type countingSource struct {
	calls int
	fail  bool
}

func (s *countingSource) Credentials(context.Context) (fulfilment.Credentials, error) {
	s.calls++
	if s.fail {
		return fulfilment.Credentials{}, errors.New("secrets manager unavailable")
	}
	return fulfilment.Credentials{Token: "t"}, nil
}

func TestCachedCredentials(t *testing.T) {
	t.Parallel()
	src := &countingSource{}
	now := time.Unix(0, 0)
	c := &fulfilment.CachedCredentials{Source: src, TTL: time.Minute, Now: func() time.Time { return now }}
	steps := []struct {
		advance   time.Duration
		fail      bool
		wantCalls int
		wantErr   bool
	}{
		{0, false, 1, false},
		{30 * time.Second, false, 1, false}, // cached
		{31 * time.Second, true, 2, true},   // expired, the fetch fails: not cached
		{0, false, 3, false},                // fetched again
		{59 * time.Second, false, 3, false},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		src.fail = s.fail
		cr, err := c.Credentials(context.Background())
		if (err != nil) != s.wantErr || src.calls != s.wantCalls || (err == nil && cr.Token != "t") {
			t.Fatalf("step %d: %+v %v, %d calls (want %d)", i, cr, err, src.calls, s.wantCalls)
		}
	}
}

// Refresh reads the origin again for a rejected token, but not when the
// cache already holds another one (a concurrent call refreshed it), and a
// failed read leaves the cache as it was.
func TestCachedCredentialsRefresh(t *testing.T) {
	t.Parallel()
	src := &rotatingSource{token: "v1"}
	c := &fulfilment.CachedCredentials{Source: src}
	ctx := context.Background()
	if cr, err := c.Credentials(ctx); err != nil || cr.Token != "v1" {
		t.Fatal(cr, err)
	}
	src.set("v2")
	if cr, err := c.Refresh(ctx, fulfilment.Credentials{Token: "v1"}); err != nil || cr.Token != "v2" || src.reads != 2 {
		t.Fatalf("refresh of the rejected v1: %+v %v, %d reads", cr, err, src.reads)
	}
	// A second caller that was refused v1 too gets v2 without a read.
	if cr, err := c.Refresh(ctx, fulfilment.Credentials{Token: "v1"}); err != nil || cr.Token != "v2" || src.reads != 2 {
		t.Fatalf("late refresh: %+v %v, %d reads", cr, err, src.reads)
	}
	if cr, err := c.Credentials(ctx); err != nil || cr.Token != "v2" || src.reads != 2 {
		t.Fatalf("cached after refresh: %+v %v, %d reads", cr, err, src.reads)
	}
	failing := &fulfilment.CachedCredentials{Source: &countingSource{fail: true}}
	if _, err := failing.Refresh(ctx, fulfilment.Credentials{}); err == nil {
		t.Fatal("a failed read refreshed nothing but returned no error")
	}
}
