// Command outboxdev runs the order service locally against a
// DynamoDB-compatible server: `dev` keeps the stack up and serves the API,
// `demo` drives orders through it and audits every promise.
//
// Usage:
//
//	outboxdev dev  [-addr 127.0.0.1:8080] [-endpoint URL] [-reconcile-every 30s]
//	outboxdev demo [-orders 300] [-concurrency 8] [-seed 1] [-endpoint URL]
//	outboxdev chaos [-orders 10000] [-epoch-orders 500] [-seed 1] [-rate 0.05] [-epoch N]
//	outboxdev chaos-history [-orders 3200] [-epoch-orders 400] [-seed 1] [-rate 0.02] [-epoch N]
//	outboxdev chaos-regions [-events 3000] [-seed 1] [-tail-prob 0.02]
//	outboxdev bench [-loads 25,50,max] [-orders 1500] [-poll 50ms] [-out results]
//
// Without -endpoint (or AWS_ENDPOINT_URL_DYNAMODB) an in-memory Dynoxide is
// started from node_modules (run `npm ci` first; `make dev` does).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	dieWithParent()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "dev":
		err = runDev(ctx, args)
	case "demo":
		err = runDemo(ctx, args)
	case "chaos":
		err = runChaos(ctx, args)
	case "chaos-history":
		err = runChaosHistory(ctx, args)
	case "chaos-regions":
		err = runChaosRegions(ctx, args)
	case "bench":
		err = runBench(ctx, args)
	case "trace-screenshot":
		err = runTraceScreenshot(ctx, args)
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "outboxdev: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxdev:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: outboxdev <command> [flags]

commands:
  dev    run the whole stack locally and serve the API until interrupted
  demo   drive orders through the local stack, audit the tables, print a summary
  chaos  the same under seeded fault injection at every boundary, in epochs
  chaos-history  the history paths under faults: archive replays, a late consumer
         with starting points, a switch to ordered, a restore from a backup,
         failing drains, refused DLQ sends, adjacent sequences at once
  chaos-regions  a bank in two local Regions under replication faults (delays,
         coalescing, a pause), one Region lost, taken over and recovered,
         wrong-Region writes fenced; audited
  bench  measure throughput, latency, calls and cost per event, store saturation,
         write-path latency and Lambda init; report under results/
  trace-screenshot  one order traced into Jaeger (a reconciler re-send and the
         duplicates it causes forced), its trace page shot in headless Chromium

Run "outboxdev <command> -h" for the flags of a command.
`)
}

// endpointFlag registers -endpoint, defaulting to AWS_ENDPOINT_URL_DYNAMODB.
func endpointFlag(fs *flag.FlagSet) *string {
	return fs.String("endpoint", os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"),
		"DynamoDB-compatible endpoint with Streams (e.g. DynamoDB Local at http://localhost:8000); empty starts an in-memory Dynoxide")
}
