package regions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The bank's consumers, each with one home Region (docs/MULTI-REGION.md,
// choice 3): its queue and its own table (dedup state and effects, one
// table, as dedup.ConsumerConfig recommends) live there only, a regional
// table; the other Region's bus forwards its events there.
const (
	// Statement is the ordered consumer homed in RegionB: it appends each
	// account's events to the account's statement in sequence order (early
	// events wait in its resequencer buffer).
	Statement = "statement"
	// StatementTable is its own table (regional, in RegionB). A statement
	// is the item {pk: StatementKey(account)}: seqs (L of N: the sequences
	// applied, in the order applied), events (L of S: their event ids),
	// balance (N, the last applied event's).
	StatementTable = "bank-statement"
	// Notify is the unordered consumer homed in RegionA: it counts each
	// event it applies.
	Notify = "notify"
	// NotifyTable is its own table (regional, in RegionA). A notice is the
	// item {pk: NoticeKey(event id)}: applied (N: times applied), account
	// (S), seq (N).
	NotifyTable = "bank-notify"
)

// StatementKey and NoticeKey are the partition keys of a statement and a
// notice in their consumer's table (beside its dedup state, whose keys
// begin with the consumer's name and "#").
func StatementKey(account string) string { return "statement-of#" + account }

// NoticeKey is the partition key of the notice of an event.
func NoticeKey(eventID string) string { return "notice-of#" + eventID }

// homeConsumer is a consumer and its home Region.
type homeConsumer struct {
	home     string
	consumer localstack.Consumer
}

func homeConsumers() []homeConsumer {
	return []homeConsumer{
		{home: RegionB, consumer: localstack.Consumer{Name: Statement, Ordered: true, AggregateType: AccountType,
			StateTable: StatementTable, NewHandler: statementHandler}},
		{home: RegionA, consumer: localstack.Consumer{Name: Notify, AggregateType: AccountType,
			StateTable: NotifyTable, NewHandler: notifyHandler}},
	}
}

// accountsTableInput is the accounts table: a global table, so with a
// stream of new and old images, as a replica of a global table (version
// 2019.11.21) has, for the replicator to read.
func accountsTableInput() *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(AccountsTable),
		BillingMode:          types.BillingModePayPerRequest,
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}
}

// consumer is one of the bank's consumers: its dedup configuration and
// applier, and the effects of an event.
type consumer struct {
	name    string
	cfg     dedup.ConsumerConfig
	applier *dedup.Applier
	log     *slog.Logger
	effects func(env outbox.Envelope, p Payload) (types.TransactWriteItem, error)
}

// newConsumer builds the consumer's handler: checked and decoded events
// (Accept), applied once with their effects (ApplyEvent), and for an
// ordered one, an early event held (Hold) and buffered by the resequencer.
func newConsumer(env localstack.ConsumerEnv, ordering dedup.Ordering, effects func(outbox.Envelope, Payload) (types.TransactWriteItem, error)) (sqsconsumer.EventHandler, error) {
	log := slog.New(slog.DiscardHandler)
	c, err := dedup.NewConsumer(env.Name, env.DDB, dedup.ConsumerConfig{Table: env.StateTable, ExpectedSource: env.Source,
		Resequencer: dedup.ResequencerConfig{Metrics: io.Discard}, Logger: log}, 0, ordering)
	if err != nil {
		return nil, err
	}
	h := &consumer{name: env.Name, cfg: c.Config, applier: c.Applier, log: log, effects: effects}
	r, err := c.Resequence(h.handle)
	if err != nil || r == nil {
		return h.handle, err
	}
	return r.Handle, nil
}

func (c *consumer) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, log, err := c.cfg.Accept(ctx, c.log, ev)
	if err != nil {
		return err
	}
	var p Payload
	if err := env.DecodePayload(&p); err != nil {
		return dedup.Refuse(ctx, log, c.name, sqsconsumer.ReasonMalformedEvent, err)
	}
	effect, err := c.effects(env, p)
	if err != nil {
		return err
	}
	_, err = c.applier.ApplyEvent(ctx, env, []types.TransactWriteItem{effect})
	if errors.Is(err, dedup.ErrSequenceGap) {
		return c.cfg.Hold(ctx, log, err)
	}
	return err
}

// update is the effect's Update of the item pk in the consumer's table,
// built with the SDK's expression builder.
func update(table, pk string, upd expression.UpdateBuilder) (types.TransactWriteItem, error) {
	expr, err := expression.NewBuilder().WithUpdate(upd).Build()
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("regions: build the effect on %s: %w", pk, err)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: pk}},
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}}, nil
}

// statementHandler is the statement consumer: ordered, appending the
// sequence and event id to the account's statement.
func statementHandler(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	return newConsumer(env, dedup.Ordered, func(e outbox.Envelope, p Payload) (types.TransactWriteItem, error) {
		empty := expression.Value(&types.AttributeValueMemberL{Value: []types.AttributeValue{}})
		appendTo := func(name string, v any) expression.SetValueBuilder {
			return expression.ListAppend(expression.IfNotExists(expression.Name(name), empty), expression.Value([]any{v}))
		}
		return update(env.StateTable, StatementKey(e.AggregateID), expression.
			Set(expression.Name("seqs"), appendTo("seqs", e.Sequence)).
			Set(expression.Name("events"), appendTo("events", e.EventID)).
			Set(expression.Name("balance"), expression.Value(p.Balance)))
	})
}

// notifyHandler is the notify consumer: unordered, counting each event it
// applies on its notice.
func notifyHandler(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	return newConsumer(env, dedup.Unordered, func(e outbox.Envelope, _ Payload) (types.TransactWriteItem, error) {
		return update(env.StateTable, NoticeKey(e.EventID), expression.
			Add(expression.Name("applied"), expression.Value(1)).
			Set(expression.Name("account"), expression.Value(e.AggregateID)).
			Set(expression.Name("seq"), expression.Value(e.Sequence)))
	})
}
