package relay

import (
	"context"
	"fmt"
	"sort"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// PublishInOrder publishes envs like Publish, one Result per envelope in the
// same order, but never lets an event overtake an earlier event of its
// aggregate (promise I4): it publishes in waves. Wave k carries the k-th
// event still to publish of every aggregate (AggregateType, AggregateID),
// the aggregate's events ordered by keys[i].SK when keys is given (the SK
// encodes sequence and index in the change) or else by Sequence, then input
// order. An aggregate whose event in wave k ends RetryableFailure (throttled
// for good, no time left...) stops: its later events are not sent and get
// RetryableFailure with ErrorCode CodeHeldBack, so on redelivery a consumer
// never sees them before the failed one. Other aggregates flow on. A
// PermanentFailure does not stop the aggregate: the event is parked (a gap
// that an ordered consumer holds and dead-letters unless the parked event
// is redriven), and holding the later events back would block the aggregate
// for good.
//
// All waves share one RetryBudget (and ctx's deadline), so the total time is
// bounded as for one Publish call.
//
// Cost: wave k costs ceil(|wave k| / 10) PutEvents calls (or more when
// MaxRequestBytes packs fewer), so a stream batch of 100 events of 100
// different aggregates costs 10 calls as before, while 100 events of one
// aggregate cost 100 calls (one per wave). keys, when not nil, has the same
// length as envs.
func (p *Publisher) PublishInOrder(ctx context.Context, envs []outbox.Envelope, keys []outbox.Key) []Result {
	results := make([]Result, len(envs))
	if len(envs) == 0 {
		return results
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RetryBudget)
	defer cancel()

	type agg struct{ idx []int }
	byAgg := map[[2]string]*agg{}
	var order []*agg
	for i, e := range envs {
		k := [2]string{e.AggregateType, e.AggregateID}
		a := byAgg[k]
		if a == nil {
			a = &agg{}
			byAgg[k] = a
			order = append(order, a)
		}
		a.idx = append(a.idx, i)
	}
	for _, a := range order {
		sort.SliceStable(a.idx, func(x, y int) bool {
			i, j := a.idx[x], a.idx[y]
			if keys != nil {
				return keys[i].SK < keys[j].SK
			}
			return envs[i].Sequence < envs[j].Sequence
		})
	}

	live := order
	for wave := 0; len(live) > 0; wave++ {
		var waveIdx []int
		var next []*agg
		for _, a := range live {
			if wave < len(a.idx) {
				waveIdx = append(waveIdx, a.idx[wave])
				next = append(next, a)
			}
		}
		if len(waveIdx) == 0 {
			break
		}
		waveEnvs := make([]outbox.Envelope, len(waveIdx))
		for j, i := range waveIdx {
			waveEnvs[j] = envs[i]
		}
		live = live[:0:0]
		for j, res := range p.Publish(ctx, waveEnvs) {
			i := waveIdx[j]
			results[i] = res
			a := next[j]
			if res.Status != RetryableFailure {
				live = append(live, a)
				continue
			}
			for _, later := range a.idx[wave+1:] {
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
