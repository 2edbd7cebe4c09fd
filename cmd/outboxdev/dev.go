package main

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	_ = fs.Parse(args)

	s, err := devstack.Start(ctx, devstack.Options{
		Endpoint: *endpoint, APIAddr: *addr, Prefix: *prefix,
		ReconcileEvery: *every, ReconcileAfter: *after, Metrics: os.Stderr,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf(`
ddb-outbox local stack is up.
  API        %s
  DynamoDB   %s   (tables %s-*)

Try:
  curl -s -X POST %s/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: first-order' \
       -d '{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}'

Ctrl-C to stop.
`, s.URL, s.Endpoint, *prefix, s.URL)
	<-ctx.Done()
	fmt.Println("stopping")
	return nil
}
