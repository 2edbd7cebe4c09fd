package dedup_test

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// A consumer handler: decode the envelope, then apply the side effect and
// the dedup marker in one transaction. A duplicate returns (false, nil).
func ExampleApplier_Apply() {
	var client *dynamodb.Client // from dynamodb.NewFromConfig, built once per Lambda instance
	a, err := dedup.NewApplier(client, dedup.Config{Table: "dedup", Consumer: "shipping"})
	if err != nil {
		log.Fatal(err) // in main only; handlers return errors
	}
	handle := func(ctx context.Context, ev events.EventBridgeEvent) error {
		env, err := dedup.DecodeEnvelope(ev) // keyed by env.EventID, never ev.ID
		if err != nil {
			return err // poison: retried, then the DLQ
		}
		effect := types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("shipments"),
			Item:      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "SHIPMENT#" + env.AggregateID}},
		}}
		applied, err := a.Apply(ctx, env, []types.TransactWriteItem{effect})
		if err != nil {
			return err // redelivered; the marker makes that safe
		}
		_ = applied // false: a duplicate, acknowledged with no effect
		return nil
	}
	_ = handle
}
