// Command outboxctl is the operator CLI of the outbox: list parked records
// and redrive them once their cause is fixed; list a consumer's dead-letter
// queue and redrive it to the consumer's queue.
//
//	outboxctl parked  -table OUTBOX_TABLE [-limit 100]
//	outboxctl redrive -table OUTBOX_TABLE [-shards 16] (-pk PK -sk SK | -all)
//	outboxctl consumer-dlq      -dlq DLQ_URL [-limit 100]
//	outboxctl consumer-redrive  -dlq DLQ_URL -queue QUEUE_URL [-max 0]
//
// A consumer DLQ holds the original EventBridge event of every event the
// consumer could not apply: moved by its queue's redrive policy after
// maxReceiveCount receives (reason max_receive_count), or dead-lettered at
// once with a reason (malformed or forged events). consumer-redrive sends
// each back to the consumer's queue (the stack outputs both URLs); the
// consumer deduplicates, so redriving twice is harmless.
//
// It uses the default AWS SDK configuration (profile, region, credentials);
// AWS_ENDPOINT_URL_DYNAMODB points it at a local server. A redriven record
// becomes PENDING again and the reconciler publishes it on its next run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/awsclient"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "outboxctl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: outboxctl parked|redrive -table OUTBOX_TABLE [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ExitOnError)
	table := fs.String("table", os.Getenv(config.EnvOutboxTable), "outbox table name (default $"+config.EnvOutboxTable+")")
	limit := fs.Int("limit", 100, "parked: list at most this many records (0: all)")
	defShards, err := config.Int(config.EnvPendingShards, config.DefaultPendingShards)
	if err != nil {
		return err
	}
	shards := fs.Int("shards", defShards, "redrive: pending index shards; must equal the writers' "+config.EnvPendingShards+" (default $"+config.EnvPendingShards+" or 16)")
	pk := fs.String("pk", "", "redrive: the record's pk")
	sk := fs.String("sk", "", "redrive: the record's sk")
	all := fs.Bool("all", false, "redrive: every parked record")
	dlqURL := fs.String("dlq", "", "consumer-dlq, consumer-redrive: the consumer DLQ URL")
	queueURL := fs.String("queue", "", "consumer-redrive: the consumer queue URL to send messages back to")
	maxMsgs := fs.Int("max", 0, "consumer-redrive: move at most this many messages (0: all)")
	_ = fs.Parse(args[1:])
	cfg, err := awsclient.Load(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "consumer-dlq", "consumer-redrive":
		return consumerDLQ(ctx, args[0], sqs.NewFromConfig(cfg), *dlqURL, *queueURL, *limit, *maxMsgs)
	}
	if *table == "" {
		return errors.New("-table is required")
	}
	ddb := dynamodb.NewFromConfig(cfg)

	switch args[0] {
	case "parked":
		recs, err := relay.ListParked(ctx, ddb, *table, *limit)
		if err != nil {
			return err
		}
		for _, r := range recs {
			fmt.Printf("%s\t%s\t%s\t%s\t%s\t%s\n", r.Key.PK, r.Key.SK, r.EventID, r.EventType, r.ParkedAt, r.Reason)
		}
		fmt.Fprintf(os.Stderr, "%d parked record(s)\n", len(recs))
		return nil
	case "redrive":
		var keys []outbox.Key
		switch {
		case *all:
			recs, err := relay.ListParked(ctx, ddb, *table, 0)
			if err != nil {
				return err
			}
			for _, r := range recs {
				keys = append(keys, r.Key)
			}
		case *pk != "" && *sk != "":
			keys = []outbox.Key{{PK: *pk, SK: *sk}}
		default:
			return errors.New("redrive needs -pk and -sk, or -all")
		}
		var errs []error
		for _, k := range keys {
			if err := relay.Redrive(ctx, ddb, *table, *shards, k, time.Now()); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Printf("redriven %s %s\n", k.PK, k.SK)
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// consumerDLQ lists (consumer-dlq) or redrives (consumer-redrive) a
// consumer DLQ through sqsconsumer.Peek / sqsconsumer.Redrive, printing one
// line per message: message id, reason, error.
func consumerDLQ(ctx context.Context, cmd string, q sqsconsumer.QueueAPI, dlq, queue string, limit, maxMsgs int) error {
	if dlq == "" {
		return errors.New(cmd + ": -dlq is required")
	}
	line := func(verb string) func(sqsconsumer.DeadLetter) {
		return func(d sqsconsumer.DeadLetter) { fmt.Printf("%s\t%s\t%s\t%s\n", verb, d.MessageID, d.Reason, d.Error) }
	}
	if cmd == "consumer-dlq" {
		msgs, err := sqsconsumer.Peek(ctx, q, dlq, sqsconsumer.RedriveOptions{Max: limit, OnMessage: line("dead-lettered")})
		fmt.Fprintf(os.Stderr, "%d message(s) on %s\n", len(msgs), dlq)
		return err
	}
	if queue == "" {
		return errors.New(cmd + ": -queue is required")
	}
	n, err := sqsconsumer.Redrive(ctx, q, dlq, q, queue, sqsconsumer.RedriveOptions{Max: maxMsgs, OnMessage: line("redriven")})
	fmt.Fprintf(os.Stderr, "%d message(s) redriven from %s to %s\n", n, dlq, queue)
	return err
}
