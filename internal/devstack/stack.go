// Package devstack runs the whole order service locally: a DynamoDB-compatible
// server (Dynoxide, or any endpoint), the tables, the HTTP API, the relay
// behind an emulated Streams event source mapping, the local EventBridge bus
// routing to the ledger and notifier consumers, and the reconciler on a
// timer. The handlers are built by internal/orders/app exactly as the Lambda mains build
// them; only what AWS runs around them (pkg/localrt) is emulated.
//
// It is used by cmd/outboxdev (make dev, make demo, make chaos, make bench)
// and by the end-to-end tests.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/smithy-go/middleware"

	"github.com/ddb-outbox/ddb-outbox/internal/localstate"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt/localstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/reconciler"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// Stack is a running local order service.
type Stack struct {
	// URL is the API base URL, e.g. http://127.0.0.1:8080.
	URL string
	// Endpoint is the DynamoDB endpoint the stack uses.
	Endpoint string
	// Settings are the function settings (table names, bus, ...).
	Settings app.Settings

	DDB       *dynamodb.Client
	Streams   *dynamodbstreams.Client
	Bus       *localrt.Bus
	Poller    *localrt.StreamPoller
	Scheduler *localrt.Scheduler
	// Sweeps are the ordered consumers' resequencer sweep schedules, by
	// consumer name: each puts a scheduled event on the consumer's queue
	// every Options.SweepEvery, as the CDK stack's schedule rule does.
	Sweeps map[string]*localrt.Scheduler
	// StateTables are the tables holding each ordered consumer's dedup
	// state (markers, ordering gates, buffer), by consumer name: its own
	// table.
	StateTables map[string]string
	// stateConsumers: a consumer whose state is keyed by another name (a
	// ledger restored from a backup keeps the lost one's).
	stateConsumers map[string]string
	// ledgers are the ledgers AddLedgerWith added, by consumer name.
	ledgers        map[string]*ledgerSlot
	ParkedQueue    *localrt.MemoryQueue
	OnFailureQueue *localrt.MemoryQueue
	// AWSURL is the AWS front's URL (empty without Options.AWSAddr).
	AWSURL string
	// ArchiveName is the bus's archive of every published event
	// (<prefix>-archive), as the CDK stack's.
	ArchiveName string
	// Consumers are the consumer delivery paths by consumer name
	// (routing.ConsumerLedger, routing.ConsumerNotifier): queue, DLQ, SQS
	// event source mapping.
	Consumers map[string]*ConsumerPath
	// Rules are the routing rules by name, each with its consumer and its
	// DLQ (<prefix>-<rule>-rule-dlq): what the bus could not deliver to the
	// consumer's queue.
	Rules map[string]*RulePath
	// Provider is the local fulfilment provider; Fulfilment the consumer
	// that calls it.
	Provider   *provider.Server
	Fulfilment *fulfilment.Fulfilment
	Relay      *relay.Relay
	Reconciler *reconciler.Reconciler
	Ledger     *ledger.Ledger
	Notifier   *notifier.Notifier

	log *slog.Logger
	// reconcileEvery is Options.ReconcileEvery (for WriteState).
	reconcileEvery time.Duration
	started        time.Time // when the schedules started
	rejecting      *localstack.RejectSwitch
	refusing       *refuseSwitch
	console        *console
	server         *http.Server
	awsServer      *http.Server
	runCtx         context.Context

	pollMu      sync.Mutex
	pollCfg     localrt.StreamPollerConfig
	pollHandler localrt.StreamHandler
	pollStop    context.CancelFunc
	pollDone    chan struct{}

	front   *localrt.AWSFront
	opts    Options
	store   localrt.StateStore
	dynox   *dynoxide.Server
	state   *localstate.Journal
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once
}

// ErrDataFileWithEndpoint: Options.DataFile (outboxdev's -data) was given
// with Options.Endpoint (-endpoint, or AWS_ENDPOINT_URL_DYNAMODB): the data
// file is for the Dynoxide the stack starts, and with an endpoint it starts
// none.
var ErrDataFileWithEndpoint = errors.New("devstack: DataFile (-data) keeps the data of the Dynoxide the stack starts, but with Endpoint (-endpoint, or AWS_ENDPOINT_URL_DYNAMODB) the server at that endpoint keeps the data and no Dynoxide starts: give one of them")

// Start brings the whole stack up: server, tables, API, poller, bus and
// scheduler. Stop it with Close. It returns an error if any part fails to
// start (and stops what had started); ErrDataFileWithEndpoint before
// anything starts when both are set.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.DataFile != "" && opts.Endpoint != "" {
		return nil, fmt.Errorf("%w (DataFile %q, Endpoint %q)", ErrDataFileWithEndpoint, opts.DataFile, opts.Endpoint)
	}
	opts.setDefaults()
	log := opts.Logger
	s := &Stack{log: log, Endpoint: opts.Endpoint, reconcileEvery: opts.ReconcileEvery}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// Ports first: a second stack must not start a Dynoxide on the data
	// file of a running one before it finds its ports taken.
	for _, p := range []struct{ what, flag, addr string }{{"API", "-addr", opts.APIAddr}, {"AWS front", "-aws-addr", opts.AWSAddr}, {"console", "-console", opts.ConsoleAddr}} {
		if err := checkFree(p.what, p.flag, p.addr); err != nil {
			return nil, err
		}
	}
	if s.Endpoint == "" {
		if opts.DataFile != "" {
			if err := os.MkdirAll(filepath.Dir(opts.DataFile), 0o755); err != nil {
				return nil, fmt.Errorf("devstack: data file directory: %w", err)
			}
		}
		if c, lerr := dynoxide.Locate(dynoxide.Current()); lerr == nil {
			if w := dynoxide.CheckVersion(ctx, c); w != "" {
				log.Warn(w)
			}
		}
		if s.dynox, err = dynoxide.StartWith(ctx, dynoxide.Options{DBPath: opts.DataFile}); err != nil {
			return nil, err
		}
		s.Endpoint = s.dynox.Endpoint
		log.Info("dynoxide started", "endpoint", s.Endpoint)
	}
	cfg := dynoxide.AWSConfig(s.Endpoint)
	if opts.AWSConfig != nil {
		opts.AWSConfig(&cfg)
	}
	// The stream poller stands in for Lambda's event source mapping, which
	// is AWS's, not traced by the functions: its client stays uninstrumented.
	s.Streams = dynamodbstreams.NewFromConfig(cfg)
	if opts.Tracing {
		cfg = cfg.Copy()
		cfg.APIOptions = append([]func(*middleware.Stack) error(nil), cfg.APIOptions...) // no aliasing
		app.InstrumentAWS(&cfg)
	}
	s.DDB = dynamodb.NewFromConfig(cfg)

	p := opts.Prefix
	s.Settings = app.Settings{
		OutboxTable:        p + "-outbox",
		OrdersTable:        p + "-orders",
		LedgerTable:        p + "-ledger",
		NotificationsTable: p + "-notifications",
		ShipmentsTable:     p + "-shipments",
		IdempotencyTable:   p + "-idempotency",
		EventBus:           p + "-bus",
		Source:             "com.ddb-outbox.orders",
		ParkedQueueURL:     "https://sqs.us-east-1.amazonaws.com/000000000000/" + p + "-parked",
		PendingShards:      opts.PendingShards,
		ReconcileAfter:     opts.ReconcileAfter,
		// The local stack may race the reconciler against the relay on
		// purpose (chaos: ReconcileAfter 1 s); AWS never sets this.
		AllowShortReconcileAfter: true,
		ReconcileBudget:          opts.ReconcileEvery / 2,
		PublishedRetention:       7 * 24 * time.Hour,
		DedupRetention:           7 * 24 * time.Hour,
		NotificationRetention:    appenv.DefaultNotificationRetention,
		// an ordered consumer's held event reaches the DLQ with its reason
		// (sequence_gap) on the queue's last receive
		ConsumerGapMaxReceives: opts.ConsumerMaxReceiveCount,
		MaxEntryBytes:          256 * 1024,
		RelayRetryBudget:       opts.RelayRetryBudget,
		RelayCallTimeout:       opts.RelayCallTimeout,
		Metrics:                opts.Metrics,
		Tracing:                opts.Tracing,
	}
	if least := relay.MinFunctionTimeout(app.RelayConfig(s.Settings, nil)); opts.RelayFunctionTimeout < least {
		return nil, fmt.Errorf("devstack: RelayFunctionTimeout %s is shorter than %s, the relay's retry budget plus its marking reserve (relay.MinFunctionTimeout); the CDK construct refuses it too", opts.RelayFunctionTimeout, least)
	}
	if err := s.createTables(ctx); err != nil {
		return nil, err
	}
	store, err := s.openState(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.opts, s.store = opts, store

	// Queues and bus stand in for SQS and EventBridge.
	onFailureURL := "https://sqs.us-east-1.amazonaws.com/000000000000/" + p + "-relay-onfailure"
	if store != nil {
		if s.ParkedQueue, err = localrt.OpenMemoryQueue(s.Settings.ParkedQueueURL, store); err != nil {
			return nil, err
		}
		if s.OnFailureQueue, err = localrt.OpenMemoryQueue(onFailureURL, store); err != nil {
			return nil, err
		}
	} else {
		s.ParkedQueue = localrt.NewMemoryQueue(s.Settings.ParkedQueueURL)
		s.OnFailureQueue = localrt.NewMemoryQueue(onFailureURL)
	}
	s.ArchiveName = p + "-archive"
	if s.Bus, err = localrt.NewBus(localrt.BusConfig{
		Name: s.Settings.EventBus, Rules: routing.BusRules(s.Settings.Source), Logger: log,
		TargetMaxAttempts: opts.BusTargetMaxAttempts, Store: store,
		// As the CDK stack's archive: every event of the outbox's source.
		Archives:     []localrt.ArchiveConfig{{Name: s.ArchiveName, Pattern: routing.ArchivePattern(s.Settings.Source), RetentionDays: config.DefaultArchiveRetentionDays}},
		ArchiveDelay: opts.ArchiveDelay,
	}); err != nil {
		return nil, err
	}

	// The functions, built exactly as the Lambda mains build them.
	published, err := s.publishPath(opts)
	if err != nil {
		return nil, err
	}
	var eb relay.EventBridgeAPI = published
	if opts.WrapEventBridge != nil {
		eb = opts.WrapEventBridge(eb)
	}
	var queue relay.QueueSender = s.ParkedQueue
	if opts.WrapQueue != nil {
		queue = opts.WrapQueue(queue)
	}
	apiHandler, err := app.NewAPI(s.Settings, s.DDB, log.With("fn", "api"))
	if err != nil {
		return nil, err
	}
	relayDDB := s.DDB
	if opts.RelayAWSConfig != nil {
		rcfg := cfg.Copy()
		rcfg.APIOptions = append([]func(*middleware.Stack) error(nil), cfg.APIOptions...) // no aliasing
		opts.RelayAWSConfig(&rcfg)
		relayDDB = dynamodb.NewFromConfig(rcfg)
	}
	if s.Relay, err = app.NewRelay(s.Settings, eb, relayDDB, queue, log.With("fn", "relay")); err != nil {
		return nil, err
	}
	if s.Reconciler, err = app.NewReconciler(s.Settings, app.ReconcilerClients{DDB: relayDDB, EventBridge: eb, Queue: queue}, log.With("fn", "reconciler")); err != nil {
		return nil, err
	}
	if s.Ledger, err = app.NewLedger(s.Settings, s.DDB, log.With("fn", routing.ConsumerLedger)); err != nil {
		return nil, err
	}
	if s.Notifier, err = app.NewNotifier(s.Settings, s.DDB, log.With("fn", routing.ConsumerNotifier)); err != nil {
		return nil, err
	}
	if opts.Provider.APIKey == "" {
		opts.Provider.APIKey = "local-provider-token"
	}
	if store != nil {
		opts.Provider.Store = store
	}
	s.Provider = provider.New(opts.Provider)
	if s.Settings.ProviderURL, err = s.Provider.Start("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("devstack: start the fulfilment provider: %w", err)
	}
	var tune []func(*fulfilment.Config)
	if opts.TuneFulfilment != nil {
		tune = append(tune, opts.TuneFulfilment)
	}
	if s.Fulfilment, err = app.NewFulfilment(s.Settings, s.DDB, fulfilment.StaticCredentials(opts.Provider.APIKey), log.With("fn", routing.ConsumerFulfilment), tune...); err != nil {
		return nil, err
	}
	if len(opts.RefuseDeliveries) > 0 {
		for _, c := range opts.RefuseDeliveries {
			if !slices.Contains(routing.Consumers(), c) {
				return nil, fmt.Errorf("devstack: RefuseDeliveries: no consumer %q (the consumers: %v)", c, routing.Consumers())
			}
		}
		s.refusing = &refuseSwitch{consumers: opts.RefuseDeliveries}
		s.refusing.active.Store(true)
		log.Warn("the queues of these consumers refuse the bus's deliveries: their events land on their rule's DLQ", "consumers", opts.RefuseDeliveries)
	}
	s.Consumers = map[string]*ConsumerPath{}
	for name, h := range map[string]localrt.EventHandler{routing.ConsumerLedger: s.Ledger.Handle, routing.ConsumerNotifier: s.Notifier.Handle,
		routing.ConsumerFulfilment: s.Fulfilment.Handle} {
		c, err := newConsumerPath(name, h, s.Settings, opts, store, log)
		if err != nil {
			return nil, err
		}
		s.Consumers[name] = c
		s.Bus.SubscribeQueue(name, s.deliveryTarget(name, c.Queue), c.Queue.URL())
	}
	// Each rule's target DLQ, as the consumer construct's (outboxcdk.NewConsumer), before the
	// deliveries a restart resumes.
	for _, r := range routing.Rules() {
		if err := s.addRuleDLQ(r.Name, r.Consumer); err != nil {
			return nil, err
		}
	}
	if err := s.addSweeps(opts, log); err != nil {
		return nil, err
	}
	// Events the bus accepted and had not delivered when the stack stopped.
	if _, err := s.Bus.Resume(); err != nil {
		return nil, err
	}

	var streamHandler localrt.StreamHandler = s.Relay.Handle
	if opts.LoseAfterPublish != nil {
		streamHandler = localstack.LoseAfterPublish(s.Relay.Publisher(), opts.LoseAfterPublish, streamHandler)
	}
	if opts.HopLog {
		streamHandler = hopStream(log.With("fn", "relay"), streamHandler)
	}
	if opts.WrapStream != nil {
		streamHandler = opts.WrapStream(streamHandler)
	}
	s.pollHandler = streamHandler
	s.pollCfg = localrt.StreamPollerConfig{
		Streams:                    s.Streams,
		TableName:                  s.Settings.OutboxTable,
		Tables:                     s.DDB,
		BatchSize:                  opts.BatchSize,
		PollInterval:               opts.PollInterval,
		MaxBatchingWindow:          opts.MaxBatchingWindow,
		BisectBatchOnFunctionError: true,
		MaximumRetryAttempts:       opts.StreamRetries,
		FunctionTimeout:            opts.RelayFunctionTimeout,
		FunctionName:               "relay",
		OnFailure:                  s.OnFailureQueue,
		OnFailureQueueURL:          s.OnFailureQueue.URL(),
		Logger:                     log.With("fn", "event-source-mapping"),
		DeliverAt:                  opts.StreamDeliverAt,
	}
	var streamARN string
	if opts.CheckpointFile != "" {
		if s.pollCfg.Checkpoints, streamARN, err = loadCheckpoints(ctx, s.DDB, s.Settings.OutboxTable, opts.CheckpointFile, log); err != nil {
			return nil, err
		}
		if len(s.pollCfg.Checkpoints) > 0 {
			log.Info("resuming the stream after saved checkpoints", "file", opts.CheckpointFile, "shards", len(s.pollCfg.Checkpoints))
		}
	}
	if s.Poller, err = localrt.NewStreamPoller(s.pollCfg, streamHandler); err != nil {
		return nil, err
	}
	if s.Scheduler, err = localrt.NewScheduler(localrt.SchedulerConfig{
		Interval: opts.ReconcileEvery, Logger: log.With("fn", "schedule"),
		// the reconciler's function timeout, as the outbox construct sets it
		Timeout: s.Settings.ReconcileBudget + 15*time.Second,
	}, s.Reconciler.Handle); err != nil {
		return nil, err
	}

	if err := s.startAWSFront(opts, published); err != nil {
		return nil, err
	}
	if err := s.startConsole(opts); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("devstack: listen on %s: %w%s", opts.APIAddr, err, portHolder(opts.APIAddr))
	}
	s.URL = "http://" + ln.Addr().String()
	warnIfExposed(log, "the API", opts.APIAddr)
	// The API's cross-origin check lives here, in front of the local
	// server, not in the handler Lambda runs: see crossOriginGuard.
	s.server = &http.Server{Handler: localGuard(apiHandler, []string{opts.APIAddr, ln.Addr().String()}, opts.AllowedHosts, apiDenier),
		ReadHeaderTimeout: 5 * time.Second}

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.goRun(func() {
		if err := s.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("api server stopped", "error", err)
		}
	})
	s.runCtx = runCtx
	s.startPoller()
	if opts.CheckpointFile != "" {
		s.goRun(func() { s.keepCheckpoints(runCtx, opts.CheckpointFile, streamARN) })
	}
	s.started = time.Now()
	s.goRun(func() { _ = s.Scheduler.Run(runCtx) }) // returns nil when runCtx ends
	for _, sw := range s.Sweeps {
		s.goRun(func() { _ = sw.Run(runCtx) })
	}
	for _, c := range s.Consumers {
		p := c.Poller
		s.goRun(func() { _ = p.Run(runCtx) })
	}
	log.Info("local stack ready", "api", s.URL, "dynamodb", s.Endpoint, "outbox_table", s.Settings.OutboxTable)
	return s, nil
}

// startPoller runs s.Poller until the stack closes or RestartPoller stops
// it; s.pollMu must be held or the stack not yet shared.
func (s *Stack) startPoller() {
	ctx, cancel := context.WithCancel(s.runCtx)
	done := make(chan struct{})
	s.pollStop, s.pollDone = cancel, done
	p := s.Poller
	s.goRun(func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			s.log.Error("stream poller stopped", "error", err)
		}
	})
}

// RestartPoller stops the event source mapping emulator and starts a new
// one from the old one's checkpoints, as happens when Lambda replaces the
// poller of a shard: records after the checkpoint are delivered (again, if
// an invocation was in flight), nothing before it. It returns the
// checkpoints it resumed from.
func (s *Stack) RestartPoller() (map[string]string, error) {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	s.pollStop()
	<-s.pollDone
	cfg := s.pollCfg
	cfg.Checkpoints = s.Poller.Checkpoint()
	p, err := localrt.NewStreamPoller(cfg, s.pollHandler)
	if err != nil {
		return nil, fmt.Errorf("devstack: restart poller: %w", err)
	}
	s.Poller = p
	s.startPoller()
	return cfg.Checkpoints, nil
}

// poller returns the current poller (RestartPoller replaces it).
func (s *Stack) poller() *localrt.StreamPoller {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	return s.Poller
}

func (s *Stack) goRun(f func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
}

// createTables creates the stack's tables, or reuses existing ones whose
// schema matches (ErrSchemaMismatch otherwise), and enables TTL where the
// stack declares it (a server without TTL support, or TTL already enabled,
// only logs a warning).
func (s *Stack) createTables(ctx context.Context) error {
	st := s.Settings
	inputs := []*dynamodb.CreateTableInput{
		outbox.CreateTableInput(st.OutboxTable),
		order.CreateTableInput(st.OrdersTable),
		ledger.CreateTableInput(st.LedgerTable),
		notifier.CreateTableInput(st.NotificationsTable),
		fulfilment.CreateTableInput(st.ShipmentsTable),
		idempotency.CreateTableInput(st.IdempotencyTable),
	}
	ttl := map[string]string{st.OutboxTable: outbox.TTLAttribute, st.OrdersTable: order.AttrExpiresAt,
		// the ledger's dedup markers (its entries carry no expires_at)
		st.LedgerTable:        dedup.TTLAttribute,
		st.NotificationsTable: notifier.TTLAttribute, st.IdempotencyTable: idempotency.TTLAttribute}
	return localstack.CreateTables(ctx, s.DDB, inputs, ttl, s.log)
}

// Drain waits until the pipeline is quiet (localstack.Quiet): the poller
// has read the stream to its end, every bus delivery has finished, every
// consumer queue is empty with no invocation running, twice in a row with
// no new events in between. It returns ctx's error on timeout.
func (s *Stack) Drain(ctx context.Context) error {
	return localstack.Quiet(ctx, s.poller, s.Bus, func() []*ConsumerPath {
		out := make([]*ConsumerPath, 0, len(s.Consumers))
		for _, c := range s.Consumers {
			out = append(out, c)
		}
		return out
	})
}

// Close stops the API, poller, scheduler, bus and (if started here) Dynoxide.
func (s *Stack) Close() {
	s.closeMu.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if s.server != nil {
			_ = s.server.Shutdown(ctx)
		}
		if s.awsServer != nil {
			_ = s.awsServer.Shutdown(ctx)
		}
		s.closeConsole(ctx)
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		if s.Bus != nil {
			_ = s.Bus.Close(ctx)
		}
		if s.Provider != nil {
			_ = s.Provider.Close(ctx)
		}
		if s.state != nil {
			if err := s.state.Close(); err != nil {
				s.log.Error("could not close the local runtime's state file", "file", s.state.Path(), "error", err)
			}
		}
		if s.dynox != nil {
			s.dynox.Stop()
		}
	})
}
