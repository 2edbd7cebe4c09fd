package outbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Add an outbox to your own table: your business write and the event that
// announces it go into one TransactWriteItems call, so both commit or
// neither does (promise I1). Here the business table is a team's "accounts"
// table; the outbox table is created with outbox.CreateTableInput (composite
// key, sparse pending index, stream NEW_IMAGE), which is what the relay reads.
//
// The example runs against Dynoxide, a local DynamoDB-compatible server
// (make deps installs it); on AWS the client is dynamodb.NewFromConfig(cfg).
func Example_addAnOutboxToYourTable() {
	ctx := context.Background()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		fmt.Println("start dynoxide:", err)
		return
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))

	// Your table (any key schema) and the outbox table.
	if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("accounts"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := ddb.CreateTable(ctx, outbox.CreateTableInput("outbox")); err != nil {
		fmt.Println(err)
		return
	}

	w, err := outbox.NewWriter(ddb, outbox.WriterConfig{Table: "outbox", Source: "com.example.accounts"})
	if err != nil {
		fmt.Println(err)
		return
	}

	// open creates account id at version 1 and records AccountOpened: the
	// account Put is refused if the account exists (attribute_not_exists).
	open := func(id string) error {
		cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("id"))).Build()
		if err != nil {
			return err
		}
		put := types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("accounts"),
			Item: map[string]types.AttributeValue{
				"id":      &types.AttributeValueMemberS{Value: id},
				"version": &types.AttributeValueMemberN{Value: "1"},
			},
			ConditionExpression:      cond.Condition(),
			ExpressionAttributeNames: cond.Names(),
		}}
		env, err := outbox.NewEnvelope(
			outbox.Aggregate{Type: "Account", ID: id, Sequence: 1}, // sequence = the aggregate's version after the change
			outbox.Event{Type: "AccountOpened", Version: 1, Payload: map[string]string{"account_id": id}},
			outbox.Metadata{Actor: "example"})
		if err != nil {
			return err
		}
		return w.Write(ctx, []types.TransactWriteItem{put}, []outbox.Envelope{env})
	}

	fmt.Println("first open:", open("acc-1"))

	// The second open fails its condition: the whole transaction is
	// cancelled, so no second event is recorded.
	err = open("acc-1")
	var txErr *outbox.TxError
	if errors.As(err, &txErr) {
		fmt.Println("second open refused, condition failed on action", txErr.FirstConditionFailed())
	}

	// What the relay will find: one pending record for the account.
	out, err := ddb.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String("outbox"),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "Account#acc-1"}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, item := range out.Items {
		r, err := outbox.RecordFromItem(item)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(r.Envelope.EventType, "sequence", r.Envelope.Sequence, r.Status, "expires:", !r.ExpiresAt.IsZero())
	}
	// Output:
	// first open: <nil>
	// second open refused, condition failed on action 0
	// AccountOpened sequence 1 PENDING expires: false
}

// Update an existing aggregate with its events: Writer.Update reads the
// account (consistent read), runs the change, and commits the new item, its
// version and one outbox record per event in one transaction conditioned on
// the version it read, retrying a conflict. The events' sequences are the
// account's versions, so they are gap-free by construction.
func ExampleWriter_Update() {
	ctx := context.Background()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		fmt.Println("start dynoxide:", err)
		return
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
	if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("accounts"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := ddb.CreateTable(ctx, outbox.CreateTableInput("outbox")); err != nil {
		fmt.Println(err)
		return
	}
	w, err := outbox.NewWriter(ddb, outbox.WriterConfig{Table: "outbox", Source: "com.example.accounts"})
	if err != nil {
		fmt.Println(err)
		return
	}
	account := outbox.UpdateInput{
		AggregateType: "Account", AggregateID: "acc-1",
		Table: "accounts", Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "acc-1"}},
	}
	// deposit is the change: the new balance and the event that says so.
	deposit := func(amount int) outbox.ChangeFunc {
		return func(_ context.Context, cur outbox.Current) (outbox.Change, error) {
			var acc struct {
				Balance int `dynamodbav:"balance"`
			}
			if err := attributevalue.UnmarshalMap(cur.Item, &acc); err != nil {
				return outbox.Change{}, err
			}
			acc.Balance += amount
			item, err := attributevalue.MarshalMap(acc)
			if err != nil {
				return outbox.Change{}, err
			}
			return outbox.Change{
				Item:   item,
				Events: []outbox.Event{{Type: "AmountDeposited", Version: 1, Payload: map[string]int{"amount": amount, "balance": acc.Balance}}},
			}, nil
		}
	}

	// The account exists at version 1 (a create is the same call).
	if _, err := w.Update(ctx, account, deposit(100)); err != nil {
		fmt.Println(err)
		return
	}
	// Update the existing account.
	res, err := w.Update(ctx, account, deposit(25))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("version", res.Version, "event", res.Events[0].EventType, "sequence", res.Events[0].Sequence, "attempts", res.Attempts)

	got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("accounts"), Key: account.Key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		fmt.Println(err)
		return
	}
	var acc struct {
		Balance int `dynamodbav:"balance"`
		Version int `dynamodbav:"version"`
	}
	if err := attributevalue.UnmarshalMap(got.Item, &acc); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("balance", acc.Balance, "version", acc.Version)
	// Output:
	// version 2 event AmountDeposited sequence 2 attempts 1
	// balance 125 version 2
}
