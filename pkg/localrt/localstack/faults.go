package localstack

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// LoseAfterPublish wraps the relay's stream handler next: each outbox
// INSERT whose envelope lose reports true is published through pub (the
// relay's Publisher: a real PutEvents, under an "outbox relay batch" span)
// and then dropped from the batch, unmarked: a relay invocation that died
// after PutEvents and before marking, whose batch the event source mapping
// then moved past. The record stays pending, so the reconciler re-sends it
// and the consumers absorb the duplicate. A nil pub publishes nothing: the
// record is missed outright (a stream record lost to an outage), and only
// the reconciler publishes it. lose is called per record, concurrently
// with nothing else of the wrapper.
func LoseAfterPublish(pub *relay.Publisher, lose func(outbox.Envelope) bool, next localrt.StreamHandler) localrt.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		var rest []events.DynamoDBEventRecord
		for _, rec := range ev.Records {
			env, ok := InsertedEnvelope(rec)
			if !ok || !lose(env) {
				rest = append(rest, rec)
				continue
			}
			if pub != nil {
				bctx, span := outboxtrace.Tracer().Start(ctx, "outbox relay batch")
				pub.Publish(bctx, []outbox.Envelope{env})
				span.End()
			}
		}
		if len(rest) == 0 {
			return events.DynamoDBEventResponse{}, nil
		}
		ev.Records = rest
		return next(ctx, ev)
	}
}

// InsertedEnvelope decodes an outbox INSERT stream record's envelope; ok
// is false for any other record or an undecodable image.
func InsertedEnvelope(rec events.DynamoDBEventRecord) (outbox.Envelope, bool) {
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

// RejectSwitch is a publish path (a localrt.PutEventsAPI) that refuses
// the entries of some detail types while active, as EventBridge refuses an
// entry it will never accept (localrt.RejectDetailTypes: a permanent entry
// error, so the relay parks the record), and passes everything to the bus
// once Stop lifts the fault, so parked records can be redriven without a
// restart. Safe for concurrent use.
type RejectSwitch struct {
	on, off localrt.PutEventsAPI
	types   []string
	active  atomic.Bool
}

// NewRejectSwitch returns an active RejectSwitch in front of bus refusing
// detailTypes with code (localrt.ErrorCodeMalformedDetail or
// localrt.ErrorCodeInvalidArgument); the error is localrt.RejectDetailTypes's
// for another code or no type.
func NewRejectSwitch(bus localrt.PutEventsAPI, code string, detailTypes ...string) (*RejectSwitch, error) {
	on, err := localrt.RejectDetailTypes(bus, code, detailTypes...)
	if err != nil {
		return nil, err
	}
	r := &RejectSwitch{on: on, off: bus, types: detailTypes}
	r.active.Store(true)
	return r, nil
}

// PutEvents publishes through the rejecting path while active, else to the bus.
func (r *RejectSwitch) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if r.active.Load() {
		return r.on.PutEvents(ctx, in, optFns...)
	}
	return r.off.PutEvents(ctx, in, optFns...)
}

// Rejecting returns the detail types refused now (nil once stopped).
func (r *RejectSwitch) Rejecting() []string {
	if r == nil || !r.active.Load() {
		return nil
	}
	return r.types
}

// Stop lifts the rejection; it reports whether it was active.
func (r *RejectSwitch) Stop() bool { return r != nil && r.active.Swap(false) }
