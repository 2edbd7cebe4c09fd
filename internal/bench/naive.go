package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// updateItemOnly hides every method but UpdateItem, so relay.NewMarker
// falls back to one UpdateItem per published record (no PartiQL batch).
type updateItemOnly struct{ relay.UpdateItemAPI }

// NaiveRelay is the textbook relay the outbox relay is measured against:
// for each outbox INSERT record of a stream batch, in order, one PutEvents
// with one entry, then one UpdateItem marking it published. It keeps the
// same promises as relay.Relay for the happy path (publish, then mark; the
// first record not done is reported as a partial batch failure) and reuses
// the relay's Publisher and Marker, only without batching. It is safe for
// concurrent use.
type NaiveRelay struct {
	pub    *relay.Publisher
	marker *relay.Marker
}

// NewNaiveRelay builds a NaiveRelay publishing to bus through eb and
// marking records of outboxTable through ddb.
func NewNaiveRelay(eb relay.EventBridgeAPI, ddb relay.UpdateItemAPI, queue relay.QueueSender, bus, source, outboxTable, parkedQueueURL string, log *slog.Logger) (*NaiveRelay, error) {
	pub, err := relay.NewPublisher(eb, relay.PublisherConfig{EventBusName: bus, Source: source, Logger: log})
	if err != nil {
		return nil, err
	}
	m, err := relay.NewMarker(updateItemOnly{ddb}, queue, relay.MarkerConfig{Table: outboxTable, ParkedQueueURL: parkedQueueURL, Logger: log, Metrics: discard{}})
	if err != nil {
		return nil, err
	}
	return &NaiveRelay{pub: pub, marker: m}, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Handle is a localrt.StreamHandler (and a Lambda DynamoDB Streams handler).
func (n *NaiveRelay) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	fail := func(rec events.DynamoDBEventRecord) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: rec.Change.SequenceNumber}}}, nil
	}
	for _, rec := range ev.Records {
		if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
			continue
		}
		if _, ok := rec.Change.NewImage[outbox.AttrEventID]; !ok {
			continue
		}
		item, err := streamimage.ToAttributeValueMap(rec.Change.NewImage)
		if err != nil {
			return events.DynamoDBEventResponse{}, fmt.Errorf("naive relay: decode: %w", err)
		}
		r, err := outbox.RecordFromItem(item)
		if err != nil {
			return events.DynamoDBEventResponse{}, fmt.Errorf("naive relay: decode: %w", err)
		}
		res := n.pub.Publish(ctx, []outbox.Envelope{r.Envelope})[0]
		if res.Status == relay.RetryableFailure {
			return fail(rec)
		}
		if errs := n.marker.MarkAll(ctx, []relay.Mark{{Key: r.Key, Envelope: r.Envelope, Result: res}}); errs[0] != nil {
			return fail(rec)
		}
	}
	return events.DynamoDBEventResponse{}, nil
}

// DualWriteAPI is what DualWriter calls on DynamoDB.
type DualWriteAPI interface {
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// DualWriter is the design the outbox exists to replace: the request path
// writes the order (PutItem to create, UpdateItem to pay), then publishes
// the event with its own PutEvents. A crash between the two loses the event
// (or, publishing first, announces a change that never committed); it is
// here only to count its calls.
type DualWriter struct {
	DDB    DualWriteAPI
	EB     relay.EventBridgeAPI
	Table  string // plain table with partition key "pk"
	Bus    string
	Source string
}

// CreateAndPay runs the two commands of one order (as Load does through the
// API): each is one DynamoDB write and one PutEvents of one entry.
func (d DualWriter) CreateAndPay(ctx context.Context, i int) error {
	id := "dual-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, err := d.DDB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(d.Table),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "order#" + id}, "status": &types.AttributeValueMemberS{Value: "PLACED"},
			"version": &types.AttributeValueMemberN{Value: "1"}, "amount_minor": &types.AttributeValueMemberN{Value: strconv.Itoa(100 + i)},
			"currency": &types.AttributeValueMemberS{Value: "EUR"}, "customer_id": &types.AttributeValueMemberS{Value: "customer-" + strconv.Itoa(i%50)},
		},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if err != nil {
		return fmt.Errorf("dual write: put order: %w", err)
	}
	if err := d.publish(ctx, id, 1, "OrderPlaced", map[string]any{"customer_id": "customer", "amount_minor": 100 + i, "currency": "EUR"}); err != nil {
		return err
	}
	_, err = d.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(d.Table),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "order#" + id}},
		UpdateExpression:          aws.String("SET #s = :paid, #v = :v2"),
		ConditionExpression:       aws.String("#v = :v1"),
		ExpressionAttributeNames:  map[string]string{"#s": "status", "#v": "version"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":paid": &types.AttributeValueMemberS{Value: "PAID"}, ":v1": &types.AttributeValueMemberN{Value: "1"}, ":v2": &types.AttributeValueMemberN{Value: "2"}},
	})
	if err != nil {
		return fmt.Errorf("dual write: pay order: %w", err)
	}
	return d.publish(ctx, id, 2, "OrderPaid", map[string]any{"amount_minor": 100 + i, "currency": "EUR"})
}

func (d DualWriter) publish(ctx context.Context, id string, seq int64, typ string, payload any) error {
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: seq}, outbox.Event{Type: typ, Version: 1, Payload: payload}, outbox.Metadata{})
	if err != nil {
		return err
	}
	detail, err := env.Detail()
	if err != nil {
		return err
	}
	out, err := d.EB.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		EventBusName: aws.String(d.Bus), Source: aws.String(d.Source), DetailType: aws.String(typ), Detail: aws.String(string(detail)),
	}}})
	if err != nil {
		return fmt.Errorf("dual write: publish: %w", err)
	}
	if out.FailedEntryCount > 0 {
		return errors.New("dual write: publish: entry rejected")
	}
	return nil
}
