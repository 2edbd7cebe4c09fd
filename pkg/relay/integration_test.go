package relay_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestRelayAgainstDynoxide writes outbox records through the Writer, reads
// the table's stream like an event source mapping would, hands the batch to
// Handle in Lambda's JSON shape, and checks the stored records.
func TestRelayAgainstDynoxide(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	w, err := outbox.NewWriter(env.DDB, outbox.WriterConfig{Source: "com.example.test", Table: table})
	if err != nil {
		t.Fatal(err)
	}
	var envs []outbox.Envelope
	for i := range 5 {
		e := envelope(t, fmt.Sprint("it", i), 1, 20)
		envs = append(envs, e)
		if err := w.Write(ctx, nil, []outbox.Envelope{e}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	stuck := envs[4] // EventBridge keeps throttling this one

	ev := readStream(t, ctx, env, table, 5)
	eb := &fakeEventBridge{fail: func(id string, _ int) string {
		if id == stuck.EventID {
			return "ThrottlingException"
		}
		return ""
	}}
	cfg := testConfig()
	cfg.Marker.Table = table
	cfg.Publisher.MaxAttempts = 2
	r, err := relay.New(eb, env.DDB, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[4].Change.SequenceNumber {
		t.Fatalf("batchItemFailures = %+v, want the stuck record's sequence number", resp.BatchItemFailures)
	}

	for _, e := range envs {
		key := outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0)
		out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := outbox.RecordFromItem(out.Item)
		if err != nil {
			t.Fatal(err)
		}
		if e.EventID == stuck.EventID {
			if rec.Status != outbox.StatusPending || rec.PendingShard == "" || !rec.ExpiresAt.IsZero() {
				t.Errorf("stuck record: status %s, shard %q, expires %v; want pending, in the index, no TTL", rec.Status, rec.PendingShard, rec.ExpiresAt)
			}
			continue
		}
		if rec.Status != outbox.StatusPublished || rec.PendingShard != "" || rec.ExpiresAt.Before(time.Now().Add(6*24*time.Hour)) {
			t.Errorf("%s: status %s, shard %q, expires %v", e.AggregateID, rec.Status, rec.PendingShard, rec.ExpiresAt)
		}
		if bus := out.Item[outbox.AttrBusEventID].(*ddbtypes.AttributeValueMemberS).Value; bus != "bus-"+e.EventID {
			t.Errorf("bus_event_id %q", bus)
		}
	}

	// The marking updates come back as MODIFY records: the relay ignores them.
	ev2 := readStream(t, ctx, env, table, 9)
	eb2 := &fakeEventBridge{}
	r2, err := relay.New(eb2, env.DDB, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ev2.Records = ev2.Records[5:]
	for _, rec := range ev2.Records {
		if rec.EventName != "MODIFY" {
			t.Fatalf("expected MODIFY, got %s", rec.EventName)
		}
	}
	if resp, err := r2.Handle(ctx, ev2); err != nil || len(resp.BatchItemFailures) != 0 || eb2.callCount() != 0 {
		t.Fatalf("MODIFY batch: resp %+v err %v calls %d", resp, err, eb2.callCount())
	}
}

// readStream reads every shard of the table's stream from TRIM_HORIZON until
// at least want records arrived, and returns them as the events.DynamoDBEvent
// Lambda would deliver, decoded from Lambda's JSON shape.
func readStream(t *testing.T, ctx context.Context, env *ddbtest.Env, table string, want int) events.DynamoDBEvent {
	t.Helper()
	desc, err := env.DDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	arn := desc.Table.LatestStreamArn
	var records []map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for len(records) < want && time.Now().Before(deadline) {
		records = records[:0]
		ds, err := env.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn})
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range ds.StreamDescription.Shards {
			it, err := env.Streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
				StreamArn: arn, ShardId: sh.ShardId, ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				t.Fatal(err)
			}
			iter := it.ShardIterator
			for iter != nil {
				out, err := env.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range out.Records {
					records = append(records, lambdaRecord(t, r, aws.ToString(arn)))
				}
				if len(out.Records) == 0 {
					break
				}
				iter = out.NextShardIterator
			}
		}
		if len(records) < want {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if len(records) < want {
		t.Fatalf("stream has %d records, want %d", len(records), want)
	}
	b, err := json.Marshal(map[string]any{"Records": records})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("decode Lambda shape: %v\n%s", err, b)
	}
	return ev
}

// lambdaRecord renders a GetRecords record in the JSON shape Lambda sends.
func lambdaRecord(t *testing.T, r stypes.Record, arn string) map[string]any {
	t.Helper()
	d := r.Dynamodb
	change := map[string]any{
		"SequenceNumber": aws.ToString(d.SequenceNumber),
		"SizeBytes":      aws.ToInt64(d.SizeBytes),
		"StreamViewType": string(d.StreamViewType),
		"Keys":           lambdaImage(d.Keys),
	}
	if d.ApproximateCreationDateTime != nil {
		change["ApproximateCreationDateTime"] = float64(d.ApproximateCreationDateTime.Unix())
	}
	if d.NewImage != nil {
		change["NewImage"] = lambdaImage(d.NewImage)
	}
	if d.OldImage != nil {
		change["OldImage"] = lambdaImage(d.OldImage)
	}
	out := map[string]any{
		"eventID":        aws.ToString(r.EventID),
		"eventName":      string(r.EventName),
		"eventVersion":   aws.ToString(r.EventVersion),
		"eventSource":    "aws:dynamodb",
		"awsRegion":      "us-east-1",
		"eventSourceARN": arn,
		"dynamodb":       change,
	}
	if r.UserIdentity != nil {
		out["userIdentity"] = map[string]any{"type": aws.ToString(r.UserIdentity.Type), "principalId": aws.ToString(r.UserIdentity.PrincipalId)}
	}
	return out
}

func lambdaImage(m map[string]stypes.AttributeValue) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = lambdaValue(v)
	}
	return out
}

func lambdaValue(v stypes.AttributeValue) map[string]any {
	switch t := v.(type) {
	case *stypes.AttributeValueMemberS:
		return map[string]any{"S": t.Value}
	case *stypes.AttributeValueMemberN:
		return map[string]any{"N": t.Value}
	case *stypes.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(t.Value)}
	case *stypes.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": t.Value}
	case *stypes.AttributeValueMemberNULL:
		return map[string]any{"NULL": true}
	case *stypes.AttributeValueMemberSS:
		return map[string]any{"SS": t.Value}
	case *stypes.AttributeValueMemberNS:
		return map[string]any{"NS": t.Value}
	case *stypes.AttributeValueMemberBS:
		l := make([]string, len(t.Value))
		for i, b := range t.Value {
			l[i] = base64.StdEncoding.EncodeToString(b)
		}
		return map[string]any{"BS": l}
	case *stypes.AttributeValueMemberL:
		l := make([]any, len(t.Value))
		for i, e := range t.Value {
			l[i] = lambdaValue(e)
		}
		return map[string]any{"L": l}
	case *stypes.AttributeValueMemberM:
		return map[string]any{"M": lambdaImage(t.Value)}
	}
	panic(fmt.Sprintf("unexpected stream attribute value %T", v))
}
