package relay_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestParkThenRedrive: an event EventBridge rejects for good is parked (DLQ
// message with the full envelope, record PARKED, out of the pending index);
// once redriven it is published by the reconciler through the normal path.
func TestParkThenRedrive(t *testing.T) {
	env := ddbtest.New(t)
	ctx := context.Background()
	table := ddbtest.Name("outbox")
	in := outbox.CreateTableInput(table)
	in.StreamSpecification = nil // the relay is driven directly here
	env.CreateTable(t, in)
	w, err := outbox.NewWriter(env.DDB, outbox.WriterConfig{Source: "com.example.test", Table: table, PendingShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	e, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: 1}, outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]any{"x": 1}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, nil, []outbox.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	key := outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0)

	rejecting := true
	eb := &fakeEventBridge{fail: func(string, int) string {
		if rejecting {
			return "MalformedDetail"
		}
		return ""
	}}
	dlq := localrt.NewMemoryQueue("https://sqs.local/parked")
	cfg := relay.Config{
		Publisher: relay.PublisherConfig{Source: "com.example.test", EventBusName: "bus"},
		Marker:    relay.MarkerConfig{Table: table, ParkedQueueURL: dlq.URL(), Metrics: io.Discard},
	}
	r, err := relay.New(eb, env.DDB, dlq, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconciler.New(env.DDB, r.Publisher(), r.Marker(), reconciler.Config{
		Table: table, PendingShards: 4, ReconcileAfter: time.Nanosecond, AllowShortReconcileAfter: true, Metrics: io.Discard,
		// A record is due once its created_at_ms is below now's millisecond:
		// with the real clock a run within the write's millisecond finds it
		// pending but not yet due (failed once in CI). The reconciler's
		// clock runs a second ahead, so every record written here is due.
		Now: func() time.Time { return time.Now().Add(time.Second) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := rec.Run(ctx); err != nil || rep.Parked != 1 {
		t.Fatalf("first run: %+v %v, want 1 parked", rep, err)
	}
	if dlq.Len() != 1 {
		t.Fatalf("DLQ has %d messages, want 1", dlq.Len())
	}
	parked, err := relay.ListParked(ctx, env.DDB, table, 0)
	if err != nil || len(parked) != 1 || parked[0].EventID != e.EventID || parked[0].Reason == "" {
		t.Fatalf("ListParked = %+v, %v", parked, err)
	}
	// Parking an already parked record (a stale index read) counts nothing twice.
	parkedBefore := r.Marker().Parked()
	if err := r.Marker().Park(ctx, relay.Mark{Key: key, Envelope: e, Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: "MalformedDetail"}}); err != nil {
		t.Fatalf("second Park: %v", err)
	}
	if r.Marker().Parked() != parkedBefore {
		t.Fatalf("a parked record was parked twice (%d -> %d)", parkedBefore, r.Marker().Parked())
	}
	// Parked records are out of the pending index: the reconciler leaves them.
	if rep, _ := rec.Run(ctx); rep.Resent != 0 || rep.Pending != 0 {
		t.Fatalf("reconciler touched a parked record: %+v", rep)
	}

	rejecting = false // the cause is fixed
	if err := relay.Redrive(ctx, env.DDB, table, 4, key, time.Now()); err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if err := relay.Redrive(ctx, env.DDB, table, 0, key, time.Now()); err == nil {
		t.Fatal("Redrive with 0 shards succeeded")
	}
	if err := relay.Redrive(ctx, env.DDB, table, 4, key, time.Now()); !errors.Is(err, relay.ErrNotParked) {
		t.Fatalf("second Redrive err = %v, want ErrNotParked", err)
	}
	if rep, err := rec.Run(ctx); err != nil || rep.Resent != 1 {
		t.Fatalf("after redrive: %+v %v, want 1 re-sent", rep, err)
	}
	got, err := env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := outbox.RecordFromItem(got.Item)
	if err != nil || r2.Status != outbox.StatusPublished || r2.PendingShard != "" || r2.ExpiresAt.IsZero() {
		t.Fatalf("after redrive and reconcile: %+v %v", r2, err)
	}

	// A late permanent failure of a re-send never turns a published record
	// back into a parked one: its event already reached the bus.
	before := r.Marker().Parked()
	err = r.Marker().Park(ctx, relay.Mark{Key: key, Envelope: e, Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: "InvalidArgument"}})
	if err != nil {
		t.Fatalf("Park of a published record: %v", err)
	}
	got, _ = env.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if r3, _ := outbox.RecordFromItem(got.Item); r3.Status != outbox.StatusPublished || r.Marker().Parked() != before {
		t.Fatalf("published record became %s (parked count %d -> %d)", r3.Status, before, r.Marker().Parked())
	}
}
