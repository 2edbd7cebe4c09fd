package mrec

import (
	"container/heap"
	"context"
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/cenkalti/backoff/v5"
)

// entry is one write waiting for delivery in one direction. A newer write
// of the same key read before the entry is dispatched replaces its write
// (coalescing) but keeps its due time and its first index.
type entry struct {
	w     write
	ver   version
	due   time.Time
	first uint64 // index of the oldest write it carries (Settle)
	last  uint64 // index of the write it carries (Reordered)
	bo    *backoff.ExponentialBackOff
	index int // in the heap
	// unexplained is the destination item (hash) that differed from the
	// one the replicator last saw there, found at unexplainedAt (after the
	// GetItem returned); see apply.
	unexplained   uint64
	unexplainedAt time.Time
}

func (e *entry) tk() tableKey { return tableKey{e.w.table, e.w.keyStr} }

// entryHeap orders entries by due time, then write index.
type entryHeap []*entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].first < h[j].first
}
func (h entryHeap) Swap(i, j int)  { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *entryHeap) Push(x any)    { e := x.(*entry); e.index = len(*h); *h = append(*h, e) }
func (h *entryHeap) Pop() any      { old := *h; e := old[len(old)-1]; *h = old[:len(old)-1]; return e }
func (h entryHeap) peek() *entry   { return h[0] }
func (h entryHeap) empty() bool    { return len(h) == 0 }
func (h *entryHeap) pop() *entry   { return heap.Pop(h).(*entry) }
func (h *entryHeap) push(e *entry) { heap.Push(h, e) }

// direction is the queue of one Region pair (guarded by Replicator.mu,
// except wake).
type direction struct {
	from, to     string
	paused       bool
	next         uint64              // index of the next write read (from 1)
	pending      map[tableKey]*entry // queued, not dispatched
	inflight     map[tableKey]*entry // being written
	queue        entryHeap           // the pending entries
	maxDelivered uint64              // highest write index delivered
	wake         chan struct{}       // dispatcher wake-up
	stats        DirectionStats
}

func newDirection(from, to string) *direction {
	return &direction{from: from, to: to, next: 1,
		pending: map[tableKey]*entry{}, inflight: map[tableKey]*entry{},
		wake: make(chan struct{}, 1)}
}

func (d *direction) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// oldestOutstanding is the lowest write index not yet done (d.next when
// every write is done).
func (d *direction) oldestOutstanding() uint64 {
	lo := d.next
	for _, m := range []map[tableKey]*entry{d.pending, d.inflight} {
		for _, e := range m {
			lo = min(lo, e.first)
		}
	}
	return lo
}

// enqueueLocked queues w (read at readAt, with version v) for delivery in d.
func (r *Replicator) enqueueLocked(d *direction, w write, v version, readAt time.Time) {
	idx := d.next
	d.next++
	tk := tableKey{w.table, w.keyStr}
	if p := d.pending[tk]; p != nil {
		p.w, p.ver, p.last = w, v, idx
		d.stats.Coalesced++
		return
	}
	e := &entry{w: w, ver: v, due: readAt.Add(r.delay(d, w)), first: idx, last: idx}
	d.pending[tk] = e
	d.queue.push(e)
	d.signal()
}

// delay draws the replication delay of w in d: a pure function of the seed,
// the direction, the table, the key and the image.
func (r *Replicator) delay(d *direction, w write) time.Duration {
	h := fnv.New64a()
	for _, s := range []string{d.from, d.to, w.table, w.keyStr} {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	h.Write(binary.BigEndian.AppendUint64(nil, w.hash))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(r.cfg.Seed))) //nolint:gosec // G115: the seed's bits, any value
	return drawDelay(rand.New(rand.NewPCG(h.Sum64(), w.hash)), &r.cfg)
}

// drawDelay draws one delay: the tail with probability TailProb, else
// log-normal around DelayMedian.
func drawDelay(rng *rand.Rand, c *Config) time.Duration {
	if c.TailProb > 0 && rng.Float64() < c.TailProb {
		return c.TailMin + time.Duration(rng.Int64N(int64(c.TailMax-c.TailMin)+1))
	}
	return time.Duration(float64(c.DelayMedian) * math.Exp(c.DelaySigma*rng.NormFloat64()))
}

// dispatch hands d's due entries to writers, one key at a time, until the
// replicator closes.
func (r *Replicator) dispatch(d *direction) {
	dest := r.regions[d.to]
	for {
		var ready []*entry
		wait := time.Hour
		r.mu.Lock()
		if !r.blockedLocked(d) {
			now := time.Now()
			for !d.queue.empty() {
				e := d.queue.peek()
				if e.due.After(now) {
					wait = e.due.Sub(now)
					break
				}
				d.queue.pop()
				tk := e.tk()
				if d.inflight[tk] != nil {
					// One key is written in order: wait for the write in flight.
					e.due = now.Add(time.Millisecond)
					d.queue.push(e)
					continue
				}
				delete(d.pending, tk)
				d.inflight[tk] = e
				ready = append(ready, e)
			}
		}
		r.mu.Unlock()
		for _, e := range ready {
			select {
			case dest.sem <- struct{}{}:
			case <-r.ctx.Done():
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer func() { <-dest.sem }()
				r.apply(d, e)
			}()
		}
		timer := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			return
		case <-d.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// apply delivers e into d.to under last writer wins. It writes only when
// the destination item is the one the replicator last saw there (else a
// local write is not read yet: the entry is deferred), registers the image
// it writes as an echo to skip when read back, and retries failed calls
// with backoff.
//
// A destination item that still differs after the destination's stream
// has been read past the moment it was first seen was not written through
// the stream the replicator read (it predates Start with Latest, or its
// record was trimmed): it is adopted as the item's current state, with no
// timestamp, and the delivery proceeds (counted in Adopted).
func (r *Replicator) apply(d *direction, e *entry) {
	dest := r.regions[d.to]
	ik := itemKey{d.to, e.tk()}
	r.mu.Lock()
	if r.suppressLocked(d, e, ik) {
		r.mu.Unlock()
		return
	}
	known := r.known[ik]
	r.mu.Unlock()

	actual, err := r.currentHash(dest, e.w)
	if err != nil {
		r.retry(d, e, err)
		return
	}
	readAt := time.Now()
	r.mu.Lock()
	if r.suppressLocked(d, e, ik) { // again: the destination may have moved during the read
		r.mu.Unlock()
		return
	}
	if r.known[ik] != known {
		d.stats.Deferred++
		r.requeueLocked(d, e, r.cfg.PollInterval)
		r.mu.Unlock()
		return
	}
	if actual != known {
		if e.unexplainedAt.IsZero() || e.unexplained != actual || !r.readersPastLocked(d.to, e.w.table, e.unexplainedAt) {
			if e.unexplainedAt.IsZero() || e.unexplained != actual {
				e.unexplained, e.unexplainedAt = actual, readAt
			}
			d.stats.Deferred++
			r.requeueLocked(d, e, r.cfg.PollInterval)
			r.mu.Unlock()
			return
		}
		d.stats.Adopted++
		r.cfg.Logger.Warn("mrec: destination item never seen in its stream adopted as current", "to", d.to, "table", e.w.table)
		known = actual
		r.known[ik] = actual
	}
	prevVer, hadVer := r.ver[ik]
	r.ver[ik] = e.ver
	r.known[ik] = e.w.hash
	if actual == e.w.hash {
		d.stats.Unchanged++
		r.deliveredLocked(d, e)
		r.mu.Unlock()
		return
	}
	tk := e.tk()
	if dest.echo[tk] == nil {
		dest.echo[tk] = map[uint64]int{}
	}
	dest.echo[tk][e.w.hash]++
	r.mu.Unlock()

	if err := r.write(dest, e.w); err != nil {
		r.mu.Lock()
		// Undo what this write claimed, unless something newer did since.
		if m := dest.echo[tk]; m[e.w.hash] > 0 {
			if m[e.w.hash]--; m[e.w.hash] == 0 {
				delete(m, e.w.hash)
			}
			if len(m) == 0 {
				delete(dest.echo, tk)
			}
		}
		if r.ver[ik] == e.ver {
			if hadVer {
				r.ver[ik] = prevVer
			} else {
				delete(r.ver, ik)
			}
			r.known[ik] = known
		}
		r.mu.Unlock()
		r.retry(d, e, err)
		return
	}
	r.mu.Lock()
	if e.w.isDelete() {
		d.stats.DeletesReplicated++
		if e.w.ttl {
			d.stats.TTLDeletesReplicated++
		}
	} else {
		d.stats.Replicated++
	}
	r.deliveredLocked(d, e)
	r.mu.Unlock()
}

// deliveredLocked records e as delivered (for Reordered) and finishes it.
func (r *Replicator) deliveredLocked(d *direction, e *entry) {
	if e.last < d.maxDelivered {
		d.stats.Reordered++
	} else {
		d.maxDelivered = e.last
	}
	r.finishLocked(d, e)
}

// suppressLocked reports whether e loses last-writer-wins against the
// destination's current version of its item, and if so counts and finishes
// it. r.mu is held.
func (r *Replicator) suppressLocked(d *direction, e *entry, ik itemKey) bool {
	if cur, ok := r.ver[ik]; ok && !e.ver.newer(cur) {
		d.stats.SuppressedByLWW++
		r.finishLocked(d, e)
		return true
	}
	return false
}

func (r *Replicator) finishLocked(d *direction, e *entry) {
	delete(d.inflight, e.tk())
	d.signal()
}

// requeueLocked puts an in-flight e back after wait; if a newer write of
// the key is already queued, e is coalesced into it.
func (r *Replicator) requeueLocked(d *direction, e *entry, wait time.Duration) {
	tk := e.tk()
	delete(d.inflight, tk)
	if p := d.pending[tk]; p != nil {
		p.first = min(p.first, e.first)
		d.stats.Coalesced++
	} else {
		e.due = time.Now().Add(wait)
		d.pending[tk] = e
		d.queue.push(e)
	}
	d.signal()
}

func (r *Replicator) retry(d *direction, e *entry, err error) {
	if r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d.stats.Errors++
	if e.bo == nil {
		e.bo = backoff.NewExponentialBackOff()
		e.bo.InitialInterval = 10 * time.Millisecond
		e.bo.MaxInterval = time.Second
	}
	wait := e.bo.NextBackOff()
	r.cfg.Logger.Warn("mrec: replicated write failed; retrying", "from", d.from, "to", d.to, "table", e.w.table, "error", err, "retry_in", wait)
	r.requeueLocked(d, e, wait)
}

// currentHash reads the destination item (strongly consistent) and hashes
// it.
func (r *Replicator) currentHash(dest *regionState, w write) (uint64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	out, err := dest.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.table), Key: w.key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, err
	}
	if out.Item == nil {
		return absent, nil
	}
	return imageHash(out.Item), nil
}

// write applies w to dest: a PutItem of the image exactly as read (no
// attribute added), or a plain DeleteItem.
func (r *Replicator) write(dest *regionState, w write) error {
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	put, del := writeInputs(w)
	if del != nil {
		_, err := dest.DDB.DeleteItem(ctx, del)
		return err
	}
	_, err := dest.DDB.PutItem(ctx, put)
	return err
}

// writeInputs builds the request that replicates w: exactly one is non-nil.
func writeInputs(w write) (*dynamodb.PutItemInput, *dynamodb.DeleteItemInput) {
	if w.isDelete() {
		return nil, &dynamodb.DeleteItemInput{TableName: aws.String(w.table), Key: w.key}
	}
	return &dynamodb.PutItemInput{TableName: aws.String(w.table), Item: w.image}, nil
}
