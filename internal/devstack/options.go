package devstack

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/fulfilment"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/provider"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Options configure a local stack. Zero values take the defaults.
type Options struct {
	// Endpoint is a running DynamoDB-compatible server (with Streams) to use,
	// e.g. DynamoDB Local at http://localhost:8000. Empty: start an
	// in-memory Dynoxide for the stack's lifetime.
	Endpoint string
	// Prefix prefixes every table name (default "local").
	Prefix string
	// APIAddr is the HTTP listen address (default "127.0.0.1:0", a free port).
	// An address beyond loopback is logged as a warning: the API
	// authenticates nothing.
	APIAddr string
	// AllowedHosts are extra names the API and the AWS front accept in the
	// Host header. Always accepted: "localhost" and names under
	// ".localhost", loopback addresses, the listen address's host (every
	// interface address when it is a wildcard). Any other Host is refused
	// with 403 (DNS rebinding protection).
	AllowedHosts []string
	// BatchSize is the event source mapping batch size (default 100).
	BatchSize int
	// PollInterval is the poller's wait after an empty GetRecords (default 50 ms).
	PollInterval time.Duration
	// MaxBatchingWindow is the event source mapping's
	// MaximumBatchingWindowInSeconds: how long the poller gathers records
	// across polls before invoking the relay (earlier when BatchSize records
	// are buffered). Default 0: invoke as soon as a poll returns records.
	MaxBatchingWindow time.Duration
	// ReconcileEvery is the reconciler schedule (default 30 s).
	ReconcileEvery time.Duration
	// ReconcileAfter is the age after which pending records are re-sent
	// (default 5 minutes, as in AWS).
	ReconcileAfter time.Duration
	// PendingShards is the pending index shard count (default 16).
	PendingShards int
	// Logger receives every component's logs (default: text to stderr).
	Logger *slog.Logger
	// AWSConfig, when set, adjusts the SDK configuration of every client
	// (fault injection and call counting add middleware here).
	AWSConfig func(*aws.Config)
	// RelayAWSConfig, when set, gives the relay and the reconciler their own
	// DynamoDB client, built from a copy of the stack's SDK configuration
	// (AWSConfig applied) adjusted by this function: make bench counts the
	// relay's calls apart from the API's and the consumers'.
	RelayAWSConfig func(*aws.Config)
	// WrapEventBridge, WrapQueue and WrapStream, when set, wrap the relay's
	// and reconciler's EventBridge client, the parked-records queue, and the
	// relay handler as the event source mapping invokes it.
	WrapEventBridge func(relay.EventBridgeAPI) relay.EventBridgeAPI
	WrapQueue       func(relay.QueueSender) relay.QueueSender
	WrapStream      func(localrt.StreamHandler) localrt.StreamHandler
	// Provider configures the local fulfilment provider the fulfilment
	// consumer calls (a real HTTP server, internal/orders/provider); its APIKey is also
	// the consumer's token. Zero: a key-honouring provider without faults.
	Provider provider.Config
	// TuneFulfilment, when set, adjusts the fulfilment consumer's
	// configuration (chaos sets Idempotency.BeforeComplete).
	TuneFulfilment func(*fulfilment.Config)
	// WrapQueueTarget, when set, wraps the bus's delivery to each
	// consumer's queue (fault injection: late deliveries reorder events).
	WrapQueueTarget func(consumer string, q localrt.MessageSender) localrt.MessageSender
	// HopLog logs one line per hop of every event with its milliseconds
	// since commit: stream → relay, published and marked, each consumer
	// applied (the dev terminal's walkthrough; see hops.go).
	HopLog bool
	// ConsumerInterceptor wraps every consumer's event handler inside its
	// SQS event source mapping invocation (fault injection, apply timing);
	// its attempt argument is the message's ApproximateReceiveCount.
	ConsumerInterceptor localrt.Interceptor
	// WrapConsumer, when set, wraps each consumer's SQS handler as its event
	// source mapping invokes it (a crash after the handler answered).
	WrapConsumer func(consumer string, h localrt.SQSHandler) localrt.SQSHandler
	// WrapConsumerDLQ, when set, wraps the SendMessage a consumer's handler
	// calls to dead-letter an event on its DLQ (sqsconsumer's permanent
	// failures, the resequencer's buffered events that cannot be applied):
	// fault injection, a DLQ send that fails. The queue's own redrive
	// policy (maxReceiveCount) moves messages without it, as SQS does.
	WrapConsumerDLQ func(consumer string, dlq sqsconsumer.MessageSender) sqsconsumer.MessageSender
	// ConsumerFunctionTimeout is each consumer's function timeout (default
	// config.DefaultConsumerTimeout, 30 s). ConsumerVisibilityTimeout is its
	// queue's visibility timeout (default ConsumerVisibilityTimeoutFactor x
	// ConsumerFunctionTimeout, as in the CDK stack); ConsumerMaxReceiveCount
	// the queue's redrive maxReceiveCount (default
	// config.DefaultConsumerMaxReceiveCount). Lower all three together to
	// reach the DLQ quickly (chaos does).
	ConsumerFunctionTimeout   time.Duration
	ConsumerVisibilityTimeout time.Duration
	ConsumerMaxReceiveCount   int
	// ConsumerMaxConcurrency is each consumer's SQS event source mapping
	// MaximumConcurrency (default config.DefaultConsumerMaxConcurrency, as
	// the CDK stack deploys it).
	ConsumerMaxConcurrency int
	// SweepEvery is how often each ordered consumer's queue gets a
	// resequencer sweep tick (default config.ResequencerSweepInterval, as
	// the CDK stack's schedule).
	SweepEvery time.Duration
	// RelayFunctionTimeout is the relay's function timeout as the stream
	// event source mapping invokes it (default config.DefaultRelayTimeout).
	// Like the CDK construct, Start refuses one shorter than
	// relay.MinFunctionTimeout of the relay's configuration.
	RelayFunctionTimeout time.Duration
	// DataFile keeps the started Dynoxide's data in this SQLite file across
	// restarts. Default: in memory. With Endpoint the server there keeps
	// the data: Start refuses the pair (ErrDataFileWithEndpoint).
	DataFile string
	// RuntimeStateFile keeps the local runtime's state in a journal file
	// (internal/localstate) across restarts, as AWS keeps it in durable
	// services: the messages of every SQS queue (the consumers' queues and
	// DLQs, the parked-records queue, the stream event source mapping's
	// on-failure destination) in flight or not, with their receive counts
	// and visibility deadlines; the events the bus accepted and had not
	// delivered, and its rule dead letters; the fulfilment provider's
	// shipments and idempotency answers. Each change is written before it
	// is acknowledged, so a stop by SIGTERM or SIGKILL loses nothing that
	// the DynamoDB data says was delivered. The journal is bound to the
	// outbox table's stream: state of a former data set (tables recreated)
	// is discarded with a warning. Default: DataFile + ".state" with
	// DataFile; without it, in memory (with Endpoint a warning says that a
	// stop loses the queues while the server keeps the data).
	RuntimeStateFile string
	// CheckpointFile keeps the stream event source mapping's checkpoints
	// across restarts (saved every second and at Close); a restarted stack
	// resumes after them instead of reading the stream from its start.
	// Empty: not kept (right for an in-memory server, whose stream is new).
	CheckpointFile string
	// RelayRetryBudget and RelayCallTimeout tune the relay (app.Settings);
	// zero keeps the relay's defaults.
	RelayRetryBudget time.Duration
	RelayCallTimeout time.Duration
	// Metrics receives the relay's and reconciler's EMF metric lines
	// (default: discarded).
	Metrics io.Writer
	// ArchiveDelay bounds the delay between the bus accepting an event and
	// the event reaching the stack's archive (<prefix>-archive): each
	// event's delay is drawn from [0, ArchiveDelay]. Default
	// localrt.DefaultArchiveDelay (30 s); EventBridge documents a delay
	// without a bound and advises replaying 10 minutes later.
	ArchiveDelay time.Duration
	// BusTargetMaxAttempts is each rule target's delivery attempts before
	// its DLQ (default 4; EventBridge's own default is 185 over 24 h).
	BusTargetMaxAttempts int
	// StreamRetries is the event source mapping's MaximumRetryAttempts
	// (default 10).
	StreamRetries int
	// StreamDeliverAt, when set, holds each stream record until the time
	// it returns (localrt.StreamPollerConfig.DeliverAt): make bench's
	// cloud-latency level injects AWS's stream → Lambda latency here.
	StreamDeliverAt func(record json.RawMessage) time.Time
	// AWSAddr, when set, is the listen address of the AWS front (see
	// startAWSFront): the stack's SQS queues, its bus (PutEvents) and its
	// DynamoDB endpoint over the AWS JSON protocols, for outboxctl. Empty:
	// no front.
	AWSAddr string
	// RejectDetailTypes makes the local bus refuse every PutEvents entry of
	// these detail types with RejectCode (default MalformedDetail; or
	// InvalidArgument), permanently, so their outbox records are parked:
	// the parked/redrive flow, tried locally.
	RejectDetailTypes []string
	RejectCode        string
	// Tracing instruments the functions as config.EnvTracing does on AWS:
	// the API's HTTP server (otelhttp) and the AWS SDK clients (otelaws);
	// the relay, reconciler and consumers start their spans whenever a
	// tracer provider is installed. The caller installs it
	// (otelsetup.Setup: OTLP to a local Jaeger, or an in-memory exporter
	// in tests). False: nothing is instrumented.
	Tracing bool
	// LoseAfterPublish, when set, forces the relay to lose the records it
	// reports true for after publishing them (localstack.LoseAfterPublish): the
	// reconciler re-sends them and the consumers absorb the duplicate.
	LoseAfterPublish func(outbox.Envelope) bool
	// ConsoleAddr, when set, is the listen address of the local console
	// (console.go): orders and each event's path with its hops' timings,
	// the consumers' effects, the outbox and the DLQs, and the operator
	// actions. Stack.ConsoleURL is its URL. Empty: no console (and no
	// event-path recorder).
	ConsoleAddr string
	// DeadLetterTypes makes a consumer refuse events of the given detail
	// types for good (sqsconsumer.Permanent, reason ReasonLocalFault), so
	// they land on its DLQ at once: keys are consumer names
	// (routing.Consumer*), values detail types. The consumer-DLQ flow,
	// tried locally, as RejectDetailTypes does for parking.
	DeadLetterTypes map[string][]string
	// RefuseDeliveries makes the queues of these consumers (routing.Consumer*)
	// refuse the local bus's deliveries, as a queue does whose policy no
	// longer admits its rule (AccessDenied; a deleted queue or a disabled
	// KMS key is met alike): EventBridge does not retry that (eb-rule-dlq),
	// so each of their events lands on the rule's DLQ
	// (<prefix>-<rule>-rule-dlq) at once, with EventBridge's attributes.
	// The rule-DLQ flow, tried locally; Stack.StopRefusing (the console's
	// button) lifts it, and the rule DLQ's redrive delivers the events.
	RefuseDeliveries []string
}

// The reconciler's schedule and stale age of `make dev` (outboxdev dev
// -reconcile-every, -reconcile-after): a replayed or redriven record is
// re-published within seconds. On AWS the stale age must outlast the
// stream event source mapping's retry window (config.MinReconcileAfter,
// 2 min), or the reconciler races the relay on records it is still
// delivering. The local mapping hands a record to the relay within
// milliseconds of its commit; only a relay stuck for longer than
// DevReconcileAfter lets the reconciler publish a record first, and then
// the relay's publish is a duplicate the consumers absorb (their dedup
// marker) and the ordered ones keep in sequence (their resequencer).
const (
	DevReconcileEvery = 5 * time.Second
	DevReconcileAfter = 10 * time.Second
)

// ReasonLocalFault is the dead-letter reason of Options.DeadLetterTypes.
const ReasonLocalFault = "local_fault"

func (o *Options) setDefaults() {
	if o.Prefix == "" {
		o.Prefix = "local"
	}
	if o.APIAddr == "" {
		o.APIAddr = "127.0.0.1:0"
	}
	if o.BatchSize == 0 {
		o.BatchSize = 100
	}
	if o.PollInterval == 0 {
		o.PollInterval = 50 * time.Millisecond
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = 30 * time.Second
	}
	if o.ReconcileAfter == 0 {
		o.ReconcileAfter = 5 * time.Minute
	}
	if o.PendingShards == 0 {
		o.PendingShards = 16
	}
	if o.Metrics == nil {
		o.Metrics = io.Discard
	}
	if o.ConsumerFunctionTimeout == 0 {
		o.ConsumerFunctionTimeout = config.DefaultConsumerTimeout
	}
	if o.ConsumerVisibilityTimeout == 0 {
		o.ConsumerVisibilityTimeout = config.ConsumerVisibilityTimeoutFactor * o.ConsumerFunctionTimeout
	}
	if o.ConsumerMaxReceiveCount == 0 {
		o.ConsumerMaxReceiveCount = config.DefaultConsumerMaxReceiveCount
	}
	if o.ConsumerMaxConcurrency == 0 {
		o.ConsumerMaxConcurrency = config.DefaultConsumerMaxConcurrency
	}
	if o.SweepEvery == 0 {
		o.SweepEvery = config.ResequencerSweepInterval
	}
	if o.RelayFunctionTimeout == 0 {
		o.RelayFunctionTimeout = config.DefaultRelayTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if o.RuntimeStateFile == "" && o.DataFile != "" {
		o.RuntimeStateFile = o.DataFile + ".state"
	}
}
