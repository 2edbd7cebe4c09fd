package notifier_test

import (
	"context"
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

	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func envelope(t testing.TB, orderID string, seq int64, typ string, payload any) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: orderID, Sequence: seq},
		outbox.Event{Type: typ, Version: order.EventVersion, Payload: payload}, outbox.Metadata{})
	// The write side refuses numbers beyond 2^53-1 (ErrUnsafeNumber); forged
	// events may carry them and the notifier must refuse them itself.
	if err != nil && !errors.Is(err, outbox.ErrUnsafeNumber) {
		t.Fatal(err)
	}
	return env
}

// delivery wraps env as EventBridge delivers it, with a fresh EventBridge id.
func delivery(t testing.TB, env outbox.Envelope) events.EventBridgeEvent {
	t.Helper()
	detail, err := env.Detail()
	if err != nil {
		t.Fatal(err)
	}
	return events.EventBridgeEvent{Version: "0", ID: uuid.NewString(), DetailType: env.EventType,
		Source: "com.ddb-outbox.orders", AccountID: "123456789012", Time: time.Now().UTC(), Region: "eu-west-1",
		Resources: []string{}, Detail: detail}
}

type fixture struct {
	env   *ddbtest.Env
	n     *notifier.Notifier
	table string
	dedup string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	env := ddbtest.New(t)
	nt, dt := ddbtest.Name("notifications"), ddbtest.Name("dedup")
	env.CreateTable(t, notifier.CreateTableInput(nt))
	env.CreateTable(t, dedup.CreateTableInput(dt))
	n, err := notifier.New(env.DDB, notifier.Config{Ordering: dedup.Unordered, Table: nt, Dedup: dedup.Config{Table: dt, MaxAttempts: 10,
		BaseBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{env: env, n: n, table: nt, dedup: dt}
}

func (f fixture) markerExists(t *testing.T, eventID string) bool {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.dedup), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dedup.MarkerKey("notifier", eventID)}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

func (f fixture) handle(t *testing.T, env outbox.Envelope) {
	t.Helper()
	if err := f.n.Handle(context.Background(), delivery(t, env)); err != nil {
		t.Fatalf("Handle %s seq %d: %v", env.EventType, env.Sequence, err)
	}
}

func (f fixture) wantView(t *testing.T, orderID, status string, seq int64) {
	t.Helper()
	v, ok, err := f.n.View(context.Background(), orderID)
	if err != nil || !ok || v.Status != status || v.LastSequence != seq || v.OrderID != orderID {
		t.Fatalf("view = %+v, %v, %v; want %s at %d", v, ok, err, status, seq)
	}
}

func (f fixture) wantCount(t *testing.T, want int) {
	t.Helper()
	if n, err := f.n.NotificationCount(context.Background()); err != nil || n != want {
		t.Fatalf("NotificationCount = %d, %v; want %d", n, err, want)
	}
}

func TestNotifierRecordsOnceAndTracksStatus(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	placed := envelope(t, "o-1", 1, order.EventOrderPlaced, order.Placed{OrderID: "o-1", CustomerID: "c-7", AmountMinor: 1250, Currency: "EUR"})
	paid := envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 1250, Currency: "EUR"})

	for i := 0; i < 3; i++ { // duplicates with different EventBridge ids
		f.handle(t, placed)
	}
	f.wantView(t, "o-1", notifier.StatusPlaced, 1)
	f.wantCount(t, 1)
	nt, ok, err := f.n.Notification(ctx, placed.EventID)
	if err != nil || !ok || nt.Message != "Order o-1 placed by customer c-7 for 12.50 EUR." || nt.Sequence != 1 || nt.EventType != order.EventOrderPlaced {
		t.Fatalf("notification = %+v, %v, %v", nt, ok, err)
	}

	f.handle(t, paid)
	f.handle(t, paid)
	f.wantView(t, "o-1", notifier.StatusPaid, 2)
	f.wantCount(t, 2)

	// Unknown detail-type: ignored, acknowledged, nothing written.
	other := envelope(t, "o-1", 9, "InventoryReserved", map[string]any{"order_id": "o-1"})
	f.handle(t, other)
	if f.markerExists(t, other.EventID) {
		t.Fatal("ignored event wrote a marker")
	}
	f.wantView(t, "o-1", notifier.StatusPaid, 2)
	f.wantCount(t, 2)
}

// TestNotifierViewNeverGoesBackwards delivers sequence 3 before sequence 2:
// the view stays at 3, and the notification of 2 is still recorded, once.
func TestNotifierViewNeverGoesBackwards(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	paid := envelope(t, "o-2", 2, order.EventOrderPaid, order.Paid{OrderID: "o-2", AmountMinor: 500, Currency: "JPY"})
	shipped := envelope(t, "o-2", 3, order.EventOrderShipped, order.Shipped{OrderID: "o-2"})

	f.handle(t, shipped)
	f.wantView(t, "o-2", notifier.StatusShipped, 3)
	f.handle(t, paid) // late
	f.wantView(t, "o-2", notifier.StatusShipped, 3)
	nt, ok, err := f.n.Notification(ctx, paid.EventID)
	if err != nil || !ok || nt.Message != "Payment of 500 JPY received for order o-2." {
		t.Fatalf("late notification = %+v, %v, %v", nt, ok, err)
	}
	if !f.markerExists(t, paid.EventID) {
		t.Fatal("late event has no marker")
	}
	f.handle(t, paid) // a duplicate of the late one
	f.handle(t, shipped)
	f.wantView(t, "o-2", notifier.StatusShipped, 3)
	f.wantCount(t, 2)
}

// TestNotifierMarkerAndEffectInOneTransaction forces the notification Put's
// condition to fail (the notification exists but the marker does not): the
// transaction is cancelled, no marker is written, the view is not touched,
// and the handler acknowledges the redelivery.
func TestNotifierMarkerAndEffectInOneTransaction(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	placed := envelope(t, "o-3", 1, order.EventOrderPlaced, order.Placed{OrderID: "o-3", CustomerID: "c", AmountMinor: 1, Currency: "EUR"})
	_, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: notifier.NotificationPrefix + placed.EventID}}})
	if err != nil {
		t.Fatal(err)
	}
	f.handle(t, placed)
	if f.markerExists(t, placed.EventID) {
		t.Fatal("marker written although its side effect was cancelled")
	}
	if _, ok, _ := f.n.View(ctx, "o-3"); ok {
		t.Fatal("view written by a cancelled transaction")
	}
}

// TestNotifierConcurrentOutOfOrder delivers every event of four orders
// (placed, paid, then shipped or a paid cancellation: sequences 1..3, all the
// state machine emits), each twice, shuffled, from concurrent goroutines:
// each view ends at its highest sequence and every event has exactly one
// notification.
func TestNotifierConcurrentOutOfOrder(t *testing.T) {
	f := newFixture(t)
	var deliveries []events.EventBridgeEvent
	final := map[string]string{}
	for i := range 4 {
		id := fmt.Sprintf("o-4%d", i)
		envs := []outbox.Envelope{
			envelope(t, id, 1, order.EventOrderPlaced, order.Placed{OrderID: id, CustomerID: "c-4", AmountMinor: 99, Currency: "KWD"}),
			envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: 99, Currency: "KWD"}),
		}
		if i%2 == 0 {
			envs = append(envs, envelope(t, id, 3, order.EventOrderShipped, order.Shipped{OrderID: id}))
			final[id] = notifier.StatusShipped
		} else {
			envs = append(envs, envelope(t, id, 3, order.EventOrderCancelled, order.Cancelled{OrderID: id, Reason: "lost", WasPaid: true, RefundMinor: 99, Currency: "KWD"}))
			final[id] = notifier.StatusCancelled
		}
		for _, e := range envs {
			deliveries = append(deliveries, delivery(t, e), delivery(t, e))
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	var wg sync.WaitGroup
	errs := make(chan error, len(deliveries))
	for _, ev := range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			for try := 0; try < 20; try++ { // redelivery, as Lambda would
				if err = f.n.Handle(context.Background(), ev); err == nil {
					return
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("delivery never succeeded: %v", err)
	}
	for id, status := range final {
		f.wantView(t, id, status, 3)
	}
	f.wantCount(t, 12)
}

func TestNotifierRefusesBadInput(t *testing.T) {
	f := newFixture(t)
	noOrder := envelope(t, "o-5", 1, order.EventOrderShipped, map[string]any{"order_id": ""})
	if err := f.n.Handle(context.Background(), delivery(t, noOrder)); !errors.Is(err, notifier.ErrInvalidPayload) {
		t.Fatalf("err = %v, want ErrInvalidPayload", err)
	}
	badType := envelope(t, "o-5", 1, order.EventOrderShipped, map[string]any{"order_id": 5})
	if err := f.n.Handle(context.Background(), delivery(t, badType)); !errors.Is(err, notifier.ErrInvalidPayload) {
		t.Fatalf("err = %v, want ErrInvalidPayload", err)
	}
	v2 := envelope(t, "o-5", 1, order.EventOrderShipped, order.Shipped{OrderID: "o-5"})
	v2.EventVersion = 2
	if err := f.n.Handle(context.Background(), delivery(t, v2)); !errors.Is(err, notifier.ErrUnsupportedVersion) {
		t.Fatalf("err = %v, want ErrUnsupportedVersion", err)
	}
	f.wantCount(t, 0)
}

func TestFormatMoney(t *testing.T) {
	t.Parallel()
	tests := []struct {
		minor int64
		cur   string
		want  string
	}{
		{1250, "EUR", "12.50 EUR"},
		{5, "USD", "0.05 USD"},
		{-1999, "GBP", "-19.99 GBP"},
		{500, "JPY", "500 JPY"},
		{1234, "KWD", "1.234 KWD"},
		{0, "EUR", "0.00 EUR"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.minor, tt.cur), func(t *testing.T) {
			t.Parallel()
			if got := notifier.FormatMoney(tt.minor, tt.cur); got != tt.want {
				t.Fatalf("FormatMoney(%d, %s) = %q, want %q", tt.minor, tt.cur, got, tt.want)
			}
		})
	}
}
