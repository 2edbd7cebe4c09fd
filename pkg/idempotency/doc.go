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
// # What the key and the hash cover
//
// The idempotency key is what the caller gives Do, or what Wrap's key
// function returns: the library never derives it. The record's partition key
// is RecordKey(Config.Namespace, key): "<namespace>#<key>", the key as
// "sha256:<hex>" when it is longer than MaxKeyBytes. For an outbox event it must be the
// event_id inside the detail (outbox.Envelope.EventID), never the
// EventBridge id, the SQS MessageId or the SNS MessageId: a reconciler
// re-send, an archive replay, an SQS redrive and an SNS publisher's retry
// each get new ones. For an HTTP request, a client-chosen header such as
// Idempotency-Key.
//
// The payload hash (PayloadHash, Wrap's default; WithPayloadHash replaces
// it, WithoutPayloadValidation and Do's "" turn it off) is HashJSON of, per
// aws-lambda-go event type:
//
//	events.SQSMessage             the body — or, when the body carries an
//	                              EventBridge event or an SNS notification (below),
//	                              what it carries. Not messageId, receiptHandle,
//	                              attributes (ApproximateReceiveCount, timestamps,
//	                              SenderId), md5OfBody nor messageAttributes: a
//	                              redelivery has a new receipt handle and receive
//	                              count, a redrive (sqsconsumer.Redrive, SQS's message
//	                              move task) is a new message without the attributes
//	events.SQSEvent               each record's, in order
//	events.EventBridgeEvent       source, detail-type and detail (a JSON value: key
//	(= CloudWatchEvent, also      order and spacing ignored, numbers kept exact). Not
//	scheduled events)             id, time, version, account, region nor resources: a
//	                              re-send gets a new id and time, a replay also
//	                              replay-name
//	events.SNSEventRecord         Subject and Message (what the message carries, when
//	                              it carries an EventBridge event). Not MessageId,
//	                              Timestamp, Signature nor MessageAttributes: a
//	                              publisher's retry is a new message
//	events.SNSEvent               each record's, in order
//	events.APIGatewayV2HTTPRequest method (requestContext.http.method), rawPath, the
//	(HTTP API, payload 2.0)       query parameters and the body (what it carries, when
//	                              it carries an EventBridge event or an SNS
//	                              notification: an API destination, an SNS HTTPS
//	                              subscription), with isBase64Encoded. Not headers
//	                              (signature, date, trace id, forwarding), the request
//	                              context's ids and times, nor cookies: a client's
//	                              retry is a new request. The path, not the route
//	                              key: /orders/o-1/pay and /orders/o-2/pay are
//	                              different requests on one route
//	events.APIGatewayProxyRequest httpMethod, path, the query parameters (multi-value when
//	(REST API, payload 1.0)       given) and the body as above
//	events.LambdaFunctionURLRequest method, rawPath, query parameters, body as above
//	events.ALBTargetGroupRequest  httpMethod, path, query parameters (multi-value when
//	                              given), body as above
//	events.KinesisEventRecord     partition key and data; when the data carries an
//	                              EventBridge event, that event's identity alone
//	                              (EventBridge's Kinesis target uses the event id as
//	                              the partition key unless the rule sets
//	                              PartitionKeyPath). Not the sequence number nor the
//	                              arrival time: a producer's retried PutRecord is a
//	                              new record
//	events.KinesisEvent           each record's, in order
//	events.DynamoDBEventRecord    eventName, Keys, NewImage and OldImage. Not the
//	                              sequence number, eventID nor the creation time
//	events.DynamoDBEvent          each record's, in order
//	events.S3EventRecord          eventName, bucket, object key, versionId, eTag and
//	                              sequencer. Not eventTime nor the request ids
//	events.S3Event                each record's, in order
//	json.RawMessage,              what it carries, when it is an EventBridge event or
//	map[string]any                an SNS notification (a rule's Lambda target invoking
//	                              a handler typed this way); else the whole input
//	anything else                 the whole input: a direct invoke's payload is the
//	                              request
//
// A text carries an EventBridge event when it is exactly one JSON object
// with the fields of an event as a target receives it (eb-events-structure)
// and nothing else: version, id, account, time and region strings,
// source and detail-type non-empty strings, resources an array of strings
// (or null), detail an object, and optionally replay-name (a string) — the
// hash is then that event's source, detail-type and detail, as for an
// events.EventBridgeEvent, so the same event hashes alike as a Lambda
// target's input and in a queue's message. A text carries an SNS
// notification when it is one JSON object with Type "Notification",
// MessageId, TopicArn, Message and Timestamp strings and no field other
// than the notification's (Subject, SignatureVersion, Signature,
// SigningCertURL, UnsubscribeURL, MessageAttributes, SequenceNumber): the
// hash is then its Subject and Message as for an events.SNSEventRecord.
// Anything else is hashed as it is: a body with one more field (an
// application's "amount" beside "source", "detail-type" and "detail") is
// not read as an event, so no field of a request is ever left out of its
// hash. A field EventBridge or SNS may add in future therefore makes the
// whole text count again (a re-send is refused, ErrPayloadMismatch, rather
// than another request's result replayed); WithPayloadHash is the remedy.
//
// Records stored before a version of this package that changed what a
// source's hash covers keep their old hash: a repeat of such a request
// within Config.Expiry gets ErrPayloadMismatch. Deploy when the consumer's
// queue is drained, or run with WithoutPayloadValidation for one Expiry.
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
//     EventBridge event's source, detail-type and detail, wherever the
//     event is carried, an HTTP request's method, path, query and body;
//     never the delivery's receipt handle, receive count, ids or times,
//     which change on every redelivery, re-send or replay) and
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
