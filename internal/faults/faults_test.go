package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/internal/faults"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

func mustNew(t *testing.T, cfg faults.Config) *faults.Injector {
	t.Helper()
	in, err := faults.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// countingBus accepts every entry and counts the entries it received.
type countingBus struct {
	mu      sync.Mutex
	entries []string
	calls   int
}

func (b *countingBus) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	out := &eventbridge.PutEventsOutput{}
	for _, e := range in.Entries {
		b.entries = append(b.entries, aws.ToString(e.Detail))
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: aws.String("id-" + aws.ToString(e.Detail))})
	}
	return out, nil
}

func entries(n int) *eventbridge.PutEventsInput {
	in := &eventbridge.PutEventsInput{}
	for i := range n {
		in.Entries = append(in.Entries, ebtypes.PutEventsRequestEntry{Detail: aws.String(fmt.Sprintf("e%d", i))})
	}
	return in
}

// The same seed and call sequence give the same decisions and log; another
// seed gives others.
func TestReproducible(t *testing.T) {
	t.Parallel()
	run := func(seed int64) []faults.Injection {
		in := mustNew(t, faults.Config{Seed: seed, Rate: 0.3, Rates: map[faults.Kind]float64{faults.Latency: 0}})
		eb := in.EventBridge(&countingBus{})
		for range 50 {
			_, _ = eb.PutEvents(context.Background(), entries(5))
			in.Chance("custom", faults.PollerRestart)
		}
		return in.Log()
	}
	a, b, c := run(7), run(7), run(8)
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed gave different logs:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same log")
	}
}

// Decisions at one boundary do not depend on calls at another.
func TestBoundariesIndependent(t *testing.T) {
	t.Parallel()
	only := mustNew(t, faults.Config{Seed: 3, Rate: 0.5})
	mixed := mustNew(t, faults.Config{Seed: 3, Rate: 0.5})
	var a, b []bool
	for range 40 {
		a = append(a, only.Chance("x", faults.PollerRestart))
		mixed.Chance("y", faults.PollerRestart)
		b = append(b, mixed.Chance("x", faults.PollerRestart))
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("boundary x decisions changed when boundary y was used")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []faults.Config{{Rate: -0.1}, {Rate: 1.1}, {Rates: map[faults.Kind]float64{faults.Throttle: 2}}, {MaxLatency: -1}} {
		if _, err := faults.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	in := mustNew(t, faults.Config{Rate: 0.5, Rates: map[faults.Kind]float64{faults.Throttle: 0}})
	if in.RateOf(faults.Throttle) != 0 || in.RateOf(faults.FailBeforeSend) != 0.5 || in.RateOf(faults.EntryPermanent) != 0.005 {
		t.Fatal("rates: override, default, permanent default")
	}
}

// Partial failure: failed entries are answered in place with their code and
// are not forwarded; the others are forwarded once.
func TestEventBridgePartialFailure(t *testing.T) {
	t.Parallel()
	in := mustNew(t, faults.Config{Seed: 1, Rates: map[faults.Kind]float64{faults.EntryRetryable: 0.4, faults.EntryPermanent: 0.2}})
	bus := &countingBus{}
	out, err := in.EventBridge(bus).PutEvents(context.Background(), entries(10))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Entries) != 10 {
		t.Fatalf("%d result entries", len(out.Entries))
	}
	var failed int32
	for i, r := range out.Entries {
		code := aws.ToString(r.ErrorCode)
		forwarded := false
		for _, d := range bus.entries {
			forwarded = forwarded || d == fmt.Sprintf("e%d", i)
		}
		switch code {
		case "":
			if !forwarded || aws.ToString(r.EventId) != fmt.Sprintf("id-e%d", i) {
				t.Errorf("entry %d: accepted but forwarded=%v id=%q", i, forwarded, aws.ToString(r.EventId))
			}
		case "ThrottlingException", "InternalFailure", "InvalidArgument", "MalformedDetail":
			failed++
			if forwarded {
				t.Errorf("entry %d failed with %s but was forwarded", i, code)
			}
		default:
			t.Errorf("entry %d: code %q", i, code)
		}
	}
	st := in.Stats()
	if failed == 0 || out.FailedEntryCount != failed || int64(failed) != st.Count(faults.BoundaryPutEvents, faults.EntryRetryable)+st.Count(faults.BoundaryPutEvents, faults.EntryPermanent) {
		t.Fatalf("FailedEntryCount %d, failed %d, stats %+v", out.FailedEntryCount, failed, st)
	}
}

// Whole-call faults: before send nothing reaches the bus; a lost response
// means the bus has the entries and the caller sees a retryable error.
func TestEventBridgeWholeCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind      faults.Kind
		forwarded int
		code      string
	}{
		{faults.FailBeforeSend, 0, "InternalServerError"},
		{faults.Throttle, 0, "ThrottlingException"},
		{faults.ResponseLost, 3, "RequestTimeout"},
	} {
		in := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{tc.kind: 1}})
		bus := &countingBus{}
		out, err := in.EventBridge(bus).PutEvents(context.Background(), entries(3))
		var api smithy.APIError
		var fe *faults.Error
		if out != nil || !errors.As(err, &api) || api.ErrorCode() != tc.code || !errors.As(err, &fe) || !fe.RetryableError() {
			t.Fatalf("%s: out %v err %v", tc.kind, out, err)
		}
		if len(bus.entries) != tc.forwarded || fe.Applied != (tc.forwarded > 0) {
			t.Fatalf("%s: bus got %d entries, Applied %v", tc.kind, len(bus.entries), fe.Applied)
		}
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	in := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{faults.Latency: 1}, MaxLatency: 30 * time.Millisecond})
	start := time.Now()
	for range 5 {
		if _, err := in.EventBridge(&countingBus{}).PutEvents(context.Background(), entries(1)); err != nil {
			t.Fatal(err)
		}
	}
	if in.Stats().Count("", faults.Latency) != 5 || time.Since(start) <= 0 {
		t.Fatal("latency not injected")
	}
	if !strings.Contains(in.Summary(), "latency") {
		t.Fatalf("summary:\n%s", in.Summary())
	}
}

// testTable creates a simple table on a fresh Dynoxide and returns a client
// whose SDK stack carries the injector's middleware.
func testTable(t *testing.T, in *faults.Injector, retryer func() aws.Retryer) (*ddbtest.Env, *dynamodb.Client, string) {
	t.Helper()
	env := ddbtest.New(t)
	table := ddbtest.Name("faults")
	env.CreateTable(t, ddbtest.SimpleTableInput(table))
	cfg := env.Config.Copy()
	cfg.APIOptions = append(cfg.APIOptions, in.Middleware())
	if retryer != nil {
		cfg.Retryer = retryer
	}
	return env, dynamodb.NewFromConfig(cfg), table
}

func getItem(t *testing.T, env *ddbtest.Env, table, pk string) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := env.DDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func noRetries() aws.Retryer { return aws.NopRetryer{} }

// The SDK middleware against a real DynamoDB-compatible server: a fault
// before send writes nothing; a lost response wrote the item; throttling uses
// DynamoDB's code; ineligible operations pass untouched.
func TestMiddlewareAgainstDynoxide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind    faults.Kind
		code    string
		written bool
	}{
		{faults.FailBeforeSend, "InternalServerError", false},
		{faults.Throttle, "ProvisionedThroughputExceededException", false},
		{faults.ResponseLost, "RequestTimeout", true},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			in := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{tc.kind: 1}, Operations: []string{"DynamoDB.PutItem"}})
			env, ddb, table := testTable(t, in, noRetries)
			_, err := ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table),
				Item: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k"}}})
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tc.code || !faults.IsInjected(err) {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
			if got := getItem(t, env, table, "k") != nil; got != tc.written {
				t.Fatalf("written = %v, want %v", got, tc.written)
			}
			// GetItem is not in Operations: never faulted.
			if _, err := ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table),
				Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k"}}}); err != nil {
				t.Fatal(err)
			}
			if st := in.Stats(); st.Count("DynamoDB.PutItem", tc.kind) != 1 || st.Calls["DynamoDB.GetItem"] != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// Inside the SDK retry loop (default placement), the SDK's standard retryer
// treats injected faults as retryable: one API call makes several attempts
// (the client's RetryMaxAttempts). Outside it, the SDK never retries them.
func TestMiddlewareSDKRetriesInjectedFaults(t *testing.T) {
	t.Parallel()
	retryer := func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 3
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
	}
	inside := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{faults.Throttle: 1}})
	_, ddb, table := testTable(t, inside, retryer)
	_, err := ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k"}}})
	if n := inside.Stats().Calls["DynamoDB.GetItem"]; err == nil || n < 2 {
		t.Fatalf("inside: err %v, %d attempts (want the SDK to retry)", err, n)
	}

	outside := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{faults.Throttle: 1}, OutsideSDKRetries: true})
	_, ddb2, table2 := testTable(t, outside, retryer)
	_, err = ddb2.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table2),
		Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k"}}})
	if err == nil || outside.Stats().Calls["DynamoDB.GetItem"] != 1 {
		t.Fatalf("outside: err %v, calls %v (want 1)", err, outside.Stats().Calls)
	}
}

// Consumer crash faults: before the effect nothing runs; after it the
// effect ran and the delivery still fails.
func TestEventHandlerCrashes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind faults.Kind
		runs int
	}{{faults.CrashBeforeEffect, 0}, {faults.CrashAfterEffect, 1}} {
		in := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{tc.kind: 1}})
		runs := 0
		h := in.EventHandler("ledger", func(context.Context, events.EventBridgeEvent) error { runs++; return nil })
		err := h(context.Background(), events.EventBridgeEvent{})
		if !faults.IsInjected(err) || runs != tc.runs || in.Stats().Count("consumer.ledger", tc.kind) != 1 {
			t.Fatalf("%s: err %v runs %d", tc.kind, err, runs)
		}
	}
}

// A crash after the stream handler ran returns an error, so the event
// source mapping redelivers the batch; the handler did run.
func TestStreamHandlerCrashAfterHandle(t *testing.T) {
	t.Parallel()
	in := mustNew(t, faults.Config{Rates: map[faults.Kind]float64{faults.CrashAfterHandle: 1}})
	ran := false
	h := in.StreamHandler(func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		ran = true
		return events.DynamoDBEventResponse{}, nil
	})
	if _, err := h(context.Background(), events.DynamoDBEvent{}); !faults.IsInjected(err) || !ran {
		t.Fatalf("err %v ran %v", err, ran)
	}
}

// Restarting the poller from its checkpoint while a batch is in flight
// loses nothing: the interrupted batch is delivered again by the new poller
// and every record is delivered at least once, in order per shard.
func TestRestartablePollerNoLoss(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	d, err := env.DDB.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int) {
		e, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: fmt.Sprintf("o-%d", i), Sequence: 1},
			outbox.Event{Type: order.EventOrderPlaced, Version: 1, Payload: map[string]int{"i": i}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: outbox.NewRecord(e, 0, 4).Item()}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		put(i)
	}

	var mu sync.Mutex
	delivered := map[string]int{}
	var order []string
	block := make(chan struct{})
	blocked := make(chan struct{}, 1)
	first := true
	handler := func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		mu.Lock()
		isFirst := first
		first = false
		mu.Unlock()
		if isFirst {
			// The poller host dies mid-invocation: nothing is acknowledged.
			blocked <- struct{}{}
			select {
			case <-ctx.Done():
				return events.DynamoDBEventResponse{}, ctx.Err()
			case <-block:
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range ev.Records {
			id := r.Change.NewImage[outbox.AttrAggregateID].String()
			delivered[id]++
			order = append(order, id)
		}
		return events.DynamoDBEventResponse{}, nil
	}
	rp, err := faults.NewRestartablePoller(localrt.StreamPollerConfig{
		Streams: env.Streams, StreamARN: aws.ToString(d.Table.LatestStreamArn), BatchSize: 2,
		PollInterval: 10 * time.Millisecond, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}, handler)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := rp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rp.Stop() }()
	<-blocked
	cp, err := rp.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cp) != 0 {
		t.Fatalf("checkpoint before any success = %v, want none", cp)
	}
	for i := 4; i < 6; i++ {
		put(i)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := rp.WaitCaughtUp(wctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 6 {
		if delivered[fmt.Sprintf("o-%d", i)] < 1 {
			t.Fatalf("o-%d lost after restart; delivered %v", i, delivered)
		}
	}
	if strings.Join(order, ",") != "o-0,o-1,o-2,o-3,o-4,o-5" || rp.Restarts() != 1 {
		t.Fatalf("order %v, restarts %d", order, rp.Restarts())
	}
}

// BatchExecuteStatement partial failure: the failed statements are answered
// with a per-statement error at their position and are not executed; the
// others run. Against Dynoxide.
func TestMiddlewareStatementFailed(t *testing.T) {
	t.Parallel()
	in := mustNew(t, faults.Config{Seed: 2, Rates: map[faults.Kind]float64{faults.StatementFailed: 0.5}})
	env, ddb, table := testTable(t, in, noRetries)
	var sts []ddbtypes.BatchStatementRequest
	for i := range 6 {
		sts = append(sts, ddbtypes.BatchStatementRequest{
			Statement:  aws.String(fmt.Sprintf(`INSERT INTO "%s" VALUE {'pk': ?}`, table)),
			Parameters: []ddbtypes.AttributeValue{&ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("k%d", i)}},
		})
	}
	out, err := ddb.BatchExecuteStatement(context.Background(), &dynamodb.BatchExecuteStatementInput{Statements: sts})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Responses) != 6 {
		t.Fatalf("%d responses", len(out.Responses))
	}
	failed := 0
	for i, r := range out.Responses {
		written := getItem(t, env, table, fmt.Sprintf("k%d", i)) != nil
		if (r.Error != nil) == written {
			t.Errorf("statement %d: error %v, written %v", i, r.Error, written)
		}
		if r.Error != nil {
			failed++
			if r.Error.Code != ddbtypes.BatchStatementErrorCodeEnumThrottlingError && r.Error.Code != ddbtypes.BatchStatementErrorCodeEnumInternalServerError {
				t.Errorf("statement %d: code %s", i, r.Error.Code)
			}
		}
	}
	if failed == 0 || failed == 6 || int64(failed) != in.Stats().Count("DynamoDB.BatchExecuteStatement", faults.StatementFailed) {
		t.Fatalf("failed %d, stats:\n%s", failed, in.Summary())
	}
}

// The stream poller reading through a faulty DynamoDB Streams client
// (GetRecords failing, throttled, or losing responses) still delivers every
// record.
func TestPollerSurvivesGetRecordsFaults(t *testing.T) {
	t.Parallel()
	in := mustNew(t, faults.Config{Seed: 6, Rate: 0.3, MaxLatency: 5 * time.Millisecond, OutsideSDKRetries: true})
	env := ddbtest.New(t)
	table := ddbtest.Name("outbox")
	env.CreateTable(t, outbox.CreateTableInput(table))
	d, err := env.DDB.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: fmt.Sprintf("o-%d", i), Sequence: 1},
			outbox.Event{Type: order.EventOrderPlaced, Version: 1, Payload: map[string]int{"i": i}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.DDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: outbox.NewRecord(e, 0, 4).Item()}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := env.Config.Copy()
	cfg.APIOptions = append(cfg.APIOptions, in.Middleware())
	streams := dynamodbstreams.NewFromConfig(cfg)
	var mu sync.Mutex
	seen := map[string]bool{}
	p, err := localrt.NewStreamPoller(localrt.StreamPollerConfig{Streams: streams, StreamARN: aws.ToString(d.Table.LatestStreamArn),
		PollInterval: 5 * time.Millisecond, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}, func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range ev.Records {
			seen[r.Change.NewImage[outbox.AttrAggregateID].String()] = true
		}
		return events.DynamoDBEventResponse{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }() //nolint:errcheck // Run's error after cancel is the cancel
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of 5; faults:\n%s", n, in.Summary())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if in.Stats().Count("DynamoDB Streams.GetRecords", faults.FailBeforeSend)+in.Stats().Count("DynamoDB Streams.GetRecords", faults.Throttle)+
		in.Stats().Count("DynamoDB Streams.GetRecords", faults.ResponseLost) == 0 {
		t.Fatalf("no GetRecords fault injected:\n%s", in.Summary())
	}
}
