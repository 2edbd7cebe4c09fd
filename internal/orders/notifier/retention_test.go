package notifier_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// A notification (customer data) carries the TTL attribute when the
// consumer has an ItemRetention, and none when it keeps notifications
// forever; the order view never expires.
func TestNotificationRetention(t *testing.T) {
	env := ddbtest.New(t)
	for _, retention := range []time.Duration{0, 90 * 24 * time.Hour} {
		nt, dt := ddbtest.Name("notifications"), ddbtest.Name("dedup")
		env.CreateTable(t, notifier.CreateTableInput(nt))
		env.CreateTable(t, dedup.CreateTableInput(dt))
		n, err := notifier.New(env.DDB, notifier.Config{Ordering: dedup.Unordered, Table: nt, Dedup: dedup.Config{Table: dt}, ItemRetention: retention, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		placed := envelope(t, "o-1", 1, order.EventOrderPlaced, order.Placed{OrderID: "o-1", CustomerID: "c-7", AmountMinor: 1250, Currency: "EUR"})
		before := time.Now()
		if err := n.Handle(context.Background(), delivery(t, placed)); err != nil {
			t.Fatal(err)
		}
		item := func(pk string) map[string]types.AttributeValue {
			out, err := env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(nt), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{notifier.AttrPK: &types.AttributeValueMemberS{Value: pk}}})
			if err != nil || out.Item == nil {
				t.Fatalf("GetItem %s: %v", pk, err)
			}
			return out.Item
		}
		ttl, has := item(notifier.NotificationPrefix + placed.EventID)[notifier.TTLAttribute].(*types.AttributeValueMemberN)
		switch {
		case retention == 0 && has:
			t.Errorf("retention 0: the notification expires at %s", ttl.Value)
		case retention > 0 && !has:
			t.Errorf("retention %s: the notification has no %s", retention, notifier.TTLAttribute)
		case retention > 0:
			at, _ := strconv.ParseInt(ttl.Value, 10, 64)
			if want := before.Add(retention).Unix(); at < want || at > want+60 {
				t.Errorf("expires_at %d, want about %d", at, want)
			}
		}
		if _, viewExpires := item(notifier.ViewPrefix + "o-1")[notifier.TTLAttribute]; viewExpires {
			t.Error("the order view carries a TTL")
		}
	}
}
