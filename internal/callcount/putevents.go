package callcount

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
)

// PutEventsAPI is the EventBridge PutEvents method with the SDK's exact
// signature: *eventbridge.Client, relay.EventBridgeAPI implementations and
// the local bus satisfy it.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Service and operation names CountingPutEvents counts under; they match
// the SDK's service id and operation name, so a fake and a real client land
// in the same row.
const (
	ServiceEventBridge = "EventBridge"
	OpPutEvents        = "PutEvents"
)

// CountingPutEvents returns a PutEventsAPI that counts each call to next
// under service "EventBridge", operation "PutEvents" (an error returned by
// next also counts as an error), then returns next's result unchanged. Use
// it for PutEvents implementations that are not SDK clients; an SDK client
// with Counter.Register is already counted. It is safe for concurrent use
// if next is.
func CountingPutEvents(c *Counter, next PutEventsAPI) PutEventsAPI {
	return countingPutEvents{c: c, next: next}
}

type countingPutEvents struct {
	c    *Counter
	next PutEventsAPI
}

func (p countingPutEvents) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	out, err := p.next.PutEvents(ctx, in, optFns...)
	if err != nil {
		p.c.AddError(ServiceEventBridge, OpPutEvents)
	} else {
		p.c.Add(ServiceEventBridge, OpPutEvents, 1)
	}
	return out, err
}
