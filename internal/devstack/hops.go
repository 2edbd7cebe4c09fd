package devstack

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// Hop logging (Options.HopLog): one INFO line per hop of each event, with
// the milliseconds since its commit (the envelope's occurred_at), so the dev
// terminal shows an event flowing: committed (the API's own line) → handed
// to the relay by the stream event source mapping → published and marked →
// applied by each consumer. Local only: it wraps what AWS runs around the
// handlers and changes nothing they do.

func sinceMillis(occurred time.Time) int64 {
	if occurred.IsZero() {
		return -1
	}
	return time.Since(occurred).Milliseconds()
}

// hopStream wraps the relay as the stream event source mapping invokes it.
func hopStream(log *slog.Logger, next localrt.StreamHandler) localrt.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		type rec struct {
			id, typ, agg string
			seq          string
			at           time.Time
			sn           string
		}
		var recs []rec
		for _, r := range ev.Records {
			img := r.Change.NewImage
			_, ok := img[outbox.AttrEventID]
			if r.EventName != string(events.DynamoDBOperationTypeInsert) || !ok {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, imgStr(img, outbox.AttrOccurredAt))
			r := rec{id: imgStr(img, outbox.AttrEventID), typ: imgStr(img, outbox.AttrEventType), agg: imgStr(img, outbox.AttrAggregateID),
				seq: imgNum(img, outbox.AttrSequence), at: at, sn: r.Change.SequenceNumber}
			recs = append(recs, r)
			log.Info("hop: stream → relay", "event_id", r.id, "event_type", r.typ,
				"aggregate_id", r.agg, "sequence", r.seq, "ms_since_commit", sinceMillis(at))
		}
		resp, err := next(ctx, ev)
		if err != nil {
			return resp, err
		}
		first := ""
		if len(resp.BatchItemFailures) > 0 {
			first = resp.BatchItemFailures[0].ItemIdentifier
		}
		for _, r := range recs {
			if r.sn == first {
				break // this record and the later ones come again
			}
			log.Info("hop: relay done (published and marked, or parked)", "event_id", r.id, "event_type", r.typ, "aggregate_id", r.agg,
				"sequence", r.seq, "ms_since_commit", sinceMillis(r.at))
		}
		return resp, nil
	}
}

// imgStr and imgNum read a string or number attribute of a stream image, "" when
// it is absent or of another type (the accessors of events.DynamoDBAttributeValue
// panic on a type mismatch).
func imgStr(img map[string]events.DynamoDBAttributeValue, k string) string {
	if v, ok := img[k]; ok && v.DataType() == events.DataTypeString {
		return v.String()
	}
	return ""
}

func imgNum(img map[string]events.DynamoDBAttributeValue, k string) string {
	if v, ok := img[k]; ok && v.DataType() == events.DataTypeNumber {
		return v.Number()
	}
	return ""
}

// hopConsumer wraps a consumer's event handler.
func hopConsumer(log *slog.Logger, consumer string, next localrt.EventHandler) localrt.EventHandler {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		err := next(ctx, ev)
		if err != nil {
			return err
		}
		var env struct {
			EventID     string    `json:"event_id"`
			EventType   string    `json:"event_type"`
			AggregateID string    `json:"aggregate_id"`
			Sequence    int64     `json:"sequence"`
			OccurredAt  time.Time `json:"occurred_at"`
		}
		_ = json.Unmarshal(ev.Detail, &env)
		if env.EventID == "" {
			// Not an outbox event: the schedule's resequencer sweep tick
			// (or another scheduled event); no hop of any event's path.
			log.Debug("consumer handled a scheduled event", "consumer", consumer, "detail_type", ev.DetailType, "source", ev.Source)
			return nil
		}
		msg := "hop: " + consumer + " done (applied, or a duplicate absorbed)"
		if o := spanOutcome(ctx); o != "" {
			msg = "hop: " + consumer + " " + outcomeLabel(o)
		}
		log.Info(msg, "event_id", env.EventID, "event_type", env.EventType,
			"aggregate_id", env.AggregateID, "sequence", env.Sequence, "ms_since_commit", sinceMillis(env.OccurredAt))
		return nil
	}
}

// spanOutcome returns the consumer outcome recorded on ctx's span
// (outboxtrace.SetOutcome: applied, duplicate, held), "" when tracing is
// off (the console's path recorder turns it on) or none was recorded.
func spanOutcome(ctx context.Context) string {
	ro, ok := trace.SpanFromContext(ctx).(interface{ Attributes() []attribute.KeyValue })
	if !ok {
		return ""
	}
	for _, kv := range ro.Attributes() {
		if kv.Key == outboxtrace.AttrOutcome {
			return kv.Value.AsString()
		}
	}
	return ""
}
