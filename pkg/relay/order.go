package relay

import (
	"container/heap"
	"context"
	"fmt"
	"sort"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// PublishInOrder publishes envs like Publish, one Result per envelope in the
// same order, but never lets an event overtake an earlier event of its
// aggregate (promise I4): an aggregate's k+1-th event is sent only after its
// k-th event was accepted by EventBridge (or parked), never in the same
// PutEvents call and never in a call running beside it. The aggregate
// (AggregateType, AggregateID) orders its events by keys[i].SK when keys is
// given (the SK encodes sequence and index in the change), else by Sequence,
// then input order. An aggregate whose event ends RetryableFailure
// (throttled for good, no time left...) stops: its later events are not sent
// and get RetryableFailure with ErrorCode CodeHeldBack, so on redelivery a
// consumer never sees them before the failed one. Other aggregates flow on.
// A PermanentFailure does not stop the aggregate: the event is parked (a gap
// that an ordered consumer waits on until the parked event is redriven), and
// holding the later events back would block the aggregate for good.
//
// All rounds share one RetryBudget (and ctx's deadline), so the total time
// is bounded as for one Publish call.
//
// Packing (cost): the entries are first laid out in PutEvents calls of at
// most 10 entries and MaxRequestBytes, highest remaining chain first (Hu's
// rule: a call takes the entries whose aggregates have the most events still
// to send, ties to the entry that has been ready longest), so that the
// events of aggregates with one event in the batch fill the calls that the
// longer aggregates' later events would leave partly empty. Consecutive calls
// that share no aggregate are sent together as one round (Publish: at most
// Concurrency calls in flight); a round ends where a call holds a later
// event of an aggregate sent earlier in the round. For entries of equal size
// this takes the fewest calls any order-keeping schedule can:
// max(ceil(n/10), the most events of one aggregate) for the usual mixes — a
// stream batch of 100 events costs 10 calls whether its aggregates have one
// or two events each, and 100 events of one aggregate cost 100 calls (one
// per event: the price of the order). Failures only remove entries (the
// held-back ones), so a failed entry can leave later calls partly filled.
// Rounds: at least the most events of one aggregate, and more when more than
// 10 aggregates share the longest chain. keys, when not nil, has the same
// length as envs.
func (p *Publisher) PublishInOrder(ctx context.Context, envs []outbox.Envelope, keys []outbox.Key) []Result {
	results := make([]Result, len(envs))
	if len(envs) == 0 {
		return results
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RetryBudget)
	defer cancel()

	chains, aggOf := aggregateChains(envs, keys)
	built := make([]builtEntry, len(envs))
	sizes := make([]int, len(envs))
	for i, env := range envs {
		e, res, ok := p.buildEntry(i, env)
		built[i] = builtEntry{e, res, ok}
		if ok {
			sizes[i] = e.size
		}
	}
	rounds := groupRounds(scheduleCalls(chains, sizes, p.cfg.MaxRequestBytes), aggOf)

	pos := make([]int, len(envs)) // index of envelope i in its chain
	for _, c := range chains {
		for k, i := range c {
			pos[i] = k
		}
	}
	stopped := make([]bool, len(chains))
	for _, round := range rounds {
		var idx []int
		for _, i := range round {
			if !stopped[aggOf[i]] {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		roundEnvs := make([]outbox.Envelope, len(idx))
		roundBuilt := make([]builtEntry, len(idx))
		for j, i := range idx {
			roundEnvs[j], roundBuilt[j] = envs[i], built[i]
		}
		for j, res := range p.publish(ctx, roundEnvs, roundBuilt) {
			i := idx[j]
			results[i] = res
			if res.Status != RetryableFailure {
				continue
			}
			a := aggOf[i]
			stopped[a] = true
			for _, later := range chains[a][pos[i]+1:] {
				results[later] = Result{
					Status:    RetryableFailure,
					ErrorCode: CodeHeldBack,
					ErrorMessage: fmt.Sprintf("held back: earlier event %s (sequence %d) of aggregate %s/%s was not published (%s)",
						envs[i].EventID, envs[i].Sequence, envs[i].AggregateType, envs[i].AggregateID, res.ErrorCode),
				}
			}
		}
	}
	return results
}

// aggregateChains groups envelope indices by aggregate, in first-seen order,
// each chain sorted by keys[i].SK (or Sequence), then input order; aggOf[i]
// is the chain of envelope i.
func aggregateChains(envs []outbox.Envelope, keys []outbox.Key) (chains [][]int, aggOf []int) {
	byAgg := map[[2]string]int{}
	aggOf = make([]int, len(envs))
	for i, e := range envs {
		k := [2]string{e.AggregateType, e.AggregateID}
		a, ok := byAgg[k]
		if !ok {
			a = len(chains)
			byAgg[k] = a
			chains = append(chains, nil)
		}
		chains[a] = append(chains[a], i)
		aggOf[i] = a
	}
	for _, c := range chains {
		sort.SliceStable(c, func(x, y int) bool {
			i, j := c[x], c[y]
			if keys != nil {
				return keys[i].SK < keys[j].SK
			}
			return envs[i].Sequence < envs[j].Sequence
		})
	}
	return chains, aggOf
}

// scheduleCalls lays the chains' entries out in PutEvents calls (slots):
// each slot holds at most MaxEntriesPerRequest entries whose sizes sum to at
// most maxRequestBytes, no two of one chain, and a chain's k+1-th entry in a
// later slot than its k-th. Entries of size 0 (refused before sending:
// invalid or too large) take no room. Slot by slot, it takes the ready heads
// with the longest rest of their chain first (Hu's highest-level-first rule,
// optimal in slots for unit entries and chains), then the head ready the
// longest, then the chain seen first.
func scheduleCalls(chains [][]int, sizes []int, maxRequestBytes int) [][]int {
	h := &readyHeap{}
	for a, c := range chains {
		heap.Push(h, readyHead{chain: a, level: len(c), ready: -1})
	}
	var slots [][]int
	for h.Len() > 0 {
		var slot []int
		var aside, next []readyHead
		count, total := 0, 0
		for h.Len() > 0 && count < MaxEntriesPerRequest {
			x := heap.Pop(h).(readyHead)
			i := chains[x.chain][x.pos]
			s := sizes[i]
			if s > 0 && count > 0 && total+s > maxRequestBytes {
				aside = append(aside, x)
				if len(aside) >= MaxEntriesPerRequest {
					break
				}
				continue
			}
			slot = append(slot, i)
			if s > 0 {
				count++
				total += s
			}
			if x.pos+1 < len(chains[x.chain]) {
				next = append(next, readyHead{chain: x.chain, pos: x.pos + 1, level: x.level - 1, ready: len(slots)})
			}
		}
		for _, x := range aside {
			heap.Push(h, x)
		}
		for _, x := range next {
			heap.Push(h, x)
		}
		slots = append(slots, slot)
	}
	return slots
}

// groupRounds joins consecutive slots into rounds that share no chain: the
// entries of a round can be sent at once without one overtaking another of
// its aggregate. A round lists its entries slot by slot, so Pack packs it
// into at most as many calls as it has slots (next-fit over a sequence of
// feasible slots never needs more groups than the slots).
func groupRounds(slots [][]int, aggOf []int) [][]int {
	var rounds [][]int
	in := map[int]bool{}
	for _, slot := range slots {
		conflict := len(rounds) == 0
		for _, i := range slot {
			conflict = conflict || in[aggOf[i]]
		}
		if conflict {
			rounds = append(rounds, nil)
			clear(in)
		}
		r := len(rounds) - 1
		rounds[r] = append(rounds[r], slot...)
		for _, i := range slot {
			in[aggOf[i]] = true
		}
	}
	return rounds
}

// readyHead is the next entry of a chain to schedule: chains[chain][pos],
// with level entries left in the chain (itself included), ready since slot
// ready (-1: from the start).
type readyHead struct {
	chain, pos, level, ready int
}

// readyHeap orders ready heads: longest rest of chain, then ready longest,
// then the chain seen first.
type readyHeap []readyHead

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.level != b.level {
		return a.level > b.level
	}
	if a.ready != b.ready {
		return a.ready < b.ready
	}
	return a.chain < b.chain
}
func (h readyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(readyHead)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
