package localrt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// runShard reads one shard to its end (or until ctx ends).
func (p *StreamPoller) runShard(ctx context.Context, s *shardState) {
	log := p.log.With("shard_id", s.id)
	var (
		iter        string
		needIter    = true
		forceTrim   = false
		ended       = false
		buf         []*item
		windowStart time.Time
		errCount    = 0
	)
	for ctx.Err() == nil {
		if needIter {
			it, err := p.acquireIterator(ctx, s, forceTrim)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var trimmed *streamtypes.TrimmedDataAccessException
				if errors.As(err, &trimmed) {
					p.count(func(st *StreamPollerStats) { st.TrimmedDataErrors++ })
					log.Warn("checkpoint is before the trim horizon; records were lost, restarting at TRIM_HORIZON", "checkpoint", p.checkpointOf(s))
					forceTrim = true
					continue
				}
				errCount++
				log.Warn("get shard iterator failed", "error", err)
				if !sleepCtx(ctx, p.backoff(errCount)) {
					return
				}
				continue
			}
			iter, needIter, forceTrim, errCount = it, false, false, 0
			ended = iter == ""
		}

		polledEmpty, polled := false, false
		if !ended && matchedCount(buf) < p.cfg.BatchSize && payloadSize(buf) < MaxInvokePayloadBytes {
			polled = true
			pollNo := p.startPoll(s)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := p.cfg.Streams.GetRecords(cctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(getRecordsLimit)})
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var expired *streamtypes.ExpiredIteratorException
				var trimmed *streamtypes.TrimmedDataAccessException
				switch {
				case errors.As(err, &expired):
					p.count(func(st *StreamPollerStats) { st.ExpiredIterators++ })
					log.Info("shard iterator expired; re-acquiring after the checkpoint", "checkpoint", p.checkpointOf(s))
				case errors.As(err, &trimmed):
					p.count(func(st *StreamPollerStats) { st.TrimmedDataErrors++ })
					log.Warn("reading before the trim horizon; records were lost, restarting at TRIM_HORIZON", "checkpoint", p.checkpointOf(s))
					forceTrim = true
				default:
					errCount++
					log.Warn("get records failed", "error", err)
					if !sleepCtx(ctx, p.backoff(errCount)) {
						return
					}
					continue // the iterator is still valid
				}
				// Re-read from the checkpoint: drop what was buffered.
				buf, windowStart, needIter = nil, time.Time{}, true
				continue
			}
			errCount = 0
			for _, r := range out.Records {
				it, err := p.newItem(r)
				if err != nil {
					log.Error("cannot build the Lambda record; it is treated as filtered out", "error", err)
				}
				buf = append(buf, it)
			}
			if out.NextShardIterator == nil {
				ended = true
			} else {
				iter = *out.NextShardIterator
			}
			polledEmpty = len(out.Records) == 0
			if len(out.Records) > 0 && windowStart.IsZero() {
				windowStart = time.Now()
			}
			if polledEmpty && len(buf) == 0 {
				p.markEmpty(s, pollNo)
			}
		}

		ready := buf[:duePrefix(buf, time.Now())]
		if len(ready) > 0 && (ended || p.cfg.MaxBatchingWindow <= 0 ||
			matchedCount(ready) >= p.cfg.BatchSize || payloadSize(ready) >= MaxInvokePayloadBytes ||
			time.Since(windowStart) >= p.cfg.MaxBatchingWindow) {
			n := p.takeBatch(ready)
			if err := p.deliver(ctx, s, buf[:n]); err != nil {
				return
			}
			buf = buf[n:]
			windowStart = time.Time{}
			if len(buf) > 0 {
				windowStart = time.Now()
			}
			continue
		}
		if ended && len(buf) == 0 {
			p.mu.Lock()
			s.done = true
			p.stats.ShardsFinished++
			p.mu.Unlock()
			log.Info("shard finished")
			return
		}
		held := len(ready) < len(buf)
		if polledEmpty || (held && !polled) {
			wait := p.cfg.PollInterval
			if len(buf) > 0 {
				// (a window already run out while records are held: wait
				// for the first due record below, not a negative time)
				if rem := p.cfg.MaxBatchingWindow - time.Since(windowStart); rem < wait && (rem > 0 || !held) {
					wait = rem
				}
			}
			if held {
				if rem := time.Until(buf[len(ready)].due); rem < wait {
					wait = rem
				}
			}
			if !sleepCtx(ctx, wait) {
				return
			}
		}
	}
}

func (p *StreamPoller) acquireIterator(ctx context.Context, s *shardState, forceTrim bool) (string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(p.StreamARN()), ShardId: aws.String(s.id)}
	p.mu.Lock()
	cp, initial := s.checkpoint, s.initial
	p.mu.Unlock()
	switch {
	case forceTrim:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeTrimHorizon
	case cp != "":
		in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(cp)
	case initial == StartingPositionLatest:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeLatest
	default:
		in.ShardIteratorType = streamtypes.ShardIteratorTypeTrimHorizon
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := p.cfg.Streams.GetShardIterator(cctx, in)
	if err != nil {
		return "", fmt.Errorf("get shard iterator %s %s: %w", s.id, in.ShardIteratorType, err)
	}
	return aws.ToString(out.ShardIterator), nil
}

func (p *StreamPoller) newItem(r streamtypes.Record) (*item, error) {
	it := &item{}
	if r.Dynamodb != nil {
		it.seq = aws.ToString(r.Dynamodb.SequenceNumber)
		if t := r.Dynamodb.ApproximateCreationDateTime; t != nil {
			it.arrival = t.UTC().Truncate(time.Second)
		}
	}
	raw, err := StreamRecordJSON(r, p.StreamARN(), p.cfg.Region)
	if err != nil {
		return it, fmt.Errorf("record %s: %w", it.seq, err)
	}
	it.raw = raw
	if p.cfg.DeliverAt != nil {
		it.due = p.cfg.DeliverAt(raw)
	}
	if len(p.filters) == 0 {
		it.matched = true
		return it, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return it, err
	}
	m, _ := v.(map[string]any)
	it.matched = MatchAny(p.filters, m)
	return it, nil
}

func (p *StreamPoller) startPoll(s *shardState) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.pollsStarted++
	return s.pollsStarted
}

func (p *StreamPoller) markEmpty(s *shardState, pollNo int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pollNo > s.lastEmpty {
		s.lastEmpty = pollNo
	}
}

func (p *StreamPoller) checkpointOf(s *shardState) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.checkpoint
}

func (p *StreamPoller) count(f func(*StreamPollerStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}
