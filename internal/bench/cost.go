package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// Prices are the list prices the cost model uses (USD, us-east-1).
type Prices struct {
	// WRUPerMillion and RRUPerMillion: DynamoDB on-demand write and read
	// request units (standard table class).
	WRUPerMillion float64 `json:"wru_per_million"`
	RRUPerMillion float64 `json:"rru_per_million"`
	// EventsPerMillion: EventBridge custom events put on a bus; each 64 KB
	// chunk of an entry is one event.
	EventsPerMillion float64 `json:"eventbridge_events_per_million"`
	// LambdaRequestsPerMillion and LambdaGBSecond: Lambda requests and arm64
	// duration.
	LambdaRequestsPerMillion float64 `json:"lambda_requests_per_million"`
	LambdaGBSecond           float64 `json:"lambda_arm64_gb_second"`
	// LambdaMemoryMB is the memory size assumed for the relay function.
	LambdaMemoryMB int `json:"lambda_memory_mb"`
	// Source and AsOf say where the prices come from and when they were
	// checked.
	Source string `json:"source"`
	AsOf   string `json:"as_of"`
}

// ListPrices are the us-east-1 on-demand list prices used by make bench.
// DynamoDB on-demand halved its prices on 1 November 2024 (AWS News Blog
// "Amazon DynamoDB On-Demand", updated 31 January 2025): $0.625 per million
// WRU, $0.125 per million RRU. EventBridge: $1.00 per million custom events,
// each 64 KB chunk billed as one event (aws.amazon.com/eventbridge/pricing).
// Lambda: $0.20 per million requests, $0.0000133334 per GB-second on arm64
// (aws.amazon.com/lambda/pricing). DynamoDB Streams GetRecords made by a
// Lambda event source mapping are free (aws.amazon.com/dynamodb/pricing).
var ListPrices = Prices{
	WRUPerMillion: 0.625, RRUPerMillion: 0.125, EventsPerMillion: 1.00,
	LambdaRequestsPerMillion: 0.20, LambdaGBSecond: 0.0000133334, LambdaMemoryMB: 128,
	Source: "aws.amazon.com/dynamodb/pricing/on-demand, aws.amazon.com/eventbridge/pricing, aws.amazon.com/lambda/pricing (us-east-1 list prices)",
	AsOf:   "checked 2025 (DynamoDB on-demand price cut of 2024-11-01 included)",
}

// Usage is what one design consumed for Events events.
type Usage struct {
	Events int64 `json:"events"`
	// WRU and RRU are DynamoDB capacity units reported by the server
	// (ReturnConsumedCapacity TOTAL) for the design's own calls.
	WRU float64 `json:"wru"`
	RRU float64 `json:"rru"`
	// EventBridgeChunks counts PutEvents entries × 64 KB chunks.
	EventBridgeChunks int64 `json:"eventbridge_chunks"`
	// LambdaInvocations and LambdaSeconds are the design's extra Lambda
	// function invocations (the relay) and their summed duration.
	LambdaInvocations int64   `json:"lambda_invocations"`
	LambdaSeconds     float64 `json:"lambda_seconds"`
}

// Cost is USD per million events, by component.
type Cost struct {
	DynamoDBWrites float64 `json:"dynamodb_writes"`
	DynamoDBReads  float64 `json:"dynamodb_reads"`
	EventBridge    float64 `json:"eventbridge"`
	LambdaRequests float64 `json:"lambda_requests"`
	LambdaDuration float64 `json:"lambda_duration"`
	Total          float64 `json:"total"`
}

// PerMillion prices u per million events.
func (p Prices) PerMillion(u Usage) Cost {
	if u.Events == 0 {
		return Cost{}
	}
	per := 1e6 / float64(u.Events) // scale to a million events
	c := Cost{
		DynamoDBWrites: u.WRU * per * p.WRUPerMillion / 1e6,
		DynamoDBReads:  u.RRU * per * p.RRUPerMillion / 1e6,
		EventBridge:    float64(u.EventBridgeChunks) * per * p.EventsPerMillion / 1e6,
		LambdaRequests: float64(u.LambdaInvocations) * per * p.LambdaRequestsPerMillion / 1e6,
		LambdaDuration: u.LambdaSeconds * per * float64(p.LambdaMemoryMB) / 1024 * p.LambdaGBSecond,
	}
	c.Total = c.DynamoDBWrites + c.DynamoDBReads + c.EventBridge + c.LambdaRequests + c.LambdaDuration
	for _, f := range []*float64{&c.DynamoDBWrites, &c.DynamoDBReads, &c.EventBridge, &c.LambdaRequests, &c.LambdaDuration, &c.Total} {
		*f = math.Round(*f*10000) / 10000
	}
	return c
}

// Chunks64KB returns how many 64 KB chunks EventBridge bills for an entry
// of size bytes (at least 1).
func Chunks64KB(size int) int64 {
	if size <= 0 {
		return 1
	}
	return int64((size + 64*1024 - 1) / (64 * 1024))
}

// SplitRow is the tally of one class of TransactWriteItems calls.
type SplitRow struct {
	Calls    int64   `json:"calls"`
	Capacity float64 `json:"capacity_units"`
}

// TransactSplit counts TransactWriteItems calls and their consumed
// capacity by class: "consumer" when a transaction writes a consumer's own
// table (its side effect + dedup marker), "api" when it writes the outbox
// table (an order command), "other" otherwise. It lets one SDK
// client shared by the API and the consumers be costed apart. Register it
// after callcount.RequestConsumedCapacity. Safe for concurrent use.
type TransactSplit struct {
	OutboxTable    string
	ConsumerTables []string
	mu             sync.Mutex
	rows           map[string]*SplitRow
}

// Register adds the middleware to an SDK operation stack.
func (s *TransactSplit) Register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc(fmt.Sprintf("bench.TransactSplit.%p", s),
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput)
			if !ok || err != nil {
				return out, md, err
			}
			class := transactClass(tx, s.OutboxTable, s.ConsumerTables)
			var cu float64
			if o, ok := out.Result.(*dynamodb.TransactWriteItemsOutput); ok {
				for _, c := range o.ConsumedCapacity {
					cu += aws.ToFloat64(c.CapacityUnits)
				}
			}
			s.mu.Lock()
			if s.rows == nil {
				s.rows = map[string]*SplitRow{}
			}
			r := s.rows[class]
			if r == nil {
				r = &SplitRow{}
				s.rows[class] = r
			}
			r.Calls++
			r.Capacity += cu
			s.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// transactClass is "consumer" when tx writes one of consumerTables, "api"
// when it writes outboxTable (and none of those), "other" otherwise.
func transactClass(tx *dynamodb.TransactWriteItemsInput, outboxTable string, consumerTables []string) string {
	class := "other"
	for _, it := range tx.TransactItems {
		var t *string
		switch {
		case it.Put != nil:
			t = it.Put.TableName
		case it.Update != nil:
			t = it.Update.TableName
		case it.Delete != nil:
			t = it.Delete.TableName
		case it.ConditionCheck != nil:
			t = it.ConditionCheck.TableName
		}
		switch name := aws.ToString(t); {
		case slices.Contains(consumerTables, name):
			class = "consumer"
		case name == outboxTable:
			if class == "other" {
				class = "api"
			}
		}
	}
	return class
}

// Get returns the tally of class ("api", "consumer" or "other").
func (s *TransactSplit) Get(class string) SplitRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rows[class]; r != nil {
		return *r
	}
	return SplitRow{}
}
