package fulfilment_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/fulfilment"
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
