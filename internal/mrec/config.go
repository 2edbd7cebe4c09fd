// Package mrec is a test-only stand-in for DynamoDB global tables version
// 2019.11.21 in multi-Region eventual consistency (MREC): it replicates the
// items of a set of tables between two or more DynamoDB-compatible servers
// (one per "Region", typically Dynoxide), reading each Region's DynamoDB
// Stream and writing what it reads into the other Regions.
//
// What it models, and the AWS text behind each point (docs/MULTI-REGION.md
// has the sources):
//
//   - Every replica's stream carries all its writes, local and replicated
//     ("Each global table produces an independent stream based on all its
//     writes, regardless of the origination point"): the replicated writes
//     land in the destination's stream because they are ordinary writes
//     there. The replicator remembers what it applied (Region, table, key,
//     image hash) and skips those records when it reads them back, so
//     nothing loops. It never adds an attribute to an item (2019.11.21
//     tables add no aws:rep:* attributes).
//   - Items replicate one by one, each with its own delay (log-normal with
//     an optional long tail): the items of one transaction can arrive apart
//     and in any order ("Items that are updated within a single transaction
//     might not be replicated together"); different keys reorder; one key is
//     delivered in write order, and a pending image superseded by a newer
//     one before its delivery is dropped (coalesced): only the newest is
//     written.
//   - Conflicts resolve per item by last writer wins on a timestamp kept
//     outside the items (the replicator's map (Region, table, key) →
//     (timestamp, origin Region)); a replicated write older than the
//     destination's current version is suppressed. The timestamp is the
//     time the replicator read the local write from its Region's stream
//     (an approximation of DynamoDB's internal write timestamp, which is
//     not exposed), from one clock that never repeats a value; equal
//     timestamps are broken by Region name (the greater name wins).
//   - A REMOVE record replicates as a plain DeleteItem; a TTL delete (a
//     REMOVE with userIdentity Service / dynamodb.amazonaws.com) replicates
//     as a plain delete too, so the replica's record carries no
//     userIdentity ("These replicated writes do not contain type or
//     principalID properties").
//   - Pause/Resume stop one direction (the AWS FIS action
//     aws:dynamodb:global-table-pause-replication); Lose/Recover cut a Region
//     off in both directions. Held writes are never dropped ("All previously
//     successful writes will be propagated eventually no matter how long the
//     Region is isolated"); they are delivered on Resume/Recover, subject to
//     last writer wins.
//
// Not modelled: replication of table settings, GSIs (each server maintains
// its own), MRSC, and an exact DynamoDB write timestamp. A replicated write
// is applied only when the destination item is the one the replicator last
// saw there (GetItem, consistent), so a local write not yet read from the
// destination's stream is not overwritten by an older replicated image;
// a local write landing between that GetItem and the PutItem (about a
// millisecond) can still be overwritten, where DynamoDB would compare the
// timestamps atomically.
//
// Use (in a test, with two DynamoDB-compatible servers whose tables have the
// same name and a NEW_IMAGE or NEW_AND_OLD_IMAGES stream):
//
//	rep, err := mrec.Start(ctx, mrec.Config{
//		Regions: []mrec.Region{
//			{Name: "eu-west-1", DDB: a.DDB, Streams: a.Streams},
//			{Name: "us-east-1", DDB: b.DDB, Streams: b.Streams},
//		},
//		Tables: []string{outboxTable, ordersTable},
//		Seed:   42,
//	})
//	defer rep.Close()
//	rep.Pause("eu-west-1", "us-east-1") // FIS-style pause of one direction
//	rep.Lose("eu-west-1")               // a Region cut off both ways
//	err = rep.Settle(ctx)               // every earlier write delivered (held ones excepted)
//	st := rep.Stats()                   // replicated, coalesced, reordered, suppressed, held
//
// Streams are read from TRIM_HORIZON by default (writes made before Start
// replicate too, like a replica added to a table that holds items), or
// from LATEST for the shards listed at Start (Config.StartingPosition);
// every shard is read, a parent before its children, new shards are found
// by DescribeStream every Config.ShardDiscoveryInterval, and an expired or
// trimmed iterator is acquired again.
//
// Randomness (delays, tails) is a pure function of Config.Seed, the
// direction, the table, the key and the image, so two runs with one seed
// draw the same delays whatever the goroutine interleaving; only timing
// (when records are read, how long writes take) differs.
package mrec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// DynamoDBAPI is the part of the DynamoDB API the replicator calls in one
// Region, with the exact signatures of *dynamodb.Client. It must be safe for
// concurrent use.
type DynamoDBAPI interface {
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// StreamsAPI is the part of the DynamoDB Streams API the replicator calls in
// one Region, with the exact signatures of *dynamodbstreams.Client. It must
// be safe for concurrent use.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, params *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, params *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, params *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// Region is one replica: a DynamoDB-compatible endpoint with Streams.
type Region struct {
	// Name is the Region code ("eu-west-1"), checked by
	// config.ValidRegionName; it names the Region in Pause, Lose and Stats
	// and breaks timestamp ties.
	Name string
	// DDB reads and writes the Region's tables.
	DDB DynamoDBAPI
	// Streams reads the Region's table streams.
	Streams StreamsAPI
}

// StartingPosition is where the replicator starts reading each stream.
type StartingPosition string

// Starting positions.
const (
	// TrimHorizon (the default) reads every record still in each stream, so
	// writes made before Start are replicated too, as when a replica is
	// added to a table that already holds items.
	TrimHorizon StartingPosition = "TRIM_HORIZON"
	// Latest reads only records written after Start, in the shards listed at
	// Start; shards found later are read from their start.
	Latest StartingPosition = "LATEST"
)

// Defaults of Config.
const (
	// DefaultDelayMedian is the median per-item replication delay. AWS:
	// "usually … within a second", no SLA.
	DefaultDelayMedian = 20 * time.Millisecond
	// DefaultDelaySigma is the log-normal sigma (of ln(delay)).
	DefaultDelaySigma = 0.5
	// DefaultTailShortest and DefaultTailLongest bound the tail delay when TailProb
	// is set and TailMin/TailMax are not.
	DefaultTailShortest = time.Second
	DefaultTailLongest  = 3 * time.Second
	// DefaultPollInterval is the wait after a GetRecords call that returned
	// nothing new.
	DefaultPollInterval = 10 * time.Millisecond
	// DefaultShardDiscoveryInterval is the DescribeStream period (AWS allows
	// 10 DescribeStream calls per second).
	DefaultShardDiscoveryInterval = 500 * time.Millisecond
	// DefaultWorkers is the number of concurrent writes per destination.
	DefaultWorkers = 8
	// getRecordsLimit is the GetRecords maximum (1,000 records per call).
	getRecordsLimit = 1000
	// callTimeout bounds each API call.
	callTimeout = 10 * time.Second
)

// Config configures Start.
type Config struct {
	// Regions are the replicas (at least two, distinct names).
	Regions []Region
	// Tables are the replicated tables, with the same name and key schema in
	// every Region, each with a stream of view type NEW_IMAGE or
	// NEW_AND_OLD_IMAGES (the replicator writes NewImage; OldImage is not
	// read).
	Tables []string
	// Seed makes the delays reproducible (see the package doc).
	Seed int64
	// DelayMedian and DelaySigma shape the log-normal per-item delay
	// (zero means DefaultDelayMedian, DefaultDelaySigma; negative is an
	// error; a tiny sigma gives an almost fixed delay). The delay runs from
	// the moment the record is read from the source stream.
	DelayMedian time.Duration
	DelaySigma  float64
	// TailProb is the probability (0..1) that an item takes the long tail
	// instead: a delay uniform in [TailMin, TailMax] (defaults
	// DefaultTailShortest, DefaultTailLongest). 0 (the default) means no tail.
	TailProb float64
	TailMin  time.Duration
	TailMax  time.Duration
	// StartingPosition is TrimHorizon (default) or Latest.
	StartingPosition StartingPosition
	// PollInterval is the wait between GetRecords calls on a shard that
	// returned nothing (default DefaultPollInterval).
	PollInterval time.Duration
	// ShardDiscoveryInterval is the DescribeStream period (default
	// DefaultShardDiscoveryInterval).
	ShardDiscoveryInterval time.Duration
	// Workers is the number of concurrent writes per destination Region
	// (default DefaultWorkers). Writes of one key are never concurrent.
	Workers int
	// Logger receives the replicator's logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.DelayMedian == 0 {
		c.DelayMedian = DefaultDelayMedian
	}
	if c.DelaySigma == 0 {
		c.DelaySigma = DefaultDelaySigma
	}
	if c.TailMin == 0 {
		c.TailMin = DefaultTailShortest
	}
	if c.TailMax == 0 {
		c.TailMax = DefaultTailLongest
	}
	if c.StartingPosition == "" {
		c.StartingPosition = TrimHorizon
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ShardDiscoveryInterval == 0 {
		c.ShardDiscoveryInterval = DefaultShardDiscoveryInterval
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("mrec: invalid config")

// Validate reports the first problem of c (after defaults), wrapping
// ErrInvalidConfig.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if len(c.Regions) < 2 {
		return bad("need at least two Regions, got %d", len(c.Regions))
	}
	seen := map[string]bool{}
	for i, r := range c.Regions {
		if err := config.ValidRegionName(r.Name); err != nil {
			return bad("Regions[%d]: %v", i, err)
		}
		if seen[r.Name] {
			return bad("Region %s listed twice", r.Name)
		}
		seen[r.Name] = true
		if r.DDB == nil || r.Streams == nil {
			return bad("Region %s: DDB and Streams are required", r.Name)
		}
	}
	if len(c.Tables) == 0 {
		return bad("no Tables")
	}
	tables := map[string]bool{}
	for _, t := range c.Tables {
		if t == "" || tables[t] {
			return bad("table name %q empty or listed twice", t)
		}
		tables[t] = true
	}
	switch {
	case c.DelayMedian < 0:
		return bad("DelayMedian %s is negative", c.DelayMedian)
	case c.DelaySigma < 0:
		return bad("DelaySigma %g is negative", c.DelaySigma)
	case c.TailProb < 0 || c.TailProb > 1:
		return bad("TailProb %g is not in [0, 1]", c.TailProb)
	case c.TailMin < 0 || c.TailMax < c.TailMin:
		return bad("tail [%s, %s] is not a range", c.TailMin, c.TailMax)
	case c.StartingPosition != TrimHorizon && c.StartingPosition != Latest:
		return bad("StartingPosition %q (want %s or %s)", c.StartingPosition, TrimHorizon, Latest)
	case c.PollInterval < 0 || c.ShardDiscoveryInterval < 0:
		return bad("negative PollInterval or ShardDiscoveryInterval")
	case c.Workers < 0:
		return bad("Workers %d is negative", c.Workers)
	}
	return nil
}
