package callcount

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Row is the tally of one (service, operation) pair.
type Row struct {
	// Service is the SDK service id, e.g. "DynamoDB", "EventBridge", "SQS"
	// (awsmiddleware.GetServiceID), or the name given to Add.
	Service string
	// Operation is the API operation name, e.g. "BatchExecuteStatement".
	Operation string
	// Calls counts operation invocations: one per client method call,
	// whatever the SDK's retries did, plus the n given to Add.
	Calls int64
	// Attempts counts HTTP requests sent for those calls, SDK retries
	// included (0 for Add): what the service sees and throttles.
	Attempts int64
	// Errors counts calls that returned an error (after the SDK's retries).
	// Per-entry failures inside an HTTP 200 response (PutEvents
	// FailedEntryCount, BatchExecuteStatement Responses[].Error) are not
	// errors here.
	Errors int64
	// CapacityUnits sums ConsumedCapacity.CapacityUnits of the responses
	// that report it (DynamoDB; see RequestConsumedCapacity). Read and write
	// units are also summed apart when the server splits them.
	CapacityUnits float64
	// ReadCapacityUnits sums ConsumedCapacity.ReadCapacityUnits.
	ReadCapacityUnits float64
	// WriteCapacityUnits sums ConsumedCapacity.WriteCapacityUnits.
	WriteCapacityUnits float64
	// Items counts the items the calls asked DynamoDB to write (WriteItems):
	// what a store's cost follows better than calls (a 4-action
	// transaction costs a local server about twice a 2-action one).
	Items int64
}

// WriteItems returns how many items a DynamoDB request writes: the actions
// of a TransactWriteItems, the statements of a BatchExecuteStatement or an
// ExecuteTransaction, the requests of a BatchWriteItem, 1 for PutItem,
// UpdateItem, DeleteItem and ExecuteStatement, 0 for anything else (reads).
func WriteItems(params any) int64 {
	switch in := params.(type) {
	case *dynamodb.TransactWriteItemsInput:
		return int64(len(in.TransactItems))
	case *dynamodb.BatchExecuteStatementInput:
		return int64(len(in.Statements))
	case *dynamodb.ExecuteTransactionInput:
		return int64(len(in.TransactStatements))
	case *dynamodb.BatchWriteItemInput:
		n := 0
		for _, rs := range in.RequestItems {
			n += len(rs)
		}
		return int64(n)
	case *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.DeleteItemInput, *dynamodb.ExecuteStatementInput:
		return 1
	}
	return 0
}

// TotalItems returns the sum of Items over every row.
func (t Table) TotalItems() int64 {
	var n int64
	for _, r := range t {
		n += r.Items
	}
	return n
}

// Table is a Snapshot: rows sorted by Service, then Operation.
type Table []Row

// Get returns the row of service and operation, or a zero Row with those
// names when nothing was counted.
func (t Table) Get(service, operation string) Row {
	for _, r := range t {
		if r.Service == service && r.Operation == operation {
			return r
		}
	}
	return Row{Service: service, Operation: operation}
}

// Calls returns the calls counted for service and operation (0 if none).
func (t Table) Calls(service, operation string) int64 { return t.Get(service, operation).Calls }

// TotalCalls returns the sum of Calls over every row.
func (t Table) TotalCalls() int64 {
	var n int64
	for _, r := range t {
		n += r.Calls
	}
	return n
}

// TotalCapacityUnits returns the sum of CapacityUnits over every row.
func (t Table) TotalCapacityUnits() float64 {
	var n float64
	for _, r := range t {
		n += r.CapacityUnits
	}
	return n
}

// String renders the table as aligned text, one row per line, with a total
// line, e.g. for test logs and reports.
func (t Table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %-24s %8s %8s %6s %10s\n", "SERVICE", "OPERATION", "CALLS", "ATTEMPTS", "ERRORS", "CAPACITY")
	for _, r := range t {
		fmt.Fprintf(&b, "%-12s %-24s %8d %8d %6d %10.1f\n", r.Service, r.Operation, r.Calls, r.Attempts, r.Errors, r.CapacityUnits)
	}
	fmt.Fprintf(&b, "%-12s %-24s %8d %8s %6s %10.1f\n", "TOTAL", "", t.TotalCalls(), "", "", t.TotalCapacityUnits())
	return b.String()
}

type key struct{ service, op string }

// Counter counts AWS calls by service and operation. The zero value is
// ready to use; it is safe for concurrent use. Register it on SDK clients
// (aws.Config.APIOptions or a client's Options.APIOptions) and use Add or
// CountingPutEvents for fakes that are not SDK clients.
type Counter struct {
	mu   sync.Mutex
	rows map[key]*Row
}

// New returns an empty Counter.
func New() *Counter { return &Counter{} }

// row returns the row for k; c.mu must be held.
func (c *Counter) row(service, op string) *Row {
	if c.rows == nil {
		c.rows = map[key]*Row{}
	}
	k := key{service, op}
	r, ok := c.rows[k]
	if !ok {
		r = &Row{Service: service, Operation: op}
		c.rows[k] = r
	}
	return r
}

// Add counts n calls of operation op on service, for clients that are not
// AWS SDK clients (in-process fakes, the local EventBridge bus). n may be
// negative to correct a count.
func (c *Counter) Add(service, op string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.row(service, op).Calls += int64(n)
}

// AddError counts one call of operation op on service that failed.
func (c *Counter) AddError(service, op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.row(service, op)
	r.Calls++
	r.Errors++
}

// Snapshot returns a copy of the counts, sorted by service then operation.
func (c *Counter) Snapshot() Table {
	c.mu.Lock()
	t := make(Table, 0, len(c.rows))
	for _, r := range c.rows {
		t = append(t, *r)
	}
	c.mu.Unlock()
	sort.Slice(t, func(i, j int) bool {
		if t[i].Service != t[j].Service {
			return t[i].Service < t[j].Service
		}
		return t[i].Operation < t[j].Operation
	})
	return t
}

// Reset clears every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows = nil
}

// Register adds the counting middleware to an SDK operation stack. Its
// signature fits aws.Config.APIOptions (every client built from that config
// is counted) and <service>.Options.APIOptions:
//
//	cfg.APIOptions = append(cfg.APIOptions, counter.Register)
//	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
//		o.APIOptions = append(o.APIOptions, counter.Register)
//	})
//
// It counts, per service id and operation name: one call per operation, one
// attempt per HTTP request (retries included), one error per failed call,
// and the consumed capacity of DynamoDB outputs that carry it. It returns an
// error only if the stack refuses the middleware (the same Counter
// registered twice on one stack).
func (c *Counter) Register(stack *middleware.Stack) error {
	id := fmt.Sprintf("callcount.Counter.%p", c)
	// After: the operation's service metadata middleware, which puts the
	// service id and operation name in the context, is added before
	// APIOptions run.
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc(id, c.handleInitialize), middleware.After); err != nil {
		return err
	}
	// The Deserialize step runs once per HTTP attempt (the retry loop is in
	// the Finalize step).
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc(id+".attempts", c.handleDeserialize), middleware.Before)
}

func (c *Counter) handleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleInitialize(ctx, in)
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	var caps []ddbtypes.ConsumedCapacity
	if err == nil {
		caps = consumedCapacity(out.Result)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.row(service, op)
	r.Calls++
	r.Items += WriteItems(in.Parameters)
	if err != nil {
		r.Errors++
	}
	for _, cc := range caps {
		r.CapacityUnits += deref(cc.CapacityUnits)
		r.ReadCapacityUnits += deref(cc.ReadCapacityUnits)
		r.WriteCapacityUnits += deref(cc.WriteCapacityUnits)
	}
	return out, md, err
}

func (c *Counter) handleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	c.mu.Lock()
	c.row(awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)).Attempts++
	c.mu.Unlock()
	return next.HandleDeserialize(ctx, in)
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

// consumedCapacity returns the ConsumedCapacity entries of a DynamoDB
// output, nil for any other output. The server fills them only when the
// request set ReturnConsumedCapacity (see RequestConsumedCapacity).
func consumedCapacity(result any) []ddbtypes.ConsumedCapacity {
	one := func(cc *ddbtypes.ConsumedCapacity) []ddbtypes.ConsumedCapacity {
		if cc == nil {
			return nil
		}
		return []ddbtypes.ConsumedCapacity{*cc}
	}
	switch o := result.(type) {
	case *dynamodb.PutItemOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.GetItemOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.ExecuteStatementOutput:
		return one(o.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		return o.ConsumedCapacity
	case *dynamodb.BatchWriteItemOutput:
		return o.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		return o.ConsumedCapacity
	case *dynamodb.TransactGetItemsOutput:
		return o.ConsumedCapacity
	case *dynamodb.BatchExecuteStatementOutput:
		return o.ConsumedCapacity
	case *dynamodb.ExecuteTransactionOutput:
		return o.ConsumedCapacity
	}
	return nil
}

// RequestConsumedCapacity is an APIOptions function that sets
// ReturnConsumedCapacity = TOTAL on DynamoDB requests that leave it unset,
// so that the server reports the capacity a Counter sums. It copies the
// input (the caller's struct is not modified) and leaves requests that set
// the field, and non-DynamoDB requests, alone. Add it next to Register:
//
//	o.APIOptions = append(o.APIOptions, counter.Register, callcount.RequestConsumedCapacity)
//
// AWS documents ReturnConsumedCapacity on every data-plane operation that
// reads or writes items, e.g.
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchExecuteStatement.html
func RequestConsumedCapacity(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("callcount.RequestConsumedCapacity",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			in.Parameters = withConsumedCapacity(in.Parameters)
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

func withConsumedCapacity(params any) any {
	const total = ddbtypes.ReturnConsumedCapacityTotal
	switch p := params.(type) {
	case *dynamodb.PutItemInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.UpdateItemInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.DeleteItemInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.GetItemInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.QueryInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.ScanInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.ExecuteStatementInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.BatchGetItemInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.BatchWriteItemInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.TransactWriteItemsInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.TransactGetItemsInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.BatchExecuteStatementInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	case *dynamodb.ExecuteTransactionInput:
		if p != nil && p.ReturnConsumedCapacity == "" {
			cp := *p
			cp.ReturnConsumedCapacity = total
			return &cp
		}
	}
	return params
}
