package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// The funds consumer: an ordered consumer, built from pkg/dedup alone as a
// team would build its own, whose effect depends on its predecessor's
// effect (issue #31, class 1). Per order it keeps one item,
// "ORDER#<order_id>", with the amount paid (paid_minor) and refunded
// (refunded_minor), and one entry per booking, "ENTRY#<event_id>" (the
// ledger's entry shape, ledger.Entry). An OrderPaid adds to paid_minor; an
// OrderCancelled that refunds is booked only if the order's payment is
// booked: its update is conditioned on paid_minor >= refund_minor. When
// that condition fails while the ordering gate held, the refund is refused
// for good as insufficient funds (reasonInsufficientFunds), as a real
// consumer would refuse it. Since the consumer is ordered, that answer can
// only be a library bug (the gate let the refund through before its
// payment, or reported the effect's failure when the gate had failed with
// it): the history audit counts every such refusal (insufficient_funds)
// and never absorbs it.

// Names of the funds consumer.
const (
	fundsConsumer  = "funds"
	fundsRule      = "funds-order-events"
	fundsOrderKey  = "ORDER#"
	attrPaidMinor  = "paid_minor"     // N: the order's payments booked, minor units
	attrRefunded   = "refunded_minor" // N: the order's refunds booked, minor units
	attrCurrencyFn = "currency"       // S: the order's currency
	// reasonInsufficientFunds: a refund whose payment is not booked while
	// the gate held. A bug in an ordered consumer, never a fault.
	reasonInsufficientFunds = "insufficient_funds"
)

// fundsMaxAttempts bounds the funds consumer's transaction attempts (its
// order items are as hot as the ledger's balance shards).
const fundsMaxAttempts = ledger.DefaultMaxAttempts

// funds is the consumer; safe for concurrent use.
type funds struct {
	table   string
	cfg     dedup.ConsumerConfig
	applier *dedup.Applier
	reseq   *dedup.Resequencer
	log     *slog.Logger
}

// addFunds creates the funds consumer's table (its effects and its dedup
// state, one table) and adds it to the stack behind a rule with the
// ledger's pattern (every order event: an ordered consumer needs each
// sequence). wrap wraps its own handler as the resequencer runs it (the
// drain's fault injection); the resequencer drains and sweeps like the
// ledger's, with sweepMinAge.
func addFunds(ctx context.Context, s *devstack.Stack, admin *dynamodb.Client, wrap func(sqsconsumer.EventHandler) sqsconsumer.EventHandler, sweepMinAge time.Duration, log *slog.Logger) (*funds, error) {
	table := s.Settings.LedgerTable + "-" + fundsConsumer
	if _, err := admin.CreateTable(ctx, dedup.CreateTableInput(table)); err != nil {
		return nil, fmt.Errorf("chaos: create %s: %w", table, err)
	}
	if err := dynamodb.NewTableExistsWaiter(admin).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
		return nil, fmt.Errorf("chaos: wait for %s: %w", table, err)
	}
	st := s.Settings
	c, err := dedup.NewConsumer(fundsConsumer, s.DDB, dedup.ConsumerConfig{
		Table: table, Dedup: dedup.Config{Retention: st.DedupRetention},
		ExpectedSource: st.Source, ExpectedAccount: st.ExpectedAccount, GapMaxReceives: st.ConsumerGapMaxReceives,
		Resequencer: dedup.ResequencerConfig{Metrics: st.Metrics, SweepMinAge: sweepMinAge},
		Logger:      log.With("fn", fundsConsumer),
	}, fundsMaxAttempts, dedup.Ordered)
	if err != nil {
		return nil, err
	}
	f := &funds{table: table, cfg: c.Config, applier: c.Applier, log: c.Config.Logger}
	if f.reseq, err = c.Resequence(wrap(f.handle)); err != nil {
		return nil, err
	}
	var pattern map[string]any
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerLedger {
			pattern = r.Pattern(st.Source)
		}
	}
	if _, err := s.AddConsumer(devstack.ConsumerSpec{Name: fundsConsumer, Rule: fundsRule, Pattern: pattern, Handler: f.reseq.Handle,
		Ordered: true, StateTable: table}); err != nil {
		return nil, err
	}
	return f, nil
}

// handle applies one order event: its effects (fundsEffects), its dedup
// marker and its ordering gate in one transaction (dedup.ApplyEvent).
func (f *funds) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, log, err := f.cfg.Accept(ctx, f.log, ev)
	if err != nil {
		return err
	}
	effects, refund, err := fundsEffects(f.table, env, time.Now().UTC())
	if err != nil {
		return dedup.Refuse(ctx, log, fundsConsumer, "invalid_event", err)
	}
	_, err = f.applier.ApplyEvent(ctx, env, effects)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dedup.ErrSequenceGap):
		return f.cfg.Hold(ctx, log, err)
	case len(effects) > 0 && dedup.EffectConditionFailed(err, 0):
		// The entry exists without the marker (an expired marker): the
		// money moved the first time; record the event as seen.
		if _, err := f.applier.ApplyEvent(ctx, env, nil); errors.Is(err, dedup.ErrSequenceGap) {
			return f.cfg.Hold(ctx, log, err)
		} else if err != nil {
			return fmt.Errorf("funds: record booked %s as seen: %w", env.EventID, err)
		}
		return nil
	case refund && dedup.EffectConditionFailed(err, 1):
		return dedup.Refuse(ctx, log, fundsConsumer, reasonInsufficientFunds,
			fmt.Errorf("funds: refund %s of order %s: the order's payment is not booked: %w", env.EventID, env.AggregateID, err))
	}
	if reason, ok := dedup.PermanentReason(err); ok {
		return dedup.Refuse(ctx, log, fundsConsumer, reason, err)
	}
	return fmt.Errorf("funds: apply %s: %w", env.EventID, err)
}

// fundsEffects returns the effects of env: for an OrderPaid the entry Put
// and "ADD paid_minor"; for a refunding OrderCancelled the entry Put and
// "ADD refunded_minor" conditioned on paid_minor >= the refund (refund
// true); nothing for the other events. An event the order domain cannot
// emit is an error.
func fundsEffects(table string, env outbox.Envelope, now time.Time) ([]types.TransactWriteItem, bool, error) {
	p, err := order.CheckEvent(env)
	if err != nil {
		return nil, false, err
	}
	var (
		e    ledger.Entry
		upd  expression.UpdateBuilder
		cond *expression.ConditionBuilder
	)
	e.OrderID = env.AggregateID // order.CheckEvent: the payload's order_id is the aggregate id
	switch p := p.(type) {
	case order.Paid:
		e.AmountMinor, e.Currency, e.Direction = p.AmountMinor, p.Currency, ledger.DirectionCredit
		upd = expression.Add(expression.Name(attrPaidMinor), expression.Value(p.AmountMinor))
	case order.Cancelled:
		if !p.WasPaid {
			return nil, false, nil
		}
		e.AmountMinor, e.Currency, e.Direction = p.RefundMinor, p.Currency, ledger.DirectionDebit
		upd = expression.Add(expression.Name(attrRefunded), expression.Value(p.RefundMinor))
		c := expression.Name(attrPaidMinor).GreaterThanEqual(expression.Value(p.RefundMinor))
		cond = &c
	default:
		return nil, false, nil
	}
	e.EventID, e.EventType, e.Sequence, e.BookedAt = env.EventID, env.EventType, env.Sequence, now
	item, err := attributevalue.MarshalMap(e)
	if err != nil {
		return nil, false, err
	}
	item[ledger.AttrPK] = &types.AttributeValueMemberS{Value: entryPrefix + env.EventID}
	put, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(ledger.AttrPK))).Build()
	if err != nil {
		return nil, false, err
	}
	b := expression.NewBuilder().WithUpdate(upd.Set(expression.Name(attrCurrencyFn), expression.Value(e.Currency)))
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	u, err := b.Build()
	if err != nil {
		return nil, false, err
	}
	return []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(table), Item: item, ConditionExpression: put.Condition(),
			ExpressionAttributeNames: put.Names(), ExpressionAttributeValues: put.Values()}},
		{Update: &types.Update{TableName: aws.String(table),
			Key:              map[string]types.AttributeValue{ledger.AttrPK: &types.AttributeValueMemberS{Value: fundsOrderKey + e.OrderID}},
			UpdateExpression: u.Update(), ConditionExpression: u.Condition(),
			ExpressionAttributeNames: u.Names(), ExpressionAttributeValues: u.Values()}},
	}, cond != nil, nil
}

// fundsState is what the funds consumer booked: its entries by event id
// (BookedAt cleared) and, per order, the amounts paid and refunded.
type fundsState struct {
	Entries map[string]ledger.Entry
	Orders  map[string]fundsOrder
}

// fundsOrder is one order's item in the funds table.
type fundsOrder struct {
	Paid, Refunded int64
	Currency       string
}

// readFunds scans the funds table (a consistent Scan).
func readFunds(ctx context.Context, client *dynamodb.Client, table string) (fundsState, error) {
	st := fundsState{Entries: map[string]ledger.Entry{}, Orders: map[string]fundsOrder{}}
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return st, fmt.Errorf("chaos: scan %s: %w", table, err)
		}
		for _, it := range page.Items {
			pk, _ := it[ledger.AttrPK].(*types.AttributeValueMemberS)
			switch {
			case pk == nil:
			case strings.HasPrefix(pk.Value, entryPrefix):
				var e ledger.Entry
				if err := attributevalue.UnmarshalMap(it, &e); err != nil {
					return st, fmt.Errorf("chaos: funds entry %s: %w", pk.Value, err)
				}
				e.BookedAt = time.Time{}
				st.Entries[e.EventID] = e
			case strings.HasPrefix(pk.Value, fundsOrderKey):
				o := fundsOrder{Paid: numAttr(it[attrPaidMinor]), Refunded: numAttr(it[attrRefunded])}
				if c, ok := it[attrCurrencyFn].(*types.AttributeValueMemberS); ok {
					o.Currency = c.Value
				}
				st.Orders[strings.TrimPrefix(pk.Value, fundsOrderKey)] = o
			}
		}
	}
	return st, nil
}

func numAttr(v types.AttributeValue) int64 {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		x, _ := strconv.ParseInt(n.Value, 10, 64)
		return x
	}
	return 0
}
