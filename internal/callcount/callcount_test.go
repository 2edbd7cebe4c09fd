package callcount_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/internal/callcount"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// countedClient returns a DynamoDB client on env counted by c.
func countedClient(env *ddbtest.Env, c *callcount.Counter, capacity bool) *dynamodb.Client {
	return dynamodb.NewFromConfig(env.Config, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, c.Register)
		if capacity {
			o.APIOptions = append(o.APIOptions, callcount.RequestConsumedCapacity)
		}
	})
}

// TestCountsAgainstDynoxide makes known calls on a real *dynamodb.Client
// against Dynoxide and checks calls, errors and consumed capacity.
func TestCountsAgainstDynoxide(t *testing.T) {
	t.Parallel()
	env := ddbtest.New(t)
	table := ddbtest.Name("cc")
	env.CreateTable(t, ddbtest.SimpleTableInput(table))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c := callcount.New()
	ddb := countedClient(env, c, true)
	for i := range 3 {
		in := &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s(fmt.Sprint("k", i))}}
		if _, err := ddb.PutItem(ctx, in); err != nil {
			t.Fatal(err)
		}
		if in.ReturnConsumedCapacity != "" {
			t.Fatal("RequestConsumedCapacity modified the caller's input")
		}
	}
	for range 2 {
		if _, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": s("k0")}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("t1")}}},
		{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("t2")}}},
	}}); err != nil {
		t.Fatal(err)
	}
	upd := `UPDATE "` + table + `" SET "v"=? WHERE "pk"=?`
	if _, err := ddb.BatchExecuteStatement(ctx, &dynamodb.BatchExecuteStatementInput{Statements: []types.BatchStatementRequest{
		{Statement: aws.String(upd), Parameters: []types.AttributeValue{s("x"), s("k1")}},
		{Statement: aws.String(upd), Parameters: []types.AttributeValue{s("x"), s("k2")}},
	}}); err != nil {
		t.Fatal(err)
	}
	_, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("no-such-table"), Key: map[string]types.AttributeValue{"pk": s("k0")}})
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("GetItem on a missing table: %v", err)
	}

	snap := c.Snapshot()
	t.Logf("\n%s", snap)
	want := []struct {
		op                  string
		calls, errs         int64
		capacity, writeOnly float64
	}{
		{op: "BatchExecuteStatement", calls: 1},
		{op: "GetItem", calls: 3, errs: 1, capacity: 1},   // 2 × 0.5 RCU (eventually consistent, ≤ 4 KB)
		{op: "PutItem", calls: 3, capacity: 3},            // 3 × 1 WCU (≤ 1 KB, no index)
		{op: "TransactWriteItems", calls: 1, capacity: 4}, // 2 items × 2 WCU (transactional)
	}
	if len(snap) != len(want) {
		t.Fatalf("rows = %d, want %d", len(snap), len(want))
	}
	for i, w := range want {
		r := snap[i]
		if r.Service != "DynamoDB" || r.Operation != w.op || r.Calls != w.calls || r.Attempts != w.calls || r.Errors != w.errs {
			t.Errorf("row %d = %+v, want %s calls %d errors %d", i, r, w.op, w.calls, w.errs)
		}
		if w.capacity != 0 && r.CapacityUnits != w.capacity {
			t.Errorf("%s capacity = %v, want %v", w.op, r.CapacityUnits, w.capacity)
		}
	}
	if cu := snap.Get("DynamoDB", "BatchExecuteStatement").CapacityUnits; cu <= 0 {
		t.Errorf("BatchExecuteStatement capacity = %v, want > 0", cu)
	}
	if snap.TotalCalls() != 8 || snap.Calls("DynamoDB", "PutItem") != 3 || snap.Calls("SQS", "SendMessage") != 0 {
		t.Errorf("totals: %d calls", snap.TotalCalls())
	}

	c.Reset()
	if len(c.Snapshot()) != 0 {
		t.Fatal("Reset left rows")
	}
	// Without RequestConsumedCapacity the server reports none.
	plain := countedClient(env, c, false)
	if _, err := plain.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("p")}}); err != nil {
		t.Fatal(err)
	}
	if r := c.Snapshot().Get("DynamoDB", "PutItem"); r.Calls != 1 || r.CapacityUnits != 0 {
		t.Errorf("plain PutItem row %+v", r)
	}
}

// TestAttemptsCountRetries counts one call and three attempts when every
// attempt fails to connect.
func TestAttemptsCountRetries(t *testing.T) {
	t.Parallel()
	c := callcount.New()
	cfg := aws.Config{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}}
	cfg.APIOptions = append(cfg.APIOptions, c.Register) // the aws.Config form
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 3
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": s("k")}}); err == nil {
		t.Fatal("expected a connection error")
	}
	r := c.Snapshot().Get("DynamoDB", "GetItem")
	if r.Calls != 1 || r.Attempts != 3 || r.Errors != 1 {
		t.Fatalf("row %+v, want 1 call, 3 attempts, 1 error", r)
	}
}

type okBus struct{ err error }

func (b okBus) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if b.err != nil {
		return nil, b.err
	}
	return &eventbridge.PutEventsOutput{}, nil
}

func TestCountingPutEventsAndAdd(t *testing.T) {
	t.Parallel()
	c := callcount.New()
	ok := callcount.CountingPutEvents(c, okBus{})
	bad := callcount.CountingPutEvents(c, okBus{err: errors.New("boom")})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = ok.PutEvents(context.Background(), &eventbridge.PutEventsInput{})
			c.Add("SQS", "SendMessage", 2)
			_ = c.Snapshot()
		}()
	}
	wg.Wait()
	if _, err := bad.PutEvents(context.Background(), &eventbridge.PutEventsInput{}); err == nil {
		t.Fatal("error not passed through")
	}
	snap := c.Snapshot()
	if r := snap.Get("EventBridge", "PutEvents"); r.Calls != 21 || r.Errors != 1 {
		t.Errorf("PutEvents row %+v", r)
	}
	if snap.Calls("SQS", "SendMessage") != 40 || snap[0].Service != "EventBridge" || snap[1].Service != "SQS" {
		t.Errorf("snapshot %v", snap)
	}
}

func TestWriteEMF(t *testing.T) {
	t.Parallel()
	c := callcount.New()
	c.Add("DynamoDB", "BatchExecuteStatement", 4)
	c.Add("EventBridge", "PutEvents", 10)
	var buf bytes.Buffer
	if err := c.WriteEMF(&buf, map[string]string{config.MetricDimensionOutboxTable: "outbox"}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	var lines []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	l := lines[1]
	if l["Service"] != "EventBridge" || l["Operation"] != "PutEvents" || l[callcount.MetricCalls] != 10.0 || l[config.MetricDimensionOutboxTable] != "outbox" {
		t.Errorf("line %v", l)
	}
	meta := l["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if meta["Namespace"] != config.MetricNamespace {
		t.Errorf("namespace %v", meta["Namespace"])
	}
	dims := meta["Dimensions"].([]any)[0].([]any)
	if fmt.Sprint(dims) != "[OutboxTable Service Operation]" {
		t.Errorf("dimensions %v", dims)
	}
	if err := c.WriteEMF(&buf, map[string]string{"Service": "x"}); err == nil {
		t.Error("reserved dimension accepted")
	}
}

func ExampleCounter_Snapshot() {
	c := callcount.New()
	c.Add("EventBridge", "PutEvents", 10)
	c.Add("DynamoDB", "BatchExecuteStatement", 4)
	fmt.Print(c.Snapshot())
	// Output:
	// SERVICE      OPERATION                   CALLS ATTEMPTS ERRORS   CAPACITY
	// DynamoDB     BatchExecuteStatement           4        0      0        0.0
	// EventBridge  PutEvents                      10        0      0        0.0
	// TOTAL                                       14                        0.0
}

// TestWriteItems counts the items each kind of DynamoDB write asks for,
// and none for reads.
func TestWriteItems(t *testing.T) {
	t.Parallel()
	put := types.TransactWriteItem{Put: &types.Put{}}
	for _, tc := range []struct {
		in   any
		want int64
	}{
		{&dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{put, put, put, put}}, 4},
		{&dynamodb.BatchExecuteStatementInput{Statements: make([]types.BatchStatementRequest, 25)}, 25},
		{&dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"a": make([]types.WriteRequest, 3), "b": make([]types.WriteRequest, 2)}}, 5},
		{&dynamodb.PutItemInput{}, 1}, {&dynamodb.UpdateItemInput{}, 1}, {&dynamodb.DeleteItemInput{}, 1},
		{&dynamodb.GetItemInput{}, 0}, {&dynamodb.QueryInput{}, 0}, {"not a request", 0},
	} {
		if got := callcount.WriteItems(tc.in); got != tc.want {
			t.Errorf("WriteItems(%T) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
