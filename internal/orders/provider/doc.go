// Package provider is a local stand-in for a fulfilment provider's HTTP API
// (the external system internal/orders/fulfilment calls): a real net/http server that
// creates and cancels shipments, honours Idempotency-Key the way payment and
// logistics APIs do, records every request it receives, and injects faults
// for chaos runs. It is tooling: the local runtime and tests use it, AWS
// deployments call the real provider.
//
// # API
//
//	POST /shipments                {"order_id","amount_minor","currency"} → 201 Shipment
//	POST /shipments/{id}/cancel    → 200 Shipment (cancelling twice is a no-op), 404 unknown id
//	GET  /shipments/{id}           → 200 Shipment, 404
//	GET  /_shipments               → 200 [Shipment] (every shipment, in creation order)
//	GET  /_requests                → 200 [Request] (every request received, in arrival order)
//
// Errors are JSON {"error": "<code>", "message": "..."} with 400 (bad body),
// 401 (missing or wrong "Authorization: Bearer <Config.APIKey>"), 404, 409
// (a request with the same key is still being processed), 422 (the key was
// used with another request), 429 and 500 (injected faults).
//
// # Idempotency-Key
//
// A POST carrying an Idempotency-Key header is acted on once per key: a
// repeat with the same method, path and body gets the first response (same
// status and body, header "Idempotent-Replayed: true") and changes nothing;
// the same key with another method, path or body gets 422
// "idempotency_key_reused"; a repeat while the first is still being
// processed gets 409 "idempotency_key_in_use" (retryable). Keys are kept for
// the server's lifetime, and across restarts with Config.Store, which keeps
// the shipments too (new shipment numbers continue after the kept ones).
// With Config.IgnoreIdempotencyKey the server is a
// naive provider: every POST acts, so a retried create makes a second
// shipment.
//
// # Faults
//
// Each /shipments request may get one fault, drawn first from the queue
// filled by Inject (deterministic tests), else at random with the rates of
// Config.Faults from a generator seeded with Faults.Seed (chaos runs, so a
// run can be replayed): FaultServerError (500, nothing done), FaultThrottle
// (429 with Retry-After, nothing done), FaultReset (the connection is
// hijacked and closed with a TCP RST, nothing done), FaultTimeoutAfterAct
// (the request is acted on, then the answer is held past the client's
// timeout: the client cannot tell it from a failure) and FaultLatency
// (Faults.Latency added, then a normal answer).
package provider
