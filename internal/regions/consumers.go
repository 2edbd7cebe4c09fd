package regions

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
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
	effects func(env outbox.Envelope, p Payload) types.TransactWriteItem
}

// newConsumer builds the consumer's handler: checked and decoded events
// (Accept), applied once with their effects (ApplyEvent), and for an
// ordered one, an early event held (Hold) and buffered by the resequencer.
func newConsumer(env localstack.ConsumerEnv, ordering dedup.Ordering, effects func(outbox.Envelope, Payload) types.TransactWriteItem) (sqsconsumer.EventHandler, error) {
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
	_, err = c.applier.ApplyEvent(ctx, env, []types.TransactWriteItem{c.effects(env, p)})
	if errors.Is(err, dedup.ErrSequenceGap) {
		return c.cfg.Hold(ctx, log, err)
	}
	return err
}

// statementHandler is the statement consumer: ordered, appending the
// sequence and event id to the account's statement.
func statementHandler(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	return newConsumer(env, dedup.Ordered, func(e outbox.Envelope, p Payload) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName:        aws.String(env.StateTable),
			Key:              map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: StatementKey(e.AggregateID)}},
			UpdateExpression: aws.String("SET seqs = list_append(if_not_exists(seqs, :empty), :seq), events = list_append(if_not_exists(events, :empty), :id), balance = :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
				":seq":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: strconv.FormatInt(e.Sequence, 10)}}},
				":id":    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: e.EventID}}},
				":b":     &types.AttributeValueMemberN{Value: strconv.FormatInt(p.Balance, 10)},
			},
		}}
	})
}

// notifyHandler is the notify consumer: unordered, counting each event it
// applies on its notice.
func notifyHandler(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	return newConsumer(env, dedup.Unordered, func(e outbox.Envelope, _ Payload) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName:        aws.String(env.StateTable),
			Key:              map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: NoticeKey(e.EventID)}},
			UpdateExpression: aws.String("ADD applied :one SET account = :a, seq = :s"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":one": &types.AttributeValueMemberN{Value: "1"},
				":a":   &types.AttributeValueMemberS{Value: e.AggregateID},
				":s":   &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Sequence, 10)},
			},
		}}
	})
}
