package notifier_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// TestNotifierOrderedRecordsInSequence: with its default ordering, the
// notifier records an order's notifications in sequence order whatever
// the arrival order (created_at), and ends with the view at the last
// event. With the resequencer (the default) each event is delivered once:
// an early one is buffered (nothing recorded) and recorded by the delivery
// of its predecessor; without it (the fallback) an early event is held
// (nothing written) and redelivered. A duplicate of a recorded event is
// acknowledged without effect.
func TestNotifierOrderedRecordsInSequence(t *testing.T) {
	for _, buffered := range []bool{true, false} {
		t.Run(fmt.Sprint("resequencer=", buffered), func(t *testing.T) { testNotifierOrdered(t, buffered) })
	}
}

func testNotifierOrdered(t *testing.T, buffered bool) {
	env := ddbtest.New(t)
	nt, dt := ddbtest.Name("notifications"), ddbtest.Name("dedup")
	env.CreateTable(t, notifier.CreateTableInput(nt))
	env.CreateTable(t, dedup.CreateTableInput(dt))
	n, err := notifier.New(env.DDB, notifier.Config{Table: nt, Logger: quiet, Dedup: dedup.Config{Table: dt},
		Resequencer: dedup.ResequencerConfig{Disabled: !buffered}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, arrival := range [][]int{{3, 1, 2}, {2, 3, 1}, {1, 3, 2}} {
		t.Run(fmt.Sprint(arrival), func(t *testing.T) {
			id := fmt.Sprintf("o-%d%d%d", arrival[0], arrival[1], arrival[2])
			evs := []outbox.Envelope{
				envelope(t, id, 1, order.EventOrderPlaced, order.Placed{OrderID: id, CustomerID: "c-1", AmountMinor: 100, Currency: "EUR"}),
				envelope(t, id, 2, order.EventOrderPaid, order.Paid{OrderID: id, AmountMinor: 100, Currency: "EUR"}),
				envelope(t, id, 3, order.EventOrderShipped, order.Shipped{OrderID: id}),
			}
			var queue []outbox.Envelope
			for _, seq := range arrival {
				queue = append(queue, evs[seq-1])
			}
			next := int64(1)
			delivered := map[int64]bool{}
			for rounds := 0; len(queue) > 0; rounds++ {
				if rounds > 20 {
					t.Fatalf("queue never drained: %d left", len(queue))
				}
				e := queue[0]
				queue = queue[1:]
				err := n.Handle(ctx, delivery(t, e))
				switch {
				case buffered && err == nil:
					// Recorded now: every event up to the first not yet
					// delivered; nothing after it.
					delivered[e.Sequence] = true
					for delivered[next] {
						next++
					}
					for _, x := range evs {
						if _, ok, _ := n.Notification(ctx, x.EventID); ok != (x.Sequence < next) {
							t.Fatalf("after seq %d: sequence %d recorded = %v", e.Sequence, x.Sequence, ok)
						}
					}
				case e.Sequence == next && err == nil:
					next++
				case e.Sequence > next && errors.Is(err, dedup.ErrSequenceGap):
					if _, perm := sqsconsumer.AsPermanent(err); perm {
						t.Fatalf("seq %d dead-lettered outside SQS: %v", e.Sequence, err)
					}
					if _, ok, _ := n.Notification(ctx, e.EventID); ok {
						t.Fatalf("seq %d recorded before sequence %d", e.Sequence, next)
					}
					queue = append(queue, e)
				default:
					t.Fatalf("seq %d with next %d: err = %v", e.Sequence, next, err)
				}
			}
			var prev time.Time
			for _, e := range evs {
				nt, ok, err := n.Notification(ctx, e.EventID)
				if err != nil || !ok || !nt.CreatedAt.After(prev) {
					t.Fatalf("sequence %d: notification %+v, %v, %v; created after %s?", e.Sequence, nt, ok, err, prev)
				}
				prev = nt.CreatedAt
			}
			v, ok, err := n.View(ctx, id)
			if err != nil || !ok || v.Status != notifier.StatusShipped || v.LastSequence != 3 {
				t.Fatalf("view = %+v, %v, %v", v, ok, err)
			}
			// A duplicate, with and without its marker: no new notification.
			if err := n.Handle(ctx, delivery(t, evs[1])); err != nil {
				t.Fatal(err)
			}
			if _, err := env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(dt),
				Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dedup.MarkerKey("notifier", evs[1].EventID)}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(nt),
				Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: notifier.NotificationPrefix + evs[1].EventID}}}); err != nil {
				t.Fatal(err)
			}
			if err := n.Handle(ctx, delivery(t, evs[1])); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := n.Notification(ctx, evs[1].EventID); ok {
				t.Fatal("a duplicate behind the ordering item was recorded again")
			}
		})
	}
}
