package devstack

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
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
	// Ordering is the ledger's ordered-apply mode (default the ledger's,
	// dedup.Ordered). Its rule gets the resequencer sweep schedule either
	// way, so SwitchLedger can make it ordered later.
	Ordering dedup.Ordering
}

// ledgerSlot is a ledger added with AddLedgerWith: the handler its queue
// runs reads the current ledger, so SwitchLedger can replace it.
type ledgerSlot struct {
	spec    LedgerSpec // Table and StateConsumer set
	current atomic.Pointer[ledger.Ledger]
}

func (l *ledgerSlot) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	return l.current.Load().Handle(ctx, ev)
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
	if _, err := localstack.EnsureTable(ctx, s.DDB, ledger.CreateTableInput(table)); err != nil {
		return nil, nil, err
	}
	w := dynamodb.NewTableExistsWaiter(s.DDB)
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, timeoutTable); err != nil {
		return nil, nil, fmt.Errorf("devstack: wait for table %s: %w", table, err)
	}
	spec.Table, spec.StateConsumer = table, consumer
	slot := &ledgerSlot{spec: spec}
	l, err := s.newLedger(spec, spec.Ordering)
	if err != nil {
		return nil, nil, err
	}
	slot.current.Store(l)
	var ledgerRule routing.Rule
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerLedger {
			ledgerRule = r
		}
	}
	c, err := s.AddConsumer(ConsumerSpec{Name: name, Rule: name + "-order-events", Pattern: ledgerRule.Pattern(s.Settings.Source),
		Handler: slot.handle, Ordered: ledgerRule.Ordered, StateTable: table, StateConsumer: consumer})
	if err != nil {
		return nil, nil, err
	}
	if s.ledgers == nil {
		s.ledgers = map[string]*ledgerSlot{}
	}
	s.ledgers[name] = slot
	return l, c, nil
}

// newLedger builds the ledger spec describes (Table and StateConsumer
// set) with ordering, configured like the stack's own.
func (s *Stack) newLedger(spec LedgerSpec, ordering dedup.Ordering) (*ledger.Ledger, error) {
	st := s.Settings
	return ledger.New(s.DDB, ledger.Config{
		Table:          spec.Table,
		Dedup:          dedup.Config{Retention: st.DedupRetention, Consumer: spec.StateConsumer},
		ExpectedSource: st.Source, ExpectedAccount: st.ExpectedAccount, GapMaxReceives: st.ConsumerGapMaxReceives,
		Ordering:    ordering,
		Resequencer: dedup.ResequencerConfig{Metrics: st.Metrics},
		Logger:      s.log.With("fn", spec.Name),
	})
}

// SwitchLedger switches the ordered-apply mode of a ledger added with
// AddLedgerWith, as a team redeploys its consumer with another
// configuration: the same queue, rule, table and consumer name, a new
// ledger with ordering. Deliveries already running finish with the old
// one. Switched from unordered to ordered, the ledger has no gate for
// the orders it applied unordered: their new events wait in its buffer
// until their history is replayed to it (a backfill), which the gate
// adopts in turn (docs/ORDERING.md). It returns the new ledger, or an
// error for a name AddLedgerWith did not add or a configuration ledger.New
// refuses.
func (s *Stack) SwitchLedger(name string, ordering dedup.Ordering) (*ledger.Ledger, error) {
	slot, ok := s.ledgers[name]
	if !ok {
		return nil, fmt.Errorf("devstack: no ledger %q added with AddLedgerWith", name)
	}
	l, err := s.newLedger(slot.spec, ordering)
	if err != nil {
		return nil, err
	}
	slot.current.Store(l)
	s.log.Info("ledger switched", "consumer", name, "ordering", l.Config().Ordering)
	return l, nil
}

// timeoutTable bounds the wait for a new table to become ACTIVE.
const timeoutTable = 30 * time.Second
