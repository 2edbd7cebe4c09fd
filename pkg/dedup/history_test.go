package dedup_test

// Ordered apply for any consumer under replays, starting points,
// concurrent deliveries and failures in the drain (issue #31). Each test
// is a class of the inputs, against Dynoxide.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// ReasonInsufficientFunds is the balance consumer's own permanent answer.
const reasonInsufficientFunds = "insufficient_funds"

// balanceConsumer is an ordered consumer whose effect depends on its
// predecessor's effect: a debit is conditioned on the balance the earlier
// credits built ("BAL#<aggregate>" in the side table, balance >= amount).
// Its handler treats that condition's failure as its own permanent answer
// (insufficient funds), as a real consumer would.
type balanceConsumer struct {
	a    *dedup.Applier
	r    *dedup.Resequencer
	side string
}

func (f seqFixture) balanceConsumer(t *testing.T, client dedup.BufferClient) *balanceConsumer {
	t.Helper()
	if client == nil {
		client = f.env.DDB
	}
	a, err := dedup.NewApplier(client, dedup.Config{Table: f.dd, Consumer: "bal", Ordered: true, MaxAttempts: 20,
		BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := &balanceConsumer{a: a, side: f.side}
	if c.r, err = dedup.NewResequencer(a, c.handle, dedup.ResequencerConfig{}, quietLog); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *balanceConsumer) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		return sqsconsumer.Permanent(dedup.ReasonMalformedEvent, err)
	}
	var p struct {
		Delta int64 `json:"delta"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return sqsconsumer.Permanent(dedup.ReasonMalformedEvent, err)
	}
	bal := expression.Name("bal")
	b := expression.NewBuilder().WithUpdate(expression.Add(bal, expression.Value(p.Delta)))
	if p.Delta < 0 {
		b = b.WithCondition(bal.GreaterThanEqual(expression.Value(-p.Delta)))
	}
	e, err := b.Build()
	if err != nil {
		return err
	}
	_, err = c.a.ApplyEvent(ctx, env, []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String(c.side), Key: pkKey("BAL#" + env.AggregateID), UpdateExpression: e.Update(),
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}}})
	if dedup.EffectConditionFailed(err, 0) {
		return sqsconsumer.Permanent(reasonInsufficientFunds, err)
	}
	return err
}

// payments returns an aggregate's credit of amount (sequence 1) and its
// refund (sequence 2), as EventBridge delivers them.
func payments(t *testing.T, agg string, amount int64) []events.EventBridgeEvent {
	t.Helper()
	var evs []events.EventBridgeEvent
	for i, delta := range []int64{amount, -amount} {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Account", ID: agg, Sequence: int64(i + 1)},
			outbox.Event{Type: "Booked", Version: 1, Payload: map[string]any{"delta": delta}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, bridge(t, env))
	}
	return evs
}

func (f seqFixture) balance(t *testing.T, agg string) int64 {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.side), Key: pkKey("BAL#" + agg), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := out.Item["bal"].(*types.AttributeValueMemberN)
	if n == nil {
		return 0
	}
	v, _ := strconv.ParseInt(n.Value, 10, 64)
	return v
}

// TestEffectDependingOnItsPredecessor (issue #31, class 1): the refund's
// transaction fails on the gate and on its balance condition together,
// because the credit before it is still committing; the credit commits
// right after, before the refund reads the gate. The gate decides: the
// refund is sent again and booked — never refused as "insufficient
// funds" (on main before the fix it was dead-lettered, and every later
// event of the aggregate waited behind it).
func TestEffectDependingOnItsPredecessor(t *testing.T) {
	f := newSeqFixture(t)
	ctx := context.Background()
	evs := payments(t, "acct-1", 500)
	other := f.balanceConsumer(t, nil)
	hook := &hookClient{Client: f.env.DDB, hookFirst: true}
	var once sync.Once
	hook.beforeGateRead = func(string) {
		once.Do(func() {
			if err := other.r.Handle(ctx, evs[0]); err != nil {
				t.Errorf("the credit on the other instance: %v", err)
			}
		})
	}
	c := f.balanceConsumer(t, hook)
	if err := c.r.Handle(ctx, evs[1]); err != nil {
		t.Fatalf("the refund: %v (want booked once its credit committed)", err)
	}
	if b := f.balance(t, "acct-1"); b != 0 {
		t.Fatalf("balance %d, want 0 (credit 500, refund 500)", b)
	}
	if st, err := c.a.ReadGate(ctx, "Account", "acct-1"); err != nil || st.Last != 2 {
		t.Fatalf("gate %+v, %v; want last 2", st, err)
	}
}

// TestEffectDependingOnItsPredecessorConcurrently: 40 aggregates' credit
// and refund delivered at the same time, as two consumer instances would
// receive adjacent sequences; a delivery that fails for now is delivered
// again. No refund is ever refused for insufficient funds and every
// balance ends at 0.
func TestEffectDependingOnItsPredecessorConcurrently(t *testing.T) {
	f := newSeqFixture(t)
	c := f.balanceConsumer(t, nil)
	ctx := context.Background()
	type delivery struct {
		agg string
		ev  events.EventBridgeEvent
	}
	var pending []delivery
	for i := range 40 {
		agg := fmt.Sprintf("acct-c%02d", i)
		for _, ev := range payments(t, agg, int64(100*(i+1))) {
			pending = append(pending, delivery{agg, ev})
		}
	}
	var refused atomic.Int32
	for round := 0; len(pending) > 0; round++ {
		if round > 10 {
			t.Fatalf("%d deliveries still failing after 10 rounds", len(pending))
		}
		var (
			mu    sync.Mutex
			again []delivery
			wg    sync.WaitGroup
		)
		for i := 0; i < len(pending); i += 2 { // each aggregate's pair at once
			for _, d := range pending[i:min(i+2, len(pending))] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := c.r.Handle(ctx, d.ev)
					if p, ok := sqsconsumer.AsPermanent(err); ok && p.Reason == reasonInsufficientFunds {
						refused.Add(1)
						return
					}
					if err != nil {
						mu.Lock()
						again = append(again, d)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		pending = again
	}
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d refunds refused for insufficient funds while their credit was committing", n)
	}
	for i := range 40 {
		if b := f.balance(t, fmt.Sprintf("acct-c%02d", i)); b != 0 {
			t.Errorf("acct-c%02d: balance %d, want 0", i, b)
		}
	}
}

// TestReplayAdoptsAppliedEventsAheadOfTheGate (issue #31, class 2): the
// consumer ran unordered and applied events 1 and 2; switched to ordered,
// it holds event 3; the history is replayed in another order than it was
// published (2 before 1). Event 2 — applied, arriving ahead of the gate —
// is kept and adopted in turn, so the gate closes and event 3 is applied
// (on main before the fix, 2 was acknowledged as a plain duplicate and the
// gate stayed at 1 for ever).
func TestReplayAdoptsAppliedEventsAheadOfTheGate(t *testing.T) {
	f := newSeqFixture(t)
	ctx := context.Background()
	evs := history(t, "shuffled", 3)
	un, err := dedup.NewApplier(f.env.DDB, dedup.Config{Table: f.dd, Consumer: "seq"})
	if err != nil {
		t.Fatal(err)
	}
	old := &seqConsumer{t: t, a: un, side: f.side, dd: f.dd}
	for _, i := range []int{0, 1} {
		if err := old.handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	for _, i := range []int{2, 1, 0} { // live 3, then the replay: 2 before 1
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatalf("delivery of %d: %v", i+1, err)
		}
	}
	if got := f.applied(t, "shuffled"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]: 1 and 2 once (unordered), then 3", got)
	}
	if st := f.gate(t, c, "shuffled"); st.Last != 3 || len(st.Buffered) != 0 {
		t.Fatalf("gate %+v, want last 3, nothing buffered", st)
	}
}

// TestReplayInEveryOrderAfterRunningUnordered: events 1, 2 and 4 were
// applied while the consumer ran unordered; then every arrival order of
// 1..5 (120), each with duplicates, reaches it ordered. Each time 3 and 5
// are applied exactly once, 3 before 5, nothing is applied again, the gate
// ends at 5 and the buffer empty.
func TestReplayInEveryOrderAfterRunningUnordered(t *testing.T) {
	f := newSeqFixture(t)
	ctx := context.Background()
	un, err := dedup.NewApplier(f.env.DDB, dedup.Config{Table: f.dd, Consumer: "seq"})
	if err != nil {
		t.Fatal(err)
	}
	old := &seqConsumer{t: t, a: un, side: f.side, dd: f.dd}
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	rng := rand.New(rand.NewPCG(3, 1))
	for i, perm := range permutations([]int{1, 2, 3, 4, 5}) {
		agg := fmt.Sprintf("replay-%03d", i)
		evs := history(t, agg, 5)
		pre := []int{1, 2, 4}
		rng.Shuffle(len(pre), func(a, b int) { pre[a], pre[b] = pre[b], pre[a] })
		var want []int64
		for _, s := range pre {
			if err := old.handle(ctx, evs[s-1]); err != nil {
				t.Fatal(err)
			}
			want = append(want, int64(s))
		}
		for j, s := range perm {
			for range 1 + j%2 { // every other event twice
				if err := c.r.Handle(ctx, evs[s-1]); err != nil {
					t.Fatalf("%v: delivery of %d: %v", perm, s, err)
				}
			}
		}
		want = append(want, 3, 5)
		if got := f.applied(t, agg); !slices.Equal(got, want) {
			t.Fatalf("%v after %v unordered: applied %v, want %v", perm, pre, got, want)
		}
		if st := f.gate(t, c, agg); st.Last != 5 || len(st.Buffered) != 0 {
			t.Fatalf("%v: gate %+v", perm, st)
		}
	}
	if b := f.buffered(t); len(b) != 0 {
		t.Fatalf("buffer not empty: %+v", b)
	}
}

// failingDLQ is a consumer DLQ whose SendMessage fails while down is set.
type failingDLQ struct {
	fakeDLQ
	down atomic.Bool
}

func (d *failingDLQ) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if d.down.Load() {
		return nil, errors.New("SQS unavailable")
	}
	return d.fakeDLQ.SendMessage(ctx, in, o...)
}

// faultyConsumer is seqConsumer whose handler fails on one sequence, the
// way named by mode: "panic", "error" (a plain error) or "hang" (longer
// than the drain's timeout).
type faultyConsumer struct {
	*seqConsumer
	seq  atomic.Int64
	mode string
}

func (c *faultyConsumer) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if env, err := dedup.DecodeEnvelope(ev); err == nil && env.Sequence == c.seq.Load() {
		switch c.mode {
		case "panic":
			panic(fmt.Sprintf("consumer bug on sequence %d", env.Sequence))
		case "error":
			return errors.New("downstream refused the event")
		case "hang":
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Second):
			}
		}
	}
	return c.seqConsumer.handle(ctx, ev)
}

func receive(t *testing.T, ev events.EventBridgeEvent, count int) events.SQSEvent {
	t.Helper()
	b := sqsBatch(t, ev)
	b.Records[0].MessageId = "m-" + uuid.NewString()
	b.Records[0].Attributes["ApproximateReceiveCount"] = strconv.Itoa(count)
	return b
}

// TestDrainIsolatesAFailingBufferedEvent (issue #31, class 4): events 3
// and 4 wait in the buffer; when 2 is applied, event 3 fails when its turn
// comes — a panic, a returned error, or a run past the drain's timeout —
// on every try. It is dead-lettered on its own, with its own reason, no
// later than the DrainMaxFailures-th receive of its predecessor (or at
// once on the predecessor's last receive); the predecessor's delivery then
// succeeds and is never dead-lettered; event 4 keeps waiting. Redriving 3
// once fixed applies 3 and 4. (On main before the fix a panicking
// successor failed its predecessor's delivery on every receive and was
// never dead-lettered.)
func TestDrainIsolatesAFailingBufferedEvent(t *testing.T) {
	for _, tc := range []struct {
		mode, reason string
		firstReceive int // the predecessor's first receive count
		failures     int // receives of the predecessor that fail first
	}{
		{"panic", dedup.ReasonDrainPanic, 1, 2},
		{"error", dedup.ReasonDrainFailed, 1, 2},
		{"hang", dedup.ReasonDrainTimeout, 1, 2},
		{"panic", dedup.ReasonDrainPanic, 5, 0}, // the predecessor's last receive: at once
	} {
		t.Run(fmt.Sprintf("%s/receive-%d", tc.mode, tc.firstReceive), func(t *testing.T) {
			f := newSeqFixture(t)
			base := f.consumer(t, nil, dedup.ResequencerConfig{})
			fc := &faultyConsumer{seqConsumer: base, mode: tc.mode}
			r, err := dedup.NewResequencer(base.a, fc.handle, dedup.ResequencerConfig{DrainTimeout: 200 * time.Millisecond}, quietLog)
			if err != nil {
				t.Fatal(err)
			}
			dlq := &fakeDLQ{}
			h, err := sqsconsumer.New(r.Handle, sqsconsumer.Config{Name: "seq", DLQ: dlq, DLQURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/seq-dlq", Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			evs := history(t, "drain-"+tc.mode, 4)
			if resp, err := h.Handle(ctx, sqsBatch(t, evs[0], evs[2], evs[3])); err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("first batch: %+v, %v", resp, err)
			}
			fc.seq.Store(3)
			n := tc.firstReceive
			for ; ; n++ {
				if n > tc.firstReceive+tc.failures {
					t.Fatalf("the predecessor still fails on receive %d", n)
				}
				resp, err := h.Handle(ctx, receive(t, evs[1], n))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.BatchItemFailures) == 0 {
					break
				}
			}
			if got := n - tc.firstReceive; got != tc.failures {
				t.Fatalf("the predecessor failed %d receives, want %d", got, tc.failures)
			}
			if len(dlq.sent) != 1 {
				t.Fatalf("dead-lettered %d messages, want event 3 alone", len(dlq.sent))
			}
			var dead events.EventBridgeEvent
			if err := json.Unmarshal([]byte(aws.ToString(dlq.sent[0].MessageBody)), &dead); err != nil || dead.ID != evs[2].ID {
				t.Fatalf("the DLQ holds %s, want event 3 (%s): %v", dead.ID, evs[2].ID, err)
			}
			if reason := aws.ToString(dlq.sent[0].MessageAttributes[sqsconsumer.AttrReason].StringValue); reason != tc.reason {
				t.Fatalf("reason %q, want %q", reason, tc.reason)
			}
			if got := f.applied(t, "drain-"+tc.mode); !slices.Equal(got, want(2)) {
				t.Fatalf("applied %v, want [1 2]", got)
			}
			if b := f.buffered(t); len(b) != 1 || b[0].Sequence != 4 {
				t.Fatalf("buffered %+v, want event 4 waiting", b)
			}
			fc.seq.Store(0)
			if resp, err := h.Handle(ctx, receive(t, dead, 1)); err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("redrive of event 3: %+v, %v", resp, err)
			}
			if got := f.applied(t, "drain-"+tc.mode); !slices.Equal(got, want(4)) {
				t.Fatalf("after the redrive: applied %v, want 1..4", got)
			}
		})
	}
}

// TestDrainKeepsAnEventWhoseDLQSendFails (issue #31, class 4): event 3
// cannot be applied (its handler refuses it for good) when its turn comes,
// and the DLQ refuses the send. Event 3 stays in the buffer, marked failed
// — an event leaves the buffer only applied or with a copy on a DLQ —
// and the predecessor's delivery succeeds. Once the DLQ is back, the next
// sweep tick dead-letters it and takes it out of the buffer; event 4
// waits for its redrive.
func TestDrainKeepsAnEventWhoseDLQSendFails(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond})
	dlq := &failingDLQ{}
	h, err := sqsconsumer.New(c.r.Handle, sqsconsumer.Config{Name: "seq", DLQ: dlq, DLQURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/seq-dlq", Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	evs := history(t, "dlq-down", 4)
	if resp, err := h.Handle(ctx, sqsBatch(t, evs[0], evs[2], evs[3])); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("first batch: %+v, %v", resp, err)
	}
	c.refuse.Store(3)
	dlq.down.Store(true)
	if resp, err := h.Handle(ctx, sqsBatch(t, evs[1])); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("event 2: %+v, %v", resp, err)
	}
	b := f.buffered(t)
	if len(b) != 2 || b[0].Sequence+b[1].Sequence != 7 {
		t.Fatalf("buffered %+v, want 3 (kept) and 4", b)
	}
	for _, e := range b {
		if e.Sequence == 3 && e.FailedReason != "test_refused" {
			t.Fatalf("event 3 not marked failed: %+v", e)
		}
	}
	if got := f.applied(t, "dlq-down"); !slices.Equal(got, want(2)) {
		t.Fatalf("applied %v, want [1 2]", got)
	}
	dlq.down.Store(false)
	tick := events.EventBridgeEvent{Version: "0", ID: uuid.NewString(), DetailType: "Scheduled Event", Source: "aws.events", Detail: json.RawMessage(`{}`)}
	if resp, err := h.Handle(ctx, sqsBatch(t, tick)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("sweep tick: %+v, %v", resp, err)
	}
	if len(dlq.sent) != 1 || aws.ToString(dlq.sent[0].MessageAttributes[sqsconsumer.AttrReason].StringValue) != "test_refused" {
		t.Fatalf("DLQ holds %d messages, want event 3 with its reason", len(dlq.sent))
	}
	if b := f.buffered(t); len(b) != 1 || b[0].Sequence != 4 {
		t.Fatalf("buffered %+v, want event 4 alone", b)
	}
}

// TestDrainCutByTheDeadlineIsNotPoison: the invocation that applies event
// 2 runs out of time while event 3 — innocent, only slow — is being
// applied from the buffer. Event 3 is neither counted as failed nor
// dead-lettered (found by chaos-history: a false resequencer_drain_failed
// that would page); below its last receive event 2's delivery is retried,
// on its last receive it succeeds (an applied event must not reach the
// DLQ) and the next sweep applies event 3.
func TestDrainCutByTheDeadlineIsNotPoison(t *testing.T) {
	f := newSeqFixture(t)
	base := f.consumer(t, nil, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond})
	fc := &faultyConsumer{seqConsumer: base, mode: "hang"}
	r, err := dedup.NewResequencer(base.a, fc.handle, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond}, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	dlq := &fakeDLQ{}
	h, err := sqsconsumer.New(r.Handle, sqsconsumer.Config{Name: "seq", DLQ: dlq, DLQURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/seq-dlq", Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	evs := history(t, "deadline", 3)
	if resp, err := h.Handle(context.Background(), sqsBatch(t, evs[0], evs[2])); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("first batch: %+v, %v", resp, err)
	}
	fc.seq.Store(3)
	// Below its last receive, event 2's delivery is retried (its
	// redelivery drains again at once), nothing counted against event 3.
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	resp, err := h.Handle(ctx, receive(t, evs[1], 2))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("event 2 on receive 2: %+v, %v; want it retried", resp, err)
	}
	if b := f.buffered(t); len(b) != 1 || b[0].Failures != 0 || len(dlq.sent) != 0 {
		t.Fatalf("after a cut drain: buffered %+v, dead-lettered %d; want event 3 waiting, uncounted", b, len(dlq.sent))
	}
	// On its last receive, event 2's delivery succeeds and event 3 waits.
	ctx, cancel = context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	resp, err = h.Handle(ctx, receive(t, evs[1], 5))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("event 2: %+v, %v; want its delivery done", resp, err)
	}
	if len(dlq.sent) != 0 {
		t.Fatalf("dead-lettered %d messages; the slow event 3 is not poison", len(dlq.sent))
	}
	b := f.buffered(t)
	if len(b) != 1 || b[0].Sequence != 3 || b[0].Failures != 0 {
		t.Fatalf("buffered %+v, want event 3 waiting, no failure counted", b)
	}
	fc.seq.Store(0)
	if rep, err := r.Sweep(context.Background()); err != nil || rep.Drained != 1 {
		t.Fatalf("Sweep = %+v, %v; want event 3 applied", rep, err)
	}
	if got := f.applied(t, "deadline"); !slices.Equal(got, want(3)) {
		t.Fatalf("applied %v, want 1..3", got)
	}
}
