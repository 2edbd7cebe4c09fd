package chaos

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The history run's own fault injections (besides internal/faults at every
// boundary). Each decision is seeded: per event by a hash of the seed and
// the event id (so it does not depend on goroutine timing), per call by a
// seeded generator. Every injected fault is counted in historyFaults.

// historyFaults counts the injected history faults. Safe for concurrent use.
type historyFaults struct {
	// drainErrors and drainPanics: applies of a buffered event, as the
	// resequencer drains it, that the wrapped handler failed with an error
	// or a panic (drainEvents: the events chosen, each failing a bounded
	// number of times).
	drainErrors, drainPanics, drainEvents atomic.Int64
	// dlqRefused: consumer DLQ sends refused; bufferedDLQRefused those of
	// buffered events the resequencer dead-letters (kept buffered, marked
	// failed).
	dlqRefused, bufferedDLQRefused atomic.Int64
	// pairs: a payment held at the funds consumer's queue until its
	// successor arrived, then both sent at once (adjacent sequences
	// delivered concurrently); pairTimeouts: held payments whose successor
	// did not come within the hold (sent alone).
	pairs, pairTimeouts atomic.Int64
	// pauses: invocations of the live ledger that waited while its table
	// was copied (the backup).
	pauses atomic.Int64
}

// unit returns a number in [0, 1) drawn from seed, tag and id alone.
func unit(seed int64, tag, id string) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed)) //nolint:gosec // G115: the seed's bits, reinterpreted on purpose
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(tag + "\x00" + id))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// eventRef is what the injections read from an EventBridge event JSON (a
// queue message body).
type eventRef struct {
	EventType  string `json:"detail-type"`
	ReplayName string `json:"replay-name"`
	Detail     struct {
		EventID     string `json:"event_id"`
		AggregateID string `json:"aggregate_id"`
		Sequence    int64  `json:"sequence"`
	} `json:"detail"`
}

func refOf(body string) (eventRef, bool) {
	var r eventRef
	if json.Unmarshal([]byte(body), &r) != nil || r.Detail.EventID == "" {
		return r, false
	}
	return r, true
}

// drainFaults wraps the funds consumer's own handler as its resequencer
// runs it. When it runs for a buffered event on behalf of another delivery
// (the SQS message being handled carries another event, or a sweep tick:
// the drain), it fails a seeded fraction rate of events a bounded number
// of times each, 1 to 4 (drawn per event), with an error or a panic (drawn
// per event): below the resequencer's DrainMaxFailures (3) the event is
// applied by a later drain; at or past it, or on the draining delivery's
// last receive, it is dead-lettered on its own and applied once the audit
// redrives it.
type drainFaults struct {
	seed int64
	rate float64
	f    *historyFaults
	mu   sync.Mutex
	hits map[string]int
}

func (d *drainFaults) wrap(next sqsconsumer.EventHandler) sqsconsumer.EventHandler {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		var detail struct {
			EventID string `json:"event_id"`
		}
		m, ok := sqsconsumer.MessageFromContext(ctx)
		if !ok || json.Unmarshal(ev.Detail, &detail) != nil || detail.EventID == "" || unit(d.seed, "drain", detail.EventID) >= d.rate {
			return next(ctx, ev)
		}
		if r, ok := refOf(m.Body); ok && r.Detail.EventID == detail.EventID {
			return next(ctx, ev) // its own delivery, not a drain
		}
		budget := 1 + int(unit(d.seed, "drain-budget", detail.EventID)*4)
		d.mu.Lock()
		n := d.hits[detail.EventID]
		if n < budget {
			d.hits[detail.EventID]++
		}
		d.mu.Unlock()
		if n >= budget {
			return next(ctx, ev)
		}
		if n == 0 {
			d.f.drainEvents.Add(1)
		}
		if unit(d.seed, "drain-panic", detail.EventID) < 0.5 {
			d.f.drainPanics.Add(1)
			panic(fmt.Sprintf("chaos: injected panic applying buffered event %s (%d of %d)", detail.EventID, n+1, budget))
		}
		d.f.drainErrors.Add(1)
		return fmt.Errorf("chaos: injected failure applying buffered event %s (%d of %d)", detail.EventID, n+1, budget)
	}
}

// errDLQRefused is the error of a refused DLQ send.
var errDLQRefused = errors.New("chaos: injected DLQ send failure (InternalError)")

// dlqRefuser refuses a seeded fraction rate of a consumer's DLQ sends.
type dlqRefuser struct {
	rate float64
	f    *historyFaults
	mu   sync.Mutex
	rng  *rand.Rand
	next sqsconsumer.MessageSender
}

func newDLQRefuser(seed int64, consumer string, rate float64, f *historyFaults, next sqsconsumer.MessageSender) *dlqRefuser {
	return &dlqRefuser{rate: rate, f: f, next: next,
		rng: rand.New(rand.NewPCG(uint64(seed), uint64(unit(seed, "dlq", consumer)*(1<<53))))} //nolint:gosec // G115, G404: a seeded fault draw
}

func (d *dlqRefuser) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	d.mu.Lock()
	refuse := d.rng.Float64() < d.rate
	d.mu.Unlock()
	if !refuse {
		return d.next.SendMessage(ctx, in, o...)
	}
	d.f.dlqRefused.Add(1)
	if a, ok := in.MessageAttributes[sqsconsumer.AttrSourceMessageID]; ok && strings.HasPrefix(aws.ToString(a.StringValue), "resequencer:") {
		d.f.bufferedDLQRefused.Add(1)
	}
	return nil, errDLQRefused
}

// pairHolder makes adjacent sequences of an order reach the funds
// consumer's queue at once: it holds a seeded fraction rate of live
// OrderPaid deliveries (not replays) until the order's next event reaches
// the queue, for at most holdFor, then sends both concurrently, so two
// invocations apply sequence n−1 and n together — the refund's condition
// (paid_minor >= refund) then meets a payment still committing. It wraps
// the innermost send to the queue (after internal/faults' late
// deliveries), and blocks the bus's delivery while it holds, as a slow
// target would.
type pairHolder struct {
	seed    int64
	rate    float64
	holdFor time.Duration
	f       *historyFaults
	mu      sync.Mutex
	held    map[string]*heldEvent // aggregate id → held predecessor
	seen    map[string]bool       // event ids held once
}

type heldEvent struct {
	seq     int64
	release chan struct{}
}

func (p *pairHolder) wrap(next localrt.MessageSender) localrt.MessageSender {
	return sendFunc(func(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		r, ok := refOf(aws.ToString(in.MessageBody))
		if !ok || r.ReplayName != "" {
			return next.SendMessage(ctx, in, o...)
		}
		agg := r.Detail.AggregateID
		p.mu.Lock()
		if h := p.held[agg]; h != nil && h.seq == r.Detail.Sequence-1 {
			delete(p.held, agg)
			p.mu.Unlock()
			p.f.pairs.Add(1)
			close(h.release) // the predecessor goes now, with this one
			return next.SendMessage(ctx, in, o...)
		}
		if r.EventType != order.EventOrderPaid || p.seen[r.Detail.EventID] || p.held[agg] != nil || unit(p.seed, "pair", r.Detail.EventID) >= p.rate {
			p.mu.Unlock()
			return next.SendMessage(ctx, in, o...)
		}
		p.seen[r.Detail.EventID] = true
		h := &heldEvent{seq: r.Detail.Sequence, release: make(chan struct{})}
		p.held[agg] = h
		p.mu.Unlock()
		t := time.NewTimer(p.holdFor)
		defer t.Stop()
		select {
		case <-h.release:
		case <-t.C:
			p.unhold(agg, h)
		case <-ctx.Done():
			p.unhold(agg, h)
			return nil, ctx.Err()
		}
		return next.SendMessage(ctx, in, o...)
	})
}

// unhold drops h if it still waits (its successor did not come).
func (p *pairHolder) unhold(agg string, h *heldEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[agg] == h {
		delete(p.held, agg)
		p.f.pairTimeouts.Add(1)
	}
}

// sendFunc is a MessageSender from a function.
type sendFunc func(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)

func (f sendFunc) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return f(ctx, in, o...)
}

// pauser stops one consumer's invocations while its table is copied, so
// the copy (devstack.SnapshotTable, a Scan) is the consistent image a
// DynamoDB backup is: every handler run of the consumer — its deliveries,
// the drains inside them, its sweeps — holds a read lock; pause takes the
// write lock once the runs in progress end. Messages wait in the queue
// meanwhile (their visibility timeout: redeliveries, counted).
type pauser struct {
	consumer string
	f        *historyFaults
	mu       sync.RWMutex
	paused   atomic.Bool
}

func (p *pauser) wrap(inner localrt.Interceptor) localrt.Interceptor {
	return func(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, next localrt.EventHandler) error {
		if consumer != p.consumer {
			return inner(ctx, consumer, ev, attempt, next)
		}
		if p.paused.Load() {
			p.f.pauses.Add(1)
		}
		p.mu.RLock()
		defer p.mu.RUnlock()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("chaos: %s paused for a backup: %w", consumer, err)
		}
		return inner(ctx, consumer, ev, attempt, next)
	}
}

// during runs f while the consumer is paused.
func (p *pauser) during(f func() error) error {
	p.paused.Store(true)
	p.mu.Lock()
	defer func() {
		p.paused.Store(false)
		p.mu.Unlock()
	}()
	return f()
}
