// Package statement is the wallet's ordered consumer: per account, a running
// balance and one statement line per event, in the consumer's own table —
// the same table as its dedup state (markers, ordering gates, resequencer
// buffer), so that one transaction writes the event's marker, its effects and
// its gate, and a backup restores them as one unit.
//
// Table: partition key "pk" (S) with the state index (dedup.WithStateIndex)
// and TTL on dedup.TTLAttribute: what the CDK module's consumer construct
// creates (outboxcdk.NewConsumer) and Table returns for tests. Items:
//
//   - "BALANCE#<account>": account_id, currency, balance (minor units) and
//     sequence, the sequence of the last event applied;
//   - "LINE#<account>#<sequence, 20 digits>": one line per event:
//     event_type, amount (signed minor units), balance (after), event_id,
//     occurred_at.
//
// Order matters: each event's balance update is conditioned on the balance
// item being at the event's predecessor (sequence = n-1 and the balance the
// event's payload says was there before), so applied out of order it would
// fail. The consumer is ordered (dedup.Ordered): the ordering gate applies an
// account's events in sequence order, keeping early ones in the buffer, so
// that condition holds; if it ever fails, the event is dead-lettered with
// dedup.ReasonEffectCondition instead of corrupting the statement. Its rule
// must deliver every event type of the Account aggregate (the ordered
// consumer's rule, go doc github.com/ddb-outbox/ddb-outbox/pkg/dedup).
package statement

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Name is the consumer's name: the prefix of its state's keys
// (dedup.Config.Consumer) and outboxcdk.ConsumerProps.Name. Code and
// infrastructure must use the same one.
const Name = "statement"

// Key prefixes of the consumer's own items.
const (
	BalancePrefix = "BALANCE#"
	LinePrefix    = "LINE#"
)

// Balance is an account's balance item.
type Balance struct {
	AccountID string `dynamodbav:"account_id"`
	Currency  string `dynamodbav:"currency"`
	Balance   int64  `dynamodbav:"balance"`
	Sequence  int64  `dynamodbav:"sequence"`
}

// Line is one statement line.
type Line struct {
	AccountID  string `dynamodbav:"account_id"`
	Sequence   int64  `dynamodbav:"sequence"`
	EventType  string `dynamodbav:"event_type"`
	Amount     int64  `dynamodbav:"amount"`
	Balance    int64  `dynamodbav:"balance"`
	EventID    string `dynamodbav:"event_id"`
	OccurredAt string `dynamodbav:"occurred_at"`
}

// BalanceKey and LineKey are the items' keys.
func BalanceKey(account string) string { return BalancePrefix + account }

// LineKey is the key of account's line for the event of sequence seq.
func LineKey(account string, seq int64) string {
	return fmt.Sprintf("%s%s#%020d", LinePrefix, account, seq)
}

// Table is the consumer's table definition for tests and local stacks:
// dedup.CreateTableInput (partition key "pk", the state index). On AWS the
// consumer construct creates it.
func Table(name string) *dynamodb.CreateTableInput { return dedup.CreateTableInput(name) }

// NewHandler returns the consumer's event handler, for sqsconsumer.New: the
// library's dedup and ordering protocol (dedup.Consumer.Handler) around
// Effects. client is a *dynamodb.Client (transactions, and the reads of the
// ordering gate and the resequencer: dedup.BufferClient). cfg is dedup.ConsumerConfigFromEnv's on AWS (cfg.Table is the
// consumer's own table).
func NewHandler(client dedup.BufferClient, cfg dedup.ConsumerConfig) (sqsconsumer.EventHandler, error) {
	c, err := dedup.NewConsumer(Name, client, cfg, 0, dedup.Ordered)
	if err != nil {
		return nil, err
	}
	// Effect 0 is the line Put, keyed by the event's sequence: its failed
	// condition proves the event was applied (a redelivery after its
	// marker expired).
	return c.Handler(Effects(cfg.Table), dedup.AppliedIf(0))
}

// Effects returns the effect builder of the consumer writing to table: for
// each event of an account, the statement line (Put, attribute_not_exists)
// and the balance item's change conditioned on its predecessor. It has no
// effect of its own; a payload that does not decode is dead-lettered
// (sqsconsumer.ReasonMalformedEvent); an event type of the aggregate it does
// not know is recorded as seen (no effects), so the gate moves past it.
func Effects(table string) dedup.EffectsFunc {
	return func(_ context.Context, env outbox.Envelope) ([]types.TransactWriteItem, error) {
		line := Line{AccountID: env.AggregateID, Sequence: env.Sequence, EventType: env.EventType,
			EventID: env.EventID, OccurredAt: env.OccurredAt.UTC().Format(time.RFC3339Nano)}
		var balance types.TransactWriteItem
		var err error
		switch env.EventType {
		case wallet.EventAccountOpened:
			var p wallet.Opened
			if err := env.DecodePayload(&p); err != nil {
				return nil, sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
			}
			balance, err = opened(table, env, p.Currency)
		case wallet.EventAmountDeposited, wallet.EventAmountWithdrawn:
			var p wallet.Deposited // same shape as wallet.Withdrawn
			if err := env.DecodePayload(&p); err != nil {
				return nil, sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
			}
			line.Amount, line.Balance = p.Amount, p.Balance
			if env.EventType == wallet.EventAmountWithdrawn {
				line.Amount = -p.Amount
			}
			balance, err = moved(table, env, line.Amount, p.Balance)
		default:
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		put, err := putLine(table, line)
		if err != nil {
			return nil, err
		}
		return []types.TransactWriteItem{put, balance}, nil
	}
}

// opened creates the balance item at the event's sequence (1 for an
// account opened with Writer.Update).
func opened(table string, env outbox.Envelope, currency string) (types.TransactWriteItem, error) {
	item, err := attributevalue.MarshalMap(Balance{AccountID: env.AggregateID, Currency: currency, Sequence: env.Sequence})
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	item[dedup.AttrPK] = &types.AttributeValueMemberS{Value: BalanceKey(env.AggregateID)}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(dedup.AttrPK))).Build()
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: item,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()}}, nil
}

// moved adds delta to the balance, conditioned on the balance item being at
// the predecessor: sequence n-1 and balance after-delta.
func moved(table string, env outbox.Envelope, delta, after int64) (types.TransactWriteItem, error) {
	if env.Sequence < 2 {
		return types.TransactWriteItem{}, sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent,
			errors.New("statement: a deposit or withdrawal must follow the account's opening (sequence >= 2)"))
	}
	cond := expression.And(
		expression.Name("sequence").Equal(expression.Value(env.Sequence-1)),
		expression.Name("balance").Equal(expression.Value(after-delta)))
	upd := expression.Set(expression.Name("sequence"), expression.Value(env.Sequence)).
		Add(expression.Name("balance"), expression.Value(delta))
	e, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: BalanceKey(env.AggregateID)}},
		UpdateExpression:          e.Update(),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}}, nil
}

func putLine(table string, l Line) (types.TransactWriteItem, error) {
	item, err := attributevalue.MarshalMap(l)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	item[dedup.AttrPK] = &types.AttributeValueMemberS{Value: LineKey(l.AccountID, l.Sequence)}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(dedup.AttrPK))).Build()
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: item,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()}}, nil
}

// GetBalance reads account's balance item (consistent read); ok is false
// when the consumer has not applied the account's opening yet.
func GetBalance(ctx context.Context, ddb wallet.GetItemAPI, table, account string) (b Balance, ok bool, err error) {
	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: BalanceKey(account)}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Balance{}, false, fmt.Errorf("statement: get balance %s: %w", account, err)
	}
	if out.Item == nil {
		return Balance{}, false, nil
	}
	if err := attributevalue.UnmarshalMap(out.Item, &b); err != nil {
		return Balance{}, false, fmt.Errorf("statement: read balance %s: %w", account, err)
	}
	return b, true, nil
}

// Lines reads account's statement lines in sequence order (consistent
// reads of each line from 1 to through, the balance item's sequence; the
// table has no sort key, so the lines are read by key).
func Lines(ctx context.Context, ddb wallet.GetItemAPI, table, account string, through int64) ([]Line, error) {
	lines := make([]Line, 0, through)
	for seq := int64(1); seq <= through; seq++ {
		out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(table),
			Key:            map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: LineKey(account, seq)}},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return nil, fmt.Errorf("statement: get line %s/%s: %w", account, strconv.FormatInt(seq, 10), err)
		}
		if out.Item == nil {
			return nil, fmt.Errorf("statement: account %s has no line %d", account, seq)
		}
		var l Line
		if err := attributevalue.UnmarshalMap(out.Item, &l); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}
