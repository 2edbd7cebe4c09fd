package localrt

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// AWS-recorded on-failure behaviour of a DynamoDB Streams event source
// mapping (LocalStack snapshot tests recorded against AWS, validated
// 2024-07..2025-11; Lambda developer guide, services-dynamodb-errors).

// One record already older than MaximumRecordAge, then 5 fresh ones, batch
// size 10, no retries: AWS sends an on-failure record for batchSize 1 (the
// expired record) and delivers the 5 fresh records to the function.
func TestPollerRecordAgeGivesUpOnlyExpiredRecords(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.putOutbox(t, 0)
	// ApproximateCreationDateTime may be whole seconds (rounded down): wait
	// long enough that only the first record is past a 2 s age limit.
	time.Sleep(2200 * time.Millisecond)
	for i := 1; i <= 5; i++ {
		f.putOutbox(t, i)
	}
	rec := &recorder{}
	dlq := NewMemoryQueue("https://sqs.local/esm-dlq")
	cfg := f.config()
	cfg.BatchSize = 10
	cfg.MaximumRetryAttempts = NoRetries
	cfg.MaximumRecordAge = 2 * time.Second
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
	if s := strings.Join(got, ","); s != "o-1,o-2,o-3,o-4,o-5" {
		t.Fatalf("delivered %q, want the 5 fresh records", s)
	}
	msgs := dlq.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d on-failure records, want 1", len(msgs))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(msgs[0].Body), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["responseContext"]; ok {
		t.Errorf("record-age on-failure record has a responseContext: %s", msgs[0].Body)
	}
	var ofr OnFailureRecord
	if err := json.Unmarshal([]byte(msgs[0].Body), &ofr); err != nil {
		t.Fatal(err)
	}
	if ofr.DDBStreamBatchInfo.BatchSize != 1 || ofr.RequestContext.Condition != ConditionRecordAgeExceeded ||
		ofr.RequestContext.ApproximateInvokeCount != 1 {
		t.Errorf("on-failure record = %s, want batchSize 1, RecordAgeExceeded, approximateInvokeCount 1", msgs[0].Body)
	}
}

// After a handler answers with an invalid (or partial) batch response until
// retries are exhausted, AWS's responseContext is
// {"statusCode":200,"executedVersion":"$LATEST","functionError":null}: the
// key is present with null.
func TestOnFailureRecordFunctionErrorNullAfterInvalidResponse(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.putOutbox(t, 0)
	rec := &recorder{respond: func(int, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: ""}}}, nil
	}}
	dlq := NewMemoryQueue("https://sqs.local/esm-dlq")
	cfg := f.config()
	cfg.MaximumRetryAttempts = 1
	cfg.OnFailure, cfg.OnFailureQueueURL = dlq, dlq.URL()
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	msgs := dlq.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d on-failure records, want 1", len(msgs))
	}
	var raw struct {
		ResponseContext map[string]json.RawMessage `json:"responseContext"`
	}
	if err := json.Unmarshal([]byte(msgs[0].Body), &raw); err != nil {
		t.Fatal(err)
	}
	fe, ok := raw.ResponseContext["functionError"]
	if !ok || string(fe) != "null" || string(raw.ResponseContext["statusCode"]) != "200" || string(raw.ResponseContext["executedVersion"]) != `"$LATEST"` {
		t.Errorf("responseContext = %s, want statusCode 200, executedVersion $LATEST, functionError null", msgs[0].Body)
	}
}

// Lambda sends ApproximateCreationDateTime as epoch seconds with a fraction.
func TestEpochSecondsJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		t    time.Time
		want string
	}{
		{time.Unix(1693997155, 0), "1693997155.0"},
		{time.Unix(1693997155, 123e6), "1693997155.123"},
		{time.Unix(1693997155, 120e6), "1693997155.12"},
		{time.Unix(1693997155, 999999999), "1693997155.999"},
	}
	for _, c := range cases {
		if got := EpochSecondsJSON(c.t); got != c.want {
			t.Errorf("EpochSecondsJSON(%v) = %s, want %s", c.t, got, c.want)
		}
		// aws-lambda-go decodes both forms.
		var v events.SecondsEpochTime
		if err := json.Unmarshal([]byte(c.want), &v); err != nil || v.Unix() != 1693997155 {
			t.Errorf("SecondsEpochTime(%s) = %v, %v", c.want, v, err)
		}
	}
}

// A Lambda invocation that overruns its timeout ends as a timeout error:
// whatever the handler returns afterwards (here full success) is discarded
// and the event source mapping retries the batch (Lambda developer guide,
// golang-context and services-dynamodb-errors).
func TestPollerDiscardsAnswerAfterFunctionTimeout(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.putOutbox(t, 0)
	rec := &recorder{respond: func(call int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		if call == 0 {
			time.Sleep(300 * time.Millisecond) // ignores its deadline, then answers "success"
		}
		return events.DynamoDBEventResponse{}, nil
	}}
	cfg := f.config()
	cfg.FunctionTimeout = 100 * time.Millisecond
	p, err := NewStreamPoller(cfg, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	waitCaughtUp(t, p)
	if n := len(rec.calls()); n != 2 {
		t.Fatalf("%d invocations, want 2: the late answer must not checkpoint the batch", n)
	}
	if st := p.Stats(); st.FunctionErrors != 1 || st.Retries != 1 {
		t.Errorf("stats = %+v, want one function error (the timeout) and one retry", st)
	}
}

// The scheduler gives the handler its function timeout as deadline and
// counts a late answer as a failed (timed-out) run.
func TestSchedulerLateAnswerIsATimeout(t *testing.T) {
	t.Parallel()
	s, err := NewScheduler(SchedulerConfig{Interval: time.Hour, Timeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
		func(ctx context.Context, _ events.EventBridgeEvent) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("no deadline in the handler's context")
			}
			time.Sleep(120 * time.Millisecond)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Trigger(context.Background()); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("Trigger = %v, want a timeout", err)
	}
	if st := s.Stats(); st.Failures != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// AWS accepts `numeric` in the filter criteria of a stream event source
// mapping (recorded); the local poller must accept it too. On stream images
// numbers are strings ({"N":"101"}), so such a filter matches nothing there.
func TestStreamPollerAcceptsNumericFilter(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	cfg := f.config()
	cfg.FilterPatterns = []any{`{"dynamodb":{"NewImage":{"sequence":{"N":[{"numeric":[">",0]}]}}}}`}
	if _, err := NewStreamPoller(cfg, (&recorder{}).handle); err != nil {
		t.Fatalf("numeric filter refused: %v", err)
	}
	p, err := CompilePatternFor(`{"dynamodb":{"NewImage":{"sequence":{"N":[{"numeric":[">",0]}]}}}}`, LambdaFilter)
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	_ = json.Unmarshal([]byte(`{"dynamodb":{"NewImage":{"sequence":{"N":"5"}}}}`), &ev)
	if p.Match(ev) {
		t.Error("a numeric filter matched a DynamoDB number, which stream images carry as a string")
	}
}
