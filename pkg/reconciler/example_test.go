package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Sweep up what the relay missed: a record still pending after
// ReconcileAfter (5 minutes by default) is found by a Query of the sparse
// pending index, claimed, re-published through the relay's Publisher and
// marked through its Marker. On AWS, an EventBridge schedule invokes
// Reconciler.Handle; here Run is called once with a clock 10 minutes ahead.
// The report counts what is still pending after the run's repair: 0.
//
// The example runs against Dynoxide, a local DynamoDB-compatible server
// (make deps installs it), and the local EventBridge bus.
func Example_sweepWhatTheRelayMissed() {
	ctx := context.Background()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		fmt.Println("start dynoxide:", err)
		return
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// One committed event that no relay published (its stream record was
	// lost to an outage, say).
	if _, err := ddb.CreateTable(ctx, outbox.CreateTableInput("outbox")); err != nil {
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

	// The reconciler reuses the relay's Publisher and Marker.
	bus, err := localrt.NewBus(localrt.BusConfig{Name: "accounts", Rules: []localrt.Rule{}, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	parked, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "outbox-parked"})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := relay.New(bus, ddb, parked, relay.Config{
		Publisher: relay.PublisherConfig{Source: "com.example.test", EventBusName: "accounts"},
		Marker:    relay.MarkerConfig{Table: "outbox", ParkedQueueURL: parked.URL(), Metrics: io.Discard},
		Logger:    quiet,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	later := func() time.Time { return time.Now().Add(10 * time.Minute) }
	rc, err := reconciler.New(ddb, r.Publisher(), r.Marker(), reconciler.Config{
		Table: "outbox", Now: later, Logger: quiet, Metrics: io.Discard,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	rep, err := rc.Run(ctx)
	fmt.Printf("run: pending=%d resent=%d parked=%d failed=%d err=%v\n", rep.Pending, rep.Resent, rep.Parked, rep.Failed, err)

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
	fmt.Println("record:", rec.Status)

	rep, err = rc.Run(ctx)
	fmt.Printf("next run: pending=%d resent=%d err=%v\n", rep.Pending, rep.Resent, err)
	// Output:
	// run: pending=0 resent=1 parked=0 failed=0 err=<nil>
	// record: PUBLISHED
	// next run: pending=0 resent=0 err=<nil>
}
