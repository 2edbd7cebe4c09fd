package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// emfCounter is the stack's metrics writer during a chaos epoch: it sums the
// reconciler's re-sends from the CloudWatch EMF lines the scheduled runs
// write, so the report counts what the reconciler did while it raced the
// relay, not only during the drain. Safe for concurrent use.
type emfCounter struct {
	mu     sync.Mutex
	resent float64
}

func (c *emfCounter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(p))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if v, ok := line[config.MetricReconcilerResent].(float64); ok {
			c.mu.Lock()
			c.resent += v
			c.mu.Unlock()
		}
	}
	return len(p), nil
}

func (c *emfCounter) Resent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.resent)
}

// applyCounter counts successful consumer applies (first or duplicate) per
// consumer. Safe for concurrent use.
type applyCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

// wrap returns an interceptor running next (through inner) and counting
// its successes.
func (c *applyCounter) wrap(inner localrt.Interceptor) localrt.Interceptor {
	return func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next localrt.EventHandler) error {
		err := inner(ctx, consumer, ev, attempt, next)
		if err == nil {
			c.mu.Lock()
			c.n[consumer]++
			c.mu.Unlock()
		}
		return err
	}
}

func (c *applyCounter) get(consumer string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[consumer]
}

// keySet is a concurrent set of idempotency keys.
type keySet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (k *keySet) add(key string) {
	k.mu.Lock()
	k.m[key] = true
	k.mu.Unlock()
}

func (k *keySet) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[key]
}
