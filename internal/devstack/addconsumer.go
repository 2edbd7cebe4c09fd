package devstack

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// ConsumerSpec is a consumer added to a running stack, as a team deploys a
// new service: a rule on the bus with its DLQ, the rule's queue and DLQ,
// the SQS event source mapping and the handler.
type ConsumerSpec struct {
	// Name is the consumer's name: its queue <prefix>-<Name>, its DLQ
	// <prefix>-<Name>-dlq, the rule's target. Not one of the stack's.
	Name string
	// Rule is the rule's name on the bus (outboxctl backfill -rule).
	Rule string
	// Pattern is the rule's event pattern (JSON text or a JSON-ready value).
	Pattern any
	// Handler applies one event (behind sqsconsumer, like every consumer).
	Handler localrt.EventHandler
	// Ordered adds the resequencer sweep schedule (Options.SweepEvery).
	Ordered bool
	// StateTable is the table holding the consumer's dedup state (its
	// own table, by dedup's default): where Stack.Buffered lists what it
	// holds. Required with Ordered.
	StateTable string
	// StateConsumer is the consumer name its state is keyed by (default
	// Name).
	StateConsumer string
}

// AddConsumer adds a consumer to the running stack: from the call on, the
// bus delivers the events its rule matches to its queue; events published
// earlier reach it only by a replay of the archive (outboxctl backfill,
// localrt.Bus.StartReplay). Its queues are served by the AWS front. Call
// it from one goroutine, not concurrently with Drain. It returns an error
// for a name or rule in use, or a queue or rule that cannot be made.
func (s *Stack) AddConsumer(spec ConsumerSpec) (*ConsumerPath, error) {
	if _, dup := s.Consumers[spec.Name]; dup || spec.Name == "" || spec.Handler == nil {
		return nil, fmt.Errorf("devstack: consumer %q: need a new name and a handler", spec.Name)
	}
	if spec.Ordered && spec.StateTable == "" {
		return nil, fmt.Errorf("devstack: ordered consumer %q: StateTable is required", spec.Name)
	}
	c, err := newConsumerPath(spec.Name, spec.Handler, s.Settings, s.opts, s.store, s.log)
	if err != nil {
		return nil, err
	}
	s.Bus.SubscribeQueue(spec.Name, s.deliveryTarget(spec.Name, c.Queue), c.Queue.URL())
	if err := s.Bus.AddRule(localrt.Rule{Name: spec.Rule, Target: spec.Name, Pattern: spec.Pattern}); err != nil {
		return nil, fmt.Errorf("devstack: consumer %s: %w", spec.Name, err)
	}
	if err := s.addRuleDLQ(spec.Rule, spec.Name); err != nil {
		return nil, fmt.Errorf("devstack: consumer %s: %w", spec.Name, err)
	}
	if s.front != nil {
		for _, q := range []localrt.FrontQueue{c.Queue, c.DLQ} {
			if err := s.front.AddQueue(q); err != nil {
				return nil, err
			}
		}
	}
	s.Consumers[spec.Name] = c
	p := c.Poller
	s.goRun(func() { _ = p.Run(s.runCtx) })
	if spec.Ordered {
		s.StateTables[spec.Name] = spec.StateTable
		if spec.StateConsumer != "" && spec.StateConsumer != spec.Name {
			s.stateConsumers[spec.Name] = spec.StateConsumer
		}
		if err := s.addSweep(spec.Name, c, s.opts, s.log); err != nil {
			return nil, err
		}
	}
	s.log.Info("consumer added: it receives new events; replay the archive to give it the history", "consumer", spec.Name, "rule", spec.Rule, "archive", s.ArchiveName)
	return c, nil
}

// AddLedger adds a second, independent ledger named name to the running
// stack, as a team adds a new service or rebuilds one from empty: its own
// table <prefix>-<name>, holding its entries and its consumer state (dedup
// markers, ordering gates, buffer, under consumer name), and a rule
// <name>-order-events with the ledger's pattern. It starts empty: backfill
// it from the archive. It returns the ledger (read its balances and
// entries) and its delivery path.
func (s *Stack) AddLedger(ctx context.Context, name string) (*ledger.Ledger, *ConsumerPath, error) {
	return s.AddLedgerWith(ctx, LedgerSpec{Name: name})
}

// LedgerSpec is a ledger added to a running stack (AddLedgerWith).
type LedgerSpec struct {
	// Name is its consumer on the stack: its queue, DLQ and rule
	// <Name>-order-events.
	Name string
	// Table is its table (default <prefix>-<Name>); an existing table of
	// the ledger's shape is used as it is: a table restored from a backup.
	Table string
	// StateConsumer is the consumer name its dedup state is keyed by
	// (default Name). A ledger restored from a backup keeps the lost one's,
	// so it finds the markers, gates and buffer the backup holds.
	StateConsumer string
}

// AddLedgerWith adds the ledger spec describes (see AddLedger).
func (s *Stack) AddLedgerWith(ctx context.Context, spec LedgerSpec) (*ledger.Ledger, *ConsumerPath, error) {
	name, table, consumer := spec.Name, spec.Table, spec.StateConsumer
	if table == "" {
		table = s.opts.Prefix + "-" + name
	}
	if consumer == "" {
		consumer = name
	}
	if _, err := ensureTable(ctx, s.DDB, ledger.CreateTableInput(table)); err != nil {
		return nil, nil, err
	}
	w := dynamodb.NewTableExistsWaiter(s.DDB)
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, timeoutTable); err != nil {
		return nil, nil, fmt.Errorf("devstack: wait for table %s: %w", table, err)
	}
	st := s.Settings
	l, err := ledger.New(s.DDB, ledger.Config{
		Table:          table,
		Dedup:          dedup.Config{Retention: st.DedupRetention, Consumer: consumer},
		ExpectedSource: st.Source, ExpectedAccount: st.ExpectedAccount, GapMaxReceives: st.ConsumerGapMaxReceives,
		Resequencer: dedup.ResequencerConfig{Metrics: st.Metrics},
		Logger:      s.log.With("fn", name),
	})
	if err != nil {
		return nil, nil, err
	}
	var ledgerRule routing.Rule
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerLedger {
			ledgerRule = r
		}
	}
	c, err := s.AddConsumer(ConsumerSpec{Name: name, Rule: name + "-order-events", Pattern: ledgerRule.Pattern(st.Source),
		Handler: l.Handle, Ordered: ledgerRule.Ordered, StateTable: table, StateConsumer: consumer})
	if err != nil {
		return nil, nil, err
	}
	return l, c, nil
}

// timeoutTable bounds the wait for a new table to become ACTIVE.
const timeoutTable = 30 * time.Second
