package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// filler is a payload of about the size of an order's outbox record, so the
// raw items weigh what the pipeline's items weigh.
var filler = strings.Repeat("x", 400)

// CreatePlainTable creates an on-demand table with a string partition key
// "pk", with a NEW_IMAGE stream when withStream, and waits until it is
// active.
func CreatePlainTable(ctx context.Context, ddb *dynamodb.Client, table string, withStream bool) error {
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}
	if withStream {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage}
	}
	if _, err := ddb.CreateTable(ctx, in); err != nil {
		return fmt.Errorf("bench: create table %s: %w", table, err)
	}
	w := dynamodb.NewTableExistsWaiter(ddb, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 30*time.Second)
}

// StoreRateResult is the raw write rate of the store.
type StoreRateResult struct {
	Transactions int           `json:"transactions"`
	Items        int           `json:"items_per_transaction"`
	Concurrency  int           `json:"concurrency"`
	Stream       bool          `json:"stream"`
	Errors       int64         `json:"errors"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	PerSecond    float64       `json:"transactions_per_second"`
	Latency      Percentiles   `json:"latency"`
}

// StoreRate sends txs TransactWriteItems of items Puts each (distinct new
// items of ~450 bytes) into table from conc goroutines, as fast as the
// server answers, and returns the rate of successful transactions.
func StoreRate(ctx context.Context, ddb *dynamodb.Client, table string, txs, items, conc int, withStream bool) StoreRateResult {
	r := callRate(ctx, txs, conc, func(i int64) error {
		in := &dynamodb.TransactWriteItemsInput{}
		for k := 0; k < items; k++ {
			in.TransactItems = append(in.TransactItems, types.TransactWriteItem{Put: &types.Put{
				TableName: aws.String(table),
				Item: map[string]types.AttributeValue{
					"pk":      &types.AttributeValueMemberS{Value: "raw#" + strconv.FormatInt(i, 10) + "#" + strconv.Itoa(k)},
					"payload": &types.AttributeValueMemberS{Value: filler},
				},
				ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}})
		}
		_, err := ddb.TransactWriteItems(ctx, in)
		return err
	})
	r.Items, r.Stream = items, withStream
	return r
}

// GetItemRate sends n strongly consistent GetItem calls of items an
// earlier StoreRate wrote into table (keys "raw#<i>#0", i < written) from
// conc goroutines, as fast as the server answers, and returns the rate of
// successful reads (Items is 1: one item per call; Stream false).
func GetItemRate(ctx context.Context, ddb *dynamodb.Client, table string, n, written, conc int) StoreRateResult {
	r := callRate(ctx, n, conc, func(i int64) error {
		key := "raw#" + strconv.FormatInt(i%int64(max(written, 1)), 10) + "#0"
		_, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(table),
			Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
			ConsistentRead: aws.Bool(true),
		})
		return err
	})
	r.Items = 1
	return r
}

// callRate makes n calls (call(0) … call(n-1)) from conc goroutines, as
// fast as they return, and returns the rate and latency of the successful
// ones (Transactions is n; the caller sets Items and Stream).
func callRate(ctx context.Context, n, conc int, call func(i int64) error) StoreRateResult {
	var next, errs atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t := time.Now()
				if err := call(i); err != nil {
					errs.Add(1)
					continue
				}
				d := time.Since(t)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	ok := n - int(errs.Load())
	return StoreRateResult{
		Transactions: n, Concurrency: conc, Errors: errs.Load(),
		Elapsed: el, PerSecond: float64(ok) / el.Seconds(), Latency: NewPercentiles(lat),
	}
}

// WritePathResult compares the order command with a plain PutItem.
type WritePathResult struct {
	Samples int `json:"samples"`
	// PostOrders is the client-side latency of POST /orders (HTTP, API
	// handler, one TransactWriteItems).
	PostOrders Percentiles `json:"post_orders"`
	// PutItem is one single-item PutItem of a ~450-byte item into a table
	// without a stream on the same server, from the same process.
	PutItem Percentiles `json:"put_item"`
	Errors  int         `json:"errors"`
}

// WritePath alternates n sequential POST /orders with n PutItem calls into
// plainTable (so noise hits both alike) and returns both latencies.
func WritePath(ctx context.Context, baseURL string, ddb *dynamodb.Client, plainTable string, n int) WritePathResult {
	client := &http.Client{Timeout: 10 * time.Second}
	l := &loader{base: baseURL, o: LoadOptions{Client: client, Prefix: fmt.Sprintf("wp%d", time.Now().UnixNano())}}
	var put []time.Duration
	res := WritePathResult{Samples: n}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		body := fmt.Sprintf(`{"customer_id":"customer-%d","amount_minor":%d,"currency":"EUR"}`, i%50, 100+i)
		if d, ok := l.post(ctx, "/orders", body, fmt.Sprintf("%s-%d", l.o.Prefix, i), http.StatusCreated, nil); ok {
			l.create = append(l.create, d)
		} else {
			res.Errors++
		}
		t := time.Now()
		_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(plainTable), Item: map[string]types.AttributeValue{
			"pk":      &types.AttributeValueMemberS{Value: "plain#" + strconv.Itoa(i)},
			"payload": &types.AttributeValueMemberS{Value: filler},
		}})
		if err != nil {
			res.Errors++
			continue
		}
		put = append(put, time.Since(t))
	}
	res.PostOrders = NewPercentiles(l.create)
	res.PutItem = NewPercentiles(put)
	return res
}

// OpTimer records the latency of every SDK operation call (retries
// included), by operation name. Register it on aws.Config.APIOptions. It is
// safe for concurrent use.
type OpTimer struct {
	// Key, when set before the first call, names the series a call is
	// recorded under (default: the operation name); "" skips the call.
	Key func(op string, params any) string
	mu  sync.Mutex
	ops map[string][]time.Duration
}

// TransactKey is an OpTimer.Key that records TransactWriteItems calls by
// the class TransactSplit gives them ("TransactWriteItems/api" for those
// writing outboxTable, ".../consumer" for those writing one of
// consumerTables, ".../other"), and every other operation under its name.
func TransactKey(outboxTable string, consumerTables ...string) func(op string, params any) string {
	return func(op string, params any) string {
		if tx, ok := params.(*dynamodb.TransactWriteItemsInput); ok {
			return op + "/" + transactClass(tx, outboxTable, consumerTables)
		}
		return op
	}
}

// NewOpTimer returns an empty OpTimer.
func NewOpTimer() *OpTimer { return &OpTimer{ops: map[string][]time.Duration{}} }

// Register adds the timing middleware to an SDK operation stack.
func (t *OpTimer) Register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc(fmt.Sprintf("bench.OpTimer.%p", t),
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			if err == nil {
				d := time.Since(start)
				op := awsmiddleware.GetOperationName(ctx)
				if t.Key != nil {
					if op = t.Key(op, in.Parameters); op == "" {
						return out, md, err
					}
				}
				t.mu.Lock()
				t.ops[op] = append(t.ops[op], d)
				t.mu.Unlock()
			}
			return out, md, err
		}), middleware.After)
}

// Get returns the latency percentiles of operation op (or of the series
// Key named op).
func (t *OpTimer) Get(op string) Percentiles {
	t.mu.Lock()
	d := append([]time.Duration(nil), t.ops[op]...)
	t.mu.Unlock()
	return NewPercentiles(d)
}

// ErrAuditFailed is returned by the bench command when a pipeline audit
// finds a broken promise.
var ErrAuditFailed = errors.New("bench: pipeline audit failed")
