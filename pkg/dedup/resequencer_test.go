package dedup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

var quietLog = slog.New(slog.DiscardHandler)

// seqConsumer is the smallest ordered consumer: its effect appends the
// event's sequence to a list item of the aggregate in a side table
// ("LOG#<aggregate_id>"), so the list shows exactly what was applied, how
// often and in which order.
type seqConsumer struct {
	t      *testing.T
	a      *dedup.Applier
	r      *dedup.Resequencer
	side   string
	dd     string
	client dedup.BufferClient
	// refuse, when set, is a sequence the handler refuses for good
	// (sqsconsumer.Permanent "test_refused") before applying it.
	refuse atomic.Int64
}

type seqFixture struct {
	env  *ddbtest.Env
	dd   string
	side string
}

func newSeqFixture(t *testing.T) seqFixture {
	t.Helper()
	env := ddbtest.New(t)
	f := seqFixture{env: env, dd: ddbtest.Name("dedup"), side: ddbtest.Name("side")}
	env.CreateTable(t, dedup.CreateTableInput(f.dd))
	env.CreateTable(t, ddbtest.SimpleTableInput(f.side))
	return f
}

// consumer returns an ordered consumer "seq" on the fixture's tables
// through client (nil: the server's client).
func (f seqFixture) consumer(t *testing.T, client dedup.BufferClient, rc dedup.ResequencerConfig) *seqConsumer {
	t.Helper()
	if client == nil {
		client = f.env.DDB
	}
	a, err := dedup.NewApplier(client, dedup.Config{Table: f.dd, Consumer: "seq", Ordered: true, MaxAttempts: 20,
		BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := &seqConsumer{t: t, a: a, side: f.side, dd: f.dd, client: client}
	if c.r, err = dedup.NewResequencer(a, c.handle, rc, quietLog); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *seqConsumer) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		return sqsconsumer.Permanent(dedup.ReasonMalformedEvent, err)
	}
	if c.refuse.Load() == env.Sequence {
		return sqsconsumer.Permanent("test_refused", fmt.Errorf("sequence %d refused", env.Sequence))
	}
	e, err := expression.NewBuilder().WithUpdate(expression.Set(expression.Name("seqs"),
		expression.ListAppend(expression.IfNotExists(expression.Name("seqs"), expression.Value([]int64{})), expression.Value([]int64{env.Sequence})))).Build()
	if err != nil {
		return err
	}
	_, err = c.a.ApplyEvent(ctx, env, []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String(c.side), Key: pkKey("LOG#" + env.AggregateID),
		UpdateExpression: e.Update(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
	}}})
	return err
}

// applied returns the sequences applied for an aggregate, in commit order.
func (f seqFixture) applied(t *testing.T, agg string) []int64 {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.side), Key: pkKey("LOG#" + agg), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := out.Item["seqs"].(*types.AttributeValueMemberL)
	var seqs []int64
	if l != nil {
		for _, v := range l.Value {
			n, _ := strconv.ParseInt(v.(*types.AttributeValueMemberN).Value, 10, 64)
			seqs = append(seqs, n)
		}
	}
	return seqs
}

func (f seqFixture) buffered(t *testing.T) []dedup.BufferedEvent {
	t.Helper()
	b, err := dedup.ListBuffered(context.Background(), f.env.DDB, f.dd, "seq")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f seqFixture) gate(t *testing.T, c *seqConsumer, agg string) dedup.GateState {
	t.Helper()
	st, err := c.a.ReadGate(context.Background(), "Order", agg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// history returns events 1..n of aggregate agg as EventBridge delivers them.
func history(t *testing.T, agg string, n int) []events.EventBridgeEvent {
	t.Helper()
	evs := make([]events.EventBridgeEvent, n)
	for i := range evs {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: agg, Sequence: int64(i + 1)},
			outbox.Event{Type: "OrderStep", Version: 1, Payload: map[string]any{"n": i + 1}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = bridge(t, env)
	}
	return evs
}

func bridge(t *testing.T, env outbox.Envelope) events.EventBridgeEvent {
	t.Helper()
	detail, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	return events.EventBridgeEvent{Version: "0", ID: uuid.NewString(), DetailType: env.EventType, Source: "test",
		AccountID: "123456789012", Time: time.Now().UTC().Truncate(time.Second), Region: "eu-west-1", Resources: []string{}, Detail: detail}
}

func want(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i + 1)
	}
	return s
}

func permutations(xs []int) [][]int {
	if len(xs) <= 1 {
		return [][]int{slices.Clone(xs)}
	}
	var out [][]int
	for i := range xs {
		rest := append(slices.Clone(xs[:i]), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{xs[i]}, p...))
		}
	}
	return out
}

// TestResequencerEveryPermutationWithDuplicates: every arrival order of an
// aggregate's events 1..5 (120), each with duplicates delivered while the
// event waits in the buffer or after it was applied, and the whole history
// once more at the end: every event is applied exactly once, in sequence
// order, each delivery is acknowledged at once (no redelivery is needed),
// after each delivery exactly the delivered prefix is applied (an early
// event is applied by its predecessor's delivery, never later), and the
// buffer ends empty.
func TestResequencerEveryPermutationWithDuplicates(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	ctx := context.Background()
	for i, perm := range permutations([]int{1, 2, 3, 4, 5}) {
		agg := fmt.Sprintf("perm-%03d", i)
		evs := history(t, agg, 5)
		var deliveries []int
		for j, s := range perm {
			deliveries = append(deliveries, s)
			if j%2 == 0 {
				deliveries = append(deliveries, s) // a duplicate right away
			}
		}
		delivered, next := map[int]bool{}, 1
		for _, s := range deliveries {
			if err := c.r.Handle(ctx, evs[s-1]); err != nil {
				t.Fatalf("%v: delivery of %d: %v", perm, s, err)
			}
			// Applied right away: exactly the delivered prefix.
			delivered[s] = true
			for delivered[next] {
				next++
			}
			if got := f.applied(t, agg); !slices.Equal(got, want(next-1)) {
				t.Fatalf("%v: after delivering %d: applied %v, want %v", perm, s, got, want(next-1))
			}
		}
		for s := range 5 { // the whole history again: all duplicates
			if err := c.r.Handle(ctx, evs[s]); err != nil {
				t.Fatalf("%v: replay of %d: %v", perm, s+1, err)
			}
		}
		if got := f.applied(t, agg); !slices.Equal(got, want(5)) {
			t.Fatalf("%v: after the replay applied %v, want %v", perm, got, want(5))
		}
		if st := f.gate(t, c, agg); st.Last != 5 || len(st.Buffered) != 0 {
			t.Fatalf("%v: gate %+v", perm, st)
		}
	}
	if b := f.buffered(t); len(b) != 0 {
		t.Fatalf("buffer not empty: %+v", b)
	}
}

// TestResequencerConcurrentDeliveries: events and duplicates of 20
// aggregates delivered concurrently (8 at a time, shuffled), as several
// consumer instances would; a delivery that fails for now is delivered
// again, as a queue does. Transactions settle every race between a buffer
// write and its predecessor's apply: each aggregate ends applied 1..5
// exactly once, in order.
func TestResequencerConcurrentDeliveries(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	ctx := context.Background()
	type delivery struct {
		agg string
		ev  events.EventBridgeEvent
	}
	var all []delivery
	var aggs []string
	for i := range 20 {
		agg := fmt.Sprintf("conc-%02d", i)
		aggs = append(aggs, agg)
		for _, ev := range history(t, agg, 5) {
			all = append(all, delivery{agg, ev}, delivery{agg, ev})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	pending := all
	for round := 0; len(pending) > 0; round++ {
		if round > 10 {
			t.Fatalf("%d deliveries still failing after 10 rounds", len(pending))
		}
		var mu sync.Mutex
		var again []delivery
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for _, d := range pending {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := c.r.Handle(ctx, d.ev); err != nil {
					mu.Lock()
					again = append(again, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		pending = again
	}
	for _, agg := range aggs {
		if got := f.applied(t, agg); !slices.Equal(got, want(5)) {
			t.Errorf("%s: applied %v, want %v", agg, got, want(5))
		}
	}
	if b := f.buffered(t); len(b) != 0 {
		t.Fatalf("buffer not empty: %+v", b)
	}
}

// hookClient is the server's client with hooks: before answering the
// ordering item's read, and after a transaction holding a given marker
// commits.
type hookClient struct {
	*dynamodb.Client
	beforeGateRead func(key string)
	// hookFirst runs beforeGateRead before the read instead of after it
	// (the read then sees what the hook committed).
	hookFirst bool
	// crashAfter, when it names an event id, makes the commit of the
	// transaction carrying that event's marker report an error (the
	// invocation died after the commit), once.
	crashAfter atomic.Value
}

func (h *hookClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if pk, ok := in.Key[dedup.AttrPK].(*types.AttributeValueMemberS); ok && strings.Contains(pk.Value, dedup.SequenceInfix) && h.beforeGateRead != nil {
		if h.hookFirst {
			h.beforeGateRead(pk.Value)
			return h.Client.GetItem(ctx, in, opts...)
		}
		out, err := h.Client.GetItem(ctx, in, opts...) // read first: the hook commits after it
		h.beforeGateRead(pk.Value)
		return out, err
	}
	return h.Client.GetItem(ctx, in, opts...)
}

func (h *hookClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := h.Client.TransactWriteItems(ctx, in, opts...)
	id, _ := h.crashAfter.Load().(string)
	if err == nil && id != "" && in.TransactItems[0].Put != nil {
		if pk, _ := in.TransactItems[0].Put.Item[dedup.AttrPK].(*types.AttributeValueMemberS); pk != nil && pk.Value == dedup.MarkerKey("seq", id) {
			h.crashAfter.Store("")
			return nil, errors.New("invocation ended after the commit")
		}
	}
	return out, err
}

// TestResequencerPredecessorCommitsBetweenReadAndBufferWrite: event 3
// fails its gate, reads the ordering item (last 1: early) — and event 2
// commits right then, on another instance. Event 3's buffer write is
// conditioned on the gate still being short of it, so it fails, and event
// 3 is applied instead: never left in a buffer nobody will drain.
func TestResequencerPredecessorCommitsBetweenReadAndBufferWrite(t *testing.T) {
	f := newSeqFixture(t)
	ctx := context.Background()
	other := f.consumer(t, nil, dedup.ResequencerConfig{})
	evs := history(t, "race", 3)
	if err := other.r.Handle(ctx, evs[0]); err != nil {
		t.Fatal(err)
	}
	hook := &hookClient{Client: f.env.DDB}
	var once sync.Once
	hook.beforeGateRead = func(string) {
		once.Do(func() {
			if err := other.r.Handle(ctx, evs[1]); err != nil {
				t.Errorf("event 2 on the other instance: %v", err)
			}
		})
	}
	c := f.consumer(t, hook, dedup.ResequencerConfig{})
	if err := c.r.Handle(ctx, evs[2]); err != nil {
		t.Fatalf("event 3: %v", err)
	}
	if got := f.applied(t, "race"); !slices.Equal(got, want(3)) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
	if b := f.buffered(t); len(b) != 0 {
		t.Fatalf("buffer not empty: %+v", b)
	}
}

// TestResequencerCrashAfterApplyBeforeDrain: event 3 waits in the buffer;
// the invocation that applies event 2 dies right after the commit, before
// draining. Nothing is lost and each way back drains event 3: the
// redelivery of event 2 (a duplicate), the next event of the aggregate,
// or a sweep.
func TestResequencerCrashAfterApplyBeforeDrain(t *testing.T) {
	f := newSeqFixture(t)
	ctx := context.Background()
	hook := &hookClient{Client: f.env.DDB}
	c := f.consumer(t, hook, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond})
	for _, way := range []string{"redelivery", "next event", "sweep"} {
		t.Run(way, func(t *testing.T) {
			agg := "crash-" + strings.ReplaceAll(way, " ", "-")
			evs := history(t, agg, 4)
			for _, i := range []int{0, 2} {
				if err := c.r.Handle(ctx, evs[i]); err != nil {
					t.Fatal(err)
				}
			}
			env2, _ := dedup.DecodeEnvelope(evs[1])
			hook.crashAfter.Store(env2.EventID)
			if err := c.r.Handle(ctx, evs[1]); err == nil {
				t.Fatal("the crashed invocation reported success")
			}
			if got := f.applied(t, agg); !slices.Equal(got, want(2)) {
				t.Fatalf("after the crash: applied %v, want [1 2]", got)
			}
			if st := f.gate(t, c, agg); st.Last != 2 || !st.IsBuffered(3) {
				t.Fatalf("after the crash: gate %+v, want last 2 with 3 buffered", st)
			}
			switch way {
			case "redelivery":
				if err := c.r.Handle(ctx, evs[1]); err != nil {
					t.Fatal(err)
				}
			case "next event":
				if err := c.r.Handle(ctx, evs[3]); err != nil {
					t.Fatal(err)
				}
			case "sweep":
				rep, err := c.r.Sweep(ctx)
				if err != nil || rep.Drained != 1 {
					t.Fatalf("Sweep = %+v, %v; want 1 drained", rep, err)
				}
			}
			wantN := 3
			if way == "next event" {
				wantN = 4
			}
			if got := f.applied(t, agg); !slices.Equal(got, want(wantN)) {
				t.Fatalf("applied %v, want %v", got, want(wantN))
			}
		})
	}
}

// TestResequencerDuplicatesAndConflicts: a duplicate of a buffered event
// is acknowledged and leaves one buffer item; another event claiming a
// buffered sequence is refused for good (sequence_conflict), never applied.
func TestResequencerDuplicatesAndConflicts(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	ctx := context.Background()
	evs := history(t, "dup", 3)
	for range 3 {
		if err := c.r.Handle(ctx, evs[2]); err != nil {
			t.Fatal(err)
		}
	}
	if b := f.buffered(t); len(b) != 1 || b[0].Sequence != 3 {
		t.Fatalf("buffered %+v, want sequence 3 once", b)
	}
	impostor := history(t, "dup", 3)[2] // sequence 3, another event id
	err := c.r.Handle(ctx, impostor)
	if p, ok := sqsconsumer.AsPermanent(err); !ok || p.Reason != dedup.ReasonSequenceConflict {
		t.Fatalf("impostor: %v, want %s", err, dedup.ReasonSequenceConflict)
	}
	for _, i := range []int{0, 1} {
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.applied(t, "dup"); !slices.Equal(got, want(3)) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
}

// TestResequencerLimits: past MaxDepth events of one aggregate, or for an
// event too large for a DynamoDB item, the buffer refuses and the event is
// held in its queue as before the resequencer (a *GapError: redelivered,
// nothing written) — never dropped; it applies when redelivered after its
// predecessor.
func TestResequencerLimits(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{MaxDepth: 2})
	ctx := context.Background()
	evs := history(t, "deep", 6)
	for _, i := range []int{2, 3} {
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	err := c.r.Handle(ctx, evs[4])
	if gap, ok := dedup.AsGapError(err); !ok || gap.Sequence != 5 {
		t.Fatalf("sequence 5 past MaxDepth: %v, want a *GapError", err)
	}
	big := history(t, "deep", 6)[5]
	env6, _ := dedup.DecodeEnvelope(evs[5])
	big.Detail, _ = env6.Detail()
	big.Resources = []string{strings.Repeat("r", dedup.MaxBufferedEventBytes)}
	c2 := f.consumer(t, nil, dedup.ResequencerConfig{})
	if err := c2.r.Handle(ctx, big); !errors.Is(err, dedup.ErrSequenceGap) {
		t.Fatalf("an event over MaxBufferedEventBytes: %v, want a *GapError", err)
	}
	for _, i := range []int{0, 1, 4, 5} {
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatalf("sequence %d: %v", i+1, err)
		}
	}
	if got := f.applied(t, "deep"); !slices.Equal(got, want(6)) {
		t.Fatalf("applied %v, want 1..6", got)
	}
	if _, err := dedup.NewResequencer(c.a, c.handle, dedup.ResequencerConfig{MaxDepth: dedup.MaxBufferMaxDepth + 1}, nil); err == nil {
		t.Fatal("MaxDepth past the limit accepted")
	}
}

// fakeDLQ records SendMessage calls (a consumer DLQ).
type fakeDLQ struct {
	mu   sync.Mutex
	sent []*sqs.SendMessageInput
}

func (d *fakeDLQ) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, in)
	return &sqs.SendMessageOutput{}, nil
}

func sqsBatch(t *testing.T, evs ...events.EventBridgeEvent) events.SQSEvent {
	t.Helper()
	var b events.SQSEvent
	for _, ev := range evs {
		body, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Records = append(b.Records, events.SQSMessage{MessageId: uuid.NewString(), Body: string(body),
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	}
	return b
}

// TestResequencerDrainedEventFailsForGood: events 3 and 4 wait in the
// buffer; when event 2 is applied, event 3 turns out to fail for good. It
// is dead-lettered on its own (its body, its reason) through the SQS
// consumer's DLQ, event 2's delivery still succeeds, and event 4 keeps
// waiting durably — not dead-lettered for waiting. Redriving event 3 from
// the DLQ applies it and drains event 4.
func TestResequencerDrainedEventFailsForGood(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	dlq := &fakeDLQ{}
	h, err := sqsconsumer.New(c.r.Handle, sqsconsumer.Config{Name: "seq", DLQ: dlq, DLQURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/seq-dlq", Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	evs := history(t, "poison", 4)
	resp, err := h.Handle(ctx, sqsBatch(t, evs[0], evs[2], evs[3]))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("first batch: %+v, %v", resp, err)
	}
	c.refuse.Store(3)
	resp, err = h.Handle(ctx, sqsBatch(t, evs[1]))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("event 2: %+v, %v", resp, err)
	}
	if len(dlq.sent) != 1 || aws.ToString(dlq.sent[0].MessageAttributes[sqsconsumer.AttrReason].StringValue) != "test_refused" {
		t.Fatalf("dead-lettered %d messages, want event 3 with its reason", len(dlq.sent))
	}
	var dead events.EventBridgeEvent
	if err := json.Unmarshal([]byte(aws.ToString(dlq.sent[0].MessageBody)), &dead); err != nil || dead.ID != evs[2].ID {
		t.Fatalf("DLQ body is not event 3: %v", err)
	}
	if got := f.applied(t, "poison"); !slices.Equal(got, want(2)) {
		t.Fatalf("applied %v, want [1 2]", got)
	}
	if b := f.buffered(t); len(b) != 1 || b[0].Sequence != 4 {
		t.Fatalf("buffered %+v, want event 4 waiting", b)
	}
	c.refuse.Store(0)
	resp, err = h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "redrive-1", Body: aws.ToString(dlq.sent[0].MessageBody)}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("redrive: %+v, %v", resp, err)
	}
	if got := f.applied(t, "poison"); !slices.Equal(got, want(4)) {
		t.Fatalf("after the redrive: applied %v, want 1..4", got)
	}
}

// TestResequencerGapWaitsDurably: the missing event never comes; the
// early one waits in the buffer however often it is delivered, a sweep
// leaves it (its gap is real) and reports its age — also as the metrics
// line a sweep tick (the schedule's event on the queue) writes — and the
// missing event's arrival (a redrive) drains it.
func TestResequencerGapWaitsDurably(t *testing.T) {
	f := newSeqFixture(t)
	var metrics bytes.Buffer
	c := f.consumer(t, nil, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond, Metrics: &metrics})
	ctx := context.Background()
	evs := history(t, "gap", 3)
	for _, i := range []int{0, 2, 2, 2, 2, 2, 2} {
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := c.r.Sweep(ctx)
	if err != nil || rep.Buffered != 1 || rep.Aggregates != 1 || rep.Drained != 0 || rep.OldestAge <= 0 {
		t.Fatalf("Sweep = %+v, %v; want one event waiting", rep, err)
	}
	tick := events.EventBridgeEvent{Version: "0", ID: uuid.NewString(), DetailType: "Scheduled Event", Source: "aws.events",
		Resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/LedgerResequencerSweep"}, Detail: json.RawMessage(`{}`)}
	if !dedup.IsSweepTick(tick) {
		t.Fatal("the schedule's event is not a sweep tick")
	}
	if err := c.r.Handle(ctx, tick); err != nil {
		t.Fatalf("sweep tick: %v", err)
	}
	var line map[string]any
	if err := json.Unmarshal(metrics.Bytes(), &line); err != nil {
		t.Fatalf("metrics line %q: %v", metrics.String(), err)
	}
	if age, _ := line[config.MetricOldestBufferedAge].(float64); line[config.MetricBufferedEvents] != float64(1) ||
		line[config.MetricDimensionConsumer] != "seq" || age <= 0 || get(line, "_aws", "CloudWatchMetrics") == nil {
		t.Fatalf("metrics line %v", line)
	}
	if got := f.applied(t, "gap"); !slices.Equal(got, want(1)) {
		t.Fatalf("a sweep tick applied something: %v", got)
	}
	if err := c.r.Handle(ctx, evs[1]); err != nil {
		t.Fatal(err)
	}
	if got := f.applied(t, "gap"); !slices.Equal(got, want(3)) {
		t.Fatalf("applied %v", got)
	}
	if rep, err := c.r.Sweep(ctx); err != nil || rep.Buffered != 0 || rep.OldestAge != 0 {
		t.Fatalf("Sweep after the redrive = %+v, %v", rep, err)
	}
}

// TestStartingPointBaseline: a consumer added to a running system holds
// events 5 and 7 of an aggregate it never saw (they arrived live); an
// operator declares its starting point after sequence 4 (SetBaseline, what
// outboxctl consumer-baseline writes): the sweep applies 5; 6's arrival
// applies 6 and 7. A baseline never moves an existing starting point.
//
// And the case (#31): a starting point read from the orders table
// (version 4) for an aggregate whose events 3 (the payment) and 4 (the
// refund) the consumer already holds starts below them (after 2), so both
// are applied, in order: a starting point never removes what the consumer
// received. Before the fix the payment was removed unapplied and the
// refund applied alone.
func TestStartingPointBaseline(t *testing.T) {
	f := newSeqFixture(t)
	c := f.consumer(t, nil, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond})
	ctx := context.Background()
	evs := history(t, "late", 7)
	for _, i := range []int{4, 6} {
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.applied(t, "late"); len(got) != 0 {
		t.Fatalf("applied %v without a starting point", got)
	}
	b, err := dedup.SetBaseline(ctx, f.env.DDB, f.dd, "seq", "Order", "late", 4, time.Now())
	if err != nil || !b.Set || b.Lowered || b.Last != 4 {
		t.Fatalf("SetBaseline = %+v, %v; want set after 4", b, err)
	}
	if b, err := dedup.SetBaseline(ctx, f.env.DDB, f.dd, "seq", "Order", "late", 2, time.Now()); err != nil || b.Set || b.Last != 4 {
		t.Fatalf("second SetBaseline = %+v, %v; want not set (the starting point after 4 exists)", b, err)
	}
	if rep, err := c.r.Sweep(ctx); err != nil || rep.Drained != 1 || rep.Buffered != 1 {
		t.Fatalf("Sweep = %+v, %v; want 5 drained, 7 waiting", rep, err)
	}
	if err := c.r.Handle(ctx, evs[5]); err != nil {
		t.Fatal(err)
	}
	if got := f.applied(t, "late"); !slices.Equal(got, []int64{5, 6, 7}) {
		t.Fatalf("applied %v, want [5 6 7]", got)
	}
	if _, err := dedup.SetBaseline(ctx, f.env.DDB, f.dd, "seq", "Order", "x", -1, time.Now()); err == nil {
		t.Fatal("a negative baseline was accepted")
	}

	held := history(t, "held", 4)
	for _, i := range []int{3, 2} { // the refund, then the payment: both early, both held
		if err := c.r.Handle(ctx, held[i]); err != nil {
			t.Fatal(err)
		}
	}
	b, err = dedup.SetBaseline(ctx, f.env.DDB, f.dd, "seq", "Order", "held", 4, time.Now())
	if err != nil || !b.Set || !b.Lowered || b.Last != 2 {
		t.Fatalf("SetBaseline over held events = %+v, %v; want set after 2 (below the held 3 and 4)", b, err)
	}
	if rep, err := c.r.Sweep(ctx); err != nil || rep.Drained != 2 || rep.Buffered != 0 {
		t.Fatalf("Sweep = %+v, %v; want 3 and 4 applied", rep, err)
	}
	if got := f.applied(t, "held"); !slices.Equal(got, []int64{3, 4}) {
		t.Fatalf("applied %v, want [3 4]: the payment, then the refund", got)
	}
}

// TestStartingPointReplayAdoptsHistory: the consumer ran unordered and
// applied events 1 and 2; it is switched to ordered and receives event 3,
// which waits (no starting point). Replaying the history (1, 2: a
// backfill, or outboxctl replay) finds their markers, so the gate adopts
// them instead of applying them again, and event 3 is applied.
func TestStartingPointReplayAdoptsHistory(t *testing.T) {
	f := newSeqFixture(t)
	ctx := context.Background()
	evs := history(t, "switch", 3)
	un, err := dedup.NewApplier(f.env.DDB, dedup.Config{Table: f.dd, Consumer: "seq"})
	if err != nil {
		t.Fatal(err)
	}
	old := &seqConsumer{t: t, a: un, side: f.side, dd: f.dd}
	for _, i := range []int{1, 0} { // unordered: in arrival order
		if err := old.handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	c := f.consumer(t, nil, dedup.ResequencerConfig{})
	if err := c.r.Handle(ctx, evs[2]); err != nil {
		t.Fatal(err)
	}
	if got := f.applied(t, "switch"); !slices.Equal(got, []int64{2, 1}) {
		t.Fatalf("event 3 applied without a starting point: %v", got)
	}
	for _, i := range []int{0, 1} {
		if err := c.r.Handle(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.applied(t, "switch"); !slices.Equal(got, []int64{2, 1, 3}) {
		t.Fatalf("applied %v, want [2 1 3]: the history adopted, not applied again, then 3", got)
	}
}

// get walks nested maps.
func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
