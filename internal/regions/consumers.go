package regions

import (
	"context"
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
// choice 3): its queue, dedup state and effects live there only, in
// regional tables; the other Region's bus forwards its events there.
const (
	// Statement is the ordered consumer homed in RegionB: it appends each
	// account's events to the account's statement in sequence order.
	Statement = "statement"
	// StatementTable holds the statements (regional, in RegionB): account
	// (S, the key), seqs (L of N: the sequences applied, in the order
	// applied), events (L of S: their event ids) and balance (N, the last
	// applied event's).
	StatementTable = "bank-statements"
	// Notify is the unordered consumer homed in RegionA: it counts each
	// event it applies.
	Notify = "notify"
	// NoticesTable holds the notices (regional, in RegionA): event_id (S,
	// the key), applied (N: times applied), account (S), seq (N).
	NoticesTable = "bank-notices"
)

// homeConsumer is a consumer, its home Region and its effect tables.
type homeConsumer struct {
	home     string
	consumer localstack.Consumer
	tables   []*dynamodb.CreateTableInput
}

func homeConsumers() []homeConsumer {
	return []homeConsumer{
		{home: RegionB, tables: []*dynamodb.CreateTableInput{keyedBy(StatementTable, "account")},
			consumer: localstack.Consumer{Name: Statement, Ordered: true, AggregateType: AccountType,
				StateTable: Statement + "-state", NewHandler: statementHandler}},
		{home: RegionA, tables: []*dynamodb.CreateTableInput{keyedBy(NoticesTable, "event_id")},
			consumer: localstack.Consumer{Name: Notify, AggregateType: AccountType,
				StateTable: Notify + "-state", NewHandler: notifyHandler}},
	}
}

func accountsTableInput() *dynamodb.CreateTableInput { return keyedBy(AccountsTable, "id") }

// keyedBy is a table keyed by the string attribute key.
func keyedBy(name, key string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
	}
}

// decode reads a bank event: a malformed one is dead-lettered at once.
func decode(ev events.EventBridgeEvent) (outbox.Envelope, Payload, error) {
	e, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		return e, Payload{}, sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
	}
	var p Payload
	if err := e.DecodePayload(&p); err != nil {
		return e, p, sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
	}
	return e, p, nil
}

// statementHandler applies an account's events in sequence order, once
// each (dedup's ordered mode: a gap is an error, retried until the missing
// event arrives), appending the sequence and event id to the statement.
func statementHandler(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	a, err := dedup.NewApplier(env.DDB, dedup.Config{Table: env.StateTable, Consumer: env.Name, Ordered: true,
		Keys: []outbox.TableKeys{{Table: StatementTable, Names: []string{"account"}}}})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		e, p, err := decode(ev)
		if err != nil {
			return err
		}
		_, err = a.Apply(ctx, e, []types.TransactWriteItem{{Update: &types.Update{
			TableName:        aws.String(StatementTable),
			Key:              map[string]types.AttributeValue{"account": &types.AttributeValueMemberS{Value: e.AggregateID}},
			UpdateExpression: aws.String("SET seqs = list_append(if_not_exists(seqs, :empty), :seq), events = list_append(if_not_exists(events, :empty), :id), balance = :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
				":seq":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: strconv.FormatInt(e.Sequence, 10)}}},
				":id":    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: e.EventID}}},
				":b":     &types.AttributeValueMemberN{Value: strconv.FormatInt(p.Balance, 10)},
			},
		}}})
		return err
	}, nil
}

// notifyHandler applies each event once, in any order, counting it on its
// notice.
func notifyHandler(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	a, err := dedup.NewApplier(env.DDB, dedup.Config{Table: env.StateTable, Consumer: env.Name,
		Keys: []outbox.TableKeys{{Table: NoticesTable, Names: []string{"event_id"}}}})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		e, _, err := decode(ev)
		if err != nil {
			return err
		}
		_, err = a.Apply(ctx, e, []types.TransactWriteItem{{Update: &types.Update{
			TableName:        aws.String(NoticesTable),
			Key:              map[string]types.AttributeValue{"event_id": &types.AttributeValueMemberS{Value: e.EventID}},
			UpdateExpression: aws.String("ADD applied :one SET account = :a, seq = :s"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":one": &types.AttributeValueMemberN{Value: "1"},
				":a":   &types.AttributeValueMemberS{Value: e.AggregateID},
				":s":   &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Sequence, 10)},
			},
		}}})
		return err
	}, nil
}
