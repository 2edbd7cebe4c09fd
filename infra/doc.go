// Command infra is the ddb-outbox AWS CDK app (Go). `npx cdk synth` and
// `npx cdk deploy` run it from the repository root through cdk.json
// ("app": "go -C infra build -o ../bin/ddb-outbox-cdk . && bin/ddb-outbox-cdk",
// so that cdk.out and dist/ resolve at the repository root). It synthesizes
// one environment-agnostic stack (package stack) built around the reusable
// Outbox construct (package outboxcdk), and applies the cdk-nag AwsSolutions
// checks.
//
// # Why infra/ is its own Go module
//
// The CDK for Go is large (~450 MB of modules, minutes to compile cold) and
// starts a Node.js jsii kernel at run time. Keeping it in the separate module
// github.com/ddb-outbox/ddb-outbox/infra (its go.mod requires the library's
// release; inside the repository the root go.work builds it against the
// working tree) means the root `go test ./...`,
// `go vet ./...` and the Lambda builds never compile or download the CDK,
// and nothing in pkg/ or functions/ can import it by accident. The
// dependency points one way: infra imports pkg/config, pkg/outbox and
// internal/orders/routing so that table shapes, env var names, metric names, the stream
// filter and the routing rules are declared once. `cd infra && go test
// ./...` (make test-infra) runs the synth assertions.
//
// # Context
//
// Set in cdk.json or with `-c key=value`:
//
//	ddb-outbox:stackName       CloudFormation stack name (default DdbOutbox)
//	ddb-outbox:assetRoot       directory of <function>/bootstrap (default <repo>/dist)
//	ddb-outbox:authMode        IAM (default) or NONE (open API, demos only)
//	ddb-outbox:eventSource     EventBridge Source (default com.ddb-outbox.orders)
//	ddb-outbox:destroy         true: cdk destroy deletes tables, queues, logs
//	ddb-outbox:nag             false: skip the cdk-nag AwsSolutions checks
//	ddb-outbox:batchSize       stream batch size, 1..10000 (default 100)
//	ddb-outbox:batchingWindow  stream batching window, seconds, 0..300 (default 0)
//	ddb-outbox:pendingShards   pending index shards, 1..256 (default 16)
//	ddb-outbox:reconcileRate   reconciler schedule, minutes (default 5)
package main
