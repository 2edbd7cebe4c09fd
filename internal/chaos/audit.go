package chaos

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

type dlqCounts struct {
	deadLettered, redriven int
	// letters are every message the redrive rounds moved off a consumer
	// DLQ; the sequence_gap ones are traced to their missing event after
	// the audit (traceGaps).
	letters []deadLetterSeen
	// parked are the parked records' sequences by aggregate id before the
	// audit redrove the ones ordered consumers wait for (parkedRedriven).
	parked         map[string][]int64
	parkedRedriven int
}

// drainRedriveAndAudit drains, then does what an operator does after a
// consumer outage: ends the outage (the consumer is fixed), redrives every
// consumer DLQ through the code outboxctl uses (sqsconsumer.Redrive), drains
// again, and audits.
func drainRedriveAndAudit(ctx context.Context, s *devstack.Stack, inj *faults.Injector) (devstack.Audit, dlqCounts, error) {
	var c dlqCounts
	if err := s.Drain(ctx); err != nil {
		return devstack.Audit{}, c, err
	}
	inj.EndOutages()
	c.parked = map[string][]int64{}
	// A sweep can dead-letter a buffered event (its drain failed for good,
	// or its earlier DLQ send failed and it was kept): redrive again until
	// a sweep leaves every DLQ empty (bounded passes).
	for pass := 0; pass < maxSettlePasses; pass++ {
		if err := redriveRounds(ctx, s, &c); err != nil {
			return devstack.Audit{}, c, err
		}
		// What a crash left in a resequencer buffer (an invocation that died
		// between applying an event and applying its buffered successors) the
		// next sweep tick applies, as the schedule would within a minute.
		if err := sweepBuffers(ctx, s); err != nil {
			return devstack.Audit{}, c, err
		}
		if dlqsEmpty(s) {
			break
		}
	}
	for _, p := range s.Consumers {
		// counted last: every message that reached a DLQ, the ones that
		// came back during the rounds included
		c.deadLettered += int(p.DLQ.Sent())
	}
	a, err := drainAndAudit(ctx, s)
	return a, c, err
}

// maxSettlePasses bounds drainRedriveAndAudit's passes of redrive rounds
// and sweeps.
const maxSettlePasses = 4

// dlqsEmpty reports whether no consumer DLQ holds a message (visible or in
// flight).
func dlqsEmpty(s *devstack.Stack) bool {
	for _, p := range s.Consumers {
		if p.DLQ.Len() > 0 {
			return false
		}
	}
	return true
}

// redriveRounds redrives, round after round, the parked records an
// ordered consumer waits for and every consumer DLQ, draining after each,
// until a round moves nothing (bounded by maxRedriveRounds); it adds what
// it moved to c.
func redriveRounds(ctx context.Context, s *devstack.Stack, c *dlqCounts) error {
	// An event redriven can fail again while the pipeline settles (an
	// ordered consumer waiting for an event redriven with it, a
	// cancellation that overtook its payment): like an operator, redrive
	// until the DLQs stay empty after a drain (bounded rounds). Each round
	// first redrives the parked records an ordered consumer waits for (a
	// record can be parked during the rounds too: a re-send refused for
	// good) and lets the reconciler publish them, then the consumer DLQs.
	for round := 0; round < maxRedriveRounds; round++ {
		parked, n, err := redriveParkedPredecessors(ctx, s)
		if err != nil {
			return err
		}
		for agg, seqs := range parked {
			c.parked[agg] = append(c.parked[agg], seqs...)
		}
		c.parkedRedriven += n
		if n > 0 {
			// the reconciler publishes them (drainAndAudit waits for no
			// record pending; its losses are the held events the DLQ
			// redrive below brings back)
			if _, err := drainAndAudit(ctx, s); err != nil {
				return err
			}
		}
		// The consumers' DLQs are independent: redrive them at once, so
		// their closing long-poll receives (1 s each) overlap.
		var (
			mu    sync.Mutex
			moved int
			g     errgroup.Group
		)
		for name, p := range s.Consumers {
			if p.DLQ.Len() == 0 {
				// Nothing to move, visible or in flight: skip the
				// redrive's closing long-poll receive.
				continue
			}
			g.Go(func() error {
				// Only what the consumer's queue moved or the consumer's
				// role dead-lettered (the function runs as its role's
				// session locally too, localrt.FunctionSenderID).
				res, err := sqsconsumer.Redrive(ctx, p.DLQ, p.DLQ.URL(), p.Queue, p.Queue.URL(), sqsconsumer.RedriveOptions{
					From: sqsconsumer.Provenance{SourceQueueARN: p.Queue.ARN(), SenderIDs: []string{localrt.FunctionRoleID(p.Name)}},
					OnMessage: func(d sqsconsumer.DeadLetter) {
						mu.Lock()
						c.letters = append(c.letters, deadLetterSeen{consumer: name, letter: d})
						mu.Unlock()
					},
				})
				mu.Lock()
				c.redriven += res.Moved
				moved += res.Moved
				mu.Unlock()
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if moved == 0 {
			return nil
		}
		if err := s.Drain(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sweepBuffers does what the sweep schedule does every minute, until no
// buffered event is left whose predecessor is applied (bounded by
// maxSweepRounds): a sweep leaves events younger than
// dedup.DefaultSweepMinAge to the live path, and one whose own calls met
// injected faults leaves its aggregates to the next one. What is still
// buffered after that is waiting for an event that never came: the audit
// reports it.
func sweepBuffers(ctx context.Context, s *devstack.Stack) error {
	for range maxSweepRounds {
		if err := s.SweepNow(ctx); err != nil {
			return err
		}
		left, err := listBuffered(ctx, s)
		if err != nil {
			return err
		}
		var youngest time.Time
		drainable := false
		for name, b := range left {
			for _, e := range b {
				if e.BufferedAt.After(youngest) {
					youngest = e.BufferedAt
				}
				last, err := gateLast(ctx, s, name, e)
				if err != nil {
					return err
				}
				drainable = drainable || e.Sequence <= last+1
			}
		}
		if !drainable {
			return nil
		}
		wait := max(dedup.DefaultSweepMinAge-time.Since(youngest)+time.Second, 0)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// listBuffered lists the ordered consumers' buffers (retried: the audit's
// reads meet injected faults too).
func listBuffered(ctx context.Context, s *devstack.Stack) (map[string][]dedup.BufferedEvent, error) {
	for attempt := 0; ; attempt++ {
		b, err := s.Buffered(ctx)
		if err == nil || attempt == 5 || ctx.Err() != nil {
			return b, err
		}
	}
}

// maxSweepRounds bounds the audit's sweeps: each round's calls can meet
// injected faults (5 % of every call by default), so one sweep may leave an
// aggregate to the next.
const maxSweepRounds = 6

// gateLast reads the last sequence consumer applied for e's aggregate
// (retried: the audit's reads meet injected faults too).
func gateLast(ctx context.Context, s *devstack.Stack, consumer string, e dedup.BufferedEvent) (int64, error) {
	a, err := dedup.NewApplier(s.DDB, dedup.Config{Table: s.StateTables[consumer], Consumer: s.StateConsumer(consumer), Ordered: true})
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		st, err := a.ReadGate(ctx, e.AggregateType, e.AggregateID)
		if err == nil || attempt == 5 || ctx.Err() != nil {
			return st.Last, err
		}
	}
}

// maxRedriveRounds bounds the audit's redrive rounds. Rounds converge (a
// redriven event applies, or waits for one redriven with it and then
// applies, or is a duplicate), but chains of held events under load took
// more than 5 rounds in 1 epoch of 20 of a default make chaos.
const maxRedriveRounds = 12

// drainAndAudit waits until the stream is read, the bus is idle and no
// outbox record is pending (running the reconciler for records whose
// event source mapping retries were exhausted), then audits. It returns
// once no record is pending, whatever the audit found: nothing else
// changes the tables after a drain.
func drainAndAudit(ctx context.Context, s *devstack.Stack) (devstack.Audit, error) {
	for {
		if err := s.Drain(ctx); err != nil {
			return devstack.Audit{}, err
		}
		a, err := s.Audit(ctx)
		if err != nil {
			// The audit's own reads can be faulted: try again.
			if ctx.Err() != nil {
				return a, err
			}
			continue
		}
		// Only pending records are left to the reconciler: once none is,
		// nothing will change any more and the audit stands (losses
		// included). Waiting on Lost as well stalled a run whose held
		// events stayed in a consumer DLQ until the context ended.
		if a.Pending == 0 {
			return a, nil
		}
		// Records left pending (ESM retries exhausted, or a crash after
		// publish) are the reconciler's job: run it now rather than wait
		// (its re-sends are counted from its metrics like the scheduled runs).
		_, _ = s.Reconciler.Run(ctx)
		select {
		case <-ctx.Done():
			return a, nil // the audit reports what is still pending or lost
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sum(m map[faults.Kind]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
