package relay

import (
	"context"
	"time"
)

// Deadline budget of one invocation. On AWS, an invocation that reaches its
// function timeout ends as a timeout error: its answer, the partial batch
// response included, is lost and the event source mapping retries the whole
// batch (Lambda developer guide, golang-context; AWS-SEMANTICS §12). So the
// Relay splits the time until ctx.Deadline() in three:
//
//	start ──publish (≤ RetryBudget)──▶ deadline − Reserve ──mark/park──▶ deadline − AnswerMargin ──answer──▶ deadline
//
// and whatever is not done at a boundary is reported in the partial batch
// response (first not-done record's SequenceNumber), never acknowledged.

// AnswerMargin is how long before the invocation deadline marking stops, so
// that Handle's answer reaches Lambda in time: 500 ms.
const AnswerMargin = 500 * time.Millisecond

// FunctionTimeoutMargin is the slack MinFunctionTimeout adds for the work
// outside publishing and marking (decoding the batch, logging, a cold
// start's first calls): 1 s.
const FunctionTimeoutMargin = time.Second

// DefaultReserve returns the default MarkerConfig.Reserve for a marker call
// timeout: 2 × callTimeout + AnswerMargin. Marking a published record can
// take two calls in a row (a BatchExecuteStatement, then its UpdateItem
// fallback), and so can parking one (SendMessage, then UpdateItem); other
// marks run in parallel (MarkerConfig.Concurrency). A zero callTimeout means
// the 5 s default.
func DefaultReserve(callTimeout time.Duration) time.Duration {
	if callTimeout == 0 {
		callTimeout = 5 * time.Second
	}
	return 2*callTimeout + AnswerMargin
}

// WithReserve returns a context that ends reserve before ctx's deadline (the
// invocation deadline), so that the work done under it leaves reserve for
// what follows. If ctx has no deadline it returns a plain cancelable child.
// If the reserve exceeds the time left, the returned context is already
// done. Call the CancelFunc when finished.
func WithReserve(ctx context.Context, reserve time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-reserve))
	}
	return context.WithCancel(ctx)
}

// MinFunctionTimeout returns the shortest Lambda function timeout that
// holds a relay built from cfg (zero fields take their defaults) without
// cutting its publisher's retry budget:
//
//	Publisher.RetryBudget + Marker.Reserve + FunctionTimeoutMargin
//
// rounded up to a whole second (Lambda timeouts are whole seconds). With
// the defaults: 20 s + (2 × 5 s + 0.5 s) + 1 s = 31.5 s → 32 s. A shorter
// timeout is still safe (publishing stops Reserve before the deadline) but
// leaves the publisher less than its RetryBudget; a timeout at or below
// Reserve leaves it no time at all and every batch is
// reported back unpublished. The CDK construct (infra/outboxcdk) refuses a
// relay timeout below this value.
func MinFunctionTimeout(cfg Config) time.Duration {
	cfg.setDefaults()
	d := cfg.Publisher.RetryBudget + cfg.Marker.Reserve + FunctionTimeoutMargin
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}
