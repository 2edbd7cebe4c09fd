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
//   - POST /orders with an Idempotency-Key is idempotent for 24 h: the same
//     key and body returns the first order with 200 (the first call got 201);
//     the same key with another body is 409 idempotency_key_reused.
//   - Commands accept If-Match with the order version; a mismatch is 409
//     version_conflict. Orders carry ETag: "<version>".
//   - Errors are {"code","message"}; see the Code* constants for the table.
//     500 responses never carry details; they are logged.
//   - Logs are slog records with the fixed keys aggregate_id and
//     idempotency_key (the repository logs event_id and sequence per
//     committed event).
//
// # Example
//
//	repo, _ := order.NewRepository(order.RepositoryConfig{Table: ordersTable, Client: ddb, Writer: w})
//	h, _ := api.New(api.Config{Orders: repo})
//	lambda.Start(api.LambdaHandler(h)) // or http.ListenAndServe(addr, h)
package api
