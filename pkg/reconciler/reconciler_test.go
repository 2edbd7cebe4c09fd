package reconciler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// fakeEventBridge accepts every entry and records the event ids sent, in
// order; fail, when set, gives an entry's ErrorCode ("" accepts it).
type fakeEventBridge struct {
	mu   sync.Mutex
	sent []string
	fail func(eventID string) string
	// reject, when set, may refuse a whole request by its entry count.
	reject func(entries int) error
	calls  int
}

func (f *fakeEventBridge) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.reject != nil {
		if err := f.reject(len(in.Entries)); err != nil {
			return nil, err
		}
	}
	out := &eventbridge.PutEventsOutput{}
	for _, e := range in.Entries {
		var env outbox.Envelope
		_ = json.Unmarshal([]byte(aws.ToString(e.Detail)), &env)
		f.sent = append(f.sent, env.EventID)
		if f.fail != nil {
			if code := f.fail(env.EventID); code != "" {
				out.FailedEntryCount++
				out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String("fake")})
				continue
			}
		}
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: aws.String("bus-" + env.EventID)})
	}
	return out, nil
}

type fakeSQS struct{}

func (fakeSQS) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return &sqs.SendMessageOutput{}, nil
}

// queryRecorder passes Query (and UpdateItem) through and records every
// Query input.
type queryRecorder struct {
	reconciler.DynamoDBAPI
	mu  sync.Mutex
	ins []*dynamodb.QueryInput
}

func (q *queryRecorder) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	q.mu.Lock()
	q.ins = append(q.ins, in)
	q.mu.Unlock()
	return q.DynamoDBAPI.Query(ctx, in, opts...)
}

type fixture struct {
	env    *ddbtest.Env
	table  string
	writer *outbox.Writer
	relay  *relay.Relay
	eb     *fakeEventBridge
	shards int
}

func setup(t *testing.T, shards int) fixture {
	t.Helper()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	w, err := outbox.NewWriter(env.DDB, outbox.WriterConfig{Source: "com.example.test", Table: table, PendingShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	eb := &fakeEventBridge{}
	r, err := relay.New(eb, env.DDB, fakeSQS{}, relay.Config{
		Publisher: relay.PublisherConfig{Source: "com.example.test", EventBusName: "bus", InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond},
		Marker:    relay.MarkerConfig{Table: table, ParkedQueueURL: "q", Metrics: io.Discard},
		Logger:    quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{env: env, table: table, writer: w, relay: r, eb: eb, shards: shards}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// write commits one outbox record that occurred age ago.
func (f fixture) write(t *testing.T, id string, age time.Duration) outbox.Envelope {
	t.Helper()
	return f.writeSeq(t, id, 1, age)
}

// writeSeq commits the outbox record of aggregate id at sequence seq, that
// occurred age ago.
func (f fixture) writeSeq(t *testing.T, id string, seq int64, age time.Duration) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: seq},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]string{"id": id}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	env.OccurredAt = env.OccurredAt.Add(-age)
	if err := f.writer.Write(context.Background(), nil, []outbox.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	return env
}

func (f fixture) record(t *testing.T, env outbox.Envelope) outbox.Record {
	t.Helper()
	out, err := f.env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.table), Key: outbox.KeyFor("Order", env.AggregateID, env.Sequence, 0).AttributeValues(), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := outbox.RecordFromItem(out.Item)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (f fixture) reconciler(t *testing.T, q reconciler.DynamoDBAPI, metrics io.Writer, mod func(*reconciler.Config)) *reconciler.Reconciler {
	t.Helper()
	cfg := reconciler.Config{Table: f.table, PendingShards: f.shards, Logger: quiet(), Metrics: metrics}
	if mod != nil {
		mod(&cfg)
	}
	rc, err := reconciler.New(q, f.relay.Publisher(), f.relay.Marker(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestReconcilerRepublishesStaleRecords(t *testing.T) {
	t.Parallel()
	f := setup(t, 4)
	var old []outbox.Envelope
	for i := range 6 {
		old = append(old, f.write(t, fmt.Sprint("old", i), time.Hour))
	}
	young := f.write(t, "young", 0)
	published := f.write(t, "published", 2*time.Hour)
	if err := f.relay.Marker().MarkPublished(context.Background(),
		outbox.KeyFor("Order", "published", 1, 0), published, "bus-earlier"); err != nil {
		t.Fatal(err)
	}

	q := &queryRecorder{DynamoDBAPI: f.env.DDB}
	var metrics bytes.Buffer
	rep, err := f.reconciler(t, q, &metrics, nil).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The gauges are taken after the repair: only the young record is
	// still pending, and it is the oldest one.
	if rep.Pending != 1 || rep.Resent != 6 || rep.Parked != 0 || rep.Failed != 0 || rep.Truncated {
		t.Fatalf("report %+v, want 1 pending after the repair, 6 resent", rep)
	}
	if rep.OldestPendingAge <= 0 || rep.OldestPendingAge > time.Minute {
		t.Errorf("OldestPendingAge %v, want the young record's age (under a minute)", rep.OldestPendingAge)
	}
	for _, e := range old {
		rec := f.record(t, e)
		if rec.Status != outbox.StatusPublished || rec.PendingShard != "" || rec.ExpiresAt.IsZero() {
			t.Errorf("%s: %+v", e.AggregateID, rec)
		}
	}
	if rec := f.record(t, young); rec.Status != outbox.StatusPending || rec.PendingShard == "" || !rec.ExpiresAt.IsZero() {
		t.Errorf("young record touched: %+v", rec)
	}
	for _, id := range f.eb.sent {
		if id == young.EventID || id == published.EventID {
			t.Errorf("re-published %s", id)
		}
	}
	if len(f.eb.sent) != 6 {
		t.Errorf("sent %d events, want 6", len(f.eb.sent))
	}
	// Only Queries on the pending index, every shard visited.
	shards := map[string]bool{}
	for _, in := range q.ins {
		if aws.ToString(in.IndexName) != outbox.PendingIndexName {
			t.Errorf("query outside the pending index: %+v", in)
		}
		for _, v := range in.ExpressionAttributeValues {
			if s, ok := v.(*ddbtypes.AttributeValueMemberS); ok {
				shards[s.Value] = true
			}
		}
	}
	for i := range f.shards {
		if !shards[outbox.ShardName(i)] {
			t.Errorf("shard %s not queried", outbox.ShardName(i))
		}
	}
	// EMF line with the three metrics.
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(metrics.Bytes()), &line); err != nil {
		t.Fatalf("EMF: %v: %s", err, metrics.String())
	}
	if line[config.MetricPendingCount] != 1.0 || line[config.MetricReconcilerResent] != 6.0 || line[config.MetricDimensionOutboxTable] != f.table {
		t.Errorf("EMF line %s", metrics.String())
	}
	if _, ok := line[config.MetricOldestPendingAge]; !ok || !strings.Contains(metrics.String(), config.MetricNamespace) {
		t.Errorf("EMF line %s", metrics.String())
	}

	// A second run finds only the young record pending.
	rep, err = f.reconciler(t, f.env.DDB, io.Discard, nil).Run(context.Background())
	if err != nil || rep.Pending != 1 || rep.Resent != 0 {
		t.Fatalf("second run %+v, %v", rep, err)
	}
}

func TestReconcilerBoundedPages(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	for i := range 5 {
		f.write(t, fmt.Sprint("o", i), time.Hour)
	}
	q := &queryRecorder{DynamoDBAPI: f.env.DDB}
	rc := f.reconciler(t, q, io.Discard, func(c *reconciler.Config) { c.PageSize = 2; c.MaxPagesPerShard = 1 })
	rep, err := rc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resent != 2 || !rep.Truncated || rep.Pending != 3 {
		t.Fatalf("report %+v, want 2 resent, truncated, 3 still pending", rep)
	}
	if rep.OldestPendingAge < 59*time.Minute || rep.OldestPendingAge > 61*time.Minute {
		t.Errorf("OldestPendingAge %v, want about 1h (the stale records left for the next run)", rep.OldestPendingAge)
	}
	for _, in := range q.ins {
		if in.Select == "" && aws.ToInt32(in.Limit) > 2 {
			t.Errorf("page larger than PageSize: %d", aws.ToInt32(in.Limit))
		}
	}
	rep, err = rc.Run(context.Background())
	if err != nil || rep.Resent != 2 || rep.Pending != 1 {
		t.Fatalf("second run %+v, %v", rep, err)
	}
	if err := rc.Handle(context.Background(), events.EventBridgeEvent{ID: "sched"}); err != nil {
		t.Fatal(err)
	}
	rep, err = rc.Run(context.Background())
	if err != nil || rep.Pending != 0 || rep.Resent != 0 || rep.Truncated || rep.OldestPendingAge != 0 {
		t.Fatalf("final run %+v, %v", rep, err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     reconciler.Config
		wantErr string // "" means valid
	}{
		{"defaults", reconciler.Config{Table: "t"}, ""},
		{"no table", reconciler.Config{}, "Table"},
		{"1000 shards", reconciler.Config{Table: "t", PendingShards: 1000}, "PendingShards"},
		{"stale age 1 s", reconciler.Config{Table: "t", ReconcileAfter: time.Second}, "MinReconcileAfter"},
		{"stale age just below the floor", reconciler.Config{Table: "t", ReconcileAfter: config.MinReconcileAfter - time.Second}, "MinReconcileAfter"},
		{"stale age at the floor", reconciler.Config{Table: "t", ReconcileAfter: config.MinReconcileAfter}, ""},
		{"stale age 1 s for tests", reconciler.Config{Table: "t", ReconcileAfter: time.Second, AllowShortReconcileAfter: true}, ""},
		{"lease shorter than the run", reconciler.Config{Table: "t", Budget: time.Minute, ClaimLease: 30 * time.Second}, "ClaimLease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := reconciler.New(&queryRecorder{}, &relay.Publisher{}, &relay.Marker{}, tt.cfg)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("New() error %v, want %q", err, tt.wantErr)
			}
		})
	}
}
