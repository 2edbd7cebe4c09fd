package fulfilment

import (
	"context"
	"sync"
	"time"
)

// CachedCredentials wraps a CredentialsSource that is slow or billed per
// call (Secrets Manager GetSecretValue, SSM GetParameter) and keeps its
// answer for TTL, so warm invocations do not call it again. A failed fetch
// is not cached. It is a CredentialsRefresher: a token the provider refuses
// (rotated since it was cached) is read again at once, not after TTL. Safe
// for concurrent use.
type CachedCredentials struct {
	// Source is the wrapped source. Required.
	Source CredentialsSource
	// TTL is how long an answer is reused; a rotated secret is picked up
	// within TTL. Zero means 5 minutes.
	TTL time.Duration
	// Now returns the current time; default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	cached  Credentials
	fetched time.Time
}

// Credentials returns the cached credentials, fetching them from Source
// when none are cached or they are older than TTL. Errors are Source's.
func (c *CachedCredentials) Credentials(ctx context.Context) (Credentials, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = 5 * time.Minute
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fetched.IsZero() && now().Sub(c.fetched) < ttl {
		return c.cached, nil
	}
	cr, err := c.Source.Credentials(ctx)
	if err != nil {
		return Credentials{}, err
	}
	c.cached, c.fetched = cr, now()
	return cr, nil
}

// Refresh reads the credentials from Source again and caches them, unless
// the cache already holds a token other than rejected's (another call
// refreshed it since): then it returns that. Errors are Source's (the cache
// is left as it was).
func (c *CachedCredentials) Refresh(ctx context.Context, rejected Credentials) (Credentials, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fetched.IsZero() && c.cached.Token != rejected.Token {
		return c.cached, nil
	}
	cr, err := c.Source.Credentials(ctx)
	if err != nil {
		return Credentials{}, err
	}
	c.cached, c.fetched = cr, now()
	return cr, nil
}
