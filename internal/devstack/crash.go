package devstack

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// crashAfterPublish wraps the relay's stream handler: each outbox INSERT
// whose envelope lose reports true is published through the relay's
// Publisher (a real PutEvents, under an "outbox relay batch" span) and then
// dropped from the batch, unmarked: a relay invocation that died after
// PutEvents and before marking, whose batch the event source mapping then
// moved past. The record stays pending, so the reconciler re-sends it and
// the consumers absorb the duplicate (the DESIGN's known trap, forced).
func crashAfterPublish(pub *relay.Publisher, lose func(outbox.Envelope) bool, h localrt.StreamHandler) localrt.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		var rest []events.DynamoDBEventRecord
		for _, rec := range ev.Records {
			env, ok := insertedEnvelope(rec)
			if !ok || !lose(env) {
				rest = append(rest, rec)
				continue
			}
			bctx, span := outboxtrace.Tracer().Start(ctx, "outbox relay batch")
			pub.Publish(bctx, []outbox.Envelope{env})
			span.End()
		}
		if len(rest) == 0 {
			return events.DynamoDBEventResponse{}, nil
		}
		ev.Records = rest
		return h(ctx, ev)
	}
}

// insertedEnvelope decodes an outbox INSERT stream record's envelope.
func insertedEnvelope(rec events.DynamoDBEventRecord) (outbox.Envelope, bool) {
	if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
		return outbox.Envelope{}, false
	}
	item, err := streamimage.ToAttributeValueMap(rec.Change.NewImage)
	if err != nil {
		return outbox.Envelope{}, false
	}
	r, err := outbox.RecordFromItem(item)
	return r.Envelope, err == nil
}
