// Command outboxctl is the operator CLI of the outbox: list parked records
// and redrive them once their cause is fixed.
//
//	outboxctl parked  -table OUTBOX_TABLE [-limit 100]
//	outboxctl redrive -table OUTBOX_TABLE [-shards 16] (-pk PK -sk SK | -all)
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

	"github.com/ddb-outbox/ddb-outbox/pkg/awsclient"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
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
	_ = fs.Parse(args[1:])
	if *table == "" {
		return errors.New("-table is required")
	}
	cfg, err := awsclient.Load(ctx)
	if err != nil {
		return err
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
