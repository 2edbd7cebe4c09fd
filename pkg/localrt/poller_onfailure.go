package localrt

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"
)

// giveUp sends the metadata of batch to the on-failure destination.
func (p *StreamPoller) giveUp(ctx context.Context, s *shardState, batch []*item, invokeCount int, condition string, last outcome) {
	if len(batch) == 0 {
		return
	}
	rec := OnFailureRecord{
		RequestContext: OnFailureRequestContext{
			RequestID:              uuid.NewString(),
			FunctionArn:            p.FunctionARN(),
			Condition:              condition,
			ApproximateInvokeCount: invokeCount,
		},
		Version:   "1.0",
		Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		DDBStreamBatchInfo: DDBStreamBatchInfo{
			ShardID:                         s.id,
			StartSequenceNumber:             batch[0].seq,
			EndSequenceNumber:               batch[len(batch)-1].seq,
			ApproximateArrivalOfFirstRecord: formatArrival(batch[0].arrival),
			ApproximateArrivalOfLastRecord:  formatArrival(batch[len(batch)-1].arrival),
			BatchSize:                       len(batch),
			StreamArn:                       p.StreamARN(),
		},
	}
	switch {
	case condition == ConditionRecordAgeExceeded:
		rec.RequestContext.ApproximateInvokeCount = max(invokeCount, 1)
	case last.kind == outcomeFunctionError:
		rec.ResponseContext = &OnFailureResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST", FunctionError: aws.String("Unhandled")}
	default:
		rec.ResponseContext = &OnFailureResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST"}
	}
	body, _ := json.Marshal(rec)
	p.count(func(st *StreamPollerStats) { st.RecordsDiscarded += int64(len(batch)) })
	log := p.log.With("shard_id", s.id, "start_sequence_number", rec.DDBStreamBatchInfo.StartSequenceNumber,
		"end_sequence_number", rec.DDBStreamBatchInfo.EndSequenceNumber, "batch_size", len(batch), "condition", condition)
	if p.cfg.OnFailure == nil {
		log.Error("batch given up and no on-failure destination is configured", "on_failure_record", string(body))
		return
	}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := p.cfg.OnFailure.SendMessage(cctx, &sqs.SendMessageInput{QueueUrl: aws.String(p.cfg.OnFailureQueueURL), MessageBody: aws.String(string(body))})
		cancel()
		if err == nil {
			p.count(func(st *StreamPollerStats) { st.FailuresSentToDestination++ })
			log.Warn("batch given up; metadata sent to the on-failure destination")
			return
		}
		p.count(func(st *StreamPollerStats) { st.DestinationErrors++ })
		if attempt == 3 || ctx.Err() != nil {
			log.Error("batch given up and the on-failure destination refused it", "error", err, "on_failure_record", string(body))
			return
		}
		if !sleepCtx(ctx, p.backoff(attempt)) {
			return
		}
	}
}

func formatArrival(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
