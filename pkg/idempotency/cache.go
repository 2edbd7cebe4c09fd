package idempotency

import (
	"container/list"
	"sync"
	"time"
)

// cacheEntry is a COMPLETED record held in memory.
type cacheEntry struct {
	data      []byte
	hash      string
	expiresAt int64 // epoch s; valid while expiresAt >= now
}

// lru is a bounded least-recently-used map of COMPLETED records, safe for
// concurrent use. Only COMPLETED records enter it: an IN_PROGRESS answer
// must always come from DynamoDB.
type lru struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // front = most recently used; values are *lruItem
	items map[string]*list.Element
}

type lruItem struct {
	key string
	e   cacheEntry
}

func newLRU(capacity int) *lru {
	return &lru{max: capacity, ll: list.New(), items: make(map[string]*list.Element, capacity)}
}

// get returns key's entry if present and unexpired at now; an expired one
// is dropped.
func (c *lru) get(key string, now time.Time) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return cacheEntry{}, false
	}
	it := el.Value.(*lruItem)
	if it.e.expiresAt < now.Unix() {
		c.ll.Remove(el)
		delete(c.items, key)
		return cacheEntry{}, false
	}
	c.ll.MoveToFront(el)
	return it.e, true
}

// put stores e under key, evicting the least recently used entry when full.
func (c *lru) put(key string, e cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value.(*lruItem).e = e
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&lruItem{key: key, e: e})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*lruItem).key)
	}
}

func (c *lru) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
