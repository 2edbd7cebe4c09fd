package order

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// envelopes wraps events for order o, which went from version prev to
// o.Version. Either each event raised the version by one (sequences
// prev+1..o.Version) or the change raised it by one and all events share it
// (distinguished by their index in the outbox key).
func envelopes(o Order, prev int64, events []outbox.Event, meta outbox.Metadata) ([]outbox.Envelope, error) {
	if len(events) == 0 {
		return nil, outbox.ErrNoEvents
	}
	delta := o.Version - prev
	if delta != 1 && delta != int64(len(events)) {
		return nil, fmt.Errorf("order %s: version went from %d to %d for %d events; each change must raise the version by one", o.ID, prev, o.Version, len(events))
	}
	envs := make([]outbox.Envelope, len(events))
	for i, ev := range events {
		seq := o.Version
		if delta > 1 {
			seq = prev + int64(i) + 1
		}
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: AggregateType, ID: o.ID, Sequence: seq}, ev, meta)
		if err != nil {
			return nil, err
		}
		envs[i] = env
	}
	return envs, nil
}

// orderItem is the stored shape of an order.
type orderItem struct {
	PK           string    `dynamodbav:"pk"`
	Kind         string    `dynamodbav:"kind"`
	ID           string    `dynamodbav:"id"`
	CustomerID   string    `dynamodbav:"customer_id"`
	AmountMinor  int64     `dynamodbav:"amount_minor"`
	Currency     string    `dynamodbav:"currency"`
	Status       Status    `dynamodbav:"status"`
	Version      int64     `dynamodbav:"version"`
	CancelReason string    `dynamodbav:"cancel_reason,omitempty"`
	CreatedAt    time.Time `dynamodbav:"created_at"`
	UpdatedAt    time.Time `dynamodbav:"updated_at"`
	CreatedBy    string    `dynamodbav:"created_by,omitempty"`
	UpdatedBy    string    `dynamodbav:"updated_by,omitempty"`
}

func toItem(o Order) orderItem {
	return orderItem{
		PK: KeyPrefixOrder + o.ID, Kind: KindOrder, ID: o.ID, CustomerID: o.CustomerID,
		AmountMinor: o.AmountMinor, Currency: o.Currency, Status: o.Status, Version: o.Version,
		CancelReason: o.CancelReason, CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(),
		CreatedBy: o.CreatedBy, UpdatedBy: o.UpdatedBy,
	}
}

func (it orderItem) order() Order {
	return Order{
		ID: it.ID, CustomerID: it.CustomerID, AmountMinor: it.AmountMinor, Currency: it.Currency,
		Status: it.Status, Version: it.Version, CancelReason: it.CancelReason,
		CreatedAt: it.CreatedAt.UTC(), UpdatedAt: it.UpdatedAt.UTC(),
		CreatedBy: it.CreatedBy, UpdatedBy: it.UpdatedBy,
	}
}

// idempotencyItem is the stored shape of an idempotency record.
type idempotencyItem struct {
	PK          string    `dynamodbav:"pk"`
	Kind        string    `dynamodbav:"kind"`
	Key         string    `dynamodbav:"idempotency_key"`
	Actor       string    `dynamodbav:"actor"`
	OrderID     string    `dynamodbav:"order_id"`
	RequestHash string    `dynamodbav:"request_hash"`
	Order       orderItem `dynamodbav:"order"`
	CreatedAt   time.Time `dynamodbav:"created_at"`
	ExpiresAt   int64     `dynamodbav:"expires_at"`
}

// orderPut builds the order Put: attribute_not_exists(pk) when prev is 0
// (a new order), version = prev otherwise.
func (r *Repository) orderPut(o Order, prev int64) (types.TransactWriteItem, error) {
	item, err := attributevalue.MarshalMap(toItem(o))
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("encode order %s: %w", o.ID, err)
	}
	cond := expression.AttributeNotExists(expression.Name(AttrPK))
	if prev > 0 {
		cond = expression.Name(AttrVersion).Equal(expression.Value(prev))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("build order condition: %w", err)
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(r.cfg.Table),
		Item:                      item,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}}, nil
}

// idempotencyPut builds the idempotency record Put. Its condition lets it
// replace a record whose TTL passed but that DynamoDB has not deleted yet.
func (r *Repository) idempotencyPut(o Order, actor, key, hash string) (types.TransactWriteItem, error) {
	now := r.cfg.Now().UTC()
	item, err := attributevalue.MarshalMap(idempotencyItem{
		PK: idempotencyPK(actor, key), Kind: KindIdempotency, Key: key, Actor: actor, OrderID: o.ID,
		RequestHash: hash, Order: toItem(o), CreatedAt: now,
		ExpiresAt: now.Add(r.cfg.IdempotencyTTL).Unix(),
	})
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("encode idempotency record: %w", err)
	}
	cond := expression.AttributeNotExists(expression.Name(AttrPK)).
		Or(expression.Name(AttrExpiresAt).LessThanEqual(expression.Value(now.Unix())))
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("build idempotency condition: %w", err)
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(r.cfg.Table),
		Item:                      item,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}}, nil
}

func keyString(key map[string]types.AttributeValue) string {
	if v, ok := key[AttrPK].(*types.AttributeValueMemberS); ok {
		return strconv.Quote(v.Value)
	}
	return "item"
}
