// Package outboxtrace carries OpenTelemetry trace context across the outbox:
// from the request that wrote an outbox record, through the stored record
// and the published envelope, to the relay, the reconciler and every
// consumer. It is part of the outbox library ring; it holds no tracing
// machinery of its own: spans come from the OpenTelemetry API
// (go.opentelemetry.io/otel), W3C Trace Context from its propagation
// package, the X-Ray header from the contrib X-Ray propagator
// (go.opentelemetry.io/contrib/propagators/aws/xray).
//
// # The hops of one order's trace
//
//	api request span (otelhttp)                       ← W3C traceparent captured here
//	 ├─ DynamoDB.TransactWriteItems (otelaws)         ← the outbox record stores it (same transaction)
//	 ├─ outbox publish <EventType>  (relay, child)    ← PutEvents entry TraceHeader = this span (X-Ray format)
//	 │   ├─ EventBridge.PutEvents (otelaws)
//	 │   └─ outbox mark published | outbox park
//	 ├─ outbox resend <EventType> (reconciler, child; outbox.resend=true)
//	 └─ consume <consumer> <EventType> (child of the publish span that delivered it;
//	                                    outbox.consumer.outcome = applied | duplicate | held | dead_lettered | retry)
//
// The wait between hops (commit → stream hand-off → relay → bus → consumer)
// is the gap between these spans on one timeline.
//
// # Parent or link
//
// The relay's per-event publish span and each consumer's per-message span
// take the event's stored context as their PARENT, so one order's trace is
// one tree a viewer opens by trace id and every hop shows, with its wait.
// Each also LINKS to the batch span of its invocation (relay batch,
// reconciler sweep), which is the root of its own trace: one invocation
// serves many orders, so it can be the parent of none of them. A
// consumer's parent is the X-Ray header the bus delivered with the message
// (SQS system attribute AWSTraceHeader: the publish span that sent it, so a
// re-send shows under the reconciler's span, not the relay's) and falls back
// to the envelope's traceparent; the envelope's writer context is also
// added as a link when it differs.
//
// # Cost when off
//
// With no tracer provider installed (otel.GetTracerProvider's default, or
// otelsetup.Setup with Enabled false) every span is the API's no-op span:
// nothing is allocated for recording or exported, and envelopes written then
// carry no trace fields. Only an envelope that already carries a traceparent
// costs a parse and, in the relay, a TraceHeader on its PutEvents entry
// (propagation only). The bench measures both (outboxdev bench
// -trace-overhead; BenchmarkHandleTracing in pkg/relay). The SDK itself
// lives in pkg/outboxtrace/otelsetup, which Lambda binaries built with the
// tag notrace (make build) do not link.
package outboxtrace
