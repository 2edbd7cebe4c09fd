package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
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
