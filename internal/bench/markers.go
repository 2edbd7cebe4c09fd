package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// A consumer has applied an event when its transaction holding the event's
// dedup marker (pkg/dedup: a Put of {pk: "<consumer>#<event_id>",
// consumer, event_id}) committed — not when its handler acknowledged the
// delivery: an ordered consumer's resequencer acknowledges an early event
// when it has buffered it, and applies it later, in the invocation of its
// predecessor. These read the marker Puts of successful TransactWriteItems
// calls on any client they are registered on.

// markerApply is one (consumer, event id) whose marker a transaction put.
type markerApply struct{ consumer, eventID string }

// markerApplies returns the dedup marker Puts of a TransactWriteItems input:
// items with string attributes consumer and event_id whose pk is
// consumer + "#" + event_id (a resequencer's buffer item has another pk).
func markerApplies(params any) []markerApply {
	tx, ok := params.(*dynamodb.TransactWriteItemsInput)
	if !ok {
		return nil
	}
	var out []markerApply
	for _, it := range tx.TransactItems {
		if it.Put == nil {
			continue
		}
		pk, ok1 := it.Put.Item["pk"].(*types.AttributeValueMemberS)
		c, ok2 := it.Put.Item["consumer"].(*types.AttributeValueMemberS)
		id, ok3 := it.Put.Item["event_id"].(*types.AttributeValueMemberS)
		if ok1 && ok2 && ok3 && c.Value != "" && id.Value != "" && pk.Value == c.Value+"#"+id.Value {
			out = append(out, markerApply{c.Value, id.Value})
		}
	}
	return out
}

// registerMarkerCommits adds a middleware to an SDK client's stack calling
// commit(consumer, eventID, at) for every marker of a TransactWriteItems
// call that succeeded, at the time its answer arrived (outermost step: any
// latency a later middleware injects is included).
func registerMarkerCommits(stack *middleware.Stack, id string, commit func(consumer, eventID string, at time.Time)) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc(id,
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if err == nil {
				at := time.Now()
				for _, m := range markerApplies(in.Parameters) {
					commit(m.consumer, m.eventID, at)
				}
			}
			return out, md, err
		}), middleware.Before)
}

// Register adds the marker middleware to an SDK operation stack (devstack
// Options.AWSConfig: every DynamoDB client of the stack, the consumers'
// included): the apply time of a consumer that writes dedup markers is its
// marker's commit, not its handler's acknowledgement.
func (r *ApplyRecorder) Register(stack *middleware.Stack) error {
	return registerMarkerCommits(stack, fmt.Sprintf("bench.ApplyRecorder.%p", r), r.markerCommitted)
}

// markerCommitted records that consumer's marker of eventID committed at at
// (the first time only).
func (r *ApplyRecorder) markerCommitted(consumer, eventID string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markerConsumers[consumer] = true
	a := r.events[eventID]
	if a == nil {
		a = &applied{consumers: map[string]time.Time{}, committedMarker: map[string]time.Time{}}
		r.events[eventID] = a
	}
	if _, seen := a.committedMarker[consumer]; !seen {
		a.committedMarker[consumer] = at
	}
}
