package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// route records an accepted event and starts one delivery per matching
// rule with a subscribed consumer, each kept in the Store first (an error:
// nothing was started or kept).
func (b *Bus) route(raw json.RawMessage, traceHeader string) error {
	v, _ := decodeJSON(raw)
	m, _ := v.(map[string]any)
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
		ds = append(ds, delivery{id: uuid.NewString(), rule: r.rule, target: t, raw: raw, traceHeader: traceHeader})
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
}

// deliver runs the target's attempts and dead-letters on exhaustion, as
// EventBridge does (eb-rule-retry-policy, eb-rule-dlq): a failure EventBridge
// does not retry (deliveryFailure: the target is gone or refuses
// EventBridge) ends the delivery at once; any other is retried up to
// TargetMaxAttempts. The dead letter goes to the rule's DLQ
// (SetDeadLetterQueue) with AWS's attributes, and to DeadLetters. With a
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
	code, retried := "", true
	for attempt < b.cfg.TargetMaxAttempts && retried {
		attempt++
		if attempt > 1 {
			b.count(func(s *BusStats) { s.Retries[consumer]++ })
			if !sleepCtx(ctx, retry.Delay(b.cfg.TargetRetryBaseDelay, b.cfg.TargetRetryMaxDelay, attempt-1)) {
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
		if t.queue != nil {
			lastErr = b.send(ctx, b.RuleARN(rule.Name), t, raw, traceHeader)
		} else {
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
	if retried && attempt >= b.cfg.TargetMaxAttempts {
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
