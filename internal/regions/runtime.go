package regions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
)

// The two Regions of the runtime: A writes first, B is the statement
// consumer's home.
const (
	RegionA = "eu-west-1"
	RegionB = "eu-central-1"
)

// Names of the bank's resources, the same in both Regions (a global table's
// replicas share its name).
const (
	Source      = "com.example.bank"
	BusName     = "bank-bus"
	OutboxTable = "bank-outbox"
)

// Replication is what the runtime needs of the replicator between the
// Regions' tables (a global table's replication; internal/mrec is one): a
// Runtime works without one (each Region's tables are then its own), and a
// chaos run drives one through these methods.
type Replication interface {
	// Pause stops applying writes in the other Region, both directions
	// (the FIS global-table-pause-replication action); writes keep being
	// made and are kept for Resume.
	Pause() error
	// Resume applies what Pause held, and replicates again.
	Resume() error
	// Lose cuts the Region off: nothing replicates from or to it until
	// Recover (its writes made meanwhile are kept: "All previously
	// successful writes will be propagated eventually no matter how long
	// the Region is isolated").
	Lose(region string) error
	// Recover ends Lose.
	Recover(region string) error
	// Settle waits until every write made so far is applied in every
	// Region it replicates to (held ones excepted), or returns ctx's
	// error.
	Settle(ctx context.Context) error
	// Close stops the replication.
	Close() error
}

// Replica is one Region's side of the replication: its name, its
// DynamoDB endpoint (its own Dynoxide server) and the stack's clients of
// it.
type Replica struct {
	Name     string
	Endpoint string
	DDB      *dynamodb.Client
	Streams  *dynamodbstreams.Client
}

// NewReplication starts a Replication of tables (the global tables: the
// outbox and the accounts) between the Regions' replicas. MREC returns
// one over internal/mrec.
type NewReplication func(ctx context.Context, replicas []Replica, tables []string) (Replication, error)

// Config configures Start. Zero values take the defaults stated per field.
type Config struct {
	// Replication starts the replicator between the Regions' global tables
	// (nil: none; each Region's tables are its own).
	Replication NewReplication
	// ForwardRetry is the retry policy of the forwarding rules between the
	// Regions' buses (nil: EventBridge's default, 185 retries over 24 h).
	ForwardRetry *localrt.RetryPolicy
	// ReconcileEvery and ReconcileAfter are each Region's reconciler
	// schedule and stale age (defaults 1 s and 2 s, localstack's).
	ReconcileEvery, ReconcileAfter time.Duration
	// Logger receives every component's logs, with a "region" attribute
	// (default: discarded).
	Logger *slog.Logger
}

// Runtime is two Regions of the bank, each a local stack on its own
// Dynoxide server (its own relay, bus, queues, consumers and reconciler),
// the buses forwarding each consumer's events to its home Region, and
// optionally a replicator between the global tables. Close stops it.
type Runtime struct {
	// A and B are the Regions (RegionA, RegionB).
	A, B *Region
	// Bank writes the bank's accounts in their home Regions.
	Bank *Bank

	repl      Replication
	closeOnce sync.Once
}

// Region is one Region of the Runtime.
type Region struct {
	// Name is the Region's name.
	Name string
	// Stack is the Region's local stack.
	Stack *localstack.Stack
}

// Start starts the two Regions, binds their forwards to each other's buses,
// starts the replication (Config.Replication) and returns the Runtime. On
// error what started is stopped. Errors: the stacks' (localstack.Start:
// dynoxide.ErrNotInstalled without a Dynoxide binary) and the replication's.
func Start(ctx context.Context, cfg Config) (_ *Runtime, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rt := &Runtime{}
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	toA, toB := &localstack.ForwardTarget{}, &localstack.ForwardTarget{}
	stackA, err := localstack.Start(ctx, stackConfig(cfg, RegionA, toB, RegionB))
	if err != nil {
		return nil, fmt.Errorf("regions: start %s: %w", RegionA, err)
	}
	rt.A = &Region{Name: RegionA, Stack: stackA}
	stackB, err := localstack.Start(ctx, stackConfig(cfg, RegionB, toA, RegionA))
	if err != nil {
		return nil, fmt.Errorf("regions: start %s: %w", RegionB, err)
	}
	rt.B = &Region{Name: RegionB, Stack: stackB}
	toA.Bind(stackA.Bus)
	toB.Bind(stackB.Bus)
	if cfg.Replication != nil {
		replicas := []Replica{{Name: RegionA, Endpoint: stackA.Endpoint, DDB: stackA.DDB, Streams: stackA.Streams},
			{Name: RegionB, Endpoint: stackB.Endpoint, DDB: stackB.DDB, Streams: stackB.Streams}}
		if rt.repl, err = cfg.Replication(ctx, replicas, GlobalTables()); err != nil {
			return nil, fmt.Errorf("regions: start the replication: %w", err)
		}
	}
	if rt.Bank, err = newBank(rt); err != nil {
		return nil, err
	}
	return rt, nil
}

// GlobalTables are the tables replicated between the Regions: the outbox
// and the accounts. The consumers' state and effect tables are regional.
func GlobalTables() []string { return []string{OutboxTable, AccountsTable} }

// stackConfig is Region region's stack: the bank's tables, the consumers
// homed in it, and a forward of the other Region's consumers' events to
// its bus (to, bound once that Region runs).
func stackConfig(cfg Config, region string, to *localstack.ForwardTarget, other string) localstack.Config {
	sc := localstack.Config{OutboxTable: OutboxTable, Source: Source, BusName: BusName, Region: region, LegacyOwner: region == RegionA,
		ReconcileEvery: cfg.ReconcileEvery, ReconcileAfter: cfg.ReconcileAfter,
		Logger: cfg.Logger.With("region", region)}
	for _, c := range homeConsumers() {
		if c.home == region {
			sc.Consumers = append(sc.Consumers, c.consumer)
			continue
		}
		sc.Forward = append(sc.Forward, localstack.Forward{Name: c.consumer.Name, AggregateType: AccountType,
			To: to, ToBus: localstack.BusARN(other, BusName), RetryPolicy: cfg.ForwardRetry})
	}
	sc.Tables = append(sc.Tables, accountsTableInput())
	return sc
}

// Region returns the Region named name, or nil.
func (rt *Runtime) Region(name string) *Region {
	switch name {
	case RegionA:
		return rt.A
	case RegionB:
		return rt.B
	}
	return nil
}

// Regions returns A and B.
func (rt *Runtime) Regions() []*Region { return []*Region{rt.A, rt.B} }

// Replication returns the replicator (nil without one).
func (rt *Runtime) Replication() Replication { return rt.repl }

// ErrUnknownRegion is returned (wrapped) for a Region name that is neither
// RegionA nor RegionB.
var ErrUnknownRegion = errors.New("regions: unknown Region")

// Suspend takes Region name down (localstack.Stack.Suspend: its relay,
// reconciler, sweeps and consumers stop; nothing is lost).
func (rt *Runtime) Suspend(name string) error {
	r := rt.Region(name)
	if r == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRegion, name)
	}
	return r.Stack.Suspend()
}

// Resume brings Region name back (localstack.Stack.Resume).
func (rt *Runtime) Resume(name string) error {
	r := rt.Region(name)
	if r == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRegion, name)
	}
	return r.Stack.Resume()
}

// Settle waits until the running Regions are quiet: the replication
// settled (when there is one), and each running Region's stack settled
// (localstack.Stack.Settle: nothing of its own pending, its queues empty),
// twice round, as an event forwarded by one Region is applied in the other.
// A suspended Region is skipped: what waits for it stays where it is. It
// returns ctx's error, wrapped, on timeout.
func (rt *Runtime) Settle(ctx context.Context) error {
	for range 2 {
		if rt.repl != nil {
			if err := rt.repl.Settle(ctx); err != nil {
				return fmt.Errorf("regions: settle the replication: %w", err)
			}
		}
		for _, r := range rt.Regions() {
			if r.Stack.Suspended() {
				continue
			}
			if err := r.Stack.Settle(ctx); err != nil {
				return fmt.Errorf("regions: settle %s: %w", r.Name, err)
			}
		}
	}
	return nil
}

// Close stops the replication and both Regions; calling it again does
// nothing.
func (rt *Runtime) Close() {
	rt.closeOnce.Do(func() {
		if rt.repl != nil {
			_ = rt.repl.Close()
		}
		for _, r := range []*Region{rt.A, rt.B} {
			if r != nil {
				r.Stack.Close()
			}
		}
	})
}
