package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// dedupFlags registers -consumer and -consumer-table: the table holding
// the consumer's dedup state (its own table, beside its effects: the
// ledger's LEDGER_TABLE_NAME, the notifier's NOTIFICATIONS_TABLE_NAME;
// default: that variable for those two).
func dedupFlags(fs *flag.FlagSet) (table, consumer *string) {
	table = fs.String("consumer-table", "", "the consumer's own table, holding its dedup markers, ordering gates and buffer (default for ledger $"+
		appenv.EnvLedgerTable+", for notifier $"+appenv.EnvNotificationsTable+")")
	consumer = fs.String("consumer", "", "the ordered consumer (e.g. ledger, notifier)")
	return table, consumer
}

// needDedup checks -consumer and -consumer-table (defaulted from the
// environment for the example's consumers) and returns the table.
func needDedup(name, table, consumer string) (string, error) {
	if consumer == "" {
		return "", usageErr("%s: -consumer is required", name)
	}
	if table == "" {
		table = os.Getenv(consumerTableEnv[consumer])
	}
	if table == "" {
		return "", usageErr("%s: -consumer-table is required: the consumer's own table, where its dedup state lives", name)
	}
	return table, nil
}

// consumerTableEnv names the variable holding each example consumer's
// table.
var consumerTableEnv = map[string]string{routing.ConsumerLedger: appenv.EnvLedgerTable, routing.ConsumerNotifier: appenv.EnvNotificationsTable}

// runConsumerBuffered lists what waits in an ordered consumer's resequencer
// buffer, with the range each aggregate waits for.
func runConsumerBuffered(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("consumer-buffered")
	table, consumer := dedupFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := needDedup("consumer-buffered", *table, *consumer)
	if err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	return consumerBuffered(ctx, e.out, c.ddb, t, *consumer, time.Now())
}

// consumerBuffered prints one line per buffered event — aggregate,
// sequence, the missing range (from the consumer's ordering item), event
// id and type, buffered at, age, and the failure reason of one that could
// not be applied — oldest first, then a count.
func consumerBuffered(ctx context.Context, w io.Writer, client *dynamodb.Client, table, consumer string, now time.Time) error {
	all, err := dedup.ListBuffered(ctx, client, table, consumer)
	if err != nil {
		return err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].BufferedAt.Before(all[j].BufferedAt) })
	a, err := dedup.NewApplier(client, dedup.Config{Table: table, Consumer: consumer, Ordered: true})
	if err != nil {
		return err
	}
	aggs := map[string]bool{}
	for _, b := range all {
		st, err := a.ReadGate(ctx, b.AggregateType, b.AggregateID)
		if err != nil {
			return err
		}
		waits := "next (applied by the next sweep)"
		if b.Sequence > st.Last+1 {
			waits = fmt.Sprintf("waits for %d..%d", st.Last+1, b.Sequence-1)
		}
		line := fmt.Sprintf("%s %s\tsequence %d\t%s\t%s\t%s\tbuffered %s\tage %s", b.AggregateType, b.AggregateID, b.Sequence, waits,
			b.EventID, b.EventType, b.BufferedAt.Format(time.RFC3339), now.Sub(b.BufferedAt).Round(time.Second))
		if b.FailedReason != "" {
			line += "\tfailed: " + b.FailedReason
		}
		fmt.Fprintln(w, line)
		aggs[b.AggregateType+"#"+b.AggregateID] = true
	}
	fmt.Fprintf(w, "%d buffered event(s) of %d aggregate(s) for consumer %s\n", len(all), len(aggs), consumer)
	return nil
}

// runConsumerStateCopy copies a consumer's dedup state from the shared
// dedup table of earlier versions into its own table
// (operator.CopyConsumerState).
func runConsumerStateCopy(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("consumer-state-copy")
	table, consumer := dedupFlags(fs)
	from := fs.String("from-table", os.Getenv(config.EnvDedupTable), "the table that held the consumer's state: the shared dedup table of earlier versions (default $"+config.EnvDedupTable+")")
	dryRun := fs.Bool("dry-run", false, "count what would be copied, write nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := needDedup("consumer-state-copy", *table, *consumer)
	if err != nil {
		return err
	}
	if *from == "" {
		return usageErr("consumer-state-copy: -from-table is required (or $%s)", config.EnvDedupTable)
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	n, err := operator.CopyConsumerState(ctx, c.ddb, *from, t, *consumer, time.Now(), *dryRun)
	verb := "copied"
	if *dryRun {
		verb = "would copy"
	}
	fmt.Fprintf(e.out, "%s %s's state from %s to %s: %s\n", verb, *consumer, *from, t, n)
	return err
}

// runConsumerBaseline declares an ordered consumer's starting point per
// aggregate (dedup.SetBaseline): one aggregate, or every order of the
// orders table at its current version.
func runConsumerBaseline(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("consumer-baseline")
	table, consumer := dedupFlags(fs)
	aggType := fs.String("aggregate-type", order.AggregateType, "the aggregate type")
	aggID := fs.String("aggregate", "", "one aggregate id (with -last)")
	last := fs.Int64("last", -1, "with -aggregate: the last sequence the consumer treats as applied before it (0: it applies from sequence 1)")
	orders := fs.String("from-orders-table", "", "every order of this orders table, at its current version")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := needDedup("consumer-baseline", *table, *consumer)
	if err != nil {
		return err
	}
	*table = t
	if (*aggID == "") == (*orders == "") {
		return usageErr("consumer-baseline: give -aggregate ID -last N, or -from-orders-table T")
	}
	if *aggID != "" && *last < 0 {
		return usageErr("consumer-baseline: -aggregate needs -last N (N >= 0)")
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	set, kept, lowered := 0, 0, 0
	mark := func(id string, seq int64) error {
		b, err := dedup.SetBaseline(ctx, c.ddb, *table, *consumer, *aggType, id, seq, time.Now())
		if err != nil {
			return err
		}
		state := "set"
		switch {
		case !b.Set:
			kept++
			state = fmt.Sprintf("kept (the consumer has a starting point: after sequence %d)", b.Last)
		case b.Lowered:
			set++
			lowered++
			state = fmt.Sprintf("set after sequence %d instead: the consumer already holds sequence %d, which it applies", b.Last, b.Last+1)
		default:
			set++
		}
		fmt.Fprintf(e.out, "%s %s\tafter sequence %d\t%s\n", *aggType, id, seq, state)
		return nil
	}
	if *aggID != "" {
		err = mark(*aggID, *last)
	} else {
		err = scanOrderVersions(ctx, c.ddb, *orders, mark)
	}
	fmt.Fprintf(e.out, "%d starting point(s) set (%d below the requested one, to cover no event the consumer holds), %d kept for consumer %s; the consumer's next sweep applies what waits after them\n", set, lowered, kept, *consumer)
	return err
}

// scanOrderVersions calls f with the id and version of every order in the
// orders table (a paginated Scan of its order items).
func scanOrderVersions(ctx context.Context, client *dynamodb.Client, table string, f func(id string, version int64) error) error {
	x, err := expression.NewBuilder().
		WithFilter(expression.Name(order.AttrKind).Equal(expression.Value(order.KindOrder))).
		WithProjection(expression.NamesList(expression.Name(order.AttrID), expression.Name(order.AttrVersion))).Build()
	if err != nil {
		return err
	}
	in := &dynamodb.ScanInput{TableName: aws.String(table), FilterExpression: x.Filter(), ProjectionExpression: x.Projection(),
		ExpressionAttributeNames: x.Names(), ExpressionAttributeValues: x.Values(), ConsistentRead: aws.Bool(true)}
	p := dynamodb.NewScanPaginator(client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("scan %s: %w", table, err)
		}
		for _, it := range page.Items {
			id, _ := it[order.AttrID].(*types.AttributeValueMemberS)
			v, _ := it[order.AttrVersion].(*types.AttributeValueMemberN)
			if id == nil || v == nil {
				continue
			}
			n, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil {
				return fmt.Errorf("order %s: version %q: %w", id.Value, v.Value, err)
			}
			if err := f(id.Value, n); err != nil {
				return err
			}
		}
	}
	return nil
}
