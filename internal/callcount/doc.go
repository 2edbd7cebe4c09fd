// Package callcount measures what an outbox event costs in AWS calls: it
// counts AWS SDK for Go v2 calls by service id and operation name, counts
// HTTP attempts and errors, and sums the DynamoDB consumed capacity the
// server reports. The counts can be read as a sorted Table (tests, reports)
// or written as CloudWatch embedded metric format lines (WriteEMF).
//
// # Example
//
//	counter := callcount.New()
//	cfg.APIOptions = append(cfg.APIOptions, counter.Register, callcount.RequestConsumedCapacity)
//	ddb := dynamodb.NewFromConfig(cfg) // every call through ddb is counted
//	eb := callcount.CountingPutEvents(counter, localBus) // a non-SDK fake
//	...
//	fmt.Print(counter.Snapshot())
//	_ = counter.WriteEMF(os.Stdout, map[string]string{config.MetricDimensionOutboxTable: table})
//
// # Invariants
//
//   - One Calls per client method call, whatever the SDK retried; Attempts
//     counts the HTTP requests (what the service sees and throttles).
//   - Errors counts calls that returned an error. Partial failures inside an
//     HTTP 200 response (PutEvents FailedEntryCount, BatchExecuteStatement
//     per-statement errors) are not errors here.
//   - Capacity is summed only from successful DynamoDB responses that carry
//     ConsumedCapacity, i.e. when the request set ReturnConsumedCapacity
//     (RequestConsumedCapacity does that). A failed conditional write
//     consumes write capacity that no response reports.
//   - A Counter is safe for concurrent use; its zero value is ready.
package callcount
