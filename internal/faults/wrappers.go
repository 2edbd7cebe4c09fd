package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Boundaries of the narrow-interface wrappers.
const (
	BoundaryPutEvents   = "EventBridge.PutEvents"
	BoundarySendMessage = "SQS.SendMessage"
	BoundaryUpdateItem  = "wrapper.UpdateItem"
	BoundaryTransact    = "wrapper.TransactWriteItems"
	BoundaryStream      = "relay.Handle"
	// BoundaryConsumerPrefix + consumer name is the boundary of a consumer
	// delivery ("consumer.ledger").
	BoundaryConsumerPrefix = "consumer."
)

// PutEventsAPI is (*eventbridge.Client).PutEvents; relay.EventBridgeAPI and
// localrt.PutEventsAPI have the same method, so a wrapper fits both.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// SendMessageAPI is (*sqs.Client).SendMessage (relay.QueueSender).
type SendMessageAPI interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// UpdateItemAPI is (*dynamodb.Client).UpdateItem (relay.UpdateItemAPI).
type UpdateItemAPI interface {
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// TransactWriteItemsAPI is (*dynamodb.Client).TransactWriteItems
// (dedup.TransactWriter).
type TransactWriteItemsAPI interface {
	TransactWriteItems(ctx context.Context, params *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// EventBridge wraps a PutEvents client (the relay's, the reconciler's). Per
// call it decides at most one of FailBeforeSend, Throttle (whole call fails
// with ThrottlingException, nothing sent) and ResponseLost (the entries are
// sent and accepted by next, then *Error is returned: the bus has them, the
// caller re-sends them), plus Latency. When the call goes through, each entry
// may fail on its own: EntryPermanent (InvalidArgument or MalformedDetail) or
// EntryRetryable (ThrottlingException or InternalFailure); such entries are
// not forwarded and come back in an HTTP 200 response with ErrorCode and
// ErrorMessage set and FailedEntryCount counting them, in request order,
// exactly as PutEvents answers. If every entry failed, next is not called.
func (in *Injector) EventBridge(next PutEventsAPI) PutEventsAPI {
	return &eventBridge{in: in, next: next}
}

type eventBridge struct {
	in   *Injector
	next PutEventsAPI
}

func (w *eventBridge) PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	in := w.in
	d := in.draw(BoundaryPutEvents, FailBeforeSend, Throttle, ResponseLost)
	if err := in.wait(ctx, d.latency); err != nil {
		return nil, err
	}
	switch d.kind {
	case FailBeforeSend, Throttle:
		return nil, &Error{Kind: d.kind, Boundary: BoundaryPutEvents, Code: codeFor(d.kind, "EventBridge")}
	case ResponseLost:
		_, _ = w.next.PutEvents(ctx, params, optFns...)
		return nil, &Error{Kind: ResponseLost, Boundary: BoundaryPutEvents, Code: codeFor(ResponseLost, "EventBridge"), Applied: true}
	}

	results := make([]ebtypes.PutEventsResultEntry, len(params.Entries))
	var fwd []ebtypes.PutEventsRequestEntry
	var fwdIdx []int
	var failed int32
	for i, e := range params.Entries {
		k, code := in.entryDraw(BoundaryPutEvents, i)
		if k != "" {
			failed++
			results[i] = ebtypes.PutEventsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String("injected " + string(k))}
			continue
		}
		fwd = append(fwd, e)
		fwdIdx = append(fwdIdx, i)
	}
	if failed == 0 {
		return w.next.PutEvents(ctx, params, optFns...)
	}
	out := &eventbridge.PutEventsOutput{}
	if len(fwd) > 0 {
		cp := *params
		cp.Entries = fwd
		got, err := w.next.PutEvents(ctx, &cp, optFns...)
		if err != nil {
			return nil, err
		}
		if len(got.Entries) != len(fwd) {
			return nil, fmt.Errorf("faults: PutEvents returned %d results for %d entries", len(got.Entries), len(fwd))
		}
		for j, r := range got.Entries {
			results[fwdIdx[j]] = r
		}
		out.ResultMetadata = got.ResultMetadata
		failed += got.FailedEntryCount
	}
	out.Entries = results
	out.FailedEntryCount = failed
	return out, nil
}

// Queue wraps an SQS SendMessage client (the relay's parked-records DLQ).
// Per call: at most one of FailBeforeSend, Throttle, ResponseLost (the
// message is sent, then *Error is returned: a retry sends it again), plus
// Latency.
func (in *Injector) Queue(next SendMessageAPI) SendMessageAPI { return &queue{in: in, next: next} }

type queue struct {
	in   *Injector
	next SendMessageAPI
}

func (w *queue) SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	var out *sqs.SendMessageOutput
	err := w.in.wrapCall(ctx, BoundarySendMessage, "SQS", func() error {
		var e error
		out, e = w.next.SendMessage(ctx, params, optFns...)
		return e
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateItem wraps a DynamoDB UpdateItem client (the relay's marking
// client): FailBeforeSend, Throttle (ProvisionedThroughputExceededException)
// and ResponseLost (the record IS marked, the caller sees an error), plus
// Latency. Failing marking after a successful PutEvents is the "relay died
// between publish and mark" crash: the record stays pending, is reported in
// batchItemFailures and is published again on redelivery.
func (in *Injector) UpdateItem(next UpdateItemAPI) UpdateItemAPI {
	return &updateItem{in: in, next: next}
}

type updateItem struct {
	in   *Injector
	next UpdateItemAPI
}

func (w *updateItem) UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	var out *dynamodb.UpdateItemOutput
	err := w.in.wrapCall(ctx, BoundaryUpdateItem, "DynamoDB", func() error {
		var e error
		out, e = w.next.UpdateItem(ctx, params, optFns...)
		return e
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TransactWriter wraps a consumer's TransactWriteItems client:
// FailBeforeSend (the consumer died before its transaction), Throttle, and
// ResponseLost (the transaction committed, the consumer sees an error and
// retries: the dedup marker must absorb the retry), plus Latency.
func (in *Injector) TransactWriter(next TransactWriteItemsAPI) TransactWriteItemsAPI {
	return &transactWriter{in: in, next: next}
}

type transactWriter struct {
	in   *Injector
	next TransactWriteItemsAPI
}

func (w *transactWriter) TransactWriteItems(ctx context.Context, params *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var out *dynamodb.TransactWriteItemsOutput
	err := w.in.wrapCall(ctx, BoundaryTransact, "DynamoDB", func() error {
		var e error
		out, e = w.next.TransactWriteItems(ctx, params, optFns...)
		return e
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// wrapCall runs call under one decision at boundary.
func (in *Injector) wrapCall(ctx context.Context, boundary, service string, call func() error) error {
	d := in.draw(boundary, FailBeforeSend, Throttle, ResponseLost)
	if err := in.wait(ctx, d.latency); err != nil {
		return err
	}
	switch d.kind {
	case FailBeforeSend, Throttle:
		return &Error{Kind: d.kind, Boundary: boundary, Code: codeFor(d.kind, service)}
	case ResponseLost:
		_ = call()
		return &Error{Kind: ResponseLost, Boundary: boundary, Code: codeFor(ResponseLost, service), Applied: true}
	}
	return call()
}

// StreamHandler wraps the relay's stream handler (localrt.StreamHandler,
// the shape of relay.Relay.Handle). With CrashAfterHandle it runs next to
// the end (published and marked) and then returns *Error instead of the
// response, as if the Lambda process died before answering: the event
// source mapping retries the whole batch, the relay publishes those events
// again, and consumers must absorb the duplicates (I3).
func (in *Injector) StreamHandler(next localrt.StreamHandler) localrt.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		crash := in.Chance(BoundaryStream, CrashAfterHandle)
		late := in.Chance(BoundaryStream+".timeout", RelayTimeout)
		resp, err := next(ctx, ev)
		if late {
			overrun(ctx)
			return resp, err
		}
		if err != nil || !crash {
			return resp, err
		}
		return events.DynamoDBEventResponse{}, &Error{Kind: CrashAfterHandle, Boundary: BoundaryStream, Code: codeFor(CrashAfterHandle, ""), Applied: true}
	}
}

// EventHandler wraps a consumer's handler (boundary "consumer.<name>"). Per
// delivery it decides at most one of CrashBeforeEffect (return *Error
// without calling next: the consumer died before its transaction, nothing
// written) and CrashAfterEffect (call next, then return *Error even if it
// succeeded: the transaction committed but the delivery is reported failed),
// plus Latency. Either way the message returns to the consumer's queue
// after its visibility timeout and is delivered again.
func (in *Injector) EventHandler(consumer string, next localrt.EventHandler) localrt.EventHandler {
	boundary := BoundaryConsumerPrefix + consumer
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		if k := in.outage(consumer, ev); k != "" {
			err := &Error{Kind: k, Boundary: boundary, Code: codeFor(k, "")}
			if k == ConsumerRejected {
				return sqsconsumer.Permanent("injected_rejection", err)
			}
			return err
		}
		d := in.draw(boundary, CrashBeforeEffect, CrashAfterEffect)
		if err := in.wait(ctx, d.latency); err != nil {
			return err
		}
		switch d.kind {
		case CrashBeforeEffect:
			return &Error{Kind: CrashBeforeEffect, Boundary: boundary, Code: codeFor(CrashBeforeEffect, "")}
		case CrashAfterEffect:
			if err := next(ctx, ev); err != nil {
				return err
			}
			return &Error{Kind: CrashAfterEffect, Boundary: boundary, Code: codeFor(CrashAfterEffect, ""), Applied: true}
		}
		return next(ctx, ev)
	}
}

// outage returns the outage kind in force for ev at consumer ("" if none),
// deciding it at the event's first delivery.
func (in *Injector) outage(consumer string, ev events.EventBridgeEvent) Kind {
	var env struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(ev.Detail, &env) != nil || env.EventID == "" {
		return ""
	}
	key := consumer + "/" + env.EventID
	in.mu.Lock()
	k, seen := in.outages[key]
	over := in.outagesOver
	in.mu.Unlock()
	if !seen {
		switch {
		case in.Chance(BoundaryConsumerPrefix+consumer+".outage", ConsumerOutage):
			k = ConsumerOutage
		case in.Chance(BoundaryConsumerPrefix+consumer+".rejected", ConsumerRejected):
			k = ConsumerRejected
		}
		in.mu.Lock()
		if prev, ok := in.outages[key]; ok {
			k = prev
		} else {
			in.outages[key] = k
		}
		in.mu.Unlock()
	}
	if over {
		return ""
	}
	return k
}

// EndOutages ends every ConsumerOutage and ConsumerRejected fault: the
// consumer is "fixed", and redriven events apply. It returns how many
// event/consumer pairs were affected.
func (in *Injector) EndOutages() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.outagesOver = true
	n := 0
	for _, k := range in.outages {
		if k != "" {
			n++
		}
	}
	return n
}

// SQSHandler wraps a consumer's SQS handler as its event source mapping
// invokes it (boundary "consumer.<name>.invoke"): with TimeoutAfterHandle
// the handler runs to the end and then overruns its deadline, so the event
// source mapping discards the answer and the whole batch returns after the
// visibility timeout.
func (in *Injector) SQSHandler(consumer string, next localrt.SQSHandler) localrt.SQSHandler {
	boundary := BoundaryConsumerPrefix + consumer + ".invoke"
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		late := in.Chance(boundary, TimeoutAfterHandle)
		resp, err := next(ctx, ev)
		if late {
			overrun(ctx)
		}
		return resp, err
	}
}

// overrun blocks until just after ctx's deadline (a function that ignores
// its deadline); without a deadline it returns at once.
func overrun(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		time.Sleep(time.Until(d) + 5*time.Millisecond)
	}
}

// Interceptor returns a localrt.Interceptor (BusConfig.Interceptor) that
// applies EventHandler's faults to every consumer delivery attempt.
func (in *Injector) Interceptor() localrt.Interceptor {
	return func(ctx context.Context, consumer string, ev events.EventBridgeEvent, _ int, next localrt.EventHandler) error {
		return in.EventHandler(consumer, next)(ctx, ev)
	}
}

// Reorder wraps the bus's delivery to a consumer's queue (an EventBridge rule
// with an SQS target): with Reorder, SendMessage waits 100 to 600 ms first,
// so events sent after it reach the queue before it.
func (in *Injector) Reorder(consumer string, next localrt.MessageSender) localrt.MessageSender {
	return reorderSender{in: in, boundary: "bus.target." + consumer, next: next}
}

type reorderSender struct {
	in       *Injector
	boundary string
	next     localrt.MessageSender
}

func (r reorderSender) SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if r.in.Chance(r.boundary, Reorder) {
		delay := 100*time.Millisecond + time.Duration(r.in.pick(r.boundary, 500))*time.Millisecond
		if err := r.in.wait(ctx, delay); err != nil {
			return nil, err
		}
	}
	return r.next.SendMessage(ctx, params, optFns...)
}
