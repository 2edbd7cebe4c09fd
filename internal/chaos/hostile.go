package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// HostileReasons are cancel reasons that the API and the outbox writer now
// refuse, but that a table can still hold (written before the rules, or by
// another writer): characters SQS refuses in a message body (U+FFFF,
// U+FFFE) and a JSON escape of a lone surrogate (the stored detail carries
// the six characters \ud800). Each one committed as a legacy change must
// end PARKED (the relay never publishes an event no consumer queue could
// take) with its parked message accepted by the strict parked-records
// queue: never stuck, never lost.
var HostileReasons = []string{"x\uffffy", "\ufffe", "lone " + loneSurrogate + " surrogate"}

// loneSurrogate marks where the stored JSON gets the escape \ud800.
const loneSurrogate = "LONE-SURROGATE"

// writeLegacyCancels commits, for up to len(HostileReasons) PLACED orders, a
// cancellation whose reason is hostile, the way an older writer without the
// text rules would have: one TransactWriteItems with the order Put (version
// condition) and the outbox record Put. It uses its own client without
// faults. It returns how many it wrote.
func writeLegacyCancels(ctx context.Context, s *devstack.Stack) (int, error) {
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(s.Endpoint))
	filt, err := expression.NewBuilder().WithFilter(expression.And(
		expression.Name(order.AttrKind).Equal(expression.Value(order.KindOrder)),
		expression.Name(order.AttrStatus).Equal(expression.Value(string(order.StatusPlaced))))).Build()
	if err != nil {
		return 0, err
	}
	var placed []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{
		TableName: aws.String(s.Settings.OrdersTable), FilterExpression: filt.Filter(),
		ExpressionAttributeNames: filt.Names(), ExpressionAttributeValues: filt.Values(),
	})
	for p.HasMorePages() && len(placed) < len(HostileReasons) {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("chaos: scan orders: %w", err)
		}
		placed = append(placed, page.Items...)
	}
	n := 0
	for i, item := range placed {
		if i == len(HostileReasons) {
			break
		}
		if err := legacyCancel(ctx, ddb, s.Settings, item, HostileReasons[i]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func legacyCancel(ctx context.Context, ddb *dynamodb.Client, st app.Settings, item map[string]types.AttributeValue, reason string) error {
	id := item[order.AttrID].(*types.AttributeValueMemberS).Value
	version, err := strconv.ParseInt(item[order.AttrVersion].(*types.AttributeValueMemberN).Value, 10, 64)
	if err != nil {
		return err
	}
	currency := item[order.AttrCurrency].(*types.AttributeValueMemberS).Value
	payload, err := json.Marshal(order.Cancelled{OrderID: id, Reason: reason, Currency: currency})
	if err != nil {
		return err
	}
	payload = bytes.ReplaceAll(payload, []byte(loneSurrogate), []byte(`\ud800`))
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: id, Sequence: version + 1},
		outbox.Event{Type: order.EventOrderCancelled, Version: order.EventVersion, Payload: json.RawMessage(payload)}, outbox.Metadata{})
	if err != nil {
		return fmt.Errorf("chaos: legacy envelope: %w", err)
	}
	next := map[string]types.AttributeValue{}
	for k, v := range item {
		next[k] = v
	}
	next[order.AttrStatus] = &types.AttributeValueMemberS{Value: string(order.StatusCancelled)}
	next[order.AttrVersion] = &types.AttributeValueMemberN{Value: strconv.FormatInt(version+1, 10)}
	next[order.AttrCancelReason] = &types.AttributeValueMemberS{Value: reason}
	next[order.AttrUpdatedAt] = &types.AttributeValueMemberS{Value: time.Now().UTC().Format(time.RFC3339Nano)}
	cond, err := expression.NewBuilder().WithCondition(expression.Name(order.AttrVersion).Equal(expression.Value(version))).Build()
	if err != nil {
		return err
	}
	_, err = ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(st.OrdersTable), Item: next, ConditionExpression: cond.Condition(),
			ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values()}},
		{Put: &types.Put{TableName: aws.String(st.OutboxTable), Item: outbox.NewRecord(env, 0, st.PendingShards).Item()}},
	}})
	if err != nil {
		return fmt.Errorf("chaos: legacy cancel of %s: %w", id, err)
	}
	return nil
}
