package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/callcount"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// costEnv is an outbox table on Dynoxide and a DynamoDB client counted by
// counter. withStream=false drops the table's stream: tests that build
// stream records themselves need none, and Dynoxide's cost per write grows
// with the stream's size.
func costEnv(t *testing.T, withStream bool) (*ddbtest.Env, string, *callcount.Counter, *dynamodb.Client) {
	t.Helper()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	if !withStream {
		in.StreamSpecification = nil
	}
	env.CreateTable(t, in)
	counter := callcount.New()
	ddb := dynamodb.NewFromConfig(env.Config, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, counter.Register, callcount.RequestConsumedCapacity)
	})
	return env, table, counter, ddb
}

// writeEnvelopes writes n outbox records with the Writer, one change (one
// aggregate, one event, so key index 0) per transaction, and returns their
// envelopes.
func writeEnvelopes(t *testing.T, ctx context.Context, ddb outbox.TransactWriter, table, prefix string, n int) []outbox.Envelope {
	t.Helper()
	w, err := outbox.NewWriter(ddb, outbox.WriterConfig{Source: "com.example.test", Table: table})
	if err != nil {
		t.Fatal(err)
	}
	envs := make([]outbox.Envelope, n)
	for i := range envs {
		envs[i] = envelope(t, fmt.Sprint(prefix, i), 1, 20)
	}
	for _, e := range envs {
		if err := w.Write(ctx, nil, []outbox.Envelope{e}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	return envs
}

// TestMarkAllBatchAgainstDynoxide marks 60 written records and one missing
// record through MarkAll on a real client: 3 BatchExecuteStatement calls
// (25 + 25 + 11 statements), no UpdateItem, every record PUBLISHED with a
// TTL and out of the pending index, and the missing record not created.
func TestMarkAllBatchAgainstDynoxide(t *testing.T) {
	t.Parallel()
	env, table, counter, ddb := costEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	envs := writeEnvelopes(t, ctx, env.DDB, table, "mk", 60)

	cfg := testConfig().Marker
	cfg.Table = table
	cfg.Logger = quietLogger()
	m, err := relay.NewMarker(ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var marks []relay.Mark
	for _, e := range envs {
		marks = append(marks, relay.Mark{
			Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0), Envelope: e,
			Result: relay.Result{Status: relay.Published, EventID: "bus-" + e.EventID},
		})
	}
	ghost := envelope(t, "ghost", 1, 10) // never written: ConditionalCheckFailed
	ghostKey := outbox.KeyFor(ghost.AggregateType, ghost.AggregateID, 1, 0)
	marks = append(marks, relay.Mark{Key: ghostKey, Envelope: ghost, Result: relay.Result{Status: relay.Published, EventID: "bus-ghost"}})

	noErrors(t, m.MarkAll(ctx, marks))
	snap := counter.Snapshot()
	t.Logf("\n%s", snap)
	if snap.Calls("DynamoDB", "BatchExecuteStatement") != 3 || snap.Calls("DynamoDB", "UpdateItem") != 0 || snap.TotalCalls() != 3 {
		t.Errorf("calls: want 3 BatchExecuteStatement and nothing else")
	}
	if r := snap.Get("DynamoDB", "BatchExecuteStatement"); r.Errors != 0 || r.CapacityUnits <= 0 {
		t.Errorf("BatchExecuteStatement row %+v", r)
	}
	if !m.BatchStatements() {
		t.Error("batching turned off")
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
		if rec.Status != outbox.StatusPublished || rec.PendingShard != "" || rec.ExpiresAt.Before(time.Now().Add(6*24*time.Hour)) {
			t.Errorf("%s: status %s, shard %q, expires %v", e.AggregateID, rec.Status, rec.PendingShard, rec.ExpiresAt)
		}
		if _, ok := out.Item[outbox.AttrPublishedAt]; !ok {
			t.Errorf("%s: no published_at", e.AggregateID)
		}
		if bus := out.Item[outbox.AttrBusEventID].(*ddbtypes.AttributeValueMemberS).Value; bus != "bus-"+e.EventID {
			t.Errorf("bus_event_id %q", bus)
		}
	}
	out, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: ghostKey.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item != nil {
		t.Errorf("ghost record: item %v, err %v; want none", out.Item, err)
	}
	// The pending index is empty.
	q, err := env.DDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), IndexName: aws.String(outbox.PendingIndexName)})
	if err != nil || q.Count != 0 {
		t.Errorf("pending index: %d items, err %v", q.Count, err)
	}
}

// TestRelayCallsPerThousandEvents runs Relay.Handle over 10 stream batches
// of 100 INSERT records (built from the written items, as Lambda delivers
// them) with a counting fake EventBridge that accepts everything and a
// counted real DynamoDB client, and bounds the AWS calls per 1,000 events:
// 10 PutEvents + 4 BatchExecuteStatement per 100 = 140, no reads.
func TestRelayCallsPerThousandEvents(t *testing.T) {
	t.Parallel()
	const events, batchSize = 1000, 100
	env, table, counter, ddb := costEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	envs := writeEnvelopes(t, ctx, env.DDB, table, "k", events)

	eb := callcount.CountingPutEvents(counter, &fakeEventBridge{})
	cfg := testConfig()
	cfg.Marker.Table = table
	r, err := relay.New(eb, ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < events; start += batchSize {
		var ev eventsBatch
		for i := start; i < start+batchSize; i++ {
			ev.Records = append(ev.Records, insertRecord(t, envs[i], fmt.Sprintf("%021d", i+1)))
		}
		resp, err := r.Handle(ctx, ev.DynamoDBEvent())
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch at %d: resp %+v err %v", start, resp, err)
		}
	}
	snap := counter.Snapshot()
	perThousand := float64(snap.TotalCalls()) * 1000 / events
	t.Logf("AWS calls for %d events at batch size %d: %d (%.0f per 1,000 events)\n%s", events, batchSize, snap.TotalCalls(), perThousand, snap)
	if perThousand > 150 {
		t.Errorf("%.0f AWS calls per 1,000 events, want <= 150", perThousand)
	}
	if snap.Calls("EventBridge", "PutEvents") != events/relay.MaxEntriesPerRequest {
		t.Errorf("PutEvents calls %d, want %d (full batches of 10)", snap.Calls("EventBridge", "PutEvents"), events/relay.MaxEntriesPerRequest)
	}
	want := int64(events / batchSize * ((batchSize + relay.MaxStatementsPerBatch - 1) / relay.MaxStatementsPerBatch))
	if snap.Calls("DynamoDB", "BatchExecuteStatement") != want || snap.Calls("DynamoDB", "UpdateItem") != 0 {
		t.Errorf("BatchExecuteStatement %d (want %d), UpdateItem %d (want 0)", snap.Calls("DynamoDB", "BatchExecuteStatement"), want, snap.Calls("DynamoDB", "UpdateItem"))
	}
	for _, row := range snap {
		if row.Service == "DynamoDB" && row.Operation != "BatchExecuteStatement" {
			t.Errorf("unexpected DynamoDB call %s (the relay must not read per record)", row.Operation)
		}
		if row.Errors != 0 {
			t.Errorf("%s %s: %d errors", row.Service, row.Operation, row.Errors)
		}
	}
	// Every record left the pending index.
	q, err := env.DDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), IndexName: aws.String(outbox.PendingIndexName), Select: ddbtypes.SelectCount})
	if err != nil || q.Count != 0 {
		t.Errorf("pending index: %d items, err %v", q.Count, err)
	}
}

type eventsBatch struct{ Records []events.DynamoDBEventRecord }

func (b eventsBatch) DynamoDBEvent() events.DynamoDBEvent {
	return events.DynamoDBEvent{Records: b.Records}
}
