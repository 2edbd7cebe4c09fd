package localrt

// The tests' own targets, event types and rules: an orders service like
// the example application's, without importing it (the local runtime is
// library code and knows nothing of the example).
const (
	testLedger, testNotifier, testFulfilment = "ledger", "notifier", "fulfilment"
	testPlaced, testPaid, testShipped        = "OrderPlaced", "OrderPaid", "OrderShipped"
	testCancelled                            = "OrderCancelled"
	testAggregateType                        = "Order"
	testSource                               = "com.ddb-outbox.orders"
)

var testEventTypes = []string{testPlaced, testPaid, testShipped, testCancelled}

// testRules are the bus rules of the tests: the ledger and the notifier
// take every order event, fulfilment payments and cancellations.
func testRules() []Rule {
	pattern := func(types ...string) map[string]any {
		dt := make([]any, len(types))
		for i, t := range types {
			dt[i] = t
		}
		return map[string]any{"source": []any{testSource}, "detail-type": dt}
	}
	return []Rule{
		{Name: "ledger-order-payments", Target: testLedger, Pattern: pattern(testEventTypes...)},
		{Name: "fulfilment-order-payments", Target: testFulfilment, Pattern: pattern(testPaid, testCancelled)},
		{Name: "notifier-order-events", Target: testNotifier, Pattern: pattern(testEventTypes...)},
	}
}
