package localstack_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// keyedByID is a table keyed by the string attribute "id".
func keyedByID(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}
}

// balances is an ordered consumer of Wallet events: each AmountDeposited
// adds its amount to the wallet's balance, once (a dedup marker in its own
// state table), in sequence order (the ordering gate).
func balances(env localstack.ConsumerEnv) (sqsconsumer.EventHandler, error) {
	a, err := dedup.NewApplier(env.DDB, dedup.Config{Table: env.StateTable, Consumer: env.Name, Ordered: true,
		Keys: []outbox.TableKeys{{Table: "balances", Names: []string{"id"}}}})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		e, err := dedup.DecodeEnvelope(ev)
		if err != nil {
			return sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
		}
		var p struct {
			Amount int `json:"amount"`
		}
		if err := e.DecodePayload(&p); err != nil {
			return sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
		}
		_, err = a.Apply(ctx, e, []types.TransactWriteItem{{Update: &types.Update{
			TableName:                 aws.String("balances"),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: e.AggregateID}},
			UpdateExpression:          aws.String("ADD balance :a"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": &types.AttributeValueMemberN{Value: fmt.Sprint(p.Amount)}},
		}}})
		return err // a gap (an event ahead of its predecessor) is retried
	}, nil
}

// A team's own outbox, end to end on one machine: a wallet service writes
// AmountDeposited events with the outbox writer; the local stack relays
// them (its stream poller, the real relay, a local EventBridge bus with one
// rule per consumer) to an ordered consumer behind its SQS queue. The relay
// misses the second event (MissRecords): the reconciler publishes it, and
// the ordered consumer applies the third only after it. Settle waits until
// nothing is pending and the pipeline is quiet.
//
// The example runs against Dynoxide, a local DynamoDB-compatible server
// (make deps installs it).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := localstack.Start(ctx, localstack.Config{
		OutboxTable: "wallet-outbox",
		Tables:      []*dynamodb.CreateTableInput{keyedByID("wallets"), keyedByID("balances")},
		Source:      "com.example.wallet",
		BusName:     "wallet-bus",
		Consumers: []localstack.Consumer{{
			Name: "balances", Ordered: true, AggregateType: "Wallet",
			NewHandler: balances, StateTable: "balances-state",
		}},
	})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer st.Close()

	w, err := outbox.NewWriter(st.DDB, outbox.WriterConfig{Table: st.OutboxTable, Source: st.Source,
		PendingShards: st.PendingShards, Keys: []outbox.TableKeys{{Table: "wallets", Names: []string{"id"}}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	st.MissRecords(func(e outbox.Envelope) bool { return e.Sequence == 2 })
	for seq := int64(1); seq <= 3; seq++ {
		amount := seq * 10
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Wallet", ID: "w-1", Sequence: seq},
			outbox.Event{Type: "AmountDeposited", Version: 1, Payload: map[string]int64{"amount": amount}}, outbox.Metadata{})
		if err != nil {
			fmt.Println(err)
			return
		}
		put := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("wallets"), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: "w-1"}, "version": &types.AttributeValueMemberN{Value: fmt.Sprint(seq)}}}}
		if err := w.Write(ctx, []types.TransactWriteItem{put}, []outbox.Envelope{env}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := st.Settle(ctx); err != nil {
		fmt.Println(err)
		return
	}
	got, err := st.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("balances"), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "w-1"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if b, ok := got.Item["balance"].(*types.AttributeValueMemberN); ok {
		fmt.Println("balance of w-1:", b.Value)
	} else {
		fmt.Println("w-1 has no balance")
	}
	pending, err := st.Pending(ctx)
	fmt.Println("pending records:", pending, err)
	// Output:
	// balance of w-1: 60
	// pending records: 0 <nil>
}
