package notifier

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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
	f, err := expression.NewBuilder().
		WithFilter(expression.Name(AttrPK).BeginsWith(NotificationPrefix)).Build()
	if err != nil {
		return 0, fmt.Errorf("notifier: build scan filter: %w", err)
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(n.cfg.Table),
		FilterExpression:          f.Filter(),
		ExpressionAttributeNames:  f.Names(),
		ExpressionAttributeValues: f.Values(),
		ConsistentRead:            aws.Bool(true),
		Select:                    types.SelectCount,
	}
	total := 0
	for {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.CallTimeout)
		out, err := n.client.Scan(cctx, in)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("notifier: scan notifications: %w", err)
		}
		total += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return total, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func (n *Notifier) get(ctx context.Context, key string) (map[string]types.AttributeValue, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.CallTimeout)
	defer cancel()
	out, err := n.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(n.cfg.Table), Key: pk(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("notifier: get %s: %w", key, err)
	}
	return out.Item, nil
}
