// Package bench holds the measurement logic of `make bench` (cmd/outboxdev
// bench): what one outbox event costs in AWS calls, capacity units, latency
// and dollars, measured against the local stack (internal/devstack) on a
// DynamoDB-compatible server, never against AWS.
//
// It provides:
//   - ApplyRecorder, a local-bus Interceptor and an SDK middleware that
//     record when each consumer applied each event, for commit → applied
//     latency: the commit of its dedup marker's transaction (an event an
//     ordered consumer's resequencer buffered is applied after its
//     predecessor, not when its delivery was acknowledged), or the
//     handler's success for a consumer without markers;
//   - Load, an HTTP load generator (paced open-loop arrivals or a closed
//     loop of clients) creating and paying orders through the real API;
//   - StoreRate and Interleaved, the store's raw TransactWriteItems rate and
//     a plain PutItem latency on the same server;
//   - NaiveRelay and DualWriter, the two designs the outbox relay is
//     compared with (one PutEvents and one UpdateItem per event; a request
//     path that writes the order, then publishes, with no outbox);
//   - CostModel, USD per million events from counted calls and capacity;
//   - MeasureInit, a Lambda binary's init time against a fake Lambda
//     Runtime API, for every function make build builds (Functions) with
//     the variables each requires at init (InitEnv); a start that fails is
//     reported FAILED with its cause, never as a time;
//   - Cloud, the cloud-latency level: AWS's published hop latencies
//     (stream → Lambda, EventBridge → target, SQS → Lambda, DynamoDB calls)
//     injected into a devstack as seeded lognormals, and each event's
//     commit → applied split into those hops, our share and the emulator's;
//   - CapacityInputs, the capacity model: sustained events/s against AWS's
//     documented limits, the first limit hit and the settings for a target
//     (consumers process a batch's aggregates at once; provisioned mode);
//   - Figure and its constructors, issue 22's "Done when" figures beside
//     their targets with a verdict (PASS, FAIL, NOT MEASURED);
//   - PlotLatencyCDF, PlotThroughputCalls and PlotCost, the report's PNGs
//     (gonum.org/v1/plot), legends outside the data.
//
// Durations are wall-clock on a shared, noisy machine: compare the ratios
// measured in one run, not absolute numbers across runs.
package bench
