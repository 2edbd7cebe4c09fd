package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// The steps of a history epoch, each what an operator or a team does.

// replayLive starts an archive replay of the events whose time is in
// [from, to) (whole seconds) into the live consumers' rules — the stack's
// (ledger, notifier, fulfilment) and the funds consumer's — while orders
// keep coming: the bus shuffles each minute of events, and the consumers
// already applied most of them (duplicates, in any order). It returns
// without waiting for the replay (Stack.Drain waits for it).
func replayLive(ctx context.Context, s *devstack.Stack, name string, from, to time.Time) error {
	a, err := s.Bus.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{ArchiveName: aws.String(s.ArchiveName)})
	if err != nil {
		return fmt.Errorf("chaos: archive: %w", err)
	}
	rules := []string{s.Bus.RuleARN(fundsRule)}
	for _, r := range routing.Rules() {
		rules = append(rules, s.Bus.RuleARN(r.Name))
	}
	from, to = from.UTC().Truncate(time.Second), to.UTC().Truncate(time.Second).Add(time.Second)
	_, err = s.Bus.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: aws.String(name), EventSourceArn: a.ArchiveArn,
		EventStartTime: aws.Time(from), EventEndTime: aws.Time(to),
		Destination: &ebtypes.ReplayDestination{Arn: a.EventSourceArn, FilterArns: rules}})
	if err != nil {
		return fmt.Errorf("chaos: replay %s: %w", name, err)
	}
	return nil
}

// backfill replays the archive's events of [from, now) (from zero: all it
// holds) to one consumer's rule with outboxctl's operator.Backfill, and
// waits until the replay completed.
func backfill(ctx context.Context, s *devstack.Stack, consumer string, from time.Time) error {
	p, err := operator.Backfill(ctx, s.Bus, operator.BackfillOptions{Archive: s.ArchiveName, Rule: consumer + "-order-events", Bus: s.Settings.EventBus,
		From: from, Settle: time.Second, Poll: 100 * time.Millisecond}, nil)
	if err != nil {
		return fmt.Errorf("chaos: backfill %s: %w", consumer, err)
	}
	if p.State != string(ebtypes.ReplayStateCompleted) {
		return fmt.Errorf("chaos: backfill %s ended %s", consumer, p.State)
	}
	return nil
}

// backup copies the live ledger's table (entries, balances, and its dedup
// markers, gates and buffer beside them) into a new table, the local
// stand-in for a DynamoDB backup restored: the ledger's invocations pause
// during the copy, so it is the consistent image a backup is, while
// orders keep coming. It returns the new table and when the copy began.
func backup(ctx context.Context, s *devstack.Stack, admin *dynamodb.Client, p *pauser) (string, time.Time, error) {
	table := s.Settings.LedgerTable + "-backup"
	var at time.Time
	err := p.during(func() error {
		at = time.Now()
		_, err := devstack.SnapshotTable(ctx, admin, s.Settings.LedgerTable, ledger.CreateTableInput(table))
		return err
	})
	return table, at, err
}

// baselines declares the late consumer's starting point for every order of
// the orders table at its current version (dedup.SetBaseline), as
// outboxctl consumer-baseline -from-orders-table does, while events are
// in flight. It returns the starting point of each order: the one set
// (lowered below an event the consumer already holds), or 0 for an order
// the consumer had started applying on its own (its rule existed when the
// order's first event was published: it applies it whole); and when each
// order's SetBaseline call began.
func baselines(ctx context.Context, s *devstack.Stack, admin *dynamodb.Client, consumer string, rep *HistoryReport) (map[string]int64, map[string]time.Time, error) {
	x, err := expression.NewBuilder().
		WithFilter(expression.Name(order.AttrKind).Equal(expression.Value(order.KindOrder))).
		WithProjection(expression.NamesList(expression.Name(order.AttrID), expression.Name(order.AttrVersion))).Build()
	if err != nil {
		return nil, nil, err
	}
	start, at := map[string]int64{}, map[string]time.Time{}
	p := dynamodb.NewScanPaginator(admin, &dynamodb.ScanInput{TableName: aws.String(s.Settings.OrdersTable), FilterExpression: x.Filter(),
		ProjectionExpression: x.Projection(), ExpressionAttributeNames: x.Names(), ExpressionAttributeValues: x.Values(), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("chaos: scan orders: %w", err)
		}
		for _, it := range page.Items {
			id, v := strAttr(it[order.AttrID]), numAttr(it[order.AttrVersion])
			at[id] = time.Now()
			b, err := dedup.SetBaseline(ctx, admin, s.StateTables[consumer], s.StateConsumer(consumer), order.AggregateType, id, v, at[id])
			if err != nil {
				return nil, nil, err
			}
			switch {
			case !b.Set:
				rep.BaselinesKept++
			case b.Lowered:
				rep.BaselinesLowered++
				fallthrough
			default:
				rep.LateBaselines++
				start[id] = b.Last
			}
		}
	}
	return start, at, nil
}

// backfillFrom is where the restored ledger's backfill starts: shortly
// (a minute) before the backup, or before the oldest event the backup
// does not hold although it was committed before it (an event the ledger
// had not applied yet: on its way, waiting in its queue, or on its DLQ),
// whichever is earlier. That is the operator's rule for a restore: the
// backup holds what the consumer had applied, the archive the rest.
func backfillFrom(ctx context.Context, admin *dynamodb.Client, events []outboxEvent, backupTable string, at time.Time) (time.Time, error) {
	held := map[string]bool{}
	err := scanTable(ctx, admin, backupTable, func(it map[string]types.AttributeValue) {
		if pk := strAttr(it[dedup.AttrPK]); strings.HasPrefix(pk, routing.ConsumerLedger+"#") {
			held[strings.TrimPrefix(pk, routing.ConsumerLedger+"#")] = true
		}
	})
	if err != nil {
		return time.Time{}, err
	}
	from := at
	for _, e := range events {
		created := time.UnixMilli(e.createdMs)
		if created.Before(at) && created.Before(from) && !held[e.id] {
			from = created
		}
	}
	return from.Add(-time.Minute), nil
}

// waitAccepted waits until the bus has accepted n events, or done closes.
func waitAccepted(ctx context.Context, s *devstack.Stack, n int64, done <-chan struct{}) {
	for s.Bus.Stats().Accepted < n {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replayName names an epoch's replay.
func replayName(epoch int, what string) string { return "hist-" + strconv.Itoa(epoch) + "-" + what }
