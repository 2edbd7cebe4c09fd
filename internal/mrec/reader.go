package mrec

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/cenkalti/backoff/v5"
)

// streamReader reads one table's stream in one Region: it lists the shards
// with DescribeStream every ShardDiscoveryInterval and reads each shard in
// its own goroutine, a parent to its end before its children (fields
// guarded by Replicator.mu).
type streamReader struct {
	region, table, arn string
	shards             map[string]*shardState
	discovered         time.Time // start of the last successful DescribeStream
	wake               chan struct{}
}

type shardState struct {
	id, parent string
	initial    StartingPosition
	started    bool
	done       bool      // read to its end (closed shard)
	caughtUp   time.Time // start of the last GetRecords that returned a partial page
	checkpoint string    // last sequence number read
}

// readersPast reports whether every stream was described, and every shard
// polled to its end, by a call started after mark (Settle's watermark).
func (r *Replicator) readersPast(mark time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readersPastLocked("", "", mark)
}

// readersPastLocked is readersPast for the streams of one Region and table
// ("" for all).
func (r *Replicator) readersPastLocked(region, table string, mark time.Time) bool {
	for _, sr := range r.readers {
		if region != "" && sr.region != region || table != "" && sr.table != table {
			continue
		}
		if region == "" && sr.discovered.Before(mark) {
			return false
		}
		for _, s := range sr.shards {
			if !s.done && (!s.started || s.caughtUp.Before(mark)) {
				return false
			}
		}
	}
	return true
}

// runStream discovers sr's shards until the replicator closes.
func (r *Replicator) runStream(sr *streamReader) {
	first := true
	bo := backoff.NewExponentialBackOff()
	bo.MaxInterval = 5 * time.Second
	for {
		wait := r.cfg.ShardDiscoveryInterval
		started := time.Now()
		shards, err := r.describe(sr)
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.count(sr.region, func(s *RegionStats) { s.ReadErrors++ })
			r.cfg.Logger.Warn("mrec: describe stream failed", "region", sr.region, "table", sr.table, "error", err)
			wait = bo.NextBackOff()
		} else {
			bo.Reset()
			r.startShards(sr, shards, first, started)
			first = false
		}
		timer := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			return
		case <-sr.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// describe lists every shard of sr's stream, following LastEvaluatedShardId.
func (r *Replicator) describe(sr *streamReader) ([]streamtypes.Shard, error) {
	streams := r.regions[sr.region].Streams
	var shards []streamtypes.Shard
	var start *string
	for {
		ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
		out, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(sr.arn), ExclusiveStartShardId: start})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("describe stream %s: %w", sr.arn, err)
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

// startShards records new shards and starts a reader for every listed
// shard whose parent is read to its end or no longer listed. At the first
// listing with StartingPosition Latest, shards start at LATEST; every other
// shard starts at TRIM_HORIZON.
func (r *Replicator) startShards(sr *streamReader, shards []streamtypes.Shard, first bool, started time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed := map[string]bool{}
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		listed[id] = true
		if sr.shards[id] == nil {
			sr.shards[id] = &shardState{id: id, parent: aws.ToString(sh.ParentShardId)}
			r.regions[sr.region].stats.Shards++
		}
	}
	ids := make([]string, 0, len(sr.shards))
	for id := range sr.shards {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := sr.shards[id]
		if s.started || s.done || !listed[id] {
			continue
		}
		if p := sr.shards[s.parent]; p != nil && listed[s.parent] && !p.done {
			continue
		}
		s.initial = TrimHorizon
		if first && r.cfg.StartingPosition == Latest {
			s.initial = Latest
		}
		s.started = true
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.runShard(sr, s) }()
	}
	sr.discovered = started
}

// runShard reads shard s until its end or the replicator closes. An
// expired iterator is acquired again after the checkpoint; a trimmed one
// restarts at TRIM_HORIZON (records were lost: logged and counted).
func (r *Replicator) runShard(sr *streamReader, s *shardState) {
	streams := r.regions[sr.region].Streams
	log := r.cfg.Logger.With("region", sr.region, "table", sr.table, "shard_id", s.id)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 10 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	var iter string
	need, trim := true, false
	for r.ctx.Err() == nil {
		if need {
			it, err := r.acquireIterator(sr, s, trim)
			if err != nil {
				if r.ctx.Err() != nil {
					return
				}
				var trimmed *streamtypes.TrimmedDataAccessException
				if errors.As(err, &trimmed) {
					r.count(sr.region, func(st *RegionStats) { st.TrimmedData++ })
					log.Warn("mrec: checkpoint before the trim horizon; records were lost, restarting at TRIM_HORIZON")
					trim = true
					continue
				}
				r.count(sr.region, func(st *RegionStats) { st.ReadErrors++ })
				log.Warn("mrec: get shard iterator failed", "error", err)
				if !sleep(r.ctx, bo.NextBackOff()) {
					return
				}
				continue
			}
			iter, need, trim = it, false, false
			if iter == "" {
				r.shardDone(sr, s)
				return
			}
		}
		pollStart := time.Now()
		ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(getRecordsLimit)})
		cancel()
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			var expired *streamtypes.ExpiredIteratorException
			var trimmed *streamtypes.TrimmedDataAccessException
			switch {
			case errors.As(err, &expired):
				r.count(sr.region, func(st *RegionStats) { st.ExpiredIterators++ })
				log.Info("mrec: shard iterator expired; acquiring a new one after the checkpoint")
				need = true
			case errors.As(err, &trimmed):
				r.count(sr.region, func(st *RegionStats) { st.TrimmedData++ })
				log.Warn("mrec: reading before the trim horizon; records were lost, restarting at TRIM_HORIZON")
				need, trim = true, true
			default:
				r.count(sr.region, func(st *RegionStats) { st.ReadErrors++ })
				log.Warn("mrec: get records failed", "error", err)
				if !sleep(r.ctx, bo.NextBackOff()) {
					return
				}
			}
			continue
		}
		bo.Reset()
		r.handleRecords(sr, s, out.Records, len(out.Records) < getRecordsLimit, pollStart)
		if out.NextShardIterator == nil {
			r.shardDone(sr, s)
			return
		}
		iter = aws.ToString(out.NextShardIterator)
		if len(out.Records) == 0 && !sleep(r.ctx, r.cfg.PollInterval) {
			return
		}
	}
}

func (r *Replicator) acquireIterator(sr *streamReader, s *shardState, trim bool) (string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(sr.arn), ShardId: aws.String(s.id)}
	r.mu.Lock()
	cp, initial := s.checkpoint, s.initial
	r.mu.Unlock()
	switch {
	case trim:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeTrimHorizon
	case cp != "":
		in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(cp)
	case initial == Latest:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeLatest
	default:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeTrimHorizon
	}
	ctx, cancel := context.WithTimeout(r.ctx, callTimeout)
	defer cancel()
	out, err := r.regions[sr.region].Streams.GetShardIterator(ctx, in)
	if err != nil {
		return "", fmt.Errorf("get shard iterator %s %s: %w", s.id, in.ShardIteratorType, err)
	}
	return aws.ToString(out.ShardIterator), nil
}

func (r *Replicator) shardDone(sr *streamReader, s *shardState) {
	r.mu.Lock()
	s.done = true
	r.mu.Unlock()
	sr.signal() // start the children now
}

// signal asks for a DescribeStream now.
func (sr *streamReader) signal() {
	select {
	case sr.wake <- struct{}{}:
	default:
	}
}

// handleRecords processes one GetRecords page of sr's shard s: a record of
// the replicator's own write is skipped (its echo); any other is a local
// write, versioned now and queued for every other Region.
func (r *Replicator) handleRecords(sr *streamReader, s *shardState, recs []streamtypes.Record, partial bool, pollStart time.Time) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.regions[sr.region]
	for _, rec := range recs {
		rs.stats.RecordsRead++
		if rec.Dynamodb != nil && rec.Dynamodb.SequenceNumber != nil {
			s.checkpoint = *rec.Dynamodb.SequenceNumber
		}
		w, err := recordToWrite(sr.table, rec)
		if err != nil {
			rs.stats.BadRecords++
			r.cfg.Logger.Error("mrec: stream record skipped", "region", sr.region, "table", sr.table, "event_id", aws.ToString(rec.EventID), "error", err)
			continue
		}
		tk := tableKey{w.table, w.keyStr}
		if m := rs.echo[tk]; m[w.hash] > 0 {
			if m[w.hash]--; m[w.hash] == 0 {
				delete(m, w.hash)
			}
			if len(m) == 0 {
				delete(rs.echo, tk)
			}
			rs.stats.EchoesSkipped++
			continue
		}
		rs.stats.LocalWrites++
		v := version{ts: r.tick(), origin: sr.region}
		ik := itemKey{sr.region, tk}
		r.ver[ik] = v
		r.known[ik] = w.hash
		for _, d := range r.dirs {
			if d.from == sr.region {
				r.enqueueLocked(d, w, v, now)
			}
		}
	}
	if partial {
		s.caughtUp = pollStart
	}
}

func (r *Replicator) count(region string, f func(*RegionStats)) {
	r.mu.Lock()
	f(&r.regions[region].stats)
	r.mu.Unlock()
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
