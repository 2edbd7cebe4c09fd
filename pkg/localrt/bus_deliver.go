package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// route records an accepted event and starts one delivery per matching
// rule with a subscribed consumer, each kept in the Store first (an error:
// nothing was started or kept). A forwarded event (another bus's delivery)
// is not delivered to an event bus target (one hop, SubscribeBus).
func (b *Bus) route(raw json.RawMessage, traceHeader string, forwarded bool) error {
	v, _ := decodeJSON(raw)
	m, _ := v.(map[string]any)
	now := b.cfg.Now()
	b.mu.Lock()
	var ds []delivery
	matched := false
	for _, r := range b.rules {
		if !r.pattern.Match(m) {
			continue
		}
		matched = true
		t, ok := b.handlers[r.rule.Target]
		if !ok {
			b.stats.Unsubscribed++
			b.log.Warn("rule matched but its consumer has no handler", "rule", r.rule.Name, "consumer", r.rule.Target)
			continue
		}
		if forwarded && t.bus != nil {
			b.stats.NotForwardedAgain++
			continue
		}
		ds = append(ds, delivery{id: uuid.NewString(), rule: r.rule, target: t, raw: raw, traceHeader: traceHeader, accepted: now})
	}
	b.mu.Unlock()
	if err := b.archiveEvent(raw, m, b.cfg.Now().UTC()); err != nil {
		return err
	}
	if err := b.keepDeliveries(ds); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Accepted++
	if forwarded {
		b.stats.Forwarded++
		b.forwardedIn = append(b.forwardedIn, raw)
	}
	b.accepted = append(b.accepted, raw)
	for _, d := range ds {
		b.inflight++
		go b.deliver(d)
	}
	if !matched {
		b.stats.Unmatched++
	}
	return nil
}

// delivery is one accepted event on its way to one rule target.
type delivery struct {
	id          string
	rule        Rule
	target      busTarget
	raw         json.RawMessage
	traceHeader string
	// accepted is when the bus accepted the event (the start of the
	// rule's MaximumEventAge).
	accepted time.Time
}

// deliver runs the target's attempts and dead-letters on exhaustion, as
// EventBridge does (eb-rule-retry-policy, eb-rule-dlq): a failure EventBridge
// does not retry (deliveryFailure: the target is gone or refuses
// EventBridge) ends the delivery at once; any other is retried up to
// TargetMaxAttempts, or as the rule's RetryPolicy says (its retries, and no
// retry that would start after the event is MaximumEventAge old). The dead
// letter goes to the rule's DLQ (SetDeadLetterQueue) with AWS's attributes,
// and to DeadLetters. With a
// Store, a delivery interrupted by Close stays kept (not dead-lettered) for
// Resume after a restart.
func (b *Bus) deliver(d delivery) {
	defer b.done()
	rule, t, raw, traceHeader := d.rule, d.target, d.raw, d.traceHeader
	consumer := rule.Target
	ctx := b.closeCtx
	var lastErr error
	var ev events.EventBridgeEvent
	attempt := 0
	maxAttempts, maxAge := b.cfg.TargetMaxAttempts, time.Duration(0)
	if p := rule.RetryPolicy; p != nil {
		maxAttempts, maxAge = p.MaximumRetryAttempts+1, p.MaximumEventAge
	}
	if d.accepted.IsZero() {
		d.accepted = b.cfg.Now()
	}
	code, retried, aged := "", true, false
	for attempt < maxAttempts && retried {
		attempt++
		if attempt > 1 {
			wait := retry.Delay(b.cfg.TargetRetryBaseDelay, b.cfg.TargetRetryMaxDelay, attempt-1)
			if maxAge > 0 && b.cfg.Now().Add(wait).Sub(d.accepted) > maxAge {
				attempt--
				aged = true
				break
			}
			b.count(func(s *BusStats) { s.Retries[consumer]++ })
			if !sleepCtx(ctx, wait) {
				lastErr = fmt.Errorf("bus closed: %w", ctx.Err())
				break
			}
		}
		// Every attempt decodes its own copy, like a fresh invocation.
		ev = events.EventBridgeEvent{}
		if err := json.Unmarshal(raw, &ev); err != nil {
			lastErr = fmt.Errorf("decode EventBridge event: %w", err)
			break
		}
		b.count(func(s *BusStats) { s.Attempts[consumer]++ })
		switch {
		case t.queue != nil:
			lastErr = b.send(ctx, b.RuleARN(rule.Name), t, raw, traceHeader)
		case t.bus != nil:
			lastErr = b.forward(ctx, b.RuleARN(rule.Name), t, ev, traceHeader)
		default:
			lastErr = b.attempt(outboxtrace.ParentOrNew(ctx, outboxtrace.FromXRayHeader(traceHeader)), consumer, ev, attempt, t.h)
		}
		if lastErr == nil {
			b.count(func(s *BusStats) { s.Deliveries[consumer]++ })
			b.forgetDelivery(d.id)
			return
		}
		if b.cfg.Store != nil && ctx.Err() != nil {
			break
		}
		code, retried = deliveryFailure(lastErr)
		b.log.Warn("delivery failed", "consumer", consumer, "rule", rule.Name, "id", ev.ID, "attempt", attempt, "error_code", code, "retried", retried, "error", lastErr)
	}
	if b.cfg.Store != nil && ctx.Err() != nil {
		b.log.Info("delivery kept for the next start (bus closed)", "consumer", consumer, "rule", rule.Name, "id", ev.ID)
		return
	}
	if code == "" {
		code, _ = deliveryFailure(lastErr)
	}
	exhausted := ""
	switch {
	case aged:
		exhausted = sqsconsumer.ExhaustedMaximumEventAge
	case retried && attempt >= maxAttempts:
		exhausted = sqsconsumer.ExhaustedMaximumRetryAttempts
	}
	dl := DeadLetter{Consumer: consumer, Rule: rule.Name, RuleARN: b.RuleARN(rule.Name), TargetARN: b.targetARN(consumer, t),
		EventJSON: raw, Event: ev, Attempts: attempt, ErrorCode: code, Error: fmt.Sprint(lastErr), At: time.Now()}
	msgID, dlqErr := b.sendToDLQ(ctx, dl, exhausted)
	dl.DLQMessageID = msgID
	b.keepDeadLetter(d.id, dl)
	b.mu.Lock()
	b.dead = append(b.dead, dl)
	b.stats.DeadLettered[consumer]++
	switch {
	case dlqErr != nil:
		b.stats.FailedToDLQ[consumer]++
	case msgID != "":
		b.stats.SentToDLQ[consumer]++
	}
	b.mu.Unlock()
	if dlqErr != nil {
		b.log.Error("event dead-lettered, and its rule's DLQ refused it: on AWS it is dropped (InvocationsFailedToBeSentToDlq)", "consumer", consumer, "rule", rule.Name, "id", ev.ID, "error", lastErr, "dlq_error", dlqErr)
	}
	b.log.Error("event dead-lettered", "consumer", consumer, "rule", rule.Name, "id", ev.ID, "attempts", attempt, "error_code", code, "error", lastErr, "dlq_message_id", msgID)
	if b.cfg.OnDeadLetter != nil {
		b.cfg.OnDeadLetter(dl)
	}
}

func (b *Bus) attempt(ctx context.Context, consumer string, ev events.EventBridgeEvent, attempt int, h EventHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, b.cfg.HandlerTimeout)
	defer cancel()
	if b.cfg.Interceptor != nil {
		return b.cfg.Interceptor(cctx, consumer, ev, attempt, h)
	}
	return h(cctx, ev)
}

// send delivers raw to a queue target, as EventBridge does for the rule
// ruleARN: under EventBridgeSenderID, with the rule's ARN as aws:SourceArn
// (WithSourceARN). The entry's X-Ray TraceHeader, if any, goes as the
// AWSTraceHeader message system attribute, as EventBridge sends it.
func (b *Bus) send(ctx context.Context, ruleARN string, t busTarget, raw json.RawMessage, traceHeader string) error {
	cctx, cancel := context.WithTimeout(WithSourceARN(WithSenderID(ctx, EventBridgeSenderID), ruleARN), b.cfg.HandlerTimeout)
	defer cancel()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(t.url), MessageBody: aws.String(string(raw))}
	if traceHeader != "" {
		in.MessageSystemAttributes = map[string]sqstypes.MessageSystemAttributeValue{
			outboxtrace.AWSTraceHeader: {DataType: aws.String("String"), StringValue: aws.String(traceHeader)},
		}
	}
	_, err := t.queue.SendMessage(cctx, in)
	return err
}

func (b *Bus) count(f func(*BusStats)) {
	b.mu.Lock()
	f(&b.stats)
	b.mu.Unlock()
}

func (b *Bus) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight--
	if b.inflight == 0 && b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
}

// forward puts ev on another bus (an event bus target, SubscribeBus) as
// EventBridge does for the rule ruleARN: one PutEvents entry with the
// event's source, detail-type, detail, time and resources, the target's
// ARN as EventBusName, under the rule's ARN as aws:SourceArn and marked as
// forwarded (withForwarded). A failed entry is returned as an API error of
// its ErrorCode (deliveryFailure classifies it).
func (b *Bus) forward(ctx context.Context, ruleARN string, t busTarget, ev events.EventBridgeEvent, traceHeader string) error {
	cctx, cancel := context.WithTimeout(withForwarded(WithSourceARN(ctx, ruleARN), ruleARN), b.cfg.HandlerTimeout)
	defer cancel()
	entry := ebtypes.PutEventsRequestEntry{EventBusName: aws.String(t.busARN), Source: aws.String(ev.Source),
		DetailType: aws.String(ev.DetailType), Detail: aws.String(string(ev.Detail)), Resources: ev.Resources}
	if !ev.Time.IsZero() {
		entry.Time = aws.Time(ev.Time)
	}
	if traceHeader != "" {
		entry.TraceHeader = aws.String(traceHeader)
	}
	out, err := t.bus.PutEvents(cctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry}})
	if err != nil {
		return err
	}
	if out.FailedEntryCount > 0 && len(out.Entries) > 0 {
		e := out.Entries[0]
		return &smithy.GenericAPIError{Code: aws.ToString(e.ErrorCode), Message: aws.ToString(e.ErrorMessage)}
	}
	return nil
}
