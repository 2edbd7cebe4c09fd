package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "API listen address (beyond loopback: a warning, the API authenticates nothing)")
	allowHosts := fs.String("allow-host", "", "comma-separated extra names the API and the AWS endpoint accept in the Host header (always: localhost, loopback addresses, the listen host); any other Host gets 403 (DNS rebinding protection)")
	endpoint := endpointFlag(fs)
	every := fs.Duration("reconcile-every", devstack.DevReconcileEvery, "reconciler schedule (AWS: the stack's schedule, default 1 min)")
	after := fs.Duration("reconcile-after", devstack.DevReconcileAfter, "age after which the reconciler re-sends a pending record: a replayed or redriven record is re-published by the first run after it is this old (AWS: RECONCILE_AFTER_SECONDS, at least "+config.MinReconcileAfter.String()+")")
	consoleAddr := fs.String("console", "127.0.0.1:8090", "listen address of the local console (orders, each event's path, the consumers' effects, the outbox, the DLQs, operator actions); empty: none")
	deadLetter := fs.String("dead-letter", "", "comma-separated CONSUMER:DETAIL_TYPE pairs the consumer refuses for good, so those messages land on its DLQ with reason "+devstack.ReasonLocalFault+" (e.g. ledger:OrderShipped): try outboxctl consumer-dlq/consumer-redrive or the console")
	refuseDelivery := fs.String("refuse-delivery", "", "comma-separated consumers whose queue refuses the bus's deliveries (as a queue whose policy no longer admits its rule), so their events land on their rule's DLQ (<prefix>-<rule>-rule-dlq) at once (e.g. ledger): try outboxctl rule-dlq-redrive or the console")
	prefix := fs.String("prefix", "dev", "table name prefix")
	data := fs.String("data", "", "keep Dynoxide's data in this file across restarts (default: in memory, lost at exit); not with -endpoint, whose server keeps the data")
	verbose := fs.Bool("v", false, "show every component's logs and the relay's and reconciler's metric lines (default: one line per hop of each event)")
	stateFile := fs.String("state-file", "", "keep the local runtime's state (SQS queues with messages in flight, the bus's undelivered events, the fulfilment provider) in this journal across restarts (default: FILE.state with -data FILE, .outboxdev/<prefix>.state with -endpoint; in memory otherwise)")
	checkpoint := fs.String("checkpoint-file", "", "keep the stream event source mapping's checkpoints here (default: .outboxdev/<prefix>.checkpoints.json when -data or -endpoint is set)")
	awsAddr := fs.String("aws-addr", "127.0.0.1:4580", "listen address of the local AWS endpoint (SQS queues, EventBridge PutEvents, archive and replays, DynamoDB proxied) for outboxctl; empty: none")
	rejectTypes := fs.String("reject-type", "", "comma-separated detail types the local bus refuses permanently, so their outbox records are parked (e.g. OrderShipped): try outboxctl parked/redrive")
	rejectCode := fs.String("reject-code", devstack.DefaultRejectCode, "the PutEvents entry error code of -reject-type: MalformedDetail or InvalidArgument")
	tracing := fs.Bool("trace", false, "trace every request and event with OpenTelemetry and open them in Jaeger: starts bin/jaeger (make bin/jaeger) with its UI on "+jaegerUI)
	traceEndpoint := fs.String("trace-endpoint", "", "with -trace: export OTLP/HTTP to this HOST:PORT or URL instead of starting bin/jaeger")
	jaegerBin := fs.String("jaeger", filepath.Join("bin", "jaeger"), "with -trace: the Jaeger binary to start")
	traceViewAddr := fs.String("trace-view", "127.0.0.1:16687", "with -trace: listen address of the trace waterfall page over Jaeger's query API")
	_ = fs.Parse(args)
	if *data != "" && *endpoint != "" {
		src := "-endpoint"
		if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") == *endpoint {
			src = "-endpoint (here from AWS_ENDPOINT_URL_DYNAMODB)"
		}
		return fmt.Errorf("-data %s keeps the data of the Dynoxide outboxdev starts, but with %s %s the server there keeps the data and no Dynoxide starts: drop -data (the server's own storage decides what is kept), or drop -endpoint (unset AWS_ENDPOINT_URL_DYNAMODB) to keep Dynoxide's data in %s", *data, src, *endpoint, *data)
	}
	traceUI := ""
	if *tracing {
		ui, stop, err := startTracing(ctx, *jaegerBin, *traceEndpoint)
		if err != nil {
			return err
		}
		defer stop()
		traceUI = ui
	}
	traceView := ""
	if traceUI != "" {
		v, closeView, err := serveTraceView(*traceViewAddr, traceUI)
		if err != nil {
			return err
		}
		defer closeView()
		traceView = v
	}
	var allowed []string
	for _, h := range strings.Split(*allowHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			allowed = append(allowed, h)
		}
	}
	var reject []string
	for _, t := range strings.Split(*rejectTypes, ",") {
		if t = strings.TrimSpace(t); t != "" {
			reject = append(reject, t)
		}
	}
	deadLetters, err := parseDeadLetter(*deadLetter)
	if err != nil {
		return err
	}
	var refuse []string
	for _, c := range strings.Split(*refuseDelivery, ",") {
		if c = strings.TrimSpace(c); c != "" {
			refuse = append(refuse, c)
		}
	}
	if *checkpoint == "" && (*data != "" || *endpoint != "") {
		*checkpoint = filepath.Join(".outboxdev", *prefix+".checkpoints.json")
	}
	switch {
	case *stateFile != "":
	case *data != "":
		*stateFile = *data + ".state"
	case *endpoint != "":
		*stateFile = filepath.Join(".outboxdev", *prefix+".state")
	}

	var handler slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	metrics := io.Discard // an idle stack stays quiet
	if *verbose {
		metrics = os.Stderr
	} else {
		handler = walkthroughHandler{handler}
	}
	s, err := devstack.Start(ctx, devstack.Options{
		Endpoint: *endpoint, APIAddr: *addr, Prefix: *prefix,
		ReconcileEvery: *every, ReconcileAfter: *after, Metrics: metrics,
		DataFile: *data, RuntimeStateFile: *stateFile, CheckpointFile: *checkpoint, HopLog: true, Logger: slog.New(handler),
		AWSAddr: *awsAddr, RejectDetailTypes: reject, RejectCode: *rejectCode, Tracing: *tracing, AllowedHosts: allowed,
		ConsoleAddr: *consoleAddr, DeadLetterTypes: deadLetters, RefuseDeliveries: refuse,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := devstack.WriteState(devstack.StateFile, s, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "outboxdev: could not record the stack for `make demo ARGS=-attach`:", err)
	}
	defer os.Remove(devstack.StateFile)
	storage := "in memory: the data is lost when the stack stops (-data FILE keeps it)"
	switch {
	case *endpoint != "":
		storage = "the server at -endpoint keeps what it keeps; queues, undelivered events and the provider in " + *stateFile + "; stream checkpoints in " + *checkpoint
	case *data != "":
		storage = "kept in " + *data + "; queues, undelivered events and the provider in " + *stateFile + "; stream checkpoints in " + *checkpoint
	}
	fmt.Printf(`
ddb-outbox local stack is up.
  API        %s
  DynamoDB   %s   (tables %s-*; %s)
%s
Try:
  curl -s -X POST %s/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: first-order' \
       -d '{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}'

Drive it from another terminal: make demo ARGS=-attach
`, s.URL, s.Endpoint, *prefix, storage, consoleLine(s), s.URL)
	printOperatorHelp(s, *prefix, reject, *every)
	if len(refuse) > 0 {
		fmt.Printf("\nThe queues of %s refuse the bus's deliveries (-refuse-delivery): their events land on their rule's DLQ.\nPress \"Accept deliveries\" in the console, then redrive the rule DLQ there or with rule-dlq-redrive (above).\n", strings.Join(refuse, ", "))
	}
	if len(deadLetters) > 0 {
		var pairs []string
		for c, types := range deadLetters {
			for _, t := range types {
				pairs = append(pairs, c+":"+t)
			}
		}
		sort.Strings(pairs)
		fmt.Printf("\nConsumers refuse these events for good (-dead-letter %s): they land on the consumer's DLQ with reason %s.\nSee them with consumer-dlq (above) or in the console; restart without -dead-letter (keeping the data with -data FILE) before consumer-redrive.\n",
			strings.Join(pairs, ","), devstack.ReasonLocalFault)
	}
	switch {
	case traceUI != "":
		fmt.Printf("\nTraces (Jaeger, in memory): %s\n  one order's traces:  %s/?order=ORDER_ID\n  Jaeger search (JSON under /api/traces): %s\n",
			traceUI, traceView, traceSearchURL(traceUI, "ORDER_ID"))
	case *tracing:
		fmt.Printf("\nTraces: exported over OTLP/HTTP to %s (service %s)\n", *traceEndpoint, traceServiceName)
	}
	fmt.Print("\nCtrl-C to stop.\n")
	<-ctx.Done()
	fmt.Println("stopping")
	return nil
}

// printOperatorHelp prints the AWS endpoint, the queue URLs and the
// outboxctl commands that run against this stack (nothing without -aws-addr).
func printOperatorHelp(s *devstack.Stack, prefix string, reject []string, every time.Duration) {
	if s.AWSURL == "" {
		return
	}
	fmt.Printf(`
  AWS        %s   (SQS queues, EventBridge PutEvents, DynamoDB proxied; any credentials)
  bus        %s
`, s.AWSURL, s.Settings.EventBus)
	for _, n := range s.QueueNames() {
		fmt.Printf("  queue      %s\n", s.Queues()[n].URL())
	}
	ctl := "go run ./cmd/outboxctl -endpoint " + s.AWSURL
	fmt.Printf(`
Operate it (or set AWS_ENDPOINT_URL=%s for an AWS SDK speaking the JSON protocols):
  %s status  -table %s -queue-prefix %s-
  %s show    -table %s -aggregate ORDER_ID -consumer-tables ledger=%s,notifier=%s -idempotency-table %s
  %s replay  -table %s -aggregate ORDER_ID -from-seq 2     (or -direct -bus %s: PutEvents now)
  %s parked  -table %s
  %s redrive -table %s -all
  %s consumer-dlq      -dlq %s-ledger-dlq
  %s consumer-redrive  -dlq %s-ledger-dlq -queue %s-ledger -sender %s
  %s consumer-buffered -consumer ledger -consumer-table %s
  %s rule-dlq-redrive  -dlq %s -queue %s-ledger -rule ledger-order-payments -bus %s -dry-run
`, s.AWSURL, ctl, s.Settings.OutboxTable, prefix, ctl, s.Settings.OutboxTable, s.Settings.LedgerTable, s.Settings.NotificationsTable, s.Settings.IdempotencyTable,
		ctl, s.Settings.OutboxTable, s.Settings.EventBus, ctl, s.Settings.OutboxTable, ctl, s.Settings.OutboxTable,
		ctl, prefix, ctl, prefix, prefix, localrt.FunctionRoleID("ledger"), ctl, s.Settings.LedgerTable,
		ctl, operator.RuleDLQName(prefix, "ledger-order-payments"), prefix, s.Settings.EventBus)
	fmt.Printf(`
Event history (archive %s of every published event; docs/ARCHIVE.md):
  %s history  -table %s ORDER_ID
  %s backfill -archive %s -rule ledger-order-payments -bus %s -orders-table %s -settle 30s
      (-rule: the consumer's rule; a name the bus does not have is answered with the list of its rules)
  %s replays
`, s.ArchiveName, ctl, s.Settings.OutboxTable, ctl, s.ArchiveName, s.Settings.EventBus, s.Settings.OrdersTable, ctl)
	if len(reject) > 0 {
		fmt.Printf(`
The bus rejects %s permanently: those events are parked. To fix the cause, press
"Stop rejecting" in the console (or stop and restart without -reject-type, keeping the data
with -data FILE), then redrive; the reconciler publishes redriven records once older than
-reconcile-after (%s, counted from the record's creation), within -reconcile-every (%s);
"Reconcile now" runs the reconciler at once, for records already that old.
`, strings.Join(reject, ", "), s.Settings.ReconcileAfter, every)
	}
}

// consoleLine is the banner's console line ("" without a console).
func consoleLine(s *devstack.Stack) string {
	if s.ConsoleURL() == "" {
		return ""
	}
	return fmt.Sprintf("  Console    %s   (each event's path, the consumers' effects, the DLQs; redrive, replay, reconcile now)\n", s.ConsoleURL())
}

// parseDeadLetter reads -dead-letter: CONSUMER:DETAIL_TYPE pairs.
func parseDeadLetter(v string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		cons, typ, ok := strings.Cut(p, ":")
		cons, typ = strings.TrimSpace(cons), strings.TrimSpace(typ)
		if !ok || cons == "" || typ == "" {
			return nil, fmt.Errorf("-dead-letter %q: want CONSUMER:DETAIL_TYPE pairs, comma-separated (e.g. ledger:OrderShipped)", v)
		}
		if !slices.Contains(routing.Consumers(), cons) {
			return nil, fmt.Errorf("-dead-letter %q: no consumer %q (the consumers: %s)", v, cons, strings.Join(routing.Consumers(), ", "))
		}
		if !slices.Contains(order.EventTypes, typ) {
			return nil, fmt.Errorf("-dead-letter %q: no event type %q (the event types: %s)", v, typ, strings.Join(order.EventTypes, ", "))
		}
		out[cons] = append(out[cons], typ)
	}
	return out, nil
}
