package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/devstack"
)

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "API listen address")
	endpoint := endpointFlag(fs)
	every := fs.Duration("reconcile-every", 30*time.Second, "reconciler schedule")
	after := fs.Duration("reconcile-after", 5*time.Minute, "age after which the reconciler re-sends a pending record")
	prefix := fs.String("prefix", "dev", "table name prefix")
	data := fs.String("data", "", "keep Dynoxide's data in this file across restarts (default: in memory, lost at exit)")
	verbose := fs.Bool("v", false, "show every component's logs and the relay's and reconciler's metric lines (default: one line per hop of each event)")
	checkpoint := fs.String("checkpoint-file", "", "keep the stream event source mapping's checkpoints here (default: .outboxdev/<prefix>.checkpoints.json when -data or -endpoint is set)")
	_ = fs.Parse(args)
	if *checkpoint == "" && (*data != "" || *endpoint != "") {
		*checkpoint = filepath.Join(".outboxdev", *prefix+".checkpoints.json")
	}

	var handler slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	var metrics io.Writer = io.Discard // an idle stack stays quiet
	if *verbose {
		metrics = os.Stderr
	} else {
		handler = walkthroughHandler{handler}
	}
	s, err := devstack.Start(ctx, devstack.Options{
		Endpoint: *endpoint, APIAddr: *addr, Prefix: *prefix,
		ReconcileEvery: *every, ReconcileAfter: *after, Metrics: metrics,
		DataFile: *data, CheckpointFile: *checkpoint, HopLog: true, Logger: slog.New(handler),
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
		storage = "the server at -endpoint keeps what it keeps; stream checkpoints in " + *checkpoint
	case *data != "":
		storage = "kept in " + *data + "; stream checkpoints in " + *checkpoint
	}
	fmt.Printf(`
ddb-outbox local stack is up.
  API        %s
  DynamoDB   %s   (tables %s-*; %s)

Try:
  curl -s -X POST %s/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: first-order' \
       -d '{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}'

Drive it from another terminal: make demo ARGS=-attach
Ctrl-C to stop.
`, s.URL, s.Endpoint, *prefix, storage, s.URL)
	<-ctx.Done()
	fmt.Println("stopping")
	return nil
}
