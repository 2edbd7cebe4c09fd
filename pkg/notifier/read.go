package notifier

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Notification is one recorded notification (item "NOTIFICATION#<event_id>").
type Notification struct {
	EventID   string
	EventType string
	OrderID   string
	Message   string
	Sequence  int64
	CreatedAt time.Time
}

// OrderView is the order status read model (item "ORDERVIEW#<order_id>"):
// the status after the event with the highest sequence seen so far.
type OrderView struct {
	OrderID       string
	Status        string // one of the Status* constants
	LastSequence  int64
	LastEventID   string
	LastEventType string
	UpdatedAt     time.Time
}

// View returns an order's status view (strongly consistent GetItem); ok is
// false when no event of the order has been handled.
func (n *Notifier) View(ctx context.Context, orderID string) (v OrderView, ok bool, err error) {
	item, err := n.get(ctx, ViewPrefix+orderID)
	if err != nil || item == nil {
		return OrderView{}, false, err
	}
	v = OrderView{
		OrderID:       str(item, AttrOrderID),
		Status:        str(item, AttrStatus),
		LastEventID:   str(item, AttrLastEventID),
		LastEventType: str(item, AttrLastEventType),
	}
	v.LastSequence, err = number(item, AttrLastSequence)
	v.UpdatedAt, _ = time.Parse(time.RFC3339Nano, str(item, AttrUpdatedAt))
	return v, true, err
}

// Notification returns the notification recorded for an event id (strongly
// consistent GetItem); ok is false when none was recorded.
func (n *Notifier) Notification(ctx context.Context, eventID string) (nt Notification, ok bool, err error) {
	item, err := n.get(ctx, NotificationPrefix+eventID)
	if err != nil || item == nil {
		return Notification{}, false, err
	}
	nt = Notification{
		EventID:   str(item, AttrEventID),
		EventType: str(item, AttrEventType),
		OrderID:   str(item, AttrOrderID),
		Message:   str(item, AttrMessage),
	}
	nt.Sequence, err = number(item, AttrSequence)
	nt.CreatedAt, _ = time.Parse(time.RFC3339Nano, str(item, AttrCreatedAt))
	return nt, true, err
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

func str(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// number decodes an N attribute as int64 without passing through float64.
func number(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("notifier: attribute %s missing or not a number", name)
	}
	i, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("notifier: attribute %s=%q: %w", name, v.Value, err)
	}
	return i, nil
}
