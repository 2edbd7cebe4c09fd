package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// newOrderedFixture is newFixture with the ledger's default ordering
// (dedup.Ordered, with the resequencer) and gapMax receives before a gap
// the buffer cannot take is dead-lettered.
func newOrderedFixture(t *testing.T, gapMax int) fixture {
	return newOrderedFixtureWith(t, gapMax, dedup.ResequencerConfig{})
}

// newHoldingFixture is newOrderedFixture with the resequencer disabled: an
// early event is held in its queue (the fallback for events the buffer
// cannot take).
func newHoldingFixture(t *testing.T, gapMax int) fixture {
	return newOrderedFixtureWith(t, gapMax, dedup.ResequencerConfig{Disabled: true})
}

func newOrderedFixtureWith(t *testing.T, gapMax int, rc dedup.ResequencerConfig) fixture {
	t.Helper()
	env := ddbtest.New(t)
	lt, dt := ddbtest.Name("ledger"), ddbtest.Name("dedup")
	env.CreateTable(t, ledger.CreateTableInput(lt))
	env.CreateTable(t, dedup.CreateTableInput(dt))
	l, err := ledger.New(env.DDB, ledger.Config{Table: lt, GapMaxReceives: gapMax, Logger: quiet, Resequencer: rc,
		Dedup: dedup.Config{Table: dt, MaxAttempts: 10, BaseBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{env: env, ledger: l, table: lt, dedup: dt}
}

// appliedAt returns the applied_at of the ledger's dedup marker of an event
// (zero when it was not applied).
func (f fixture) appliedAt(t *testing.T, eventID string) time.Time {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.dedup), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dedup.MarkerKey("ledger", eventID)}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, out.Item[dedup.AttrAppliedAt].(*types.AttributeValueMemberS).Value)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// paidThenRefunded is one order's life: placed (1), paid (2), cancelled
// with a refund (3).
func paidThenRefunded(t *testing.T, id string, amount int64) []outbox.Envelope {
	return []outbox.Envelope{
		envelope(t, id, 1, order.EventOrderPlaced, order.Placed{OrderID: id, CustomerID: "c-1", AmountMinor: amount, Currency: "EUR"}),
		envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: amount, Currency: "EUR"}),
		envelope(t, id, 3, order.EventOrderCancelled, order.Cancelled{OrderID: id, WasPaid: true, RefundMinor: amount, Currency: "EUR"}),
	}
}

// TestLedgerBufferedAppliesInSequence delivers one order's events once
// each, in every arrival order of three: an early event is acknowledged at
// once (buffered, nothing booked), and the delivery of its predecessor
// books both, in sequence order (dedup markers' applied_at, entries'
// booked_at). No event is ever delivered twice and the money balances.
func TestLedgerBufferedAppliesInSequence(t *testing.T) {
	f := newOrderedFixture(t, 0)
	ctx := context.Background()
	for _, arrival := range [][]int{{3, 1, 2}, {1, 3, 2}, {2, 3, 1}, {3, 2, 1}, {1, 2, 3}, {2, 1, 3}} {
		t.Run(fmt.Sprint(arrival), func(t *testing.T) {
			id := "ob-" + strings.Trim(strings.ReplaceAll(fmt.Sprint(arrival), " ", ""), "[]")
			evs := paidThenRefunded(t, id, 500)
			applied := 0 // the contiguous prefix delivered so far
			delivered := map[int64]bool{}
			for _, seq := range arrival {
				if err := f.ledger.Handle(ctx, delivery(t, evs[seq-1])); err != nil {
					t.Fatalf("seq %d: %v", seq, err)
				}
				delivered[int64(seq)] = true
				for delivered[int64(applied+1)] {
					applied++
				}
				for i, e := range evs {
					if got, want := f.markerExists(t, e.EventID), i < applied; got != want {
						t.Fatalf("after seq %d: sequence %d applied = %v, want %v", seq, e.Sequence, got, want)
					}
				}
			}
			for i := 1; i < len(evs); i++ {
				if a, b := f.appliedAt(t, evs[i-1].EventID), f.appliedAt(t, evs[i].EventID); a.IsZero() || !a.Before(b) {
					t.Fatalf("sequence %d applied at %s, sequence %d at %s", i, a, i+1, b)
				}
			}
			paid, _, _ := f.ledger.Entry(ctx, evs[1].EventID)
			refund, _, _ := f.ledger.Entry(ctx, evs[2].EventID)
			if !paid.BookedAt.Before(refund.BookedAt) {
				t.Fatalf("refund booked at %s, payment at %s", refund.BookedAt, paid.BookedAt)
			}
		})
	}
	mustBalance(t, f.ledger, "EUR", 0)
	if left, err := dedup.ListBuffered(ctx, f.env.DDB, f.dedup, "ledger"); err != nil || len(left) != 0 {
		t.Fatalf("buffer after every order completed: %v, %v", left, err)
	}
}

// TestLedgerOrderedAppliesInSequence is the fallback without the buffer
// (ResequencerConfig.Disabled): one order's events in every interesting
// arrival order; a held event goes back to the end of the queue, as a
// message reported failed comes back. Whatever the arrival order, the
// events are applied in sequence order (dedup markers' applied_at,
// entries' booked_at), an event is refused while its predecessor is
// missing (never booked early), and the money balances.
func TestLedgerOrderedAppliesInSequence(t *testing.T) {
	f := newHoldingFixture(t, 0)
	ctx := context.Background()
	for _, arrival := range [][]int{{3, 1, 2}, {1, 3, 2}, {2, 3, 1}, {3, 2, 1}, {1, 2, 3}} {
		t.Run(fmt.Sprint(arrival), func(t *testing.T) {
			id := "o-" + strings.Trim(strings.ReplaceAll(fmt.Sprint(arrival), " ", ""), "[]")
			evs := paidThenRefunded(t, id, 500)
			queue := make([]outbox.Envelope, 0, len(arrival))
			for _, seq := range arrival {
				queue = append(queue, evs[seq-1])
			}
			var order []int64
			for rounds := 0; len(queue) > 0; rounds++ {
				if rounds > 20 {
					t.Fatalf("queue never drained: %d left", len(queue))
				}
				e := queue[0]
				queue = queue[1:]
				err := f.ledger.Handle(ctx, delivery(t, e))
				next := int64(len(order) + 1)
				switch {
				case e.Sequence == next && err == nil:
					order = append(order, e.Sequence)
				case e.Sequence > next && errors.Is(err, dedup.ErrSequenceGap):
					if _, perm := sqsconsumer.AsPermanent(err); perm {
						t.Fatalf("seq %d: held event dead-lettered before the bound: %v", e.Sequence, err)
					}
					if f.markerExists(t, e.EventID) {
						t.Fatalf("seq %d: held event wrote its marker", e.Sequence)
					}
					if _, booked, _ := f.ledger.Entry(ctx, e.EventID); booked {
						t.Fatalf("seq %d: booked before sequence %d", e.Sequence, next)
					}
					queue = append(queue, e) // redelivered later
				default:
					t.Fatalf("seq %d with %d applied: err = %v", e.Sequence, len(order), err)
				}
			}
			for i := 1; i < len(evs); i++ {
				if a, b := f.appliedAt(t, evs[i-1].EventID), f.appliedAt(t, evs[i].EventID); a.IsZero() || !a.Before(b) {
					t.Fatalf("sequence %d applied at %s, sequence %d at %s", i, a, i+1, b)
				}
			}
			paid, _, _ := f.ledger.Entry(ctx, evs[1].EventID)
			refund, _, _ := f.ledger.Entry(ctx, evs[2].EventID)
			if !paid.BookedAt.Before(refund.BookedAt) {
				t.Fatalf("refund booked at %s, payment at %s", refund.BookedAt, paid.BookedAt)
			}
		})
	}
	mustBalance(t, f.ledger, "EUR", 0)
}

// TestLedgerNeverRefundsBeforePayment: an order placed (1); its refund
// (OrderCancelled was_paid, 3) arrives before its payment (OrderPaid, 2).
// An unordered ledger would book the refund first (the balance goes
// negative); the ordered ledger buffers it, and the payment's delivery
// books the payment, then the refund. The balance never drops below zero.
func TestLedgerNeverRefundsBeforePayment(t *testing.T) {
	f := newOrderedFixture(t, 0)
	ctx := context.Background()
	evs := paidThenRefunded(t, "o-rb", 900)
	for i, e := range []outbox.Envelope{evs[0], evs[2]} {
		if err := f.ledger.Handle(ctx, delivery(t, e)); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	mustBalance(t, f.ledger, "EUR", 0)
	if _, booked, _ := f.ledger.Entry(ctx, evs[2].EventID); booked {
		t.Fatal("refund booked before its payment")
	}
	left, err := dedup.ListBuffered(ctx, f.env.DDB, f.dedup, "ledger")
	if err != nil || len(left) != 1 || left[0].Sequence != 3 || left[0].EventID != evs[2].EventID {
		t.Fatalf("buffered = %+v, %v; want the refund (sequence 3)", left, err)
	}
	if err := f.ledger.Handle(ctx, delivery(t, evs[1])); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, f.ledger, "EUR", 0)
	paid, _, _ := f.ledger.Entry(ctx, evs[1].EventID)
	refund, booked, _ := f.ledger.Entry(ctx, evs[2].EventID)
	if !booked || !paid.BookedAt.Before(refund.BookedAt) {
		t.Fatalf("refund booked=%v at %s, payment at %s", booked, refund.BookedAt, paid.BookedAt)
	}
}

// TestLedgerHoldingNeverRefundsBeforePayment is the same without the
// buffer: the ordered ledger holds the refund (a *GapError, redelivered),
// books the payment, then the refund.
func TestLedgerHoldingNeverRefundsBeforePayment(t *testing.T) {
	f := newHoldingFixture(t, 0)
	ctx := context.Background()
	evs := paidThenRefunded(t, "o-r", 900)
	if err := f.ledger.Handle(ctx, delivery(t, evs[0])); err != nil {
		t.Fatal(err)
	}
	err := f.ledger.Handle(ctx, delivery(t, evs[2]))
	gap, ok := dedup.AsGapError(err)
	if !ok || gap.Last != 1 || gap.Sequence != 3 {
		t.Fatalf("refund before payment: err = %v, want a gap 2..2", err)
	}
	mustBalance(t, f.ledger, "EUR", 0)
	if err := f.ledger.Handle(ctx, delivery(t, evs[1])); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, f.ledger, "EUR", 900)
	if err := f.ledger.Handle(ctx, delivery(t, evs[2])); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, f.ledger, "EUR", 0)
}

// TestLedgerOrderedDuplicates: a duplicate of an applied event is
// acknowledged without effect, whether its marker is still there or has
// expired (the ordering item then says it is behind: sequence <= last).
func TestLedgerOrderedDuplicates(t *testing.T) {
	f := newOrderedFixture(t, 0)
	ctx := context.Background()
	evs := paidThenRefunded(t, "o-d", 300)
	for _, e := range evs[:2] {
		if err := f.ledger.Handle(ctx, delivery(t, e)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"marker present", "marker expired"} {
		if name == "marker expired" {
			for _, e := range evs[:2] {
				if _, err := f.env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(f.dedup),
					Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dedup.MarkerKey("ledger", e.EventID)}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, e := range evs[:2] {
			if err := f.ledger.Handle(ctx, delivery(t, e)); err != nil {
				t.Fatalf("%s: duplicate of sequence %d: %v", name, e.Sequence, err)
			}
			if name == "marker expired" && f.markerExists(t, e.EventID) {
				t.Fatalf("duplicate of sequence %d was applied again (it wrote a marker)", e.Sequence)
			}
		}
		mustBalance(t, f.ledger, "EUR", 300)
		if n, err := f.ledger.EntryCount(ctx); err != nil || n != 1 {
			t.Fatalf("%s: EntryCount = %d, %v", name, n, err)
		}
	}
}

// TestLedgerUnorderedKeepsArrivalOrder: configured Unordered, the ledger
// behaves as before ordering existed: a refund that arrives first is
// booked at once, and events it does not book write nothing.
func TestLedgerUnorderedKeepsArrivalOrder(t *testing.T) {
	f := newFixture(t) // Ordering: dedup.Unordered
	ctx := context.Background()
	evs := paidThenRefunded(t, "o-u", 400)
	for _, i := range []int{2, 0, 1} {
		if err := f.ledger.Handle(ctx, delivery(t, evs[i])); err != nil {
			t.Fatalf("sequence %d: %v", evs[i].Sequence, err)
		}
		if i == 2 {
			mustBalance(t, f.ledger, "EUR", -400)
		}
	}
	if f.markerExists(t, evs[0].EventID) {
		t.Fatal("unordered ledger recorded OrderPlaced")
	}
	mustBalance(t, f.ledger, "EUR", 0)
}

// dlq is a fake consumer DLQ.
type dlq struct {
	mu   sync.Mutex
	sent []*sqs.SendMessageInput
}

func (d *dlq) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, in)
	return &sqs.SendMessageOutput{}, nil
}

// sqsMessage is e as the consumer queue delivers it on receive n.
func sqsMessage(t *testing.T, e outbox.Envelope, n int) events.SQSMessage {
	t.Helper()
	body, err := json.Marshal(delivery(t, e))
	if err != nil {
		t.Fatal(err)
	}
	return events.SQSMessage{MessageId: fmt.Sprintf("m-%d-%d", e.Sequence, n), Body: string(body),
		Attributes: map[string]string{"ApproximateReceiveCount": fmt.Sprint(n)}}
}

// TestLedgerSequenceGapDeadLettered: sequence 2 of an order never arrives
// (parked, or stuck in another DLQ). Sequence 3 is held on receives
// 1..GapMaxReceives-1 and dead-lettered on receive GapMaxReceives with the
// reason sequence_gap and the missing range; nothing is booked. Redriven
// (new messages, receive count 1) after the missing event, the held event
// applies in order.
//
// This is the fallback path (the resequencer disabled, or an event the
// buffer cannot take); with the buffer, see TestLedgerGapWaitsInBuffer.
func TestLedgerSequenceGapDeadLettered(t *testing.T) {
	const gapMax = 4
	f := newHoldingFixture(t, gapMax)
	ctx := context.Background()
	d := &dlq{}
	h, err := sqsconsumer.New(f.ledger.Handle, sqsconsumer.Config{Name: "ledger", DLQ: d, DLQURL: "https://sqs/dlq", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	evs := paidThenRefunded(t, "o-g", 700)
	deliver := func(e outbox.Envelope, n int) (failed bool) {
		t.Helper()
		resp, err := h.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsMessage(t, e, n)}})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.BatchItemFailures) == 1
	}
	if deliver(evs[0], 1) {
		t.Fatal("sequence 1 failed")
	}
	for n := 1; n < gapMax; n++ {
		if !deliver(evs[2], n) || len(d.sent) != 0 {
			t.Fatalf("receive %d: the held event was not left for redelivery (dead-lettered: %d)", n, len(d.sent))
		}
	}
	if deliver(evs[2], gapMax) || len(d.sent) != 1 {
		t.Fatalf("receive %d: want the held event dead-lettered, sent %d", gapMax, len(d.sent))
	}
	attrs := d.sent[0].MessageAttributes
	if r := aws.ToString(attrs[sqsconsumer.AttrReason].StringValue); r != dedup.ReasonSequenceGap {
		t.Fatalf("reason = %q, want %q", r, dedup.ReasonSequenceGap)
	}
	if e := aws.ToString(attrs[sqsconsumer.AttrError].StringValue); !strings.Contains(e, "waiting for sequences 2..2 of Order o-g") {
		t.Fatalf("error attribute %q does not name the missing range", e)
	}
	mustBalance(t, f.ledger, "EUR", 0)

	// Redrive: the missing event, then the held one, each a new message.
	if deliver(evs[1], 1) || deliver(evs[2], 1) {
		t.Fatal("redriven events did not apply")
	}
	mustBalance(t, f.ledger, "EUR", 0)
	if n, err := f.ledger.EntryCount(ctx); err != nil || n != 2 {
		t.Fatalf("EntryCount = %d, %v; want 2", n, err)
	}
}

// TestLedgerStartingPointAfterRunningUnordered is the new user's case: the
// ledger ran unordered and booked an order's events 1 and 2 (the payment);
// it is redeployed ordered and receives the refund (3). Without a starting
// point the refund waits in the buffer (not dead-lettered, not lost, the
// balance unchanged); replaying the order's history (outboxctl replay, or a
// backfill) finds events 1 and 2 applied (their markers), so the gate
// adopts them instead of booking them again, and the refund is booked: the
// balance is right.
func TestLedgerStartingPointAfterRunningUnordered(t *testing.T) {
	f := newFixture(t) // unordered
	ctx := context.Background()
	evs := paidThenRefunded(t, "o-switch", 800)
	for _, e := range evs[:2] {
		if err := f.ledger.Handle(ctx, delivery(t, e)); err != nil {
			t.Fatal(err)
		}
	}
	mustBalance(t, f.ledger, "EUR", 800)
	ordered, err := ledger.New(f.env.DDB, ledger.Config{Table: f.table, Logger: quiet, Dedup: dedup.Config{Table: f.dedup}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ordered.Handle(ctx, delivery(t, evs[2])); err != nil {
		t.Fatalf("the refund after the switch: %v", err)
	}
	mustBalance(t, f.ledger, "EUR", 800)
	if b, err := dedup.ListBuffered(ctx, f.env.DDB, f.dedup, "ledger"); err != nil || len(b) != 1 || b[0].Sequence != 3 {
		t.Fatalf("buffered = %+v, %v; want the refund waiting", b, err)
	}
	for _, e := range evs[:2] { // the replay
		if err := ordered.Handle(ctx, delivery(t, e)); err != nil {
			t.Fatal(err)
		}
	}
	mustBalance(t, f.ledger, "EUR", 0)
	if n, err := f.ledger.EntryCount(ctx); err != nil || n != 2 {
		t.Fatalf("EntryCount = %d, %v; want 2 (payment once, refund once)", n, err)
	}
}

// TestLedgerStartingPointJoinsLate: a new ledger joins a running system;
// an order it never saw already has events 1..2 (paid before the ledger
// existed). Its refund (3) waits; the operator declares the starting point
// from the orders' current versions (outboxctl consumer-baseline), the
// sweep books the refund alone (the payment belongs to the time before).
func TestLedgerStartingPointJoinsLate(t *testing.T) {
	f := newOrderedFixtureWith(t, 0, dedup.ResequencerConfig{SweepMinAge: time.Nanosecond})
	ctx := context.Background()
	evs := paidThenRefunded(t, "o-late", 600)
	if err := f.ledger.Handle(ctx, delivery(t, evs[2])); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, f.ledger, "EUR", 0)
	if b, err := dedup.SetBaseline(ctx, f.env.DDB, f.dedup, "ledger", order.AggregateType, "o-late", 2, time.Now()); err != nil || !b.Set || b.Lowered {
		t.Fatalf("SetBaseline = %+v, %v", b, err)
	}
	if rep, err := f.ledger.Sweep(ctx); err != nil || rep.Drained != 1 || rep.Buffered != 0 {
		t.Fatalf("Sweep = %+v, %v", rep, err)
	}
	mustBalance(t, f.ledger, "EUR", -600)
	if _, booked, _ := f.ledger.Entry(ctx, evs[2].EventID); !booked {
		t.Fatal("the refund after the starting point was not booked")
	}
}
