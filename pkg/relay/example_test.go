package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// exampleRecordingBus is the local EventBridge bus (which refuses what PutEvents
// refuses: more than 10 entries, entries over the size limit, missing
// fields) plus a log of the detail types it accepted.
type exampleRecordingBus struct {
	*localrt.Bus
	accepted []string
}

func (b *exampleRecordingBus) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	out, err := b.Bus.PutEvents(ctx, in, opts...)
	if err == nil {
		for i, e := range out.Entries {
			if e.EventId != nil {
				b.accepted = append(b.accepted, aws.ToString(in.Entries[i].DetailType))
			}
		}
	}
	return out, err
}

// Run the relay on your own stream: the outbox table's DynamoDB stream
// delivers INSERT records (events.DynamoDBEvent, exactly the JSON Lambda
// sends) to Relay.Handle, which publishes each event to EventBridge, then
// marks its record PUBLISHED (pending index entry removed, TTL set). On AWS,
// main is three lines: build the relay with the SDK clients, then
// lambda.Start(r.Handle); the event source mapping needs
// ReportBatchItemFailures and outbox.StreamFilterPattern() as its filter.
//
// Here the stream is read from Dynoxide with the Streams API and turned into
// the Lambda payload by the local runtime, and the bus is the local one.
func Example_runTheRelayOnYourStream() {
	ctx := context.Background()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		fmt.Println("start dynoxide:", err)
		return
	}
	defer srv.Stop()
	cfg := dynoxide.AWSConfig(srv.Endpoint)
	ddb := dynamodb.NewFromConfig(cfg)

	// An outbox table with one committed event (see the outbox package's
	// example for the business write that goes with it).
	created, err := ddb.CreateTable(ctx, outbox.CreateTableInput("outbox"))
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := outbox.NewWriter(ddb, outbox.WriterConfig{Source: "com.example.test", Table: "outbox"})
	if err != nil {
		fmt.Println(err)
		return
	}
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Account", ID: "acc-1", Sequence: 1},
		outbox.Event{Type: "AccountOpened", Version: 1, Payload: map[string]string{"account_id": "acc-1"}}, outbox.Metadata{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Write(ctx, nil, []outbox.Envelope{env}); err != nil {
		fmt.Println(err)
		return
	}

	// The stream batch, as Lambda's event source mapping would deliver it.
	streamARN := aws.ToString(created.TableDescription.LatestStreamArn)
	recs, err := exampleReadStream(ctx, dynamodbstreams.NewFromConfig(cfg), streamARN)
	if err != nil {
		fmt.Println(err)
		return
	}
	payload, err := localrt.StreamEventJSON(recs, streamARN, cfg.Region)
	if err != nil {
		fmt.Println(err)
		return
	}
	var batch events.DynamoDBEvent
	if err := json.Unmarshal(payload, &batch); err != nil {
		fmt.Println(err)
		return
	}

	// The relay: an EventBridge client, a DynamoDB client (marking) and an
	// SQS client (the parked-records DLQ for events that cannot be published).
	local, err := localrt.NewBus(localrt.BusConfig{Name: "accounts", Rules: []localrt.Rule{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	bus := &exampleRecordingBus{Bus: local}
	parked, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "outbox-parked"})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := relay.New(bus, ddb, parked, relay.Config{
		Publisher: relay.PublisherConfig{Source: "com.example.test", EventBusName: "accounts"},
		Marker:    relay.MarkerConfig{Table: "outbox", ParkedQueueURL: parked.URL()},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := r.Handle(ctx, batch)
	if err != nil {
		fmt.Println("whole batch retried:", err)
		return
	}
	fmt.Println("records:", len(batch.Records), "failed:", len(resp.BatchItemFailures))
	fmt.Println("published:", bus.accepted)

	got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("outbox"), Key: outbox.KeyFor("Account", "acc-1", 1, 0).AttributeValues(), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, err := outbox.RecordFromItem(got.Item)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, inPendingIndex := got.Item[outbox.AttrPendingShard]
	fmt.Println("record:", rec.Status, "in pending index:", inPendingIndex, "expires:", !rec.ExpiresAt.IsZero())
	// Output:
	// records: 1 failed: 0
	// published: [AccountOpened]
	// record: PUBLISHED in pending index: false expires: true
}

// exampleReadStream returns the records of the stream's shards from their start
// (TRIM_HORIZON), one GetRecords call per shard.
func exampleReadStream(ctx context.Context, streams *dynamodbstreams.Client, arn string) ([]streamtypes.Record, error) {
	desc, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)})
	if err != nil {
		return nil, err
	}
	var recs []streamtypes.Record
	for _, sh := range desc.StreamDescription.Shards {
		it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(arn), ShardId: sh.ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			return nil, err
		}
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
		if err != nil {
			return nil, err
		}
		recs = append(recs, out.Records...)
	}
	return recs, nil
}
