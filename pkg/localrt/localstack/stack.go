package localstack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// QueueURLPrefix prefixes every queue URL of the stack (account
// 000000000000, us-east-1, as the local runtime's queues).
const QueueURLPrefix = "https://sqs.us-east-1.amazonaws.com/000000000000/"

// Stack is a running local stack (Start). Its fields are set by Start and
// read-only afterwards; its methods are safe for concurrent use except
// Close, which ends it.
type Stack struct {
	// Endpoint is the DynamoDB endpoint; AWSConfig the SDK configuration
	// the stack's clients use (dummy credentials, that endpoint).
	Endpoint  string
	AWSConfig aws.Config
	DDB       *dynamodb.Client
	Streams   *dynamodbstreams.Client
	// OutboxTable, Source, BusName, PendingShards and Region are the
	// Config's, defaults applied: what a writer needs (WriterConfig).
	OutboxTable   string
	Source        string
	BusName       string
	PendingShards int
	Region        string
	// Tables are the names of every table Start created or reused.
	Tables []string
	// Bus is the local EventBridge bus; ArchiveName its archive of every
	// event of Source (<BusName>-archive).
	Bus         *localrt.Bus
	ArchiveName string
	// Relay is the relay (pkg/relay) the stream poller invokes; Poller the
	// stream event source mapping.
	Relay  *relay.Relay
	Poller *localrt.StreamPoller
	// Reconciler is the reconciler (pkg/reconciler); ReconcileSchedule
	// invokes it every Config.ReconcileEvery.
	Reconciler        *reconciler.Reconciler
	ReconcileSchedule *localrt.Scheduler
	// Consumers are the consumers' delivery paths by name; RuleDLQs each
	// consumer's rule target DLQ by consumer name; Sweeps the ordered
	// consumers' sweep schedules by name.
	Consumers map[string]*ConsumerPath
	RuleDLQs  map[string]*localrt.SQSQueue
	Sweeps    map[string]*localrt.Scheduler
	// ForwardDLQs are the forwarding rules' DLQs (<Name>-forward-dlq) by
	// Forward name.
	ForwardDLQs map[string]*localrt.SQSQueue
	// ParkedQueue receives the relay's parked records (<OutboxTable>-parked);
	// OnFailureQueue the stream event source mapping's on-failure records
	// (<OutboxTable>-relay-onfailure).
	ParkedQueue    *localrt.MemoryQueue
	OnFailureQueue *localrt.MemoryQueue

	cfg       Config
	stateOf   map[string]string // consumer → state table
	publish   atomic.Pointer[localrt.PutEventsAPI]
	rejecting atomic.Pointer[RejectSwitch]
	miss      atomic.Pointer[func(outbox.Envelope) bool]
	dynox     *dynoxide.Server
	closeOnce sync.Once

	// runMu guards the running components (run, Suspend, Resume, Close).
	runMu     sync.Mutex
	cancel    context.CancelFunc // nil while suspended or closed
	life      context.Context    // the invocations' context: ends with Close
	endLife   context.CancelFunc
	wg        sync.WaitGroup
	suspended atomic.Bool
	closed    bool
}

// Start starts the stack cfg describes and returns it running: Dynoxide
// (or the server at cfg.Endpoint), the tables (outbox, cfg.Tables, the
// consumers' state tables), the bus with one rule per consumer, each
// consumer's queue, DLQ, rule DLQ and SQS event source mapping, the relay
// behind the outbox stream's event source mapping, the reconciler schedule
// and the ordered consumers' sweep schedules. Stop it with Close.
//
// Errors: ErrInvalidConfig (wrapped, naming the field) before anything
// starts; ErrSchemaMismatch (wrapped) for an existing table of another
// shape; dynoxide.ErrNotInstalled when no Dynoxide binary is found; or the
// failing part's error. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, Endpoint: cfg.Endpoint, OutboxTable: cfg.OutboxTable, Source: cfg.Source, BusName: cfg.BusName,
		PendingShards: cfg.PendingShards, Region: cfg.Region, stateOf: map[string]string{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	log := cfg.Logger
	if s.Endpoint == "" {
		if s.dynox, err = dynoxide.StartWith(ctx, dynoxide.Options{DBPath: cfg.DataFile}); err != nil {
			return nil, err
		}
		s.Endpoint = s.dynox.Endpoint
	}
	s.AWSConfig = dynoxide.AWSConfig(s.Endpoint)
	if cfg.AWSConfig != nil {
		cfg.AWSConfig(&s.AWSConfig)
	}
	s.DDB = dynamodb.NewFromConfig(s.AWSConfig)
	s.Streams = dynamodbstreams.NewFromConfig(s.AWSConfig)

	if err := s.createTables(ctx); err != nil {
		return nil, err
	}

	s.ParkedQueue = localrt.NewMemoryQueue(QueueURLPrefix + cfg.OutboxTable + "-parked")
	s.OnFailureQueue = localrt.NewMemoryQueue(QueueURLPrefix + cfg.OutboxTable + "-relay-onfailure")
	s.ArchiveName = cfg.BusName + "-archive"
	if len(s.ArchiveName) > localrt.MaxArchiveNameLength {
		s.ArchiveName = s.ArchiveName[:localrt.MaxArchiveNameLength]
	}
	rules := make([]localrt.Rule, 0, len(cfg.Consumers)+len(cfg.Forward))
	for _, c := range cfg.Consumers {
		rules = append(rules, localrt.Rule{Name: c.Name + "-rule", Target: c.Name, Pattern: c.rulePattern(cfg.Source)})
	}
	rules = append(rules, cfg.forwardRules()...)
	if s.Bus, err = localrt.NewBus(localrt.BusConfig{Name: cfg.BusName, Region: cfg.Region, Rules: rules, Logger: log.With("fn", "bus"),
		Archives: []localrt.ArchiveConfig{{Name: s.ArchiveName, Pattern: map[string]any{"source": []any{cfg.Source}}, RetentionDays: config.DefaultArchiveRetentionDays}},
	}); err != nil {
		return nil, fmt.Errorf("localstack: bus: %w", err)
	}
	var bus localrt.PutEventsAPI = s.Bus
	s.publish.Store(&bus)

	// The relay and the reconciler, publishing through the switchable path.
	if s.Relay, err = relay.New(publishPath{s}, s.DDB, s.ParkedQueue, relay.Config{
		Publisher: relay.PublisherConfig{EventBusName: cfg.BusName, Source: cfg.Source},
		Marker:    relay.MarkerConfig{Table: cfg.OutboxTable, ParkedQueueURL: s.ParkedQueue.URL(), Metrics: cfg.Metrics},
		Region:    cfg.Region,
		Logger:    log.With("fn", "relay"),
	}); err != nil {
		return nil, fmt.Errorf("localstack: relay: %w", err)
	}
	budget := max(cfg.ReconcileEvery/2, 5*time.Second)
	if s.Reconciler, err = reconciler.New(s.DDB, s.Relay.Publisher(), s.Relay.Marker(), reconciler.Config{
		Table: cfg.OutboxTable, PendingShards: cfg.PendingShards, ReconcileAfter: cfg.ReconcileAfter,
		AllowShortReconcileAfter: true, Budget: budget, Metrics: cfg.Metrics, Logger: log.With("fn", "reconciler"),
		Region: cfg.Region, LegacyOwner: cfg.LegacyOwner,
	}); err != nil {
		return nil, fmt.Errorf("localstack: reconciler: %w", err)
	}
	if s.ReconcileSchedule, err = localrt.NewScheduler(localrt.SchedulerConfig{
		Interval: cfg.ReconcileEvery, Timeout: budget + 15*time.Second, Logger: log.With("fn", "schedule"),
	}, s.Reconciler.Handle); err != nil {
		return nil, fmt.Errorf("localstack: reconciler schedule: %w", err)
	}

	if err := s.addConsumers(); err != nil {
		return nil, err
	}
	if err := s.addForwards(); err != nil {
		return nil, err
	}

	stream := LoseAfterPublish(nil, func(env outbox.Envelope) bool {
		m := s.miss.Load()
		return m != nil && (*m)(env)
	}, s.Relay.Handle)
	if s.Poller, err = localrt.NewStreamPoller(localrt.StreamPollerConfig{
		Streams: s.Streams, TableName: cfg.OutboxTable, Tables: s.DDB,
		FilterPatterns: []any{outbox.StreamFilterPatternIn(cfg.Region)}, Region: cfg.Region,
		PollInterval: cfg.PollInterval, BisectBatchOnFunctionError: true,
		FunctionTimeout: cfg.RelayFunctionTimeout, FunctionName: "relay",
		OnFailure: s.OnFailureQueue, OnFailureQueueURL: s.OnFailureQueue.URL(),
		Logger: log.With("fn", "event-source-mapping"),
	}, stream); err != nil {
		return nil, fmt.Errorf("localstack: stream poller: %w", err)
	}

	s.life, s.endLife = context.WithCancel(context.Background())
	s.runMu.Lock()
	s.run()
	s.runMu.Unlock()
	return s, nil
}

// WriterConfig returns what a writer of this stack's outbox needs: the
// outbox table, the event source, the pending shard count and, in
// multi-Region mode, the Region (outbox.WriterConfig.Region). Add the
// business tables' Keys and use it with outbox.NewWriter and the stack's
// DDB client.
func (s *Stack) WriterConfig() outbox.WriterConfig {
	return outbox.WriterConfig{Table: s.OutboxTable, Region: s.Region, Source: s.Source, PendingShards: s.PendingShards}
}

// createTables creates the outbox, cfg.Tables and the consumers' state
// tables not among them.
func (s *Stack) createTables(ctx context.Context) error {
	cfg := s.cfg
	inputs := []*dynamodb.CreateTableInput{outbox.CreateTableInput(cfg.OutboxTable)}
	inputs = append(inputs, cfg.Tables...)
	ttl := map[string]string{cfg.OutboxTable: outbox.TTLAttribute}
	for t, a := range cfg.TTL {
		ttl[t] = a
	}
	have := func(name string) bool {
		return slices.ContainsFunc(inputs, func(in *dynamodb.CreateTableInput) bool { return aws.ToString(in.TableName) == name })
	}
	for _, c := range cfg.Consumers {
		if c.StateTable == "" {
			continue
		}
		s.stateOf[c.Name] = c.StateTable
		if !have(c.StateTable) {
			inputs = append(inputs, dedup.CreateTableInput(c.StateTable)) // with the state index
		}
		if _, set := ttl[c.StateTable]; !set {
			ttl[c.StateTable] = dedup.TTLAttribute
		}
	}
	for _, in := range inputs {
		s.Tables = append(s.Tables, aws.ToString(in.TableName))
	}
	return CreateTables(ctx, s.DDB, inputs, ttl, s.cfg.Logger)
}

// addConsumers builds every consumer's path, rule DLQ and sweep.
func (s *Stack) addConsumers() error {
	cfg := s.cfg
	s.Consumers, s.RuleDLQs, s.Sweeps = map[string]*ConsumerPath{}, map[string]*localrt.SQSQueue{}, map[string]*localrt.Scheduler{}
	for _, c := range cfg.Consumers {
		log := cfg.Logger.With("fn", c.Name)
		env := func(q ConsumerQueues, dlqURL string) ConsumerEnv {
			return ConsumerEnv{Name: c.Name, Source: cfg.Source, QueueURL: q.Queue.URL(), DLQURL: dlqURL,
				StateTable: c.StateTable, SQS: q, DDB: s.DDB}
		}
		var build func(ConsumerQueues, string) (localrt.SQSHandler, *sqsconsumer.Handler, error)
		switch {
		case c.Handler != nil:
			build = EventHandler(c.Name, c.Handler, time.Second, cfg.ConsumerVisibilityTimeout, log)
		case c.NewHandler != nil:
			build = func(q ConsumerQueues, dlqURL string) (localrt.SQSHandler, *sqsconsumer.Handler, error) {
				h, err := c.NewHandler(env(q, dlqURL))
				if err != nil {
					return nil, nil, err
				}
				if h == nil {
					return nil, nil, errors.New("NewHandler returned no handler")
				}
				return EventHandler(c.Name, h, time.Second, cfg.ConsumerVisibilityTimeout, log)(q, dlqURL)
			}
		default:
			build = func(q ConsumerQueues, dlqURL string) (localrt.SQSHandler, *sqsconsumer.Handler, error) {
				h, err := c.SQSHandler(env(q, dlqURL))
				return h, nil, err
			}
		}
		p, err := NewConsumerPath(PathConfig{Name: c.Name, FunctionTimeout: cfg.ConsumerFunctionTimeout,
			VisibilityTimeout: cfg.ConsumerVisibilityTimeout, MaxReceiveCount: cfg.ConsumerMaxReceiveCount,
			Handler: build, Logger: log})
		if err != nil {
			return err
		}
		s.Consumers[c.Name] = p
		s.Bus.SubscribeQueue(c.Name, p.Queue, p.Queue.URL())
		rule := c.Name + "-rule"
		dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: rule + "-dlq", RetentionPeriod: DLQRetention,
			OnlySourceArns: []string{s.Bus.RuleARN(rule)}})
		if err != nil {
			return fmt.Errorf("localstack: consumer %s: rule DLQ: %w", c.Name, err)
		}
		if err := s.Bus.SetDeadLetterQueue(rule, dlq, dlq.URL()); err != nil {
			return fmt.Errorf("localstack: consumer %s: %w", c.Name, err)
		}
		s.RuleDLQs[c.Name] = dlq
		if c.Ordered {
			if s.Sweeps[c.Name], err = NewSweep(c.Name, p.Queue, cfg.SweepEvery, log); err != nil {
				return err
			}
		}
	}
	return nil
}

// publishPath is what the relay and the reconciler publish to: the bus,
// or a RejectSwitch in front of it (RejectDetailTypes).
type publishPath struct{ s *Stack }

func (p publishPath) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return (*p.s.publish.Load()).PutEvents(ctx, in, optFns...)
}

// QueueURLs returns the URL of every queue of the stack by name (the last
// segment of its URL): the parked-records queue, the on-failure queue, and
// each consumer's queue, DLQ and rule DLQ, and each forward's DLQ.
func (s *Stack) QueueURLs() map[string]string {
	urls := map[string]string{}
	add := func(u string) { urls[u[len(QueueURLPrefix):]] = u }
	add(s.ParkedQueue.URL())
	add(s.OnFailureQueue.URL())
	for name, c := range s.Consumers {
		add(c.Queue.URL())
		add(c.DLQ.URL())
		add(s.RuleDLQs[name].URL())
	}
	for _, q := range s.ForwardDLQs {
		add(q.URL())
	}
	return urls
}

// Drain waits until the pipeline is quiet (Quiet): the stream read to its
// end, every bus delivery done, every consumer queue empty and no consumer
// invocation running. A record the relay missed is not waited for: Settle
// waits for the reconciler too. It returns ctx's error, wrapped, on
// timeout, and ErrSuspended at once while the stack is suspended (nothing
// runs to drain it).
func (s *Stack) Drain(ctx context.Context) error {
	if s.suspended.Load() {
		return fmt.Errorf("localstack: drain: %w", ErrSuspended)
	}
	return Quiet(ctx, func() *localrt.StreamPoller { return s.Poller }, s.Bus, s.consumerList)
}

func (s *Stack) consumerList() []*ConsumerPath {
	out := make([]*ConsumerPath, 0, len(s.Consumers))
	for _, c := range s.Consumers {
		out = append(out, c)
	}
	return out
}

// Settle waits until no outbox record is pending (the relay or, for a
// record it missed, the reconciler after Config.ReconcileAfter published
// or parked every one) and the pipeline is quiet (Drain). A record whose
// publishing keeps failing keeps it waiting: it returns ctx's error,
// wrapped, on timeout.
func (s *Stack) Settle(ctx context.Context) error {
	for {
		if err := s.Drain(ctx); err != nil {
			return err
		}
		n, err := s.Pending(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return s.Drain(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localstack: settle: %d outbox record(s) still pending: %w", n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pending counts the outbox's pending records of the stack's Region: a
// strongly consistent count would need a Scan, so it queries every shard of
// the sparse pending index (outbox.PendingIndexName; eventually consistent
// on AWS, current on Dynoxide) the Region's writers use
// (outbox.RegionShardName; in single-Region mode outbox.ShardName).
func (s *Stack) Pending(ctx context.Context) (int, error) {
	return PendingIn(ctx, s.DDB, s.OutboxTable, s.Region, s.PendingShards)
}

// PendingIn counts the pending records of region ("" = single-Region mode)
// in the outbox table of ddb: a Query with Select COUNT on each of the
// Region's shards of the pending index.
func PendingIn(ctx context.Context, ddb *dynamodb.Client, table, region string, shards int) (int, error) {
	n := 0
	for i := range shards {
		p := dynamodb.NewQueryPaginator(ddb, &dynamodb.QueryInput{
			TableName: aws.String(table), IndexName: aws.String(outbox.PendingIndexName),
			KeyConditionExpression:    aws.String("#s = :s"),
			ExpressionAttributeNames:  map[string]string{"#s": outbox.AttrPendingShard},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: outbox.RegionShardName(region, i)}},
			Select:                    types.SelectCount,
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return n, fmt.Errorf("localstack: count pending records: %w", err)
			}
			n += int(page.Count)
		}
	}
	return n, nil
}

// MissRecords makes the relay miss every outbox record whose envelope
// match reports true (nil: none, the default): the event source mapping
// moves past it, nothing is published, and the record stays pending until
// the reconciler publishes it, Config.ReconcileAfter after its commit. It
// stands for a stream record lost to an outage (LoseAfterPublish).
func (s *Stack) MissRecords(match func(outbox.Envelope) bool) {
	if match == nil {
		s.miss.Store(nil)
		return
	}
	s.miss.Store(&match)
}

// RejectDetailTypes makes the bus refuse every PutEvents entry of these
// detail types with localrt.ErrorCodeMalformedDetail, a permanent entry
// error (RejectSwitch): the relay and the reconciler park the record
// (status PARKED, a message on ParkedQueue), as for an entry EventBridge
// will never accept. StopRejecting lifts it; RedriveParked then publishes
// the parked records. It returns an error for no type.
func (s *Stack) RejectDetailTypes(detailTypes ...string) error {
	r, err := NewRejectSwitch(s.Bus, localrt.ErrorCodeMalformedDetail, detailTypes...)
	if err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	var p localrt.PutEventsAPI = r
	s.rejecting.Store(r)
	s.publish.Store(&p)
	return nil
}

// StopRejecting lifts RejectDetailTypes; it reports whether a rejection
// was active.
func (s *Stack) StopRejecting() bool {
	var bus localrt.PutEventsAPI = s.Bus
	s.publish.Store(&bus)
	return s.rejecting.Swap(nil).Stop()
}

// Parked lists the outbox's parked records (relay.ListParked).
func (s *Stack) Parked(ctx context.Context) ([]relay.ParkedRecord, error) {
	return relay.ListParked(ctx, s.DDB, s.OutboxTable, 0)
}

// RedriveParked returns every parked record to the pending state
// (relay.Redrive, as outboxctl redrive does once the cause is fixed); the
// reconciler publishes each on its next run, and Settle waits for that.
// In multi-Region mode it redrives in the stack's Region
// (relay.RedriveInRegion): a parked record replicated from another Region
// is left to its origin Region (relay.ErrNotOrigin, not counted, not an
// error). It returns how many it redrove and the joined errors of those it
// could not.
func (s *Stack) RedriveParked(ctx context.Context) (int, error) {
	parked, err := s.Parked(ctx)
	if err != nil {
		return 0, err
	}
	var opts []relay.RedriveOption
	if s.Region != "" {
		opts = append(opts, relay.RedriveInRegion(s.Region))
	}
	n := 0
	var errs []error
	for _, p := range parked {
		err := relay.Redrive(ctx, s.DDB, s.OutboxTable, s.PendingShards, p.Key, time.Now(), opts...)
		if errors.Is(err, relay.ErrNotOrigin) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ReconcileNow runs the reconciler once at once (the schedule's next run
// still comes): records pending for longer than Config.ReconcileAfter are
// published. It returns the run's error, or ErrSuspended while the stack is
// suspended.
func (s *Stack) ReconcileNow(ctx context.Context) error {
	if s.suspended.Load() {
		return fmt.Errorf("localstack: reconcile: %w", ErrSuspended)
	}
	return s.ReconcileSchedule.Trigger(ctx)
}

// SweepNow sends every ordered consumer's queue a sweep tick at once (what
// its schedule does every Config.SweepEvery) and drains the stack, so what
// a crash left in a resequencer buffer is applied. It returns the first
// error; ErrSuspended while the stack is suspended.
func (s *Stack) SweepNow(ctx context.Context) error {
	if s.suspended.Load() {
		return fmt.Errorf("localstack: sweep: %w", ErrSuspended)
	}
	names := make([]string, 0, len(s.Sweeps))
	for n := range s.Sweeps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := s.Sweeps[n].Trigger(ctx); err != nil {
			return fmt.Errorf("localstack: sweep tick for %s: %w", n, err)
		}
	}
	return s.Drain(ctx)
}

// Buffered returns the events waiting in the resequencer buffer of each
// ordered consumer with a StateTable (dedup.ListBuffered, the consumer's
// name as its dedup consumer name), by consumer name.
func (s *Stack) Buffered(ctx context.Context) (map[string][]dedup.BufferedEvent, error) {
	out := map[string][]dedup.BufferedEvent{}
	for name := range s.Sweeps {
		table, ok := s.stateOf[name]
		if !ok {
			continue
		}
		b, err := dedup.ListBuffered(ctx, s.DDB, table, name)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

// Close stops the pollers, schedules and bus, and the Dynoxide Start
// started (its data is lost unless Config.DataFile kept it). It waits for
// running invocations to end; calling it again does nothing.
func (s *Stack) Close() {
	s.closeOnce.Do(func() {
		s.runMu.Lock()
		s.closed = true
		if s.endLife != nil {
			s.endLife()
		}
		s.stop()
		s.runMu.Unlock()
		if s.Bus != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Bus.Close(ctx)
			cancel()
		}
		if s.dynox != nil {
			s.dynox.Stop()
		}
	})
}
