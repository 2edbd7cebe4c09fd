package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// world is an outbox table and a dedup table on Dynoxide, the queues and a
// bus of a local stack, all behind one AWS front (DynamoDB proxied), as
// `outboxdev dev` serves them. Its records:
//
//	o-1 seq 1 OrderPlaced PUBLISHED 1 min ago (bus b-1; the ledger applied it)
//	o-1 seq 2 OrderPaid    PUBLISHED 2 h ago
//	o-1 seq 3 OrderShipped PARKED
//	o-2 seq 1 OrderPlaced PENDING, created 10 min ago
//	o-2 seq 2 OrderPaid    PARKED
//	o-3 seq 1 OrderPlaced PENDING, created 1 min ago
type world struct {
	endpoint   string
	table      string
	dedupTable string
	ddb        *dynamodb.Client
	parked     *localrt.MemoryQueue
	queue, dlq *localrt.SQSQueue
	// ruleDLQ is the DLQ of the ledger's rule (ledger-order-payments), its
	// policy admitting that rule only, as the stack makes it: empty.
	ruleDLQ *localrt.SQSQueue
	bus     *localrt.Bus
	events  chan events.EventBridgeEvent
	ids     map[string]string // "o-1/1" -> event id
}

const shards = 4

// ledgerRule is the ledger's routing rule (routing.Rules).
const ledgerRule = "ledger-order-payments"

// newWorld builds the world; busOpts adjust the local bus's
// configuration (e.g. its clock) before it starts.
func newWorld(t *testing.T, busOpts ...func(*localrt.BusConfig)) *world {
	t.Helper()
	// Nothing of the developer's AWS setup may leak in.
	for _, v := range append([]string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, endpointVars...) {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	env := ddbtest.New(t)
	w := &world{table: ddbtest.Name("ctl-outbox"), dedupTable: ddbtest.Name("ctl-dedup"), ddb: env.DDB,
		events: make(chan events.EventBridgeEvent, 16), ids: map[string]string{}}
	env.CreateTable(t, outbox.CreateTableInput(w.table))
	env.CreateTable(t, dedup.CreateTableInput(w.dedupTable))

	now := time.Now().UTC()
	type rec struct {
		agg      string
		seq      int64
		typ      string
		status   string
		occurred time.Time
		extra    map[string]types.AttributeValue
	}
	recs := []rec{
		{"o-1", 1, "OrderPlaced", outbox.StatusPublished, now.Add(-2 * time.Minute), map[string]types.AttributeValue{
			outbox.AttrPublishedAt: &types.AttributeValueMemberS{Value: now.Add(-time.Minute).Format(time.RFC3339Nano)},
			outbox.AttrBusEventID:  &types.AttributeValueMemberS{Value: "b-1"}}},
		{"o-1", 2, "OrderPaid", outbox.StatusPublished, now.Add(-3 * time.Hour), map[string]types.AttributeValue{
			outbox.AttrPublishedAt: &types.AttributeValueMemberS{Value: now.Add(-2 * time.Hour).Format(time.RFC3339Nano)},
			outbox.AttrBusEventID:  &types.AttributeValueMemberS{Value: "b-2"}}},
		{"o-1", 3, "OrderShipped", outbox.StatusParked, now.Add(-time.Hour), map[string]types.AttributeValue{
			outbox.AttrParkedReason: &types.AttributeValueMemberS{Value: "MalformedDetail: Detail is malformed."},
			outbox.AttrParkedAt:     &types.AttributeValueMemberS{Value: now.Add(-time.Hour).Format(time.RFC3339Nano)}}},
		{"o-2", 1, "OrderPlaced", outbox.StatusPending, now.Add(-10 * time.Minute), nil},
		{"o-2", 2, "OrderPaid", outbox.StatusParked, now.Add(-time.Hour), map[string]types.AttributeValue{
			outbox.AttrParkedReason: &types.AttributeValueMemberS{Value: "InvalidArgument: bad"},
			outbox.AttrParkedAt:     &types.AttributeValueMemberS{Value: now.Add(-time.Hour).Format(time.RFC3339Nano)}}},
		{"o-3", 1, "OrderPlaced", outbox.StatusPending, now.Add(-time.Minute), nil},
	}
	ctx := context.Background()
	for i, r := range recs {
		id := fmt.Sprintf("0190%04d-0000-7000-8000-%012d", i, i)
		w.ids[r.agg+"/"+strconv.FormatInt(r.seq, 10)] = id
		env := outbox.Envelope{EventID: id, EventType: r.typ, EventVersion: 1, AggregateType: "Order", AggregateID: r.agg,
			Sequence: r.seq, OccurredAt: r.occurred, Payload: json.RawMessage(`{"order_id":"` + r.agg + `"}`)}
		record := outbox.NewRecord(env, 0, shards)
		record.Status = r.status
		if r.status != outbox.StatusPending {
			record.PendingShard = ""
		}
		item := record.Item()
		for k, v := range r.extra {
			item[k] = v
		}
		if _, err := w.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.dedupTable), Item: map[string]types.AttributeValue{
		dedup.AttrPK:        &types.AttributeValueMemberS{Value: dedup.MarkerKey(routing.ConsumerLedger, w.ids["o-1/1"])},
		dedup.AttrAppliedAt: &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)},
	}}); err != nil {
		t.Fatal(err)
	}

	var err error
	if w.dlq, err = localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "ctl-ledger-dlq"}); err != nil {
		t.Fatal(err)
	}
	if w.queue, err = localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "ctl-ledger", Redrive: &localrt.RedrivePolicy{DeadLetterQueue: w.dlq, MaxReceiveCount: 1}}); err != nil {
		t.Fatal(err)
	}
	// The DLQ holds the ledger's two dead letters: one its queue's redrive
	// policy moved (after maxReceiveCount 1), one the ledger function
	// dead-lettered itself, as its role's session.
	if _, err := w.queue.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.queue.URL()), MessageBody: aws.String(`{"detail":{"event_id":"ev-1","event_type":"OrderPaid","aggregate_type":"Order","aggregate_id":"o-1","sequence":2}}`)}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // receive 1 = maxReceiveCount, visibility reset; the next receive moves it
		r, err := w.queue.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.queue.URL())})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			if _, err := w.queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(w.queue.URL()), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := w.dlq.SendMessage(localrt.WithSenderID(ctx, localrt.FunctionSenderID(routing.ConsumerLedger)), &sqs.SendMessageInput{
		QueueUrl: aws.String(w.dlq.URL()), MessageBody: aws.String(`{"detail":{"n":2}}`), MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			sqsconsumer.AttrReason: {DataType: aws.String("String"), StringValue: aws.String("forged_source")},
			sqsconsumer.AttrError:  {DataType: aws.String("String"), StringValue: aws.String("source is not the outbox")},
		}}); err != nil {
		t.Fatal(err)
	}
	if w.dlq.Len() != 2 || w.queue.Len() != 0 {
		t.Fatalf("setup: DLQ %d, queue %d", w.dlq.Len(), w.queue.Len())
	}
	w.parked = localrt.NewMemoryQueue("https://sqs.us-east-1.amazonaws.com/000000000000/ctl-parked")
	for _, b := range []string{"p1", "p2"} {
		if _, err := w.parked.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.parked.URL()), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	onFailure := localrt.NewMemoryQueue("https://sqs.us-east-1.amazonaws.com/000000000000/ctl-relay-onfailure")
	busCfg := localrt.BusConfig{Name: "ctl-bus", Rules: routing.BusRules(appenv.EventSource), ArchiveDelay: time.Millisecond}
	for _, o := range busOpts {
		o(&busCfg)
	}
	if w.bus, err = localrt.NewBus(busCfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.bus.Close(context.Background()) })
	if w.ruleDLQ, err = localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: operator.RuleDLQName("ctl", ledgerRule),
		OnlySourceArns: []string{w.bus.RuleARN(ledgerRule)}}); err != nil {
		t.Fatal(err)
	}
	if err := w.bus.SetDeadLetterQueue(ledgerRule, w.ruleDLQ, w.ruleDLQ.URL()); err != nil {
		t.Fatal(err)
	}
	// The notifier's rule matches every order event type.
	w.bus.Subscribe(routing.ConsumerNotifier, func(_ context.Context, ev events.EventBridgeEvent) error { w.events <- ev; return nil })
	w.bus.Subscribe(routing.ConsumerLedger, func(context.Context, events.EventBridgeEvent) error { return nil })
	front, err := localrt.NewAWSFront(localrt.AWSFrontConfig{
		Queues: []localrt.FrontQueue{w.parked, onFailure, w.queue, w.dlq, w.ruleDLQ}, EventBridge: w.bus, DynamoDB: env.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	w.endpoint = srv.URL
	return w
}

// ctl runs outboxctl with -endpoint set to the front and returns stdout.
func (w *world) ctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"-endpoint", w.endpoint}, args...), &out, &errOut)
	return out.String(), err
}

func (w *world) status(t *testing.T, k outbox.Key) string {
	t.Helper()
	out, err := w.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(w.table), Key: k.AttributeValues(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := out.Item[outbox.AttrStatus].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

func mustContain(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, s := range want {
		if !strings.Contains(out, s) {
			t.Errorf("%s: output lacks %q:\n%s", what, s, out)
		}
	}
}

func TestHelpListsEveryCommandWithAnExample(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%v: err = %v, want flag.ErrHelp", args, err)
		}
		for _, c := range commands {
			example := "outboxctl -endpoint http://127.0.0.1:4580 " + c.name + " "
			if awsOnly[c.name] { // alarms test: the local stack has no CloudWatch
				example = "outboxctl -region eu-west-1 " + c.name + " "
			}
			mustContain(t, strings.Join(args, " "), out.String(), "\n  "+c.name+" ", example)
		}
	}
	for _, c := range commands {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{c.name, "-h"}, &out, &errOut); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: err = %v, want flag.ErrHelp", c.name, err)
		}
		mustContain(t, c.name+" -h", out.String(), "usage: outboxctl "+c.name, c.example, "-endpoint")
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("OUTBOX_TABLE_NAME", "")
	t.Setenv("EVENT_BUS_NAME", "")
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"status"}, "status: -table is required"},
		{[]string{"show", "-table", "t"}, "show: -event ID or -aggregate ID is required"},
		{[]string{"replay", "-table", "t", "-event", "e", "-direct"}, "replay -direct: -bus is required"},
		{[]string{"replay", "-table", "t"}, "replay: -event ID or -aggregate ID is required"},
		{[]string{"redrive", "-table", "t"}, "redrive: give -pk PK -sk SK, -event ID, or -all"},
		{[]string{"redrive", "-table", "t", "-pk", "p"}, "redrive: give -pk PK -sk SK, -event ID, or -all"},
		{[]string{"redrive", "-table", "t", "-all", "-event", "e"}, "redrive: give -pk PK -sk SK, -event ID, or -all"},
		{[]string{"consumer-dlq"}, "consumer-dlq: -dlq is required"},
		{[]string{"rule-dlq-redrive", "-dlq", "d", "-queue", "q"}, "rule-dlq-redrive: -dlq, -queue and -rule are required"},
		{[]string{"consumer-redrive", "-dlq", "d"}, "consumer-redrive: -dlq and -queue are required"},
		{[]string{"parked", "-table", "t", "extra"}, `unexpected argument "extra"`},
	}
	for _, tc := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

func TestLocalTargetUsesDummyCredentials(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string
		env      map[string]string
		local    bool
	}{
		{"-endpoint", "http://127.0.0.1:4580", nil, true},
		{"loopback DynamoDB variable", "", map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "http://localhost:8000"}, true},
		{"loopback SQS variable", "", map[string]string{"AWS_ENDPOINT_URL_SQS": "http://[::1]:4580"}, true},
		{"remote endpoint variable", "", map[string]string{"AWS_ENDPOINT_URL": "https://dynamodb.eu-west-1.amazonaws.com"}, false},
		{"nothing", "", nil, false},
	}
	for _, tc := range tests {
		for _, v := range append([]string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"}, endpointVars...) {
			t.Setenv(v, "")
		}
		t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		tg := target{endpoint: tc.endpoint}
		if got := tg.localTarget(); got != tc.local {
			t.Errorf("%s: localTarget = %v, want %v", tc.name, got, tc.local)
		}
		if !tc.local {
			continue
		}
		c, err := tg.connect(context.Background())
		if err != nil {
			t.Fatalf("%s: connect: %v", tc.name, err)
		}
		creds, err := c.sqs.Options().Credentials.Retrieve(context.Background())
		if err != nil || creds.AccessKeyID != "local" || c.sqs.Options().Region != DefaultLocalRegion {
			t.Errorf("%s: credentials %+v (%v), region %q; want the dummy ones and %s", tc.name, creds, err, c.sqs.Options().Region, DefaultLocalRegion)
		}
		if tc.endpoint != "" && (aws.ToString(c.ddb.Options().BaseEndpoint) != tc.endpoint || aws.ToString(c.eb.Options().BaseEndpoint) != tc.endpoint) {
			t.Errorf("%s: endpoints %v %v, want %s", tc.name, c.ddb.Options().BaseEndpoint, c.eb.Options().BaseEndpoint, tc.endpoint)
		}
	}
}

func TestStatus(t *testing.T) {
	w := newWorld(t)
	out, err := w.ctl(t, "status", "-table", w.table, "-shards", strconv.Itoa(shards), "-window", "15m", "-queue-prefix", "ctl-")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	mustContain(t, "status", out,
		"pending           2\n", "oldest pending    10m", "parked            2\n", "published (15m0s) 1\n",
		queueLine("parked-records", "ctl-parked", 2, 0),
		queueLine("stream-failures", "ctl-relay-onfailure", 0, 0),
		queueLine("consumer-dlq", "ctl-ledger-dlq", 2, 0),
		queueLine("rule-dlq", "ctl-ledger-order-payments-rule-dlq", 0, 0),
		queueLine("consumer-queue", "ctl-ledger", 0, 0))
	// Per shard: the two pending records' shards, and their sum.
	want := map[string]int{}
	for _, k := range []string{"o-2/1", "o-3/1"} {
		want[outbox.PendingShard(w.ids[k], shards)]++
	}
	for shard, n := range want {
		mustContain(t, "status", out, fmt.Sprintf(" %s=%d", shard, n))
	}
	// -window 0 skips the scan; the queues can be named one by one.
	out, err = w.ctl(t, "status", "-table", w.table, "-shards", strconv.Itoa(shards), "-window", "0", "-dlq", w.dlq.URL(), "-parked-queue", w.parked.URL())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\nparked ") || strings.Contains(out, "\npublished (") {
		t.Errorf("status -window 0 scanned the table:\n%s", out)
	}
	mustContain(t, "status -dlq", out, queueLine("consumer-dlq", "ctl-ledger-dlq", 2, 0), queueLine("parked-records", "ctl-parked", 2, 0))
}

func TestShow(t *testing.T) {
	w := newWorld(t)
	tests := []struct {
		name  string
		args  []string
		want  []string
		count int
	}{
		{"by event id", []string{"-event", w.ids["o-1/1"], "-consumer-tables", "ledger=" + w.dedupTable + ",notifier=" + w.dedupTable},
			[]string{"event_id       " + w.ids["o-1/1"], "status         PUBLISHED", "sequence       1", "bus_event_id   b-1", "published_at", "applied        ledger "}, 1},
		{"parked event", []string{"-event", w.ids["o-1/3"]},
			[]string{"status         PARKED", "parked_reason  MalformedDetail: Detail is malformed.", "parked_at"}, 1},
		{"by aggregate", []string{"-aggregate", "o-1"},
			[]string{"event_type     OrderPlaced", "event_type     OrderPaid", "event_type     OrderShipped"}, 3},
		{"by aggregate from a sequence", []string{"-aggregate", "o-1", "-from-seq", "2"},
			[]string{"event_type     OrderPaid", "event_type     OrderShipped"}, 2},
		{"pending event", []string{"-aggregate", "o-2", "-from-seq", "1", "-consumer-tables", "ledger=" + w.dedupTable + ",notifier=" + w.dedupTable},
			[]string{"status         PENDING", "pending_shard  p0", "applied        no consumer marker"}, 2},
	}
	for _, tc := range tests {
		out, err := w.ctl(t, append([]string{"show", "-table", w.table}, tc.args...)...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		mustContain(t, tc.name, out, tc.want...)
		mustContain(t, tc.name, out, fmt.Sprintf("%d record(s)\n", tc.count))
		if n := strings.Count("\n"+out, "\nevent_id "); n != tc.count {
			t.Errorf("%s: %d records printed, want %d", tc.name, n, tc.count)
		}
	}
	if _, err := w.ctl(t, "show", "-table", w.table, "-event", "no-such-event"); err == nil || !strings.Contains(err.Error(), "no outbox record found") {
		t.Errorf("show of an unknown event: err = %v", err)
	}
}

func TestReplayDirect(t *testing.T) {
	w := newWorld(t)
	received := func(n int) []events.EventBridgeEvent {
		t.Helper()
		var got []events.EventBridgeEvent
		for len(got) < n {
			select {
			case ev := <-w.events:
				got = append(got, ev)
			case <-time.After(5 * time.Second):
				t.Fatalf("the bus delivered %d of %d replayed events", len(got), n)
			}
		}
		select {
		case ev := <-w.events:
			t.Fatalf("an extra event was delivered: %s", ev.Detail)
		case <-time.After(100 * time.Millisecond):
		}
		return got
	}
	eventID := func(ev events.EventBridgeEvent) string {
		var env outbox.Envelope
		if err := json.Unmarshal(ev.Detail, &env); err != nil {
			t.Fatal(err)
		}
		return env.EventID
	}

	out, err := w.ctl(t, "replay", "-table", w.table, "-event", w.ids["o-1/1"], "-direct", "-bus", "ctl-bus")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	got := received(1)
	if eventID(got[0]) != w.ids["o-1/1"] || got[0].DetailType != "OrderPlaced" || got[0].Source != "com.ddb-outbox.orders" {
		t.Fatalf("replayed event %+v", got[0])
	}
	mustContain(t, "replay -event", out, "replayed\t"+w.ids["o-1/1"]+"\tOrderPlaced\t1\t"+got[0].ID, "1 of 1 event(s) replayed to ctl-bus")

	// An aggregate from a sequence: the published one is replayed, the
	// parked one is skipped (redrive is its path).
	out, err = w.ctl(t, "replay", "-table", w.table, "-aggregate", "o-1", "-from-seq", "2", "-direct", "-bus", "ctl-bus")
	if err != nil {
		t.Fatalf("replay -aggregate: %v\n%s", err, out)
	}
	got = received(1)
	if eventID(got[0]) != w.ids["o-1/2"] {
		t.Fatalf("replayed %s, want %s", eventID(got[0]), w.ids["o-1/2"])
	}
	mustContain(t, "replay -aggregate", out, "replayed\t"+w.ids["o-1/2"], "skipped\t"+w.ids["o-1/3"]+"\tOrderShipped\t3\tparked: redrive it", "1 of 2 event(s) replayed")

	// A pending record is the relay's: nothing is sent.
	out, err = w.ctl(t, "replay", "-table", w.table, "-aggregate", "o-2", "-direct", "-bus", "ctl-bus")
	if err != nil {
		t.Fatal(err)
	}
	received(0)
	mustContain(t, "replay pending", out, "skipped\t"+w.ids["o-2/1"]+"\tOrderPlaced\t1\tstatus PENDING", "0 of 2 event(s) replayed")

	// The records are unchanged.
	for k, want := range map[string]string{"o-1/1": outbox.StatusPublished, "o-1/2": outbox.StatusPublished, "o-1/3": outbox.StatusParked} {
		agg, seq, _ := strings.Cut(k, "/")
		n, _ := strconv.ParseInt(seq, 10, 64)
		if s := w.status(t, outbox.KeyFor("Order", agg, n, 0)); s != want {
			t.Errorf("%s is %s after replay, want %s", k, s, want)
		}
	}

	// A bus that does not exist fails the replay, and says so.
	out, err = w.ctl(t, "replay", "-table", w.table, "-event", w.ids["o-1/1"], "-direct", "-bus", "no-bus")
	if err == nil || !strings.Contains(out, "failed\t"+w.ids["o-1/1"]) {
		t.Errorf("replay to an unknown bus: err = %v\n%s", err, out)
	}
}

func TestParkedAndRedrive(t *testing.T) {
	w := newWorld(t)
	out, err := w.ctl(t, "parked", "-table", w.table)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "parked", out, w.ids["o-1/3"]+"\tOrderShipped\t", "\tMalformedDetail: Detail is malformed.\n", w.ids["o-2/2"]+"\tOrderPaid\t", "2 parked record(s)\n")

	one := outbox.KeyFor("Order", "o-1", 3, 0)
	out, err = w.ctl(t, "redrive", "-table", w.table, "-shards", strconv.Itoa(shards), "-pk", one.PK, "-sk", one.SK)
	if err != nil {
		t.Fatalf("redrive one: %v\n%s", err, out)
	}
	mustContain(t, "redrive one", out, "redriven\t"+one.PK+"\t"+one.SK, "1 of 1 record(s) redriven")
	if s := w.status(t, one); s != outbox.StatusPending {
		t.Fatalf("redriven record is %s, want PENDING", s)
	}
	// Redriving it again fails: it is no longer parked.
	out, err = w.ctl(t, "redrive", "-table", w.table, "-shards", strconv.Itoa(shards), "-pk", one.PK, "-sk", one.SK)
	if err == nil || !strings.Contains(out, "failed\t"+one.PK) || !strings.Contains(out, "0 of 1 record(s) redriven") {
		t.Fatalf("second redrive: err = %v\n%s", err, out)
	}

	out, err = w.ctl(t, "redrive", "-table", w.table, "-shards", strconv.Itoa(shards), "-all")
	if err != nil {
		t.Fatalf("redrive -all: %v\n%s", err, out)
	}
	two := outbox.KeyFor("Order", "o-2", 2, 0)
	mustContain(t, "redrive -all", out, "redriven\t"+two.PK+"\t"+two.SK+"\t"+w.ids["o-2/2"]+"\tOrderPaid\n", "1 of 1 record(s) redriven")
	if s := w.status(t, two); s != outbox.StatusPending {
		t.Fatalf("record redriven by -all is %s, want PENDING", s)
	}
	// The status follows: 4 pending, none parked.
	out, err = w.ctl(t, "status", "-table", w.table, "-shards", strconv.Itoa(shards))
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status after redrive", out, "pending           4\n", "parked            0\n")
	// Nothing left: -all says so.
	out, err = w.ctl(t, "redrive", "-table", w.table, "-shards", strconv.Itoa(shards), "-all")
	if err != nil || out != "0 of 0 record(s) redriven: now PENDING, the reconciler publishes each on its next run once older than "+reconcileAge+"\n" {
		t.Fatalf("redrive -all with nothing parked: err = %v, output %q", err, out)
	}
}

func TestRedriveByEventID(t *testing.T) {
	w := newWorld(t)
	out, err := w.ctl(t, "redrive", "-table", w.table, "-shards", strconv.Itoa(shards), "-event", w.ids["o-2/2"])
	if err != nil {
		t.Fatalf("redrive -event: %v\n%s", err, out)
	}
	mustContain(t, "redrive -event", out, "redriven\tOrder#o-2\t", "1 of 1 record(s) redriven")
	if s := w.status(t, outbox.KeyFor("Order", "o-2", 2, 0)); s != outbox.StatusPending {
		t.Fatalf("record is %s, want PENDING", s)
	}
	if s := w.status(t, outbox.KeyFor("Order", "o-1", 3, 0)); s != outbox.StatusParked {
		t.Fatalf("another parked record changed: %s", s)
	}
}

func TestConsumerDLQAndRedrive(t *testing.T) {
	w := newWorld(t)
	ledgerRole := localrt.FunctionRoleID(routing.ConsumerLedger)
	// By name (GetQueueUrl through the front) and by URL alike.
	for _, dlq := range []string{"ctl-ledger-dlq", w.dlq.URL()} {
		out, err := w.ctl(t, "consumer-dlq", "-dlq", dlq)
		if err != nil {
			t.Fatalf("consumer-dlq %s: %v", dlq, err)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 3 || lines[2] != "2 message(s) on "+w.dlq.URL() {
			t.Fatalf("consumer-dlq printed:\n%s\nwant two message lines and a count", out)
		}
		mustContain(t, "consumer-dlq", out,
			"\tOrderPaid Order/o-1 #2 ev-1\t"+sqsconsumer.ReasonMaxReceiveCount+"\tqueue "+w.queue.ARN()+"\t",
			"\t-\tforged_source\t",
			"\tforged_source\tsender "+ledgerRole+":"+routing.ConsumerLedger+"\tsource is not the outbox")
		for _, l := range lines[:2] {
			if f := strings.Split(l, "\t"); len(f) != 6 || f[0] != "dead-lettered" || f[1] == "" || f[2] == "" {
				t.Errorf("line %q: want verb, message id, event, reason, from, error", l)
			}
		}
		if v, i := w.dlq.Counts(); v != 2 || i != 0 {
			t.Fatalf("consumer-dlq left %d visible, %d in flight; want 2 visible", v, i)
		}
	}
	if _, err := w.ctl(t, "consumer-dlq", "-dlq", "no-such-dlq"); err == nil || !strings.Contains(err.Error(), "NonExistentQueue") {
		t.Fatalf("consumer-dlq of an unknown queue: %v", err)
	}
}

// TestConsumerRedriveLeavesPlantedMessages: the consumer DLQ accepts
// SendMessage from any principal allowed it, and consumer-redrive forwards
// under the operator's role. It forwards only the messages SQS's system
// attributes prove to be the consumer's — moved by its queue's redrive
// policy (DeadLetterQueueSourceArn), or sent by its role (SenderId, given
// with -sender) — and lists any other with its sender, leaving it on the
// DLQ: a message planted there with a dead letter's reason attributes is
// never laundered into the consumer queue.
func TestConsumerRedriveLeavesPlantedMessages(t *testing.T) {
	w := newWorld(t)
	const intruder = "AIDAINTRUDERUSERID001"
	planted := `{"detail":{"planted":true}}`
	if _, err := w.dlq.SendMessage(localrt.WithSenderID(context.Background(), intruder), &sqs.SendMessageInput{
		QueueUrl: aws.String(w.dlq.URL()), MessageBody: aws.String(planted), MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			sqsconsumer.AttrReason:   {DataType: aws.String("String"), StringValue: aws.String("unsupported_version")},
			sqsconsumer.AttrConsumer: {DataType: aws.String("String"), StringValue: aws.String(routing.ConsumerLedger)},
		}}); err != nil {
		t.Fatal(err)
	}
	// Without -sender: only the message the queue's redrive policy moved;
	// the consumer's own and the planted one are left, with their senders.
	out, err := w.ctl(t, "consumer-redrive", "-dlq", "ctl-ledger-dlq", "-queue", "ctl-ledger")
	if err != nil {
		t.Fatalf("consumer-redrive: %v\n%s", err, out)
	}
	mustContain(t, "consumer-redrive without -sender", out,
		"redriven\t", "\t"+sqsconsumer.ReasonMaxReceiveCount+"\tqueue "+w.queue.ARN()+"\t",
		"left\t", "\tsender "+intruder+"\t", "\tsender "+localrt.FunctionSenderID(routing.ConsumerLedger)+"\t",
		"1 message(s) redriven from "+w.dlq.URL()+" to "+w.queue.URL()+"; 2 left on the DLQ")
	if w.queue.Len() != 1 || w.dlq.Len() != 2 {
		t.Fatalf("after the first redrive: queue %d, DLQ %d; want 1 and 2", w.queue.Len(), w.dlq.Len())
	}
	// With the ledger's role id: its own dead letter moves; the planted
	// message stays, listed with its sender.
	out, err = w.ctl(t, "consumer-redrive", "-dlq", "ctl-ledger-dlq", "-queue", "ctl-ledger", "-sender", localrt.FunctionRoleID(routing.ConsumerLedger))
	if err != nil {
		t.Fatalf("consumer-redrive -sender: %v\n%s", err, out)
	}
	if n := strings.Count(out, "redriven\t"); n != 1 {
		t.Fatalf("printed %d redriven lines, want 1:\n%s", n, out)
	}
	mustContain(t, "consumer-redrive -sender", out,
		"redriven\t", "\tforged_source\tsender "+localrt.FunctionSenderID(routing.ConsumerLedger)+"\t",
		"left\t", "\tunsupported_version\tsender "+intruder+"\tsent to the DLQ by "+intruder,
		"1 message(s) redriven from "+w.dlq.URL()+" to "+w.queue.URL()+"; 1 left on the DLQ")
	if w.dlq.Len() != 1 || w.queue.Len() != 2 {
		t.Fatalf("DLQ %d, queue %d; want the planted message alone on the DLQ and the 2 dead letters in the queue", w.dlq.Len(), w.queue.Len())
	}
	for range 2 {
		r, err := w.queue.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.queue.URL()), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			if aws.ToString(m.Body) == planted {
				t.Fatal("the planted message reached the consumer queue")
			}
		}
	}
	if _, err := w.ctl(t, "consumer-redrive", "-dlq", "ctl-ledger-dlq", "-queue", "ctl-ledger", "-sender", " "); !errors.Is(err, errUsage) {
		t.Errorf("-sender ' ': %v, want a usage error", err)
	}
}

// queueLine is status's line for a queue.
func queueLine(kind, name string, visible, inFlight int) string {
	return fmt.Sprintf("queue  %-16s %-24s %d visible, %d in flight\n", kind, name, visible, inFlight)
}

func TestTimeoutBoundsTheCommand(t *testing.T) {
	for _, args := range [][]string{
		{"-endpoint", "http://127.0.0.1:1", "-timeout", "1ns", "parked", "-table", "t"},
		{"-endpoint", "http://127.0.0.1:1", "parked", "-table", "t", "-timeout", "1ns"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v: err = %v, want the deadline", args, err)
		}
	}
}

func TestReplayRequeuesForTheReconciler(t *testing.T) {
	w := newWorld(t)
	out, err := w.ctl(t, "replay", "-table", w.table, "-shards", strconv.Itoa(shards), "-aggregate", "o-1")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	mustContain(t, "replay", out,
		"requeued\t"+w.ids["o-1/1"]+"\tOrderPlaced\t1\tPENDING in shard "+outbox.PendingShard(w.ids["o-1/1"], shards),
		"requeued\t"+w.ids["o-1/2"]+"\tOrderPaid\t2\t",
		"skipped\t"+w.ids["o-1/3"]+"\tOrderShipped\t3\tparked: redrive it",
		"2 of 3 event(s) requeued")
	select {
	case ev := <-w.events:
		t.Fatalf("replay without -direct put an event on the bus: %s", ev.Detail)
	case <-time.After(100 * time.Millisecond):
	}
	for _, seq := range []int64{1, 2} {
		k := outbox.KeyFor("Order", "o-1", seq, 0)
		got, err := w.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(w.table), Key: k.AttributeValues(), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		_, ttl := got.Item[outbox.AttrExpiresAt]
		shard, _ := got.Item[outbox.AttrPendingShard].(*types.AttributeValueMemberS)
		replayed, _ := got.Item["replayed_at"].(*types.AttributeValueMemberS)
		if w.status(t, k) != outbox.StatusPending || ttl || shard == nil || replayed == nil {
			t.Errorf("seq %d after requeue: %v", seq, got.Item)
		}
	}
	// The reconciler sees them: 4 pending, the oldest the 3 h old OrderPaid.
	out, err = w.ctl(t, "status", "-table", w.table, "-shards", strconv.Itoa(shards), "-window", "0")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status after requeue", out, "pending           4\n", "oldest pending    3h0m")
	// Requeueing again skips them: they are pending now.
	out, err = w.ctl(t, "replay", "-table", w.table, "-shards", strconv.Itoa(shards), "-event", w.ids["o-1/1"])
	if err != nil || !strings.Contains(out, "skipped\t"+w.ids["o-1/1"]+"\tOrderPlaced\t1\tstatus PENDING") || !strings.Contains(out, "0 of 1 event(s) requeued") {
		t.Fatalf("second replay: err = %v\n%s", err, out)
	}
}

// TestReconcileAgeNamesTheLocalKnob: the redrive and replay summaries name
// make dev's flag with its real default (devstack's constants) and the
// reconciler's variable on AWS.
func TestReconcileAgeNamesTheLocalKnob(t *testing.T) {
	if localReconcileAfter != devstack.DevReconcileAfter.String() || localReconcileEvery != devstack.DevReconcileEvery.String() {
		t.Errorf("outboxctl says make dev reconciles after %s every %s; devstack: %s every %s",
			localReconcileAfter, localReconcileEvery, devstack.DevReconcileAfter, devstack.DevReconcileEvery)
	}
	mustContain(t, "reconcile age", reconcileAge, "-reconcile-after, default 10s", "RECONCILE_AFTER_SECONDS", "Reconcile now")
}

// TestShowIdempotencyRecord: show -idempotency-table names the fulfilment
// consumer's pkg/idempotency record of each event (written here by the
// real Store, as the consumer writes it), and "no idempotency record" for
// an event it has none of.
func TestShowIdempotencyRecord(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	idemTable := ddbtest.Name("ctl-idem")
	if _, err := w.ddb.CreateTable(ctx, idempotency.CreateTableInput(idemTable)); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(w.ddb).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(idemTable)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.NewStore(w.ddb, idempotency.Config{Table: idemTable, Namespace: routing.ConsumerFulfilment})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Do(ctx, w.ids["o-1/2"], "", func(context.Context) ([]byte, error) { return []byte(`{}`), nil }); err != nil {
		t.Fatal(err)
	}
	out, err := w.ctl(t, "show", "-table", w.table, "-aggregate", "o-1", "-idempotency-table", idemTable)
	if err != nil {
		t.Fatal(err)
	}
	paid := out[strings.Index(out, "event_id       "+w.ids["o-1/2"]):]
	mustContain(t, "paid event", paid[:strings.Index(paid, "\n\n")], "idempotency    fulfilment COMPLETED ", "(answers repeats until ")
	placed := out[strings.Index(out, "event_id       "+w.ids["o-1/1"]):]
	mustContain(t, "placed event", placed[:strings.Index(placed, "\n\n")], "idempotency    no idempotency record")
}
