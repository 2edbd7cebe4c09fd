package idempotency

import (
	"testing"
	"time"
)

func TestLRUEvictsLeastRecentlyUsedAndExpired(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000, 0)
	c := newLRU(2)
	c.put("a", cacheEntry{data: []byte("a"), expiresAt: 2_000})
	c.put("b", cacheEntry{data: []byte("b"), expiresAt: 2_000})
	if _, ok := c.get("a", now); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.put("c", cacheEntry{data: []byte("c"), expiresAt: 1_000})
	tests := []struct {
		key  string
		at   time.Time
		want bool
	}{
		{"b", now, false}, // evicted: least recently used
		{"a", now, true},
		{"c", now, true},                   // expires_at == now is still valid
		{"c", now.Add(time.Second), false}, // past expiry: dropped
		{"a", time.Unix(2_000, 0), true},   // boundary
		{"a", time.Unix(2_001, 0), false},
	}
	for _, tc := range tests {
		if _, ok := c.get(tc.key, tc.at); ok != tc.want {
			t.Errorf("get(%s, %d) = %v, want %v", tc.key, tc.at.Unix(), ok, tc.want)
		}
	}
	if c.len() != 0 {
		t.Fatalf("len %d after expiries", c.len())
	}
}
