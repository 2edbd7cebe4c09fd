// Package api is the orders HTTP API: a plain net/http handler (Go 1.22+
// ServeMux patterns) over the order repository, and an adapter that serves it
// from Lambda behind an API Gateway HTTP API (payload format 2.0).
//
// # Contract
//
//   - Bodies are at most Config.MaxBodyBytes (16 KiB) and, when present, must
//     be Content-Type application/json and exactly one JSON object with only
//     the documented members (exact names, no duplicates, nothing after it).
//   - An invalid request writes nothing: headers, body and values are all
//     checked before the repository is called (invariant I6).
//   - Every request has a caller (CallerMode): behind API Gateway the most
//     specific identity the IAM authorizer gives — the Cognito identity of
//     an identity pool user (requestContext.authorizer.iam.cognitoIdentity,
//     "cognito-identity:<pool>/<identity>"), else the IAM principal that
//     signed it (requestContext.authorizer.iam.userArn); none, or a pool
//     role session without its identity, is 401 unauthenticated; over plain
//     net/http (local only) X-Caller or "local". The caller is the actor of
//     each change and is logged.
//   - POST /orders with an Idempotency-Key is idempotent for 24 h per caller:
//     the same caller, key and body returns the first order with 200 (the
//     first call got 201); the same caller and key with another body is 409
//     idempotency_key_reused. Another caller's use of the same key is an
//     independent request (no oracle, no replay of another caller's order,
//     no squatting).
//   - Free text (customer_id, reason) is refused with 422 invalid_text when
//     it holds characters customers must never be shown (order.CheckText).
//   - Commands accept If-Match with the order version; a mismatch is 409
//     version_conflict. Orders carry ETag: "<version>".
//   - Behind API Gateway (LambdaHandler) the route is matched on rawPath as
//     API Gateway hands it over, already percent-decoded and never decoded
//     again: "/orders/100%" or "/orders/<id>?x=1" name orders that do not
//     exist (404), never another resource. An event that cannot become a
//     request is 400 bad_request, never 500, and no client input produces
//     an ERROR log line.
//   - Cross-site request forgery is not this handler's concern: behind API
//     Gateway every request is authenticated with credentials a browser
//     never attaches by itself (SigV4, a JWT), and a check here would refuse
//     legitimate cross-origin browser clients. Where nothing authenticates —
//     the local stack — the server in front refuses cross-origin browser
//     requests that change state (devstack's crossOriginGuard,
//     net/http.CrossOriginProtection); serve the handler with
//     http.ListenAndServe yourself and you must do the same.
//   - Errors are {"code","message"}; see the Code* constants for the table.
//     500 responses never carry details; they are logged.
//   - Logs are slog records with the fixed keys aggregate_id,
//     idempotency_key, actor and request_id (the repository logs event_id and sequence per
//     committed event).
//
// # Example
//
//	repo, _ := order.NewRepository(order.RepositoryConfig{Table: ordersTable, Client: ddb, Writer: w})
//	h, _ := api.New(api.Config{Orders: repo})
//	lambda.Start(api.LambdaHandler(h)) // or http.ListenAndServe(addr, h)
package api
