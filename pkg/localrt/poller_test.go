package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

const bigNumber = "12345678901234567890123456789012345678" // 38 digits: not a float64

// streamFixture is an outbox table with a stream on a fresh Dynoxide.
type streamFixture struct {
	env   *ddbtest.Env
	table string
	arn   string
}

func newStreamFixture(t *testing.T) *streamFixture {
	t.Helper()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	out, err := env.DDB.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	return &streamFixture{env: env, table: table, arn: aws.ToString(out.Table.LatestStreamArn)}
}

// putOutbox writes the outbox record of aggregate "o-<i>" (one INSERT) and
// returns its key. The item also carries every attribute type.
func (f *streamFixture) putOutbox(t *testing.T, i int) outbox.Key {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: testAggregateType, ID: fmt.Sprintf("o-%d", i), Sequence: 1},
		outbox.Event{Type: testPlaced, Version: 1, Payload: map[string]any{"i": i}}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	rec := outbox.NewRecord(env, 0, 16)
	item := rec.Item()
	item["big"] = &ddbtypes.AttributeValueMemberN{Value: bigNumber}
	item["bin"] = &ddbtypes.AttributeValueMemberB{Value: []byte{0, 1, 2, 255}}
	item["flag"] = &ddbtypes.AttributeValueMemberBOOL{Value: true}
	item["nothing"] = &ddbtypes.AttributeValueMemberNULL{Value: true}
	item["ss"] = &ddbtypes.AttributeValueMemberSS{Value: []string{"a", "b"}}
	item["ns"] = &ddbtypes.AttributeValueMemberNS{Value: []string{"1", "2.5"}}
	item["bs"] = &ddbtypes.AttributeValueMemberBS{Value: [][]byte{{1}, {2}}}
	item["m"] = &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"n": &ddbtypes.AttributeValueMemberN{Value: "0.1"}}}
	item["l"] = &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{&ddbtypes.AttributeValueMemberS{Value: "x"}, &ddbtypes.AttributeValueMemberN{Value: "7"}}}
	if _, err := f.env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	return rec.Key
}

// recorder is a test StreamHandler that records every batch and answers
// with respond (nil: full success).
type recorder struct {
	mu      sync.Mutex
	batches [][]events.DynamoDBEventRecord
	respond func(call int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

func (r *recorder) handle(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	r.mu.Lock()
	call := len(r.batches)
	r.batches = append(r.batches, ev.Records)
	respond := r.respond
	r.mu.Unlock()
	if respond == nil {
		return events.DynamoDBEventResponse{}, nil
	}
	return respond(call, ev)
}

func (r *recorder) calls() [][]events.DynamoDBEventRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]events.DynamoDBEventRecord(nil), r.batches...)
}

func aggIDs(recs []events.DynamoDBEventRecord) []string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Change.NewImage[outbox.AttrAggregateID].String())
	}
	return ids
}

// startPoller runs p until the test ends and waits for it to catch up.
func startPoller(t *testing.T, p *StreamPoller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitCaughtUp(t *testing.T, p *StreamPoller) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitCaughtUp(ctx); err != nil {
		t.Fatalf("WaitCaughtUp: %v (stats %+v)", err, p.Stats())
	}
}

func (f *streamFixture) config() StreamPollerConfig {
	return StreamPollerConfig{
		Streams:        f.env.Streams,
		StreamARN:      f.arn,
		PollInterval:   10 * time.Millisecond,
		RetryBaseDelay: time.Millisecond,
		RetryMaxDelay:  5 * time.Millisecond,
		Logger:         slog.New(slog.DiscardHandler),
	}
}

func TestPollerDeliversInOrderWithLambdaShape(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 5 {
		f.putOutbox(t, i)
	}
	rec := &recorder{}
	cfg := f.config()
	cfg.StreamARN, cfg.TableName, cfg.Tables = "", f.table, f.env.DDB // resolve via DescribeTable
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)

	var all []events.DynamoDBEventRecord
	for _, b := range rec.calls() {
		all = append(all, b...)
	}
	if got := strings.Join(aggIDs(all), ","); got != "o-0,o-1,o-2,o-3,o-4" {
		t.Fatalf("delivered %s, want o-0..o-4 in order", got)
	}
	for i, r := range all {
		if i > 0 && CompareSequenceNumbers(all[i-1].Change.SequenceNumber, r.Change.SequenceNumber) >= 0 {
			t.Errorf("sequence numbers not increasing: %s then %s", all[i-1].Change.SequenceNumber, r.Change.SequenceNumber)
		}
		if r.EventName != "INSERT" || r.EventSource != "aws:dynamodb" || r.EventVersion == "" || r.AWSRegion == "" || r.EventID == "" {
			t.Errorf("record metadata = %+v", r)
		}
		if r.EventSourceArn != f.arn {
			t.Errorf("eventSourceARN = %q, want %q", r.EventSourceArn, f.arn)
		}
		if r.Change.ApproximateCreationDateTime.IsZero() || time.Since(r.Change.ApproximateCreationDateTime.Time) > time.Hour {
			t.Errorf("ApproximateCreationDateTime = %v", r.Change.ApproximateCreationDateTime)
		}
		if got := r.Change.NewImage["big"].Number(); got != bigNumber {
			t.Errorf("big number = %q, want %q (lossless)", got, bigNumber)
		}
		if r.Change.Keys[outbox.AttrPK].String() == "" || r.Change.StreamViewType != "NEW_IMAGE" || r.Change.SizeBytes < 1 {
			t.Errorf("dynamodb = %+v", r.Change)
		}
	}
	st := p.Stats()
	if st.RecordsDelivered != 5 || st.RecordsFiltered != 0 || st.Checkpoints == nil {
		t.Errorf("stats = %+v", st)
	}

	// The exact JSON: read the stream directly and render it.
	raw := f.readStreamJSON(t)
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	r0 := ev["Records"].([]any)[0].(map[string]any)
	for _, k := range []string{"eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "dynamodb", "eventSourceARN"} {
		if _, ok := r0[k]; !ok {
			t.Errorf("record lacks %q: %s", k, raw)
		}
	}
	if _, ok := r0["userIdentity"]; ok {
		t.Errorf("userIdentity present on a user write")
	}
	d := r0["dynamodb"].(map[string]any)
	if _, ok := d["ApproximateCreationDateTime"].(float64); !ok {
		t.Errorf("ApproximateCreationDateTime is %T, want a JSON number", d["ApproximateCreationDateTime"])
	}
	if _, ok := d["OldImage"]; ok {
		t.Errorf("INSERT with NEW_IMAGE carries an OldImage")
	}
	for _, want := range []string{
		`"big":{"N":"` + bigNumber + `"}`, `"bin":{"B":"AAEC/w=="}`, `"flag":{"BOOL":true}`, `"nothing":{"NULL":true}`,
		`"ss":{"SS":["a","b"]}`, `"bs":{"BS":["AQ==","Ag=="]}`, `"m":{"M":{"n":{"N":"0.1"}}}`, `"l":{"L":[{"S":"x"},{"N":"7"}]}`,
		`"SequenceNumber":"`, `"StreamViewType":"NEW_IMAGE"`, `"eventSourceARN":"` + f.arn + `"`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("Lambda JSON lacks %s:\n%s", want, raw)
		}
	}
}

// readStreamJSON reads every record of the (single) shard and renders the
// Lambda payload.
func (f *streamFixture) readStreamJSON(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	d, err := f.env.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(f.arn)})
	if err != nil {
		t.Fatal(err)
	}
	it, err := f.env.Streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(f.arn), ShardId: d.StreamDescription.Shards[0].ShardId, ShardIteratorType: "TRIM_HORIZON"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.env.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := StreamEventJSON(out.Records, f.arn, "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestPollerFiltersButPassesOtherRecords(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	ctx := context.Background()
	k0 := f.putOutbox(t, 0)
	// MODIFY: the relay marks the record published.
	if _, err := f.env.DDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(f.table), Key: k0.AttributeValues(),
		UpdateExpression:          aws.String("SET #s = :p REMOVE pending_shard"),
		ExpressionAttributeNames:  map[string]string{"#s": outbox.AttrStatus},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": &ddbtypes.AttributeValueMemberS{Value: outbox.StatusPublished}},
	}); err != nil {
		t.Fatal(err)
	}
	// REMOVE.
	if _, err := f.env.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(f.table), Key: k0.AttributeValues()}); err != nil {
		t.Fatal(err)
	}
	// A foreign item (no event_id).
	if _, err := f.env.DDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]ddbtypes.AttributeValue{
		outbox.AttrPK: &ddbtypes.AttributeValueMemberS{Value: "Other#1"}, outbox.AttrSK: &ddbtypes.AttributeValueMemberS{Value: "x"},
	}}); err != nil {
		t.Fatal(err)
	}
	f.putOutbox(t, 1)

	rec := &recorder{}
	p, err := NewStreamPoller(f.config(), rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	var all []events.DynamoDBEventRecord
	for _, b := range rec.calls() {
		all = append(all, b...)
	}
	if got := strings.Join(aggIDs(all), ","); got != "o-0,o-1" {
		t.Fatalf("delivered %q, want only the two INSERTs of outbox items", got)
	}
	for _, r := range all {
		if r.EventName != "INSERT" {
			t.Errorf("delivered a %s record", r.EventName)
		}
	}
	st := p.Stats()
	if st.RecordsFiltered != 3 {
		t.Errorf("RecordsFiltered = %d, want 3", st.RecordsFiltered)
	}
	// The checkpoint is the last record of the shard: filtered ones were passed.
	for _, cp := range st.Checkpoints {
		if cp != all[len(all)-1].Change.SequenceNumber {
			t.Errorf("checkpoint %s, want %s", cp, all[len(all)-1].Change.SequenceNumber)
		}
	}
}

func TestPollerPartialBatchResumesAtLowestReported(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 5 {
		f.putOutbox(t, i)
	}
	rec := &recorder{respond: func(call int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		if call > 0 {
			return events.DynamoDBEventResponse{}, nil
		}
		// Report the 4th and the 3rd record: the lowest (3rd) wins.
		return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{
			{ItemIdentifier: ev.Records[3].Change.SequenceNumber},
			{ItemIdentifier: ev.Records[2].Change.SequenceNumber},
		}}, nil
	}}
	p, err := NewStreamPoller(f.config(), rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	calls := rec.calls()
	if len(calls) != 2 {
		t.Fatalf("%d invocations, want 2", len(calls))
	}
	if got := strings.Join(aggIDs(calls[0]), ","); got != "o-0,o-1,o-2,o-3,o-4" {
		t.Fatalf("first batch %s", got)
	}
	if got := strings.Join(aggIDs(calls[1]), ","); got != "o-2,o-3,o-4" {
		t.Fatalf("retry batch %s, want o-2,o-3,o-4 (the reported record and every later one, nothing earlier)", got)
	}
	st := p.Stats()
	if st.PartialFailures != 1 || st.Retries != 1 || st.Batches != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestPollerInvalidIdentifierFailsWholeBatch(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "999999999999999999999999", "not-a-number"} {
		t.Run(fmt.Sprintf("id=%q", id), func(t *testing.T) {
			t.Parallel()
			f := newStreamFixture(t)
			for i := range 3 {
				f.putOutbox(t, i)
			}
			rec := &recorder{respond: func(call int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				if call > 0 {
					return events.DynamoDBEventResponse{}, nil
				}
				return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: id}}}, nil
			}}
			p, err := NewStreamPoller(f.config(), rec.handle)
			if err != nil {
				t.Fatal(err)
			}
			startPoller(t, p)
			waitCaughtUp(t, p)
			calls := rec.calls()
			if len(calls) != 2 || len(calls[1]) != 3 {
				t.Fatalf("calls = %d (%v), want the whole batch of 3 twice", len(calls), calls)
			}
			if st := p.Stats(); st.InvalidResponses != 1 {
				t.Errorf("InvalidResponses = %d", st.InvalidResponses)
			}
		})
	}
}

func TestPollerErrorRetriesThenOnFailureDestination(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 3 {
		f.putOutbox(t, i)
	}
	rec := &recorder{respond: func(_ int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		if aggIDs(ev.Records)[0] == "o-1" {
			return events.DynamoDBEventResponse{}, fmt.Errorf("poison")
		}
		return events.DynamoDBEventResponse{}, nil
	}}
	dlq := NewMemoryQueue("https://sqs.local/esm-dlq")
	cfg := f.config()
	cfg.BatchSize = 1
	cfg.MaximumRetryAttempts = 2
	cfg.OnFailure, cfg.OnFailureQueueURL = dlq, dlq.URL()
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	var got []string
	for _, c := range rec.calls() {
		got = append(got, aggIDs(c)...)
	}
	if s := strings.Join(got, ","); s != "o-0,o-1,o-1,o-1,o-2" {
		t.Fatalf("invocations %s, want o-1 tried 1+2 times then the poller moves on", s)
	}
	msgs := dlq.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d on-failure messages, want 1", len(msgs))
	}
	body := msgs[0].Body
	for _, leak := range []string{"Records", "NewImage", "event_id", "o-1"} {
		if strings.Contains(body, leak) {
			t.Errorf("on-failure message leaks record data (%s): %s", leak, body)
		}
	}
	var ofr OnFailureRecord
	if err := json.Unmarshal([]byte(body), &ofr); err != nil {
		t.Fatal(err)
	}
	poisonSeq := rec.calls()[1][0].Change.SequenceNumber
	bi := ofr.DDBStreamBatchInfo
	if ofr.Version != "1.0" || ofr.RequestContext.Condition != ConditionRetryAttemptsExhausted ||
		ofr.RequestContext.ApproximateInvokeCount != 3 || ofr.ResponseContext == nil || aws.ToString(ofr.ResponseContext.FunctionError) != "Unhandled" ||
		ofr.RequestContext.FunctionArn != p.FunctionARN() || ofr.Timestamp == "" ||
		bi.StartSequenceNumber != poisonSeq || bi.EndSequenceNumber != poisonSeq || bi.BatchSize != 1 ||
		bi.StreamArn != f.arn || bi.ShardID == "" || bi.ApproximateArrivalOfFirstRecord == "" {
		t.Errorf("on-failure record = %s", body)
	}
	st := p.Stats()
	if st.FailuresSentToDestination != 1 || st.Retries != 2 || st.FunctionErrors != 3 || st.RecordsDiscarded != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestPollerBisectIsolatesPoisonRecord(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 4 {
		f.putOutbox(t, i)
	}
	var mu sync.Mutex
	delivered := map[string]int{}
	rec := &recorder{respond: func(_ int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		ids := aggIDs(ev.Records)
		for _, id := range ids {
			if id == "o-2" {
				return events.DynamoDBEventResponse{}, fmt.Errorf("poison")
			}
		}
		mu.Lock()
		for _, id := range ids {
			delivered[id]++
		}
		mu.Unlock()
		return events.DynamoDBEventResponse{}, nil
	}}
	dlq := NewMemoryQueue("q")
	cfg := f.config()
	cfg.BisectBatchOnFunctionError = true
	cfg.MaximumRetryAttempts = NoRetries
	cfg.OnFailure, cfg.OnFailureQueueURL = dlq, dlq.URL()
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	mu.Lock()
	defer mu.Unlock()
	if delivered["o-0"] != 1 || delivered["o-1"] != 1 || delivered["o-3"] != 1 || delivered["o-2"] != 0 {
		t.Errorf("delivered = %v", delivered)
	}
	var ofr OnFailureRecord
	if dlq.Len() != 1 || json.Unmarshal([]byte(dlq.Messages()[0].Body), &ofr) != nil || ofr.DDBStreamBatchInfo.BatchSize != 1 {
		t.Fatalf("on-failure messages = %+v", dlq.Messages())
	}
}

func TestPollerRestartFromCheckpoint(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 3 {
		f.putOutbox(t, i)
	}
	first := &recorder{}
	p1, err := NewStreamPoller(f.config(), first.handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p1.Run(ctx) }()
	waitCaughtUp(t, p1)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cp := p1.Checkpoint()
	if len(cp) != 1 {
		t.Fatalf("checkpoint = %v", cp)
	}
	for i := 3; i < 5; i++ {
		f.putOutbox(t, i)
	}
	second := &recorder{}
	cfg := f.config()
	cfg.Checkpoints = cp
	p2, err := NewStreamPoller(cfg, second.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p2)
	waitCaughtUp(t, p2)
	var got []string
	for _, c := range second.calls() {
		got = append(got, aggIDs(c)...)
	}
	if s := strings.Join(got, ","); s != "o-3,o-4" {
		t.Fatalf("after restart delivered %q, want only o-3,o-4", s)
	}
}

func TestPollerBatchSize(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 7 {
		f.putOutbox(t, i)
	}
	rec := &recorder{}
	cfg := f.config()
	cfg.BatchSize = 3
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	var sizes []int
	var got []string
	for _, c := range rec.calls() {
		sizes = append(sizes, len(c))
		got = append(got, aggIDs(c)...)
	}
	if fmt.Sprint(sizes) != "[3 3 1]" || len(got) != 7 {
		t.Fatalf("batch sizes %v (records %v), want [3 3 1]", sizes, got)
	}
}

func TestPollerLatestSkipsOldRecords(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.putOutbox(t, 0)
	rec := &recorder{}
	cfg := f.config()
	cfg.StartingPosition = StartingPositionLatest
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	f.putOutbox(t, 1)
	waitCaughtUp(t, p)
	var got []string
	for _, c := range rec.calls() {
		got = append(got, aggIDs(c)...)
	}
	if s := strings.Join(got, ","); s != "o-1" {
		t.Fatalf("LATEST delivered %q, want o-1", s)
	}
}

func TestStreamPollerConfigValidate(t *testing.T) {
	t.Parallel()
	h := func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, nil
	}
	base := StreamPollerConfig{Streams: &dynamodbstreams.Client{}, StreamARN: "arn"}
	bad := []func(*StreamPollerConfig){
		func(c *StreamPollerConfig) { c.Streams = nil },
		func(c *StreamPollerConfig) { c.StreamARN = "" },
		func(c *StreamPollerConfig) { c.BatchSize = 10001 },
		func(c *StreamPollerConfig) { c.MaxBatchingWindow = 301 * time.Second },
		func(c *StreamPollerConfig) { c.StartingPosition = "AT_TIMESTAMP" },
		func(c *StreamPollerConfig) { c.MaximumRetryAttempts = 10001 },
		func(c *StreamPollerConfig) { c.OnFailure = NewMemoryQueue("") },
		func(c *StreamPollerConfig) { c.FilterPatterns = []any{`{"a":[]}`} },
		func(c *StreamPollerConfig) { c.Checkpoints = map[string]string{"s": "x1"} },
	}
	for i, mut := range bad {
		c := base
		mut(&c)
		if _, err := NewStreamPoller(c, h); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
	if _, err := NewStreamPoller(base, h); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// flakyStreams injects one ExpiredIteratorException on the n-th GetRecords.
type flakyStreams struct {
	StreamsAPI
	mu    sync.Mutex
	calls int
	failN int
}

func (f *flakyStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, o ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls == f.failN
	f.mu.Unlock()
	if fail {
		return nil, &streamtypes.ExpiredIteratorException{Message: aws.String("Iterator expired")}
	}
	return f.StreamsAPI.GetRecords(ctx, in, o...)
}

func TestPollerExpiredIteratorResumesAfterCheckpoint(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 2 {
		f.putOutbox(t, i)
	}
	rec := &recorder{}
	cfg := f.config()
	cfg.BatchSize = 1
	flaky := &flakyStreams{StreamsAPI: f.env.Streams, failN: 2}
	cfg.Streams = flaky
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	for i := 2; i < 4; i++ {
		f.putOutbox(t, i)
	}
	waitCaughtUp(t, p)
	var got []string
	for _, c := range rec.calls() {
		got = append(got, aggIDs(c)...)
	}
	if s := strings.Join(got, ","); s != "o-0,o-1,o-2,o-3" {
		t.Fatalf("delivered %q, want each once in order", s)
	}
	if st := p.Stats(); st.ExpiredIterators != 1 {
		t.Errorf("ExpiredIterators = %d", st.ExpiredIterators)
	}
}

// DeliverAt holds a record until its time and, shard order being kept, the
// records behind it too; the ones before it go at once.
func TestPollerDeliverAtHoldsRecordAndTheOnesBehindIt(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for i := range 4 {
		f.putOutbox(t, i)
	}
	const hold = 400 * time.Millisecond
	var mu sync.Mutex
	var due time.Time
	var invoked []time.Time
	rec := &recorder{respond: func(_ int, _ events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		mu.Lock()
		invoked = append(invoked, time.Now())
		mu.Unlock()
		return events.DynamoDBEventResponse{}, nil
	}}
	cfg := f.config()
	cfg.DeliverAt = func(raw json.RawMessage) time.Time {
		var r events.DynamoDBEventRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Errorf("DeliverAt got a record that is not Lambda's shape: %v", err)
			return time.Time{}
		}
		if r.Change.NewImage[outbox.AttrAggregateID].String() != "o-1" {
			return time.Time{}
		}
		mu.Lock()
		defer mu.Unlock()
		due = time.Now().Add(hold)
		return due
	}
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	var got []string
	calls := rec.calls()
	for _, c := range calls {
		got = append(got, aggIDs(c)...)
	}
	if strings.Join(got, ",") != "o-0,o-1,o-2,o-3" {
		t.Fatalf("delivered %v, want o-0..o-3 in order", got)
	}
	if len(calls) < 2 || strings.Join(aggIDs(calls[0]), ",") != "o-0" {
		t.Fatalf("first batch %v, want o-0 alone (the held o-1 holds the rest)", aggIDs(calls[0]))
	}
	mu.Lock()
	defer mu.Unlock()
	if due.IsZero() || invoked[1].Before(due) {
		t.Fatalf("o-1 invoked at %v, before its DeliverAt %v", invoked[1], due)
	}
}
