// Package faults is a seeded, reproducible fault injector for proving the
// outbox promises (README "The promises", I1–I6) under failure, without editing the code
// under test. It is used by the tests and by the chaos audit of the local
// stack (cmd/outboxdev chaos); it never runs in a Lambda.
//
// # Injection points
//
//   - AWS SDK v2 middleware (Injector.Middleware) for DynamoDB and DynamoDB
//     Streams clients: FailBeforeSend, Throttle, ResponseLost (the request
//     was applied, the response dropped) and Latency, on the operations in
//     Config.Operations (default DefaultOperations).
//   - Narrow-interface wrappers with the SDK's exact signatures:
//     EventBridge (PutEvents: whole-call faults, lost responses, and per-entry
//     retryable or permanent failures in an HTTP 200 answer), Queue (SQS
//     SendMessage, the parked-records DLQ), UpdateItem (marking) and
//     TransactWriter (a consumer's transaction).
//   - Crash simulations: StreamHandler (the relay dies after it published and
//     marked, before answering the event source mapping), EventHandler and
//     Interceptor (a consumer dies before or after its transaction), and
//     RestartablePoller (the stream poller restarts from its checkpoint).
//
// Every injected error is an *Error: a smithy.APIError with the AWS code it
// imitates and retryable for the SDK's retryer; IsInjected recognises it.
//
// # Reproducibility
//
// Every decision comes from math/rand/v2 PCG streams seeded with
// Config.Seed, one stream per boundary, and every call consumes a fixed
// number of draws. The same seed and the same sequence of calls at a
// boundary give the same faults; Log lists them in order and Stats/Summary
// count them per boundary and kind for the audit table.
//
// # Example (the chaos wiring)
//
//	inj, _ := faults.New(faults.Config{Seed: seed, Rate: 0.05})
//	cfg := dynoxide.AWSConfig(endpoint)
//	cfg.APIOptions = append(cfg.APIOptions, inj.Middleware())
//	cfg.Retryer = func() aws.Retryer { // no token bucket starvation at high rates
//		return retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None })
//	}
//	ddb, streams := dynamodb.NewFromConfig(cfg), dynamodbstreams.NewFromConfig(cfg)
//	bus, _ := localrt.NewBus(localrt.BusConfig{Name: busName, Interceptor: inj.Interceptor()})
//	rl, _ := relay.New(inj.EventBridge(bus), ddb, inj.Queue(dlq), relayCfg)
//	rp, _ := faults.NewRestartablePoller(localrt.StreamPollerConfig{Streams: streams, ...}, inj.StreamHandler(rl.Handle))
//	_ = rp.Start(ctx)
//	go rp.Chaos(ctx, inj, time.Second)
//	// ... drive traffic, wait, audit ...
//	fmt.Print(inj.Summary())
//
// Rates and budgets: the SDK's default retry token bucket runs dry under a
// fault storm ("retry quota exceeded"), so chaos clients should use
// ratelimit.None as above. Consumer deliveries fail with probability about
// CrashBeforeEffect + CrashAfterEffect + the transaction's faults; at
// Rate 0.5 a bus with 30 target attempts dead-letters some deliveries
// (observed with internal/orders/ledger's TestFaultChaosSmoke, FAULTS_RATE=0.5). A
// dead letter is the bus giving up (a target DLQ in AWS), not a lost
// event: the audit must report it as such, or use a lower rate / more
// attempts (at Rate 0.3, 40 seeds ran clean).
//
// An event rejected with a permanent entry code (EntryPermanent, default
// rate Rate/100) is parked by the relay: the audit must count it as parked
// (I5), not lost.
package faults
