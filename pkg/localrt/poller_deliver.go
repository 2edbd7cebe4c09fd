package localrt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
)

// duePrefix is the length of buf's prefix whose records are due at now
// (StreamPollerConfig.DeliverAt): all of buf without a hold.
func duePrefix(buf []*item, now time.Time) int {
	for i, it := range buf {
		if !it.due.IsZero() && it.due.After(now) {
			return i
		}
	}
	return len(buf)
}

func matchedCount(buf []*item) int {
	n := 0
	for _, it := range buf {
		if it.matched {
			n++
		}
	}
	return n
}

func payloadSize(buf []*item) int {
	n := len(`{"Records":[]}`)
	for _, it := range buf {
		if it.matched {
			n += len(it.raw) + 1
		}
	}
	return n
}

// takeBatch returns the length of the buffer prefix forming the next batch:
// at most BatchSize matched records and MaxInvokePayloadBytes of JSON, plus
// the filtered-out records among them. It is at least 1.
func (p *StreamPoller) takeBatch(buf []*item) int {
	matched, size := 0, len(`{"Records":[]}`)
	for i, it := range buf {
		if it.matched {
			if matched == p.cfg.BatchSize || (matched > 0 && size+len(it.raw)+1 > MaxInvokePayloadBytes) {
				return i
			}
			matched++
			size += len(it.raw) + 1
		}
	}
	return len(buf)
}

// commit checkpoints the last item of done and counts filtered ones.
func (p *StreamPoller) commit(s *shardState, done []*item) {
	if len(done) == 0 {
		return
	}
	filtered := 0
	for _, it := range done {
		if !it.matched {
			filtered++
		}
	}
	last := done[len(done)-1].seq
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.RecordsFiltered += int64(filtered)
	if last != "" && (s.checkpoint == "" || CompareSequenceNumbers(last, s.checkpoint) > 0) {
		s.checkpoint = last
	}
}

func matchedItems(items []*item) []*item {
	var out []*item
	for _, it := range items {
		if it.matched {
			out = append(out, it)
		}
	}
	return out
}

// outcome of one invocation.
type outcomeKind int

const (
	outcomeSuccess outcomeKind = iota
	outcomePartial
	outcomeInvalid
	outcomeFunctionError
)

type outcome struct {
	kind   outcomeKind
	lowest string // outcomePartial: lowest reported sequence number
	err    error
}

// deliver processes a buffer prefix until every item is committed; it
// returns a non-nil error only when ctx ended (nothing more is committed).
func (p *StreamPoller) deliver(ctx context.Context, s *shardState, items []*item) error {
	return p.deliverRange(ctx, s, items, 0)
}

func (p *StreamPoller) deliverRange(ctx context.Context, s *shardState, items []*item, invokeCount int) error {
	log := p.log.With("shard_id", s.id)
	retries := 0
	var last outcome
	for {
		batch := matchedItems(items)
		if len(batch) == 0 {
			p.commit(s, items)
			return nil
		}
		if n := p.expiredPrefix(items); n > 0 {
			// Only the records past MaximumRecordAge are given up; the
			// fresh ones after them are still delivered (AWS: one expired
			// record then 5 fresh ones → an on-failure record of batchSize 1
			// and the 5 reach the function).
			p.giveUp(ctx, s, matchedItems(items[:n]), invokeCount, ConditionRecordAgeExceeded, last)
			p.commit(s, items[:n])
			items = items[n:]
			continue
		}
		invokeCount++
		last = p.invoke(ctx, batch)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch last.kind {
		case outcomeSuccess:
			p.commit(s, items)
			p.count(func(st *StreamPollerStats) { st.Batches++ })
			return nil
		case outcomePartial:
			j := 0
			for j < len(items) && (items[j].seq == "" || CompareSequenceNumbers(items[j].seq, last.lowest) < 0) {
				j++
			}
			p.commit(s, items[:j])
			items = items[j:]
			p.count(func(st *StreamPollerStats) { st.PartialFailures++ })
			log.Info("partial batch failure; resuming at the lowest reported sequence number", "sequence_number", last.lowest, "records_left", len(matchedItems(items)))
		case outcomeInvalid:
			p.count(func(st *StreamPollerStats) { st.InvalidResponses++ })
			log.Warn("whole batch failed: invalid batchItemFailures", "error", last.err, "first_sequence_number", batch[0].seq)
		case outcomeFunctionError:
			p.count(func(st *StreamPollerStats) { st.FunctionErrors++ })
			log.Warn("function error; whole batch failed", "error", last.err, "first_sequence_number", batch[0].seq, "batch_size", len(batch))
			if p.cfg.BisectBatchOnFunctionError && len(batch) > 1 {
				mid := 0
				for mid < len(items) && items[mid] != batch[len(batch)/2] {
					mid++
				}
				p.count(func(st *StreamPollerStats) { st.Bisections++ })
				if err := p.deliverRange(ctx, s, items[:mid], invokeCount); err != nil {
					return err
				}
				return p.deliverRange(ctx, s, items[mid:], invokeCount)
			}
		}
		if p.cfg.MaximumRetryAttempts == NoRetries || (p.cfg.MaximumRetryAttempts != RetryForever && retries >= p.cfg.MaximumRetryAttempts) {
			p.giveUp(ctx, s, matchedItems(items), invokeCount, ConditionRetryAttemptsExhausted, last)
			p.commit(s, items)
			p.count(func(st *StreamPollerStats) { st.Batches++ })
			return nil
		}
		retries++
		p.count(func(st *StreamPollerStats) { st.Retries++ })
		if !sleepCtx(ctx, p.backoff(retries)) {
			return ctx.Err()
		}
	}
}

// expiredPrefix returns how many leading items are older than
// MaximumRecordAge (stream records are in order, so the expired ones are a
// prefix); 0 when the age is unlimited.
func (p *StreamPoller) expiredPrefix(items []*item) int {
	if p.cfg.MaximumRecordAge <= 0 {
		return 0
	}
	n := 0
	for n < len(items) && !items[n].arrival.IsZero() && time.Since(items[n].arrival) > p.cfg.MaximumRecordAge {
		n++
	}
	return n
}

// invoke builds the Lambda payload for batch, decodes it into
// events.DynamoDBEvent, calls the handler and interprets its response.
func (p *StreamPoller) invoke(ctx context.Context, batch []*item) outcome {
	var payload bytes.Buffer
	payload.WriteString(`{"Records":[`)
	for i, it := range batch {
		if i > 0 {
			payload.WriteByte(',')
		}
		payload.Write(it.raw)
	}
	payload.WriteString(`]}`)
	p.count(func(st *StreamPollerStats) {
		st.Invocations++
		st.RecordsDelivered += int64(len(batch))
	})
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(payload.Bytes(), &ev); err != nil {
		return outcome{kind: outcomeFunctionError, err: fmt.Errorf("decode DynamoDB event: %w", err)}
	}
	ictx, cancel := context.WithTimeout(ctx, p.cfg.FunctionTimeout)
	defer cancel()
	resp, err := p.call(ictx, ev)
	if err == nil && errors.Is(ictx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("Task timed out after %.2f seconds", p.cfg.FunctionTimeout.Seconds()) //nolint:staticcheck // ST1005: Lambda's own message, word for word
	}
	if err != nil {
		return outcome{kind: outcomeFunctionError, err: err}
	}
	if !*p.cfg.ReportBatchItemFailures {
		return outcome{kind: outcomeSuccess}
	}
	// Lambda sees the serialized response.
	b, err := json.Marshal(resp)
	if err != nil {
		return outcome{kind: outcomeFunctionError, err: fmt.Errorf("encode response: %w", err)}
	}
	var r struct {
		BatchItemFailures []struct {
			ItemIdentifier *string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return outcome{kind: outcomeInvalid, err: err}
	}
	if len(r.BatchItemFailures) == 0 {
		return outcome{kind: outcomeSuccess}
	}
	inBatch := make(map[string]bool, len(batch))
	for _, it := range batch {
		inBatch[it.seq] = true
	}
	lowest := ""
	for _, f := range r.BatchItemFailures {
		id := aws.ToString(f.ItemIdentifier)
		if id == "" {
			return outcome{kind: outcomeInvalid, err: errors.New("empty or null itemIdentifier")}
		}
		if !inBatch[id] {
			return outcome{kind: outcomeInvalid, err: fmt.Errorf("itemIdentifier %q is not a sequence number of this batch", id)}
		}
		if lowest == "" || CompareSequenceNumbers(id, lowest) < 0 {
			lowest = id
		}
	}
	return outcome{kind: outcomePartial, lowest: lowest}
}

// call invokes the handler, turning a panic into a function error.
func (p *StreamPoller) call(ctx context.Context, ev events.DynamoDBEvent) (resp events.DynamoDBEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return p.handler(ctx, ev)
}

// backoff returns the wait before retry n (1-based): exponential from
// RetryBaseDelay, capped at RetryMaxDelay, with full jitter
// (pkg/internal/retry).
func (p *StreamPoller) backoff(n int) time.Duration {
	return retry.Delay(p.cfg.RetryBaseDelay, p.cfg.RetryMaxDelay, n)
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool { return retry.Sleep(ctx, d) == nil }
