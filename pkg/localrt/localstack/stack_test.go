package localstack_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

func TestStartRefusesInvalidConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, events.EventBridgeEvent) error { return nil }
	ok := localstack.Config{OutboxTable: "o", Source: "com.example.t", BusName: "b"}
	cases := map[string]struct {
		edit func(*localstack.Config)
		want string
	}{
		"no outbox table": {func(c *localstack.Config) { c.OutboxTable = "" }, "OutboxTable"},
		"no source":       {func(c *localstack.Config) { c.Source = "" }, "Source"},
		"aws source":      {func(c *localstack.Config) { c.Source = "aws.events" }, `"aws."`},
		"no bus":          {func(c *localstack.Config) { c.BusName = "" }, "BusName"},
		"data and endpoint": {func(c *localstack.Config) { c.DataFile, c.Endpoint = "x.db", "http://127.0.0.1:1" },
			"DataFile"},
		"shards": {func(c *localstack.Config) { c.PendingShards = 1000 }, "PendingShards"},
		"two routes": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "c", AggregateType: "A", Pattern: `{}`, Handler: h}}
		}, "AggregateType and Pattern"},
		"no handler": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "c", AggregateType: "A"}}
		}, "exactly one of Handler"},
		"two handlers": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "c", AggregateType: "A", Handler: h,
				SQSHandler: func(localstack.ConsumerEnv) (localrt.SQSHandler, error) { return nil, nil }}}
		}, "exactly one of Handler"},
		"duplicate name": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "c", AggregateType: "A", Handler: h}, {Name: "c", AggregateType: "B", Handler: h}}
		}, "used twice"},
		"nil table": {func(c *localstack.Config) { c.Tables = []*dynamodb.CreateTableInput{nil} }, "Tables[0]"},
		"name with a space": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "a b", AggregateType: "A", Handler: h}}
		}, "letters, digits, hyphens or underscores"},
		"name with a slash": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "a/b", AggregateType: "A", Handler: h}}
		}, `name "a/b"`},
		"name with #": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "a#b", AggregateType: "A", Handler: h}}
		}, `name "a#b"`},
		"name over the rule limit": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: strings.Repeat("a", 60), AggregateType: "A", Handler: h}}
		}, "1..59"},
		"ordered name over the sweep rule limit": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: strings.Repeat("a", 47), Ordered: true, AggregateType: "A", Handler: h}}
		}, "-resequencer-sweep"},
		"ordered pattern on detail-type": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "o", Ordered: true, Pattern: `{"source":["com.example.t"],"detail-type":["ThingMade"]}`, Handler: h}}
		}, "detail-type"},
		"ordered pattern on an event field": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "o", Ordered: true, Handler: h,
				Pattern: map[string]any{"detail": map[string]any{"aggregate_type": []string{"A"}, "event_type": []string{"Made"}}}}}
		}, "detail.event_type"},
		"ordered pattern with $or": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "o", Ordered: true, Handler: h, Pattern: `{"$or":[{"detail-type":["X"]},{"source":["s"]}]}`}}
		}, "$or"},
		"state table is the outbox": {func(c *localstack.Config) {
			c.Consumers = []localstack.Consumer{{Name: "c", AggregateType: "A", Handler: h, StateTable: "o"}}
		}, "is the outbox table"},
		"table named like the outbox": {func(c *localstack.Config) { c.Tables = []*dynamodb.CreateTableInput{outbox.CreateTableInput("o")} }, "is the outbox table"},
		"table twice": {func(c *localstack.Config) {
			c.Tables = []*dynamodb.CreateTableInput{outbox.CreateTableInput("x"), outbox.CreateTableInput("x")}
		}, "given twice"},
	}
	// Accepted: an ordered consumer's pattern on whole aggregates.
	wholeAggregates := ok
	wholeAggregates.Consumers = []localstack.Consumer{{Name: "o", Ordered: true, Handler: h,
		Pattern: `{"source":["com.example.t"],"detail":{"aggregate_type":["A","B"]}}`}}
	if _, err := localstack.Start(context.Background(), wholeAggregates); errors.Is(err, localstack.ErrInvalidConfig) {
		t.Errorf("ordered pattern on aggregate types refused: %v", err)
	}
	for name, tc := range cases {
		cfg := ok
		tc.edit(&cfg)
		// Refused before anything starts: no Dynoxide is needed.
		_, err := localstack.Start(context.Background(), cfg)
		if !errors.Is(err, localstack.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Start = %v, want ErrInvalidConfig naming %q", name, err, tc.want)
		}
	}
}

// applied records the events a consumer applied, by event id.
type applied struct {
	mu  sync.Mutex
	ids map[string]int
}

func (a *applied) handle(_ context.Context, ev events.EventBridgeEvent) error {
	env, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		return sqsconsumer.Permanent(sqsconsumer.ReasonMalformedEvent, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string]int{}
	}
	a.ids[env.EventID]++
	return nil
}

func (a *applied) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

func write(t *testing.T, st *localstack.Stack, id, eventType string) outbox.Envelope {
	t.Helper()
	w, err := outbox.NewWriter(st.DDB, outbox.WriterConfig{Table: st.OutboxTable, Source: st.Source, PendingShards: st.PendingShards})
	if err != nil {
		t.Fatal(err)
	}
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Thing", ID: id, Sequence: 1},
		outbox.Event{Type: eventType, Version: 1, Payload: map[string]string{"id": id}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), nil, []outbox.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	return env
}

func record(t *testing.T, st *localstack.Stack, env outbox.Envelope) map[string]types.AttributeValue {
	t.Helper()
	out, err := st.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(st.OutboxTable),
		Key: outbox.KeyFor(env.AggregateType, env.AggregateID, env.Sequence, 0).AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func status(item map[string]types.AttributeValue) string {
	if s, ok := item[outbox.AttrStatus].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func start(t *testing.T, cfg localstack.Config) *localstack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := localstack.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestMissedRecordReachesConsumerThroughReconciler: a record the relay
// misses stays pending and unapplied until the reconciler runs (its
// schedule is an hour here, so only ReconcileNow runs it), then it is
// published by the reconciler (its claim is on the record) and applied
// once; a record the relay did not miss was published by the relay.
func TestMissedRecordReachesConsumerThroughReconciler(t *testing.T) {
	t.Parallel()
	var got applied
	st := start(t, localstack.Config{OutboxTable: "miss-outbox", Source: "com.example.miss", BusName: "miss-bus",
		ReconcileEvery: time.Hour, ReconcileAfter: time.Millisecond,
		Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	kept := write(t, st, "t-1", "ThingMade")
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	st.MissRecords(func(e outbox.Envelope) bool { return e.AggregateID == "t-2" })
	missed := write(t, st, "t-2", "ThingMade")
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got.count(kept.EventID) != 1 || got.count(missed.EventID) != 0 {
		t.Fatalf("before the reconciler: applied kept %d, missed %d times; want 1 and 0", got.count(kept.EventID), got.count(missed.EventID))
	}
	if n, err := st.Pending(ctx); n != 1 || err != nil {
		t.Fatalf("Pending = %d, %v; want 1 (the missed record)", n, err)
	}
	if err := st.ReconcileNow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if got.count(missed.EventID) != 1 {
		t.Fatalf("missed record applied %d times after the reconciler, want 1", got.count(missed.EventID))
	}
	m, k := record(t, st, missed), record(t, st, kept)
	if status(m) != outbox.StatusPublished || m[outbox.AttrClaimedUntil] == nil {
		t.Errorf("missed record: status %q, claimed_until %v; want PUBLISHED by the reconciler (its claim set)", status(m), m[outbox.AttrClaimedUntil])
	}
	if status(k) != outbox.StatusPublished || k[outbox.AttrClaimedUntil] != nil {
		t.Errorf("kept record: status %q, claimed_until %v; want PUBLISHED by the relay (no claim)", status(k), k[outbox.AttrClaimedUntil])
	}
}

// TestParkAndRedrive: an event the bus refuses for good is parked (status
// PARKED, a message on the parked queue) and never applied; once the
// fault is lifted, RedriveParked makes it pending and the reconciler
// schedule publishes it: applied once.
func TestParkAndRedrive(t *testing.T) {
	t.Parallel()
	var got applied
	st := start(t, localstack.Config{OutboxTable: "park-outbox", Source: "com.example.park", BusName: "park-bus",
		Consumers: []localstack.Consumer{{Name: "things", AggregateType: "Thing", Handler: got.handle}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.RejectDetailTypes("ThingBroken"); err != nil {
		t.Fatal(err)
	}
	bad := write(t, st, "t-9", "ThingBroken")
	good := write(t, st, "t-8", "ThingMade")
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	parked, err := st.Parked(ctx)
	if err != nil || len(parked) != 1 || parked[0].EventID != bad.EventID {
		t.Fatalf("Parked = %+v, %v; want the rejected event only", parked, err)
	}
	if st.ParkedQueue.Len() != 1 || got.count(bad.EventID) != 0 || got.count(good.EventID) != 1 {
		t.Fatalf("parked queue %d messages, bad applied %d, good %d; want 1, 0, 1", st.ParkedQueue.Len(), got.count(bad.EventID), got.count(good.EventID))
	}
	if !st.StopRejecting() {
		t.Fatal("StopRejecting: no rejection was active")
	}
	if n, err := st.RedriveParked(ctx); n != 1 || err != nil {
		t.Fatalf("RedriveParked = %d, %v; want 1", n, err)
	}
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if got.count(bad.EventID) != 1 || status(record(t, st, bad)) != outbox.StatusPublished {
		t.Fatalf("after the redrive: applied %d times, status %s; want 1, PUBLISHED", got.count(bad.EventID), status(record(t, st, bad)))
	}
}

// TestSQSHandlerDeadLetters: a consumer given as its own
// *sqsconsumer.Handler (SQSHandler, built from ConsumerEnv) dead-letters a
// permanent failure to the consumer's DLQ with its reason, and the rule
// matches by Pattern.
func TestSQSHandlerDeadLetters(t *testing.T) {
	t.Parallel()
	var env localstack.ConsumerEnv
	st := start(t, localstack.Config{OutboxTable: "dlq-outbox", Source: "com.example.dlq", BusName: "dlq-bus",
		Consumers: []localstack.Consumer{{Name: "refuser", Pattern: `{"detail-type":["ThingMade"]}`, StateTable: "refuser-state",
			SQSHandler: func(e localstack.ConsumerEnv) (localrt.SQSHandler, error) {
				env = e
				h, err := sqsconsumer.New(func(context.Context, events.EventBridgeEvent) error {
					return sqsconsumer.Permanent("refused", fmt.Errorf("never"))
				}, sqsconsumer.Config{Name: e.Name, DLQ: e.SQS, DLQURL: e.DLQURL})
				if err != nil {
					return nil, err
				}
				return h.Handle, nil
			}}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	write(t, st, "t-1", "ThingMade")
	write(t, st, "t-2", "ThingIgnored")
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	dlq := st.Consumers["refuser"].DLQ
	if dlq.Len() != 1 {
		t.Fatalf("DLQ holds %d messages, want 1 (the matched event, dead-lettered)", dlq.Len())
	}
	out, err := dlq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq.URL()), MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageAttributes[sqsconsumer.AttrReason].StringValue) != "refused" {
		t.Fatalf("DLQ message %+v, %v; want reason refused", out, err)
	}
	if env.DLQURL != dlq.URL() || env.Environment()["CONSUMER_TABLE_NAME"] != "refuser-state" || st.QueueURLs()["refuser-dlq"] != dlq.URL() {
		t.Errorf("ConsumerEnv %+v, queue URLs %v", env, st.QueueURLs())
	}
}
