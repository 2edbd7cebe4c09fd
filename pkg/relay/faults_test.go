package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

func newInjector(t *testing.T, cfg faults.Config) *faults.Injector {
	t.Helper()
	in, err := faults.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// batch returns n envelopes and their INSERT stream records with sequence
// numbers 100..100+n-1.
func batch(t *testing.T, n int) ([]outbox.Envelope, events.DynamoDBEvent) {
	t.Helper()
	var envs []outbox.Envelope
	var ev events.DynamoDBEvent
	for i := range n {
		e := envelope(t, fmt.Sprintf("agg-%d", i), 1, 10)
		envs = append(envs, e)
		ev.Records = append(ev.Records, insertRecord(t, e, fmt.Sprint(100+i)))
	}
	return envs, ev
}

// failedEntries returns the entry indexes of the injector's log with kind k
// at PutEvents, call by call: the first call carries the whole batch in
// order, so there an index is the record's index.
func failedEntries(in *faults.Injector, k faults.Kind) []int {
	var idx []int
	for _, inj := range in.Log() {
		if inj.Kind == k && inj.Boundary == faults.BoundaryPutEvents {
			i := -1 // an unreadable detail yields an index no record has
			if _, err := fmt.Sscanf(inj.Detail, "entry %d:", &i); err != nil {
				i = -1
			}
			idx = append(idx, i)
		}
	}
	return idx
}

// PutEvents answers HTTP 200 with some entries failed (retryable codes, not
// forwarded): the publisher re-sends only those entries, every event
// reaches the bus exactly once, and a record is marked published only after
// its own entry was accepted. With no retry left, the failed records are
// not marked and the first one is reported in batchItemFailures.
func TestFaultPartialPutEventsOnlyFailedEntriesResent(t *testing.T) {
	t.Parallel()
	t.Run("retried within the invocation", func(t *testing.T) {
		t.Parallel()
		in := newInjector(t, faults.Config{Seed: 11, Rates: map[faults.Kind]float64{faults.EntryRetryable: 0.3}})
		bus := &fakeEventBridge{}
		envs, ev := batch(t, 10)
		byPK := map[string]string{}
		for _, e := range envs {
			byPK[outbox.NewRecord(e, 0, 16).Key.PK] = e.EventID
		}
		ddb := &fakeDDB{fail: func(pk, _ string) error {
			if bus.sent()[byPK[pk]] != 1 {
				t.Errorf("%s marked before its entry was accepted", pk)
			}
			return nil
		}}
		cfg := testConfig()
		cfg.Publisher.MaxAttempts = 10
		r, err := relay.New(in.EventBridge(bus), ddb, &fakeSQS{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := r.Handle(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("resp %+v err %v", resp, err)
		}
		if n := in.Stats().Count(faults.BoundaryPutEvents, faults.EntryRetryable); n == 0 {
			t.Fatal("seed injected no partial failure")
		}
		for _, e := range envs {
			if got := bus.sent()[e.EventID]; got != 1 {
				t.Errorf("%s reached the bus %d times, want 1 (accepted entries must not be re-sent)", e.EventID, got)
			}
		}
		if got := len(ddb.byPK()); got != len(envs) {
			t.Fatalf("%d records marked, want %d", got, len(envs))
		}
	})
	t.Run("no retry left", func(t *testing.T) {
		t.Parallel()
		in := newInjector(t, faults.Config{Seed: 11, Rates: map[faults.Kind]float64{faults.EntryRetryable: 0.3}})
		bus := &fakeEventBridge{}
		envs, ev := batch(t, 10)
		ddb := &fakeDDB{}
		cfg := testConfig()
		cfg.Publisher.MaxAttempts = 1
		r, err := relay.New(in.EventBridge(bus), ddb, &fakeSQS{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := r.Handle(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		failed := failedEntries(in, faults.EntryRetryable)
		if len(failed) == 0 {
			t.Fatal("seed injected no partial failure")
		}
		isFailed := map[int]bool{}
		for _, i := range failed {
			isFailed[i] = true
		}
		marked := ddb.byPK()
		for i, e := range envs {
			pk := outbox.NewRecord(e, 0, 16).Key.PK
			_, ok := marked[pk]
			if ok == isFailed[i] {
				t.Errorf("record %d: marked=%v, failed=%v", i, ok, isFailed[i])
			}
		}
		want := fmt.Sprint(100 + failed[0])
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != want {
			t.Fatalf("batchItemFailures %+v, want [%s]", resp.BatchItemFailures, want)
		}
	})
}

// A permanently rejected entry (InvalidArgument/MalformedDetail) is parked:
// a DLQ message with the full envelope and the reason, the record marked
// PARKED with parked_reason, the Parked counter incremented; the other
// records of the batch, before and after it, are published and the batch
// succeeds.
func TestFaultPoisonEventParkedWhileBatchFlows(t *testing.T) {
	t.Parallel()
	in := newInjector(t, faults.Config{Seed: 5, Rates: map[faults.Kind]float64{faults.EntryPermanent: 0.25}})
	bus, ddb, q := &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}
	envs, ev := batch(t, 8)
	r, err := relay.New(in.EventBridge(bus), ddb, q, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v err %v: later records must keep flowing", resp, err)
	}
	poison := failedEntries(in, faults.EntryPermanent)
	if len(poison) == 0 || len(poison) == len(envs) || poison[0] == len(envs)-1 {
		t.Fatalf("seed gave poison entries %v; want some, not all, not only the last", poison)
	}
	isPoison := map[int]bool{}
	for _, i := range poison {
		isPoison[i] = true
	}
	if got := r.Marker().Parked(); got != int64(len(poison)) {
		t.Fatalf("Parked() = %d, want %d", got, len(poison))
	}
	if len(q.msgs) != len(poison) {
		t.Fatalf("%d DLQ messages, want %d", len(q.msgs), len(poison))
	}
	msgs := map[string]relay.ParkedMessage{}
	for _, m := range q.msgs {
		msgs[m.EventID] = m
	}
	marked := ddb.byPK()
	for i, e := range envs {
		expr := marked[outbox.NewRecord(e, 0, 16).Key.PK]
		if !isPoison[i] {
			if !strings.Contains(expr, outbox.StatusPublished) || bus.sent()[e.EventID] != 1 {
				t.Errorf("record %d: %q, sent %d", i, expr, bus.sent()[e.EventID])
			}
			continue
		}
		m, ok := msgs[e.EventID]
		if !ok || m.Envelope == nil || m.Envelope.EventID != e.EventID || string(m.Envelope.Payload) != string(e.Payload) ||
			(m.ErrorCode != "InvalidArgument" && m.ErrorCode != "MalformedDetail") || m.Reason == "" {
			t.Errorf("record %d: DLQ message %+v", i, m)
		}
		if !strings.Contains(expr, outbox.StatusParked) || !strings.Contains(expr, m.ErrorCode) || bus.sent()[e.EventID] != 0 {
			t.Errorf("record %d: parked update %q, sent %d", i, expr, bus.sent()[e.EventID])
		}
	}
}

// Marking throttled by DynamoDB (the relay "dies" between publish and
// mark): the events were published, but every record stays PENDING (in the
// pending index, no TTL) and the first one is reported in
// batchItemFailures; the redelivery publishes them again (I3 absorbs it)
// and marks them. Against Dynoxide, faults injected in the SDK stack of
// whatever marking call the relay makes (UpdateItem or BatchExecuteStatement).
func TestFaultThrottledMarkingStaysPending(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	w, err := outbox.NewWriter(env.DDB, outbox.WriterConfig{Source: "com.example.test", Table: table, PendingShards: 16})
	if err != nil {
		t.Fatal(err)
	}
	envs, ev := batch(t, 3)
	for _, e := range envs { // one change each: index 0, the key insertRecord uses
		if err := w.Write(context.Background(), nil, []outbox.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	in := newInjector(t, faults.Config{Rates: map[faults.Kind]float64{faults.Throttle: 1}, OutsideSDKRetries: true,
		Operations: []string{"DynamoDB.UpdateItem", "DynamoDB.BatchExecuteStatement", "DynamoDB.TransactWriteItems"}})
	cfg := env.Config.Copy()
	cfg.APIOptions = append(cfg.APIOptions, in.Middleware())
	throttled := dynamodb.NewFromConfig(cfg)

	bus := &fakeEventBridge{}
	rcfg := testConfig()
	rcfg.Marker.Table = table
	r, err := relay.New(bus, throttled, &fakeSQS{}, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), ev)
	if err == nil && (len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "100") {
		t.Fatalf("resp %+v: want the first record reported", resp)
	}
	if in.Stats().Count("", faults.Throttle) == 0 {
		t.Fatal("no throttling injected: the marker made no faultable call")
	}
	read := func(e outbox.Envelope) outbox.Record {
		out, err := env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: outbox.KeyFor(e.AggregateType, e.AggregateID, e.Sequence, 0).AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := outbox.RecordFromItem(out.Item)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	for _, e := range envs {
		if bus.sent()[e.EventID] != 1 {
			t.Fatalf("%s not published before marking", e.EventID)
		}
		if rec := read(e); rec.Status != outbox.StatusPending || rec.PendingShard == "" || !rec.ExpiresAt.IsZero() {
			t.Fatalf("after throttled marking: status %s shard %q expires %v", rec.Status, rec.PendingShard, rec.ExpiresAt)
		}
	}

	// Redelivery with DynamoDB healthy again.
	r2, err := relay.New(bus, env.DDB, &fakeSQS{}, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = r2.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("redelivery: %+v %v", resp, err)
	}
	for _, e := range envs {
		if rec := read(e); rec.Status != outbox.StatusPublished || rec.PendingShard != "" || rec.ExpiresAt.IsZero() || bus.sent()[e.EventID] != 2 {
			t.Fatalf("after redelivery: status %s shard %q expires %v sent %d", rec.Status, rec.PendingShard, rec.ExpiresAt, bus.sent()[e.EventID])
		}
	}
}

// A lost PutEvents response (the bus accepted the entries) is a retryable
// failure: the publisher re-sends, the bus holds the event twice, and the
// record is marked published once the re-send is acknowledged.
func TestFaultAmbiguousPutEventsResent(t *testing.T) {
	t.Parallel()
	in := newInjector(t, faults.Config{Rates: map[faults.Kind]float64{faults.ResponseLost: 1}})
	bus := &fakeEventBridge{}
	lossy := &firstCalls{n: 1, faulty: in.EventBridge(bus), healthy: bus}
	envs, ev := batch(t, 2)
	ddb := &fakeDDB{}
	r, err := relay.New(lossy, ddb, &fakeSQS{}, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	for _, e := range envs {
		if bus.sent()[e.EventID] != 2 {
			t.Fatalf("%s reached the bus %d times, want 2 (lost response, then re-send)", e.EventID, bus.sent()[e.EventID])
		}
	}
	if len(ddb.byPK()) != 2 || in.Stats().Count(faults.BoundaryPutEvents, faults.ResponseLost) != 1 {
		t.Fatalf("marked %d, stats %+v", len(ddb.byPK()), in.Stats())
	}
}

// firstCalls sends the first n calls through faulty, the rest to healthy.
type firstCalls struct {
	mu      sync.Mutex
	n       int
	calls   int
	faulty  relay.EventBridgeAPI
	healthy relay.EventBridgeAPI
}

func (f *firstCalls) PutEvents(ctx context.Context, in *eventbridgeInput, opts ...eventbridgeOption) (*eventbridgeOutput, error) {
	f.mu.Lock()
	f.calls++
	faulty := f.calls <= f.n
	f.mu.Unlock()
	if faulty {
		return f.faulty.PutEvents(ctx, in, opts...)
	}
	return f.healthy.PutEvents(ctx, in, opts...)
}

type (
	eventbridgeInput  = eventbridge.PutEventsInput
	eventbridgeOutput = eventbridge.PutEventsOutput
	eventbridgeOption = func(*eventbridge.Options)
)

// The parked-records DLQ failing (before send, or after send with the
// response lost): the poison record is not marked PARKED, stays pending and
// is reported; on redelivery it is parked, with at least one DLQ message
// carrying the full envelope (a lost response may leave a duplicate).
func TestFaultDLQSendFailureKeepsRecordPending(t *testing.T) {
	t.Parallel()
	for _, kind := range []faults.Kind{faults.FailBeforeSend, faults.ResponseLost} {
		permanent := newInjector(t, faults.Config{Rates: map[faults.Kind]float64{faults.EntryPermanent: 1}})
		dlqFaults := newInjector(t, faults.Config{Rates: map[faults.Kind]float64{kind: 1}})
		bus, ddb, q := &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}
		envs, ev := batch(t, 1)
		r, err := relay.New(permanent.EventBridge(bus), ddb, dlqFaults.Queue(q), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := r.Handle(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "100" {
			t.Fatalf("%s: resp %+v err %v", kind, resp, err)
		}
		if len(ddb.byPK()) != 0 || r.Marker().Parked() != 0 {
			t.Fatalf("%s: marked %v, parked %d although the DLQ send failed", kind, ddb.byPK(), r.Marker().Parked())
		}
		r2, err := relay.New(permanent.EventBridge(bus), ddb, q, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := r2.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%s: redelivery %+v %v", kind, resp, err)
		}
		wantMsgs := 1
		if kind == faults.ResponseLost {
			wantMsgs = 2
		}
		if len(q.msgs) != wantMsgs || q.msgs[len(q.msgs)-1].Envelope == nil || q.msgs[len(q.msgs)-1].Envelope.EventID != envs[0].EventID {
			t.Fatalf("%s: DLQ messages %+v", kind, q.msgs)
		}
		if !strings.Contains(ddb.byPK()[outbox.NewRecord(envs[0], 0, 16).Key.PK], outbox.StatusParked) || r2.Marker().Parked() != 1 {
			t.Fatalf("%s: not parked after redelivery", kind)
		}
	}
}
