package notifier

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Notification is one recorded notification (item "NOTIFICATION#<event_id>").
type Notification struct {
	EventID   string    `dynamodbav:"event_id"`
	EventType string    `dynamodbav:"event_type"`
	OrderID   string    `dynamodbav:"order_id"`
	Message   string    `dynamodbav:"message"`
	Sequence  int64     `dynamodbav:"sequence"`
	CreatedAt time.Time `dynamodbav:"created_at"`
}

// OrderView is the order status read model (item "ORDERVIEW#<order_id>"):
// the status after the event with the highest sequence seen so far.
type OrderView struct {
	OrderID       string    `dynamodbav:"order_id"`
	Status        string    `dynamodbav:"status"` // one of the Status* constants
	LastSequence  int64     `dynamodbav:"last_sequence"`
	LastEventID   string    `dynamodbav:"last_event_id"`
	LastEventType string    `dynamodbav:"last_event_type"`
	UpdatedAt     time.Time `dynamodbav:"updated_at"`
}

// View returns an order's status view (strongly consistent GetItem); ok is
// false when no event of the order has been handled.
func (n *Notifier) View(ctx context.Context, orderID string) (v OrderView, ok bool, err error) {
	item, err := n.get(ctx, ViewPrefix+orderID)
	if err != nil || item == nil {
		return OrderView{}, false, err
	}
	if err := attributevalue.UnmarshalMap(item, &v); err != nil {
		return v, true, fmt.Errorf("notifier: decode view %s: %w", orderID, err)
	}
	return v, true, nil
}

// Notification returns the notification recorded for an event id (strongly
// consistent GetItem); ok is false when none was recorded.
func (n *Notifier) Notification(ctx context.Context, eventID string) (nt Notification, ok bool, err error) {
	item, err := n.get(ctx, NotificationPrefix+eventID)
	if err != nil || item == nil {
		return Notification{}, false, err
	}
	if err := attributevalue.UnmarshalMap(item, &nt); err != nil {
		return nt, true, fmt.Errorf("notifier: decode notification %s: %w", eventID, err)
	}
	return nt, true, nil
}

// NotificationCount returns the number of recorded notifications.
//
// AUDIT ONLY: it Scans the whole notifications table (strongly consistent,
// all pages, Select COUNT), costing read capacity proportional to the table
// size. Never call it on a request path.
func (n *Notifier) NotificationCount(ctx context.Context) (int, error) {
	total := 0
	err := n.cfg.ScanPrefix(ctx, n.client, NotificationPrefix, true, func(_ []map[string]types.AttributeValue, c int32) error {
		total += int(c)
		return nil
	})
	return total, err
}

func (n *Notifier) get(ctx context.Context, key string) (map[string]types.AttributeValue, error) {
	return n.cfg.GetItem(ctx, n.client, key)
}
