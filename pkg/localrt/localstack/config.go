package localstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// ErrInvalidConfig is wrapped by every error Start returns for a Config it
// refuses before anything starts; the message names the field.
var ErrInvalidConfig = errors.New("localstack: invalid config")

// Config is a local stack's declarative configuration. Zero values take
// the defaults stated per field; the defaults are short, for tests.
type Config struct {
	// Endpoint is a running DynamoDB-compatible server with Streams (e.g.
	// DynamoDB Local at http://localhost:8000). Empty: Start starts a
	// Dynoxide (pkg/dynoxide) for the stack's lifetime.
	Endpoint string
	// DataFile keeps the started Dynoxide's data in this SQLite file
	// (default: in memory). Refused with Endpoint.
	DataFile string
	// OutboxTable is the outbox table's name (outbox.CreateTableInput
	// creates it). Required.
	OutboxTable string
	// PendingShards is the outbox's pending index shard count, as the
	// writers use it (outbox.WriterConfig.PendingShards; default
	// config.DefaultPendingShards, 1..config.MaxPendingShards).
	PendingShards int
	// Tables are the business tables to create besides the outbox and the
	// consumers' state tables (dynamodb.CreateTableInput each; an existing
	// table of the same shape is reused, another shape is refused:
	// ErrSchemaMismatch).
	Tables []*dynamodb.CreateTableInput
	// TTL enables DynamoDB TTL: table name → attribute (epoch seconds).
	// The outbox's (outbox.TTLAttribute) and every consumer state table's
	// (dedup.TTLAttribute) are enabled without being listed.
	TTL map[string]string
	// Source is the EventBridge source the relay publishes with (the
	// writers' outbox.WriterConfig.Source; config.EnvEventSource).
	// Required; EventBridge refuses sources starting with "aws.".
	Source string
	// BusName is the local EventBridge bus's name. Required.
	BusName string
	// Consumers are the consumers, each with its rule, queue, DLQ, SQS
	// event source mapping and (ordered) sweep schedule.
	Consumers []Consumer
	// Region is the simulated AWS Region of the stack in multi-Region mode
	// (docs/MULTI-REGION.md; a Region name, config.ValidRegionName): the
	// stream poller delivers only the records written in it
	// (outbox.StreamFilterPatternIn), the relay and the reconciler get it
	// (relay.Config.Region, reconciler.Config.Region), Pending counts its
	// pending shards (outbox.RegionShardName), the bus's events and ARNs
	// name it, and WriterConfig gives writers it. "" (the default):
	// single-Region mode, as before.
	Region string
	// LegacyOwner makes this Region's reconciler the legacy owner
	// (reconciler.Config.LegacyOwner): it also publishes records written
	// before the table went multi-Region (no origin Region, in the plain
	// pNN shards). On AWS that is the first Region of OUTBOX_REGIONS; set it
	// on one stack only. Requires Region.
	LegacyOwner bool
	// Forward forwards events of this stack's bus to another bus: the bus
	// of the Region where a consumer lives (its home Region), as an
	// EventBridge rule with an event bus target does. See Forward.
	Forward []Forward

	// PollInterval is the stream poller's wait after an empty GetRecords
	// (default 20 ms).
	PollInterval time.Duration
	// ReconcileEvery is the reconciler's schedule (default 1 s).
	// ReconcileAfter is the age past which a pending record is re-sent
	// (default 2 s; on AWS at least config.MinReconcileAfter, 2 min, which
	// the stack does not enforce: a short age races the relay on purpose,
	// and the consumers absorb the duplicates).
	ReconcileEvery time.Duration
	ReconcileAfter time.Duration
	// SweepEvery is the ordered consumers' resequencer sweep schedule
	// (default 1 s; config.ResequencerSweepInterval on AWS).
	SweepEvery time.Duration
	// RelayFunctionTimeout is the relay's function timeout as the stream
	// event source mapping invokes it (default config.DefaultRelayTimeout).
	RelayFunctionTimeout time.Duration
	// ConsumerFunctionTimeout is each consumer's function timeout (default
	// 10 s). ConsumerVisibilityTimeout is its queue's visibility timeout
	// (default ConsumerFunctionTimeout; never shorter). A failed message
	// comes back sooner (sqsconsumer.RetryDelays from 1 s). Consumer
	// MaxReceiveCount is the queue's redrive maxReceiveCount (default 5):
	// after that many receives a failing message is on the consumer's DLQ.
	ConsumerFunctionTimeout   time.Duration
	ConsumerVisibilityTimeout time.Duration
	ConsumerMaxReceiveCount   int

	// AWSConfig, when set, adjusts the SDK configuration of the stack's
	// DynamoDB and Streams clients (middleware for fault injection or call
	// counting); the endpoint and dummy credentials are set before it.
	AWSConfig func(*aws.Config)
	// Logger receives every component's logs (default: discarded).
	Logger *slog.Logger
	// Metrics receives the relay's and reconciler's EMF lines (default
	// discarded).
	Metrics io.Writer
}

// Consumer is one consumer of the stack's events: a rule on the bus
// (<Name>-rule, its target DLQ <Name>-rule-dlq), the rule's queue <Name>
// with its DLQ <Name>-dlq, the SQS event source mapping and the handler;
// an ordered consumer also gets its resequencer sweep schedule.
type Consumer struct {
	// Name is the consumer's name, unique in the stack. Required: letters,
	// digits, hyphens and underscores, at most 59 characters (46 for an
	// ordered consumer), as the queue and rule names the stack derives
	// from it must be on AWS (SQS CreateQueue, EventBridge PutRule).
	Name string
	// Ordered says the consumer applies an aggregate's events in sequence
	// order (dedup's ordered mode): it gets the sweep schedule, and its
	// rule must match every event type of its aggregates or it waits
	// forever for a sequence it never receives. With AggregateType the
	// rule does; an ordered consumer's Pattern may match only on source,
	// account, region and detail.aggregate_type (Start refuses e.g. a
	// detail-type list).
	Ordered bool
	// AggregateType makes the rule {"source":[Source],"detail":
	// {"aggregate_type":[AggregateType]}}: every event of that aggregate
	// type. Pattern is any other EventBridge event pattern (JSON text or a
	// JSON-ready value). Exactly one is required.
	AggregateType string
	Pattern       any
	// Handler applies one event; the stack runs it behind
	// sqsconsumer.New with the consumer's DLQ (a *sqsconsumer.PermanentError
	// is dead-lettered at once with its reason, other errors retried, then
	// moved to the DLQ by the queue's redrive policy) and answers with
	// partial batch responses. NewHandler builds such a handler from the
	// consumer's resources (the stack's DynamoDB client, its state table),
	// which exist only once Start runs. SQSHandler instead builds the whole
	// SQS handler (an *sqsconsumer.Handler's Handle, or anything answering
	// events.SQSEvent with a partial batch response) from them. Exactly one
	// of the three is required; an error a builder returns fails Start.
	Handler    sqsconsumer.EventHandler
	NewHandler func(ConsumerEnv) (sqsconsumer.EventHandler, error)
	SQSHandler func(ConsumerEnv) (localrt.SQSHandler, error)
	// StateTable is the consumer's own table for its dedup state (markers,
	// ordering gates, resequencer buffer). Unless Tables creates a table
	// of that name, Start creates it as
	// dedup.CreateTableInput(StateTable) (with the state index). Optional;
	// Stack.Buffered lists an ordered consumer's buffer from it.
	StateTable string
}

// ConsumerEnv is what a Consumer.NewHandler or SQSHandler gets to build its handler: the
// consumer's queues, table and the stack's clients.
type ConsumerEnv struct {
	// Name is the consumer's name; Source the stack's event source.
	Name, Source string
	// QueueURL and DLQURL are the consumer's queue and DLQ.
	QueueURL, DLQURL string
	// StateTable is Consumer.StateTable.
	StateTable string
	// SQS sends to the DLQ (SendMessage) and changes visibility on the
	// queue (ChangeMessageVisibility): an sqsconsumer.Config's DLQ and Queue.
	SQS ConsumerQueues
	// DDB is the stack's DynamoDB client.
	DDB *dynamodb.Client
}

// Environment returns the environment variables the consumer construct
// sets for this consumer on AWS: config.EnvConsumerTable (when StateTable
// is set), config.EnvEventSource and config.EnvConsumerDLQURL, for
// handlers configured from the environment.
func (e ConsumerEnv) Environment() map[string]string {
	env := map[string]string{config.EnvEventSource: e.Source, config.EnvConsumerDLQURL: e.DLQURL}
	if e.StateTable != "" {
		env[config.EnvConsumerTable] = e.StateTable
	}
	return env
}

// Defaults of the stack's intervals and consumer settings.
const (
	DefaultPollInterval            = 20 * time.Millisecond
	DefaultReconcileEvery          = time.Second
	DefaultReconcileAfter          = 2 * time.Second
	DefaultSweepEvery              = time.Second
	DefaultConsumerFunctionTimeout = 10 * time.Second
	DefaultConsumerMaxReceiveCount = 5
)

func (c *Config) setDefaults() {
	if c.PendingShards == 0 {
		c.PendingShards = config.DefaultPendingShards
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ReconcileEvery <= 0 {
		c.ReconcileEvery = DefaultReconcileEvery
	}
	if c.ReconcileAfter <= 0 {
		c.ReconcileAfter = DefaultReconcileAfter
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = DefaultSweepEvery
	}
	if c.RelayFunctionTimeout <= 0 {
		c.RelayFunctionTimeout = config.DefaultRelayTimeout
	}
	if c.ConsumerFunctionTimeout <= 0 {
		c.ConsumerFunctionTimeout = DefaultConsumerFunctionTimeout
	}
	c.ConsumerVisibilityTimeout = max(c.ConsumerVisibilityTimeout, c.ConsumerFunctionTimeout)
	if c.ConsumerMaxReceiveCount <= 0 {
		c.ConsumerMaxReceiveCount = DefaultConsumerMaxReceiveCount
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = io.Discard
	}
}

// validate checks what Start needs before anything starts.
func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.OutboxTable == "":
		return bad("OutboxTable is required")
	case c.Source == "":
		return bad("Source is required (the event source the writers use)")
	case strings.HasPrefix(c.Source, "aws."):
		return bad("Source %q: EventBridge refuses sources starting with \"aws.\"", c.Source)
	case c.BusName == "":
		return bad("BusName is required")
	case c.DataFile != "" && c.Endpoint != "":
		return bad("DataFile %q keeps the data of the Dynoxide Start starts, but with Endpoint %q none starts: give one of them", c.DataFile, c.Endpoint)
	case c.PendingShards < 1 || c.PendingShards > config.MaxPendingShards:
		return bad("PendingShards %d out of range 1..%d", c.PendingShards, config.MaxPendingShards)
	}
	if c.Region != "" {
		if err := config.ValidRegionName(c.Region); err != nil {
			return bad("Region: %v", err)
		}
	}
	names := map[string]bool{}
	for i, cs := range c.Consumers {
		switch {
		case cs.Name == "":
			return bad("Consumers[%d]: Name is required", i)
		case names[cs.Name]:
			return bad("Consumers[%d]: name %q used twice", i, cs.Name)
		case !validConsumerName(cs.Name, cs.Ordered):
			return bad("Consumers[%d]: name %q: the stack names the consumer's queues and rules after it (%s), so it must be "+
				"1..%d letters, digits, hyphens or underscores (SQS queue names: alphanumerics, - and _, at most 80 characters; "+
				"EventBridge rule names: at most %d characters)", i, cs.Name, derivedNames(cs), maxConsumerName(cs.Ordered), maxRuleName)
		case (cs.AggregateType == "") == (cs.Pattern == nil):
			return bad("consumer %s: give exactly one of AggregateType and Pattern", cs.Name)
		case cs.Ordered && cs.Pattern != nil:
			if key := narrowingKey(cs.Pattern); key != "" {
				return bad("ordered consumer %s: Pattern matches on %s, which can drop some event types of an aggregate: an ordered "+
					"consumer waits for each sequence of an aggregate, and a sequence its rule drops never arrives and stalls that "+
					"aggregate for ever (docs/ORDERING.md). Give AggregateType (the rule then matches every event of it), or a Pattern "+
					"on source and detail.aggregate_type only", cs.Name, key)
			}
		case btoi(cs.Handler != nil)+btoi(cs.NewHandler != nil)+btoi(cs.SQSHandler != nil) != 1:
			return bad("consumer %s: give exactly one of Handler, NewHandler and SQSHandler", cs.Name)
		}
		if cs.StateTable == c.OutboxTable {
			return bad("consumer %s: StateTable %q is the outbox table: a consumer's state (dedup markers, gates, buffer) lives in its own table", cs.Name, cs.StateTable)
		}
		names[cs.Name] = true
	}
	if err := c.validateForwards(bad); err != nil {
		return err
	}
	tables := map[string]bool{}
	for i, t := range c.Tables {
		name := ""
		if t != nil {
			name = aws.ToString(t.TableName)
		}
		switch {
		case name == "":
			return bad("Tables[%d]: a CreateTableInput with a TableName is required", i)
		case name == c.OutboxTable:
			return bad("Tables[%d]: %q is the outbox table, which Start creates (outbox.CreateTableInput); name your business tables otherwise", i, name)
		case tables[name]:
			return bad("Tables[%d]: table %q given twice", i, name)
		default:
			tables[name] = true
		}
	}
	return nil
}

// Names the stack derives from a consumer's name: its queue <Name>, DLQ
// <Name>-dlq, rule <Name>-rule and the rule's DLQ <Name>-rule-dlq, and
// for an ordered consumer the sweep schedule <Name>-resequencer-sweep.
const (
	ruleSuffix  = "-rule"
	sweepSuffix = "-resequencer-sweep"
	// maxRuleName is EventBridge's rule name limit (PutRule: 1..64 of
	// [.-_A-Za-z0-9]); SQS queue names are 1..80 of [-_A-Za-z0-9]
	// (CreateQueue), so the rule names bind first.
	maxRuleName = 64
)

func maxConsumerName(ordered bool) int {
	if ordered {
		return maxRuleName - len(sweepSuffix)
	}
	return maxRuleName - len(ruleSuffix)
}

func validConsumerName(name string, ordered bool) bool {
	if len(name) == 0 || len(name) > maxConsumerName(ordered) {
		return false
	}
	for _, r := range name {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func derivedNames(cs Consumer) string {
	n := []string{cs.Name, cs.Name + "-dlq", cs.Name + ruleSuffix, cs.Name + ruleSuffix + "-dlq"}
	if cs.Ordered {
		n = append(n, cs.Name+sweepSuffix)
	}
	return strings.Join(n, ", ")
}

// narrowingKey returns the first field of an event pattern that selects
// events within an aggregate — anything but source, account, region and
// detail.aggregate_type (e.g. detail-type, detail.event_type, $or) — or ""
// when the pattern selects whole aggregates (or is not a JSON object: the
// bus reports that).
func narrowingKey(pattern any) string {
	var raw []byte
	switch v := pattern.(type) {
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	case json.RawMessage:
		raw = v
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return ""
		}
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch k {
		case "source", "account", "region":
		case "detail":
			var d map[string]json.RawMessage
			if json.Unmarshal(p[k], &d) != nil {
				return "detail"
			}
			dk := make([]string, 0, len(d))
			for k := range d {
				dk = append(dk, k)
			}
			sort.Strings(dk)
			for _, k := range dk {
				if k != "aggregate_type" {
					return "detail." + k
				}
			}
		default:
			return k
		}
	}
	return ""
}

// rulePattern is the consumer's rule's event pattern.
func (cs Consumer) rulePattern(source string) any {
	if cs.AggregateType != "" {
		return map[string]any{"source": []any{source}, "detail": map[string]any{"aggregate_type": []any{cs.AggregateType}}}
	}
	return cs.Pattern
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
