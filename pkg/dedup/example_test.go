package dedup_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Deduplicate a consumer: the same outbox event delivered twice (a relay
// retry and a reconciler re-send reach EventBridge as two events with two
// different EventBridge ids) adds to the balance once. The dedup marker,
// keyed by the envelope's event_id, commits in the same transaction as the
// effect (promise I3).
//
// The example runs against Dynoxide, a local DynamoDB-compatible server
// (make deps installs it); on AWS the client is dynamodb.NewFromConfig(cfg).
func ExampleApplier_Apply() {
	ctx := context.Background()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		fmt.Println("start dynoxide:", err)
		return
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))

	// The dedup table (dedup.CreateTableInput: key pk, TTL on expires_at)
	// and the consumer's own table.
	if _, err := ddb.CreateTable(ctx, dedup.CreateTableInput("dedup")); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("balances"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		fmt.Println(err)
		return
	}

	a, err := dedup.NewApplier(ddb, dedup.Config{Table: "dedup", Consumer: "balances"})
	if err != nil {
		fmt.Println(err)
		return
	}

	// handle is the consumer: decode the outbox envelope from the
	// EventBridge event's detail, then apply effect + marker in one
	// transaction. applied is false for a duplicate, which is acknowledged.
	handle := func(ctx context.Context, ev events.EventBridgeEvent) (applied bool, err error) {
		env, err := dedup.DecodeEnvelope(ev)
		if err != nil {
			return false, err
		}
		add := types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String("balances"),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: env.AggregateID}},
			UpdateExpression:          aws.String("ADD balance :amount"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":amount": &types.AttributeValueMemberN{Value: "25"}},
		}}
		return a.Apply(ctx, env, []types.TransactWriteItem{add})
	}

	// One outbox event, delivered twice with two EventBridge ids.
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Account", ID: "acc-1", Sequence: 2},
		outbox.Event{Type: "AccountCredited", Version: 1, Payload: map[string]int{"amount": 25}}, outbox.Metadata{})
	if err != nil {
		fmt.Println(err)
		return
	}
	detail, err := env.Detail()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, busID := range []string{"eb-id-1", "eb-id-2"} {
		applied, err := handle(ctx, events.EventBridgeEvent{
			Version: "0", ID: busID, DetailType: env.EventType, Source: "com.example.accounts", Detail: detail,
		})
		fmt.Printf("delivery %s: applied=%t err=%v\n", busID, applied, err)
	}

	got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("balances"), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "acc-1"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("balance:", got.Item["balance"].(*types.AttributeValueMemberN).Value)
	// Output:
	// delivery eb-id-1: applied=true err=<nil>
	// delivery eb-id-2: applied=false err=<nil>
	// balance: 25
}
