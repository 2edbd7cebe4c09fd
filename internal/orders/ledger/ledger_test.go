package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	contract "github.com/ddb-outbox/ddb-outbox/events"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func envelope(t testing.TB, orderID string, seq int64, typ string, payload any) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: orderID, Sequence: seq},
		outbox.Event{Type: typ, Version: order.EventVersion, Payload: payload}, outbox.Metadata{CorrelationID: "corr-1"})
	// The write side refuses numbers beyond 2^53-1 (ErrUnsafeNumber); forged
	// events may carry them and the ledger must refuse them itself.
	if err != nil && !errors.Is(err, outbox.ErrUnsafeNumber) {
		t.Fatal(err)
	}
	return env
}

// delivery wraps env as EventBridge delivers it to a consumer Lambda, with a
// fresh EventBridge id each time (as a re-send by relay or reconciler gets).
func delivery(t testing.TB, env outbox.Envelope) events.EventBridgeEvent {
	t.Helper()
	detail, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	return events.EventBridgeEvent{
		Version: "0", ID: uuid.NewString(), DetailType: env.EventType, Source: "com.ddb-outbox.orders",
		AccountID: "123456789012", Time: time.Now().UTC().Truncate(time.Second), Region: "eu-west-1",
		Resources: []string{}, Detail: detail,
	}
}

type fixture struct {
	env    *ddbtest.Env
	ledger *ledger.Ledger
	table  string
	dedup  string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	env := ddbtest.New(t)
	lt, dt := ddbtest.Name("ledger"), ddbtest.Name("dedup")
	env.CreateTable(t, ledger.CreateTableInput(lt))
	env.CreateTable(t, dedup.CreateTableInput(dt))
	l, err := ledger.New(env.DDB, ledger.Config{Ordering: dedup.Unordered, Table: lt, Dedup: dedup.Config{Table: dt, MaxAttempts: 10,
		BaseBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{env: env, ledger: l, table: lt, dedup: dt}
}

func (f fixture) markerExists(t *testing.T, eventID string) bool {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.dedup), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dedup.MarkerKey("ledger", eventID)}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

func mustBalance(t *testing.T, l *ledger.Ledger, cur string, want int64) {
	t.Helper()
	got, err := l.Balance(context.Background(), cur)
	if err != nil || got != want {
		t.Fatalf("balance %s = %d (%v), want %d", cur, got, err, want)
	}
}

func TestLedgerBooksOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.ledger

	paid := envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 1250, Currency: "EUR"})
	// The same envelope delivered three times, each with a new EventBridge id.
	for i := 0; i < 3; i++ {
		if err := l.Handle(ctx, delivery(t, paid)); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	mustBalance(t, l, "EUR", 1250)
	e, ok, err := l.Entry(ctx, paid.EventID)
	if err != nil || !ok || e.Direction != ledger.DirectionCredit || e.AmountMinor != 1250 || e.OrderID != "o-1" || e.Sequence != 2 {
		t.Fatalf("entry = %+v, %v, %v", e, ok, err)
	}

	// A re-send keyed by event_id: a fresh decode of the same bytes, new id.
	resent := delivery(t, paid)
	resent.Time = resent.Time.Add(time.Hour)
	if err := l.Handle(ctx, resent); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, l, "EUR", 1250)

	// Refund, delivered twice.
	refund := envelope(t, "o-1", 3, order.EventOrderCancelled, order.Cancelled{OrderID: "o-1", WasPaid: true, RefundMinor: 1250, Currency: "EUR"})
	for i := 0; i < 2; i++ {
		if err := l.Handle(ctx, delivery(t, refund)); err != nil {
			t.Fatal(err)
		}
	}
	mustBalance(t, l, "EUR", 0)
	if e, _, _ := l.Entry(ctx, refund.EventID); e.Direction != ledger.DirectionDebit || e.AmountMinor != 1250 {
		t.Fatalf("refund entry = %+v", e)
	}

	// A cancellation without payment moves no money but is acknowledged and recorded.
	unpaid := envelope(t, "o-2", 2, order.EventOrderCancelled, order.Cancelled{OrderID: "o-2", Currency: "USD"})
	if err := l.Handle(ctx, delivery(t, unpaid)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := l.Entry(ctx, unpaid.EventID); ok {
		t.Fatal("unpaid cancellation booked an entry")
	}
	if !f.markerExists(t, unpaid.EventID) {
		t.Fatal("unpaid cancellation not recorded as seen")
	}

	// Unknown (or unrouted) detail-types are ignored and acknowledged.
	shipped := envelope(t, "o-1", 4, order.EventOrderShipped, order.Shipped{OrderID: "o-1"})
	other := envelope(t, "x-1", 1, "SomethingElse", map[string]any{})
	for _, e := range []outbox.Envelope{shipped, other} {
		if err := l.Handle(ctx, delivery(t, e)); err != nil {
			t.Fatalf("%s: %v", e.EventType, err)
		}
		if f.markerExists(t, e.EventID) {
			t.Fatalf("%s: ignored event wrote a marker", e.EventType)
		}
	}

	bal, err := l.Balances(ctx)
	if err != nil || len(bal) != 1 || bal["EUR"] != 0 {
		t.Fatalf("Balances = %v, %v", bal, err)
	}
	if n, err := l.EntryCount(ctx); err != nil || n != 2 {
		t.Fatalf("EntryCount = %d, %v; want 2", n, err)
	}
}

// TestLedgerMarkerAndEffectInOneTransaction forces the entry Put's condition
// to fail (the entry exists, the marker does not, as after a marker TTL
// expiry): the transaction is cancelled, so no marker is written and the
// balance does not move; the handler acknowledges the redelivery.
func TestLedgerMarkerAndEffectInOneTransaction(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	paid := envelope(t, "o-9", 2, order.EventOrderPaid, order.Paid{OrderID: "o-9", AmountMinor: 700, Currency: "EUR"})
	_, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: ledger.EntryPrefix + paid.EventID}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ledger.Handle(ctx, delivery(t, paid)); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if f.markerExists(t, paid.EventID) {
		t.Fatal("marker written although its side effect was cancelled")
	}
	mustBalance(t, f.ledger, "EUR", 0)
}

func TestLedgerRefusesBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		name string
		env  outbox.Envelope
		want error
	}{
		{"zero amount", envelope(t, "o", 2, order.EventOrderPaid, order.Paid{OrderID: "o", Currency: "EUR"}), ledger.ErrInvalidPayload},
		{"bad currency", envelope(t, "o", 2, order.EventOrderPaid, order.Paid{OrderID: "o", AmountMinor: 1, Currency: "eur"}), ledger.ErrInvalidPayload},
		{"no order id", envelope(t, "o", 2, order.EventOrderPaid, order.Paid{AmountMinor: 1, Currency: "EUR"}), ledger.ErrInvalidPayload},
		{"paid refund of zero", envelope(t, "o", 2, order.EventOrderCancelled, order.Cancelled{OrderID: "o", WasPaid: true, Currency: "EUR"}), ledger.ErrInvalidPayload},
		{"amount is a string", envelope(t, "o", 2, order.EventOrderPaid, map[string]any{"order_id": "o", "amount_minor": "5", "currency": "EUR"}), ledger.ErrInvalidPayload},
		{"unsupported version", func() outbox.Envelope {
			e := envelope(t, "o", 2, order.EventOrderPaid, order.Paid{OrderID: "o", AmountMinor: 1, Currency: "EUR"})
			e.EventVersion = 2
			return e
		}(), ledger.ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.ledger.Handle(ctx, delivery(t, tt.env))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if f.markerExists(t, tt.env.EventID) {
				t.Fatal("refused event wrote a marker")
			}
		})
	}
	bad := events.EventBridgeEvent{ID: "x", DetailType: order.EventOrderPaid, Source: "com.ddb-outbox.orders", Detail: json.RawMessage(`{"event_id":1}`)}
	if err := f.ledger.Handle(ctx, bad); !errors.Is(err, dedup.ErrMalformedEvent) {
		t.Fatalf("malformed detail: err = %v", err)
	}
	mustBalance(t, f.ledger, "EUR", 0)
}

// TestLedgerConcurrentDeliveries delivers paid and refund events, each two
// or three times with different EventBridge ids, from 50 goroutines in random
// order. A delivery that returns an error is redelivered, as Lambda would.
// The balances must equal sum(paid) - sum(refunded), with one entry per event.
func TestLedgerConcurrentDeliveries(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	want := map[string]int64{}
	var envs []outbox.Envelope
	for i := 0; i < 40; i++ {
		cur := []string{"EUR", "USD"}[i%2]
		id := fmt.Sprintf("o-%02d", i)
		amount := int64(100 + i)
		envs = append(envs, envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: amount, Currency: cur}))
		want[cur] += amount
		if i%4 == 0 {
			envs = append(envs, envelope(t, id, 3, order.EventOrderCancelled, order.Cancelled{OrderID: id, WasPaid: true, RefundMinor: amount, Currency: cur}))
			want[cur] -= amount
		}
	}
	var deliveries []events.EventBridgeEvent
	for i, e := range envs {
		for n := 0; n < 2+i%2; n++ {
			deliveries = append(deliveries, delivery(t, e))
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	work := make(chan events.EventBridgeEvent)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	var redeliveries int
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range work {
				var err error
				for try := 0; try < 20; try++ {
					if err = f.ledger.Handle(ctx, ev); err == nil {
						break
					}
					mu.Lock()
					redeliveries++
					mu.Unlock()
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, ev := range deliveries {
		work <- ev
	}
	close(work)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d deliveries never succeeded, first: %v", len(failures), failures[0])
	}
	t.Logf("%d deliveries of %d events, %d redeliveries after errors", len(deliveries), len(envs), redeliveries)

	got, err := f.ledger.Balances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for cur, w := range want {
		if got[cur] != w {
			t.Errorf("balance %s = %d, want %d", cur, got[cur], w)
		}
	}
	if n, err := f.ledger.EntryCount(ctx); err != nil || n != len(envs) {
		t.Fatalf("EntryCount = %d, %v; want %d", n, err, len(envs))
	}
}

// conflictClient cancels every transaction with TransactionConflict on the
// balance update (action 2), like a hot balance item under heavy load.
type conflictClient struct {
	ledger.Client
	mu    sync.Mutex
	calls int
}

func (c *conflictClient) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	for i := range reasons {
		reasons[i] = types.CancellationReason{Code: aws.String(outbox.ReasonNone)}
	}
	reasons[len(reasons)-1].Code = aws.String(outbox.ReasonTransactionConflict)
	return nil, &types.TransactionCanceledException{CancellationReasons: reasons}
}

func TestLedgerGivesUpOnPersistentConflict(t *testing.T) {
	t.Parallel()
	c := &conflictClient{}
	l, err := ledger.New(c, ledger.Config{Ordering: dedup.Unordered, Table: "l", Dedup: dedup.Config{Table: "d", MaxAttempts: 4,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	paid := envelope(t, "o", 2, order.EventOrderPaid, order.Paid{OrderID: "o", AmountMinor: 5, Currency: "EUR"})
	err = l.Handle(context.Background(), delivery(t, paid))
	te, ok := outbox.AsTxError(err)
	if !ok || !te.Retryable() {
		t.Fatalf("want a retryable TxError so the platform redelivers, got %v", err)
	}
	if c.calls != 4 {
		t.Fatalf("calls = %d, want 4 (bounded retries)", c.calls)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	if _, err := ledger.New(&conflictClient{}, ledger.Config{Dedup: dedup.Config{Table: "d"}}); err == nil {
		t.Fatal("missing Table accepted")
	}
	// The ledger's dedup state lives in its own table by default.
	l, err := ledger.New(&conflictClient{}, ledger.Config{Ordering: dedup.Unordered, Table: "l"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Config().Dedup.Table; got != "l" {
		t.Fatalf("Dedup.Table = %q, want the ledger's own table", got)
	}
	if _, err := ledger.New(&conflictClient{}, ledger.Config{Ordering: dedup.Unordered, Table: "l", Dedup: dedup.Config{Table: "d"}}); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerHandlesTheSample books the EventBridge sample a consumer Lambda
// receives (events/samples/eventbridge-order-paid.json).
func TestLedgerHandlesTheSample(t *testing.T) {
	f := newFixture(t)
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(contract.Sample(contract.SampleEventBridgeOrderPaid), &ev); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := f.ledger.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	mustBalance(t, f.ledger, "EUR", 1250)
}
