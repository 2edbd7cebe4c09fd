// Package idempotency makes any Go Lambda handler (SQS, EventBridge, API
// Gateway, a direct invoke) idempotent when its effect lives outside
// DynamoDB: an HTTP call to a provider, an e-mail, a payment. It keeps one
// record per idempotency key in a DynamoDB table and runs the effect at most
// once per key while the record lives; a repeat gets the stored result. It
// does not need the outbox: a team that never uses pkg/outbox can use it on
// its own. (Effects that live in DynamoDB should use pkg/dedup instead: the
// marker and the effect commit in one transaction, which closes every
// window; see "The window no library can close" below.)
//
// Part of the outbox library, the packages a team imports for its own tables
// (outbox, relay, reconciler, dedup, streamimage, idempotency); they never
// import the example orders application or the local tooling. The runnable
// examples wrap a handler (Wrap) and call Store.Do with the cache.
//
// The semantics follow, and in places tighten, Powertools for AWS Lambda's
// idempotency utility (Python/TypeScript/Java "Idempotency" pages and the
// TypeScript DynamoDBPersistenceLayer); the differences are listed at the
// end.
//
// # Record states
//
// One item per key, partition key AttrPK = "<namespace>#<key>":
//
//		(absent) ──PutItem──▶ IN_PROGRESS ──UpdateItem──▶ COMPLETED ──(expiry)──▶ runs again
//		                          │
//		                          ├──DeleteItem (the effect failed)──▶ (absent): a retry runs again
//		                          └──(in-progress expiry passed: the invocation died)──▶ taken over by the next PutItem
//
//	  - IN_PROGRESS carries AttrToken (a fresh random token per attempt),
//	    AttrInProgressExpiry (Unix epoch milliseconds: the invocation's
//	    ctx.Deadline(), or now + Config.InProgressExpiry when the context has
//	    no deadline) and AttrPayloadHash.
//	  - COMPLETED carries AttrData (the effect's result bytes) and AttrExpiresAt
//	    (Unix epoch seconds, now + Config.Expiry; also the table's TTL
//	    attribute, TTLAttribute).
//
// # Conditional writes (one per state change, built with expression.NewBuilder)
//
//   - Start: PutItem of the IN_PROGRESS item conditioned on
//     attribute_not_exists(pk) OR expires_at < :now_s OR
//     (status = IN_PROGRESS AND in_progress_expiry < :now_ms), with
//     ReturnValues ALL_OLD (to count take-overs) and
//     ReturnValuesOnConditionCheckFailure ALL_OLD (to answer a repeat without
//     a second read).
//   - Complete: UpdateItem SET status = COMPLETED, data, expires_at REMOVE
//     in_progress_expiry, conditioned on token = :token AND status =
//     IN_PROGRESS: an invocation whose record was taken over can never
//     overwrite the new owner's record (ErrRecordTakenOver).
//   - Fail: DeleteItem conditioned on token = :token AND status =
//     IN_PROGRESS: a late failure never deletes another attempt's record.
//
// DynamoDB TTL deletes records "typically within a few days" after
// expires_at, and an expired item stays readable until then, so expiry is
// always decided by comparing expires_at with the clock, never by presence.
//
// # What a caller sees
//
//   - The first call for a key runs the effect, stores its result and
//     returns it.
//   - A repeat while the record is COMPLETED and unexpired returns the stored
//     result without running the effect (Result.Source SourceStore, or
//     SourceCache from the optional in-memory cache).
//   - A repeat while another invocation holds the record IN_PROGRESS gets
//     ErrInProgress: retryable (an SQS consumer returns it so the message
//     comes back after the visibility timeout).
//   - The same key with another payload hash gets ErrPayloadMismatch, in
//     every state, the cache included: never a silent replay of another
//     request's result.
//   - An empty key is ErrNoKey, unless Wrap is given AllowMissingKey (the
//     handler then runs without idempotency, counted in Metrics.NoKey).
//   - An effect error deletes the record and is returned unchanged (wrapped
//     errors keep their types, so a *sqsconsumer.PermanentError still
//     dead-letters).
//
// # The window no library can close
//
// If the function dies (timeout, out of memory, a crash) after the external
// effect happened and before the COMPLETED write lands, the record stays
// IN_PROGRESS until its in-progress expiry; the next delivery takes it over
// and runs the effect again. No client-side library can close this window:
// the effect and the record live in two systems without a shared
// transaction. What closes it is the provider's own idempotency: send the
// same idempotency key with the repeated request (an Idempotency-Key header
// carrying the event id, as internal/orders/fulfilment does), and the provider answers
// the repeat with the first result instead of acting twice. Against a
// provider that ignores keys the window produces a duplicate effect; a
// consumer should detect it where it can (internal/orders/fulfilment refuses a second
// shipment id for one order and dead-letters the event for an operator).
// Config.BeforeComplete lets tests and chaos runs open this window on
// purpose.
//
// # Differences from Powertools
//
//   - The COMPLETED update and the failure delete are conditioned on the
//     attempt's token; Powertools writes them unconditionally, so a stale
//     invocation can overwrite or delete a newer one's record.
//   - Payload validation is on by default (a SHA-256 of what identifies the
//     request, per event source: PayloadHash — an SQS message's body, an
//     EventBridge event's source, detail-type and detail, an HTTP request's
//     method, path, query and body; never the delivery's receipt handle,
//     receive count, ids or times, which change on every redelivery) and
//     is checked on every path, including the record returned by a failed
//     conditional put and the local cache (Powertools issues #2058, #3781,
//     #3821, java#2260 were bugs on exactly those paths). Powertools
//     validates nothing unless payload_validation_jmespath is set.
//   - A context without a deadline still gets an in-progress expiry
//     (Config.InProgressExpiry, default 15 minutes, Lambda's maximum
//     timeout); Powertools sets none without a registered Lambda context,
//     which blocks the key until the whole record expires.
//   - A missing key is an error by default (Powertools' default runs the
//     handler without idempotency and only warns).
//
// # Example
//
//	store, err := idempotency.NewStore(ddb, idempotency.Config{Table: "idempotency", Namespace: "charge"})
//	charge := idempotency.Wrap(store,
//		func(r ChargeRequest) (string, error) { return r.RequestID, nil },
//		func(ctx context.Context, r ChargeRequest) (Receipt, error) { return psp.Charge(ctx, r) })
//	lambda.Start(charge) // a redelivered request returns the first Receipt
package idempotency
