package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// StreamPoller is a local stand-in for a Lambda event source mapping on a
// DynamoDB stream (https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html).
// It discovers shards with DescribeStream, reads a parent shard to its end
// before its children, reads each shard's records strictly in order with one
// batch in flight per shard (ParallelizationFactor 1), filters, batches,
// builds the exact JSON Lambda sends, decodes it into events.DynamoDBEvent,
// invokes the handler, interprets partial batch responses, retries, bisects,
// sends metadata of given-up batches to the on-failure destination and
// checkpoints only after success. Delivery is at-least-once.
type StreamPoller struct {
	cfg     StreamPollerConfig
	handler StreamHandler
	filters []*Pattern
	log     *slog.Logger

	running atomic.Bool

	mu          sync.Mutex
	streamARN   string
	initialized bool
	shards      map[string]*shardState
	stats       StreamPollerStats
}

type shardState struct {
	id, parent   string
	started      bool
	ran          bool // read by an earlier Run (its next start is not "first")
	done         bool
	initial      StartingPosition
	checkpoint   string
	pollsStarted int64
	lastEmpty    int64
}

// item is one stream record waiting in a shard's buffer.
type item struct {
	seq     string
	raw     json.RawMessage
	matched bool
	arrival time.Time
	due     time.Time // StreamPollerConfig.DeliverAt; zero: deliverable now
}

// NewStreamPoller validates cfg (after defaults) and returns a poller that
// invokes h. It returns an error for an invalid configuration or filter
// pattern. Start it with Run.
func NewStreamPoller(cfg StreamPollerConfig, h StreamHandler) (*StreamPoller, error) {
	if h == nil {
		return nil, errors.New("localrt: stream handler is nil")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &StreamPoller{cfg: cfg, handler: h, log: cfg.Logger.With("component", "stream-poller"), shards: map[string]*shardState{}}
	if !cfg.DisableFilter {
		for i, f := range cfg.FilterPatterns {
			c, err := CompilePatternFor(f, LambdaFilter)
			if err != nil {
				return nil, fmt.Errorf("filter %d: %w", i, err)
			}
			p.filters = append(p.filters, c)
		}
	}
	for sh, seq := range cfg.Checkpoints {
		p.shards[sh] = &shardState{id: sh, checkpoint: seq}
	}
	return p, nil
}

// StreamARN returns the stream being read, empty until Run resolved it.
func (p *StreamPoller) StreamARN() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streamARN
}

// FunctionARN returns the local ARN of the handler, as put in on-failure
// records: arn:aws:lambda:<region>:<account>:function:<FunctionName>.
func (p *StreamPoller) FunctionARN() string {
	return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", p.cfg.Region, p.cfg.Account, p.cfg.FunctionName)
}

// Checkpoint returns shard id → last processed sequence number (delivered
// successfully, given up, or filtered out). Pass it as
// StreamPollerConfig.Checkpoints to resume after a restart.
func (p *StreamPoller) Checkpoint() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkpointsLocked()
}

func (p *StreamPoller) checkpointsLocked() map[string]string {
	m := map[string]string{}
	for id, s := range p.shards {
		if s.checkpoint != "" {
			m[id] = s.checkpoint
		}
	}
	return m
}

// Stats returns a snapshot of the counters and checkpoints.
func (p *StreamPoller) Stats() StreamPollerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Checkpoints = p.checkpointsLocked()
	return s
}

// CaughtUp reports whether, right now, every known shard is finished or its
// latest GetRecords returned nothing with no record buffered or in flight.
// See WaitCaughtUp for a race-free wait after writing.
func (p *StreamPoller) CaughtUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized {
		return false
	}
	for _, s := range p.shards {
		if s.done {
			continue
		}
		if !s.started || s.pollsStarted == 0 || s.lastEmpty != s.pollsStarted {
			return false
		}
	}
	return true
}

// WaitCaughtUp blocks until every shard is finished or has completed a
// GetRecords call that started after WaitCaughtUp was called, returned no
// records and left nothing buffered or in flight: everything written before
// the call has been delivered, filtered or given up. It returns ctx.Err() if
// ctx ends first. Run must be running (or about to be).
func (p *StreamPoller) WaitCaughtUp(ctx context.Context) error {
	var snap map[string]int64
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		p.mu.Lock()
		if p.initialized {
			if snap == nil {
				snap = map[string]int64{}
				for id, s := range p.shards {
					snap[id] = s.pollsStarted
				}
			}
			ok := true
			for id, s := range p.shards {
				if s.done {
					continue
				}
				if !s.started || s.lastEmpty <= snap[id] || s.lastEmpty != s.pollsStarted {
					ok = false
					break
				}
			}
			if ok {
				p.mu.Unlock()
				return nil
			}
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Run polls the stream and invokes the handler until ctx ends, then waits for
// in-flight invocations to finish and returns nil. Run may be called again
// after it returned: it resumes every shard after its checkpoint, as a
// disabled and re-enabled event source mapping does (a shard an earlier Run
// read from LATEST without reaching a checkpoint restarts at TRIM_HORIZON:
// duplicates, never a gap). It returns an error when
// the stream ARN cannot be resolved or Run is already running. Transient
// Streams errors are logged and retried.
func (p *StreamPoller) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("localrt: stream poller already running")
	}
	defer p.running.Store(false)
	arn, err := p.resolveARN(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.streamARN = arn
	p.mu.Unlock()
	p.log.Info("stream poller started", "stream_arn", arn, "batch_size", p.cfg.BatchSize,
		"starting_position", p.cfg.StartingPosition, "max_retry_attempts", p.cfg.MaximumRetryAttempts)

	var wg sync.WaitGroup
	wake := make(chan struct{}, 1)
	first := true
	failures := 0
	for {
		shards, err := p.describe(ctx, arn)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			p.log.Warn("describe stream failed", "stream_arn", arn, "error", err)
		} else {
			failures = 0
			p.startShards(ctx, shards, first, &wg, wake)
			first = false
		}
		wait := p.cfg.ShardDiscoveryInterval
		if failures > 0 {
			wait = p.backoff(failures)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			wg.Wait()
			p.stopped()
			p.log.Info("stream poller stopped", "stream_arn", arn)
			return nil
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
	wg.Wait()
	p.stopped()
	return nil
}

// stopped marks every unfinished shard as not being read, so that the next
// Run starts it again after its checkpoint (AFTER_SEQUENCE_NUMBER): a
// stopped event source mapping keeps its position, and the records it had
// not processed (read, buffered or in flight) are read again.
func (p *StreamPoller) stopped() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.shards {
		if !s.done && s.started {
			s.started, s.ran = false, true
		}
	}
}

func (p *StreamPoller) resolveARN(ctx context.Context) (string, error) {
	if p.cfg.StreamARN != "" {
		return p.cfg.StreamARN, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := p.cfg.Tables.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: aws.String(p.cfg.TableName)})
	if err != nil {
		return "", fmt.Errorf("localrt: describe table %s: %w", p.cfg.TableName, err)
	}
	if out.Table == nil || aws.ToString(out.Table.LatestStreamArn) == "" {
		return "", fmt.Errorf("localrt: table %s has no stream", p.cfg.TableName)
	}
	return aws.ToString(out.Table.LatestStreamArn), nil
}

// describe lists every shard of the stream, following LastEvaluatedShardId.
func (p *StreamPoller) describe(ctx context.Context, arn string) ([]streamtypes.Shard, error) {
	var shards []streamtypes.Shard
	var start *string
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := p.cfg.Streams.DescribeStream(cctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn), ExclusiveStartShardId: start})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("describe stream %s: %w", arn, err)
		}
		if out.StreamDescription == nil {
			return shards, nil
		}
		shards = append(shards, out.StreamDescription.Shards...)
		start = out.StreamDescription.LastEvaluatedShardId
		if aws.ToString(start) == "" {
			return shards, nil
		}
	}
}

// startShards records newly seen shards and starts a worker for every shard
// whose parent is finished (or no longer listed).
func (p *StreamPoller) startShards(ctx context.Context, shards []streamtypes.Shard, first bool, wg *sync.WaitGroup, wake chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	listed := map[string]bool{}
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		listed[id] = true
		s, ok := p.shards[id]
		if !ok {
			s = &shardState{id: id}
			p.shards[id] = s
		}
		s.parent = aws.ToString(sh.ParentShardId)
	}
	ids := make([]string, 0, len(p.shards))
	for id := range p.shards {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := p.shards[id]
		if s.started || s.done || !listed[id] {
			continue
		}
		if par, ok := p.shards[s.parent]; ok && s.parent != "" && listed[s.parent] && !par.done {
			continue
		}
		s.initial = StartingPositionTrimHorizon
		// EndingSequenceNumber is not trusted to mean "closed" (Dynoxide
		// reports it on its open shard); a closed shard read at LATEST just
		// ends at once, and its children are then read from TRIM_HORIZON.
		if first && !s.ran && p.cfg.StartingPosition == StartingPositionLatest && s.checkpoint == "" {
			s.initial = StartingPositionLatest
		}
		s.started = true
		wg.Add(1)
		go func(s *shardState) {
			defer wg.Done()
			p.runShard(ctx, s)
			select {
			case wake <- struct{}{}:
			default:
			}
		}(s)
	}
	p.initialized = true
}
