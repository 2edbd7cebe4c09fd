package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// ReasonEffectCondition is the dead-letter reason of an event whose
// effect's condition failed while its marker and gate held (the effect's
// own answer: e.g. a balance that must not go negative) and that
// HandlerOption AppliedIf does not name: retrying cannot change it.
const ReasonEffectCondition = "effect_condition_failed"

// EffectsFunc builds the effects of one event: the DynamoDB actions
// committed with its dedup marker (and, ordered, its gate) in one
// TransactWriteItems, at most MaxEffects (99 unordered, 97 ordered), none
// on the event's own marker or gate (one action per item: DynamoDB's
// TransactWriteItems rule); more, or two on one item, dead-letter the
// event with ReasonTransactionInvalid. Items of the consumer's table whose
// pk starts with the consumer's name and "#" are the protocol's (markers
// MarkerKey, gates SequenceKey, buffer BufferKey): keep effects off them. It
// may run more than once for one event (every delivery, every drain of the
// resequencer) and must have no effect of its own. Returning no effects
// records the event as seen without an effect: an ordered consumer's
// answer to an event type it does not act on (the gate advances past it).
// An error wrapping a *sqsconsumer.PermanentError (sqsconsumer.Permanent)
// dead-letters the event with its reason; any other error retries it.
type EffectsFunc func(ctx context.Context, env outbox.Envelope) ([]types.TransactWriteItem, error)

// HandlerOption changes a Handler.
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	appliedIf []int
}

// AppliedIf names effects (indexes into what EffectsFunc returns) whose
// failed condition proves the event was applied before: typically a Put
// keyed by the event id with attribute_not_exists, which catches a
// redelivery after the dedup marker expired (Config.Retention). Such a
// failure is acknowledged as a duplicate; an ordered consumer records the
// event as seen (marker and gate, no effect) so its gate advances.
func AppliedIf(effects ...int) HandlerOption {
	return func(o *handlerOptions) { o.appliedIf = append(o.appliedIf, effects...) }
}

// Handler returns the consumer's event handler, for sqsconsumer.New: the
// whole dedup and ordering protocol around effects, so that a consumer is
// its effect builder and nothing else. For each EventBridge event it
//
//  1. checks the origin and decodes the envelope (ConsumerConfig.Accept):
//     a forged or malformed event is dead-lettered (sqsconsumer.Permanent
//     with ReasonForeignSource, ReasonForeignAccount or
//     ReasonMalformedEvent);
//  2. builds the effects (EffectsFunc; its permanent errors dead-letter,
//     others retry);
//  3. applies marker, effects and, ordered, the gate in one transaction
//     (Applier.ApplyEvent) and answers: applied, duplicate or buffered →
//     nil (acknowledged); an early event the resequencer cannot take →
//     held, then dead-lettered with ReasonSequenceGap
//     (ConsumerConfig.Hold); an AppliedIf effect's condition → duplicate;
//     ValidationError or ItemCollectionSizeLimitExceeded, or effects the
//     transaction cannot take (more than MaxEffects, two actions on one
//     item) → dead-lettered (PermanentReason); another effect's condition → dead-lettered with
//     ReasonEffectCondition; anything else (conflicts, throttling past
//     Config.MaxAttempts, SDK errors) → an error, so the message is retried.
//
// An ordered consumer (ConsumerConfig.Ordering Ordered) runs it inside its
// Resequencer (Consumer.Resequence): early events wait in the consumer's
// table and are applied right after their predecessor, and the sweep tick
// (IsSweepTick) runs the resequencer's sweep; an unordered consumer
// acknowledges a sweep tick. Every answer is logged on Config.Logger with
// the envelope's keys. Errors: the Resequencer's (NewResequencer), or a nil
// effects.
func (c Consumer) Handler(effects EffectsFunc, opts ...HandlerOption) (sqsconsumer.EventHandler, error) {
	if effects == nil {
		return nil, fmt.Errorf("%s: nil EffectsFunc", c.Config.Dedup.Consumer)
	}
	if c.Applier == nil {
		return nil, errors.New("dedup: Consumer without an Applier: build it with NewConsumer")
	}
	var o handlerOptions
	for _, opt := range opts {
		opt(&o)
	}
	h := func(ctx context.Context, ev events.EventBridgeEvent) error { return c.handle(ctx, ev, effects, o) }
	r, err := c.Resequence(h)
	if err != nil {
		return nil, err
	}
	if r != nil {
		return r.Handle, nil
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		if IsSweepTick(ev) {
			return nil // unordered: no buffer to sweep
		}
		return h(ctx, ev)
	}, nil
}

// handle is the protocol of Handler for one event.
func (c Consumer) handle(ctx context.Context, ev events.EventBridgeEvent, build EffectsFunc, o handlerOptions) error {
	cfg := c.Config
	name := cfg.Dedup.Consumer
	env, log, err := cfg.Accept(ctx, cfg.Logger, ev)
	if err != nil {
		return err
	}
	log = log.With("idempotency_key", MarkerKey(name, env.EventID))
	effects, err := build(ctx, env)
	if p, ok := sqsconsumer.AsPermanent(err); ok {
		log.ErrorContext(ctx, name+": event refused", "reason", p.Reason, "error", err)
		return err
	}
	if err != nil {
		log.ErrorContext(ctx, name+": building the effects failed; the event will be redelivered", "error", err)
		return fmt.Errorf("%s: effects of %s %s: %w", name, env.EventType, env.EventID, err)
	}
	outcome, err := c.Applier.ApplyEvent(ctx, env, effects)
	failed, effectFailed := FailedEffect(err)
	effectFailed = effectFailed && failed < len(effects) // len(effects): the gate
	reason, permanent := PermanentReason(err)
	switch {
	case errors.Is(err, ErrSequenceGap):
		// Its predecessors are not applied and the buffer cannot take
		// it: nothing was written; hold it, or dead-letter it past the bound.
		return cfg.Hold(ctx, log, err)
	case effectFailed && !permanent && slices.Contains(o.appliedIf, failed):
		log.WarnContext(ctx, name+": effect already applied (its marker expired); acknowledging redelivery", "effect", failed)
		if cfg.Ordering == Ordered {
			// Recorded as seen, so the gate advances past it.
			if _, err := c.Applier.ApplyEvent(ctx, env, nil); errors.Is(err, ErrSequenceGap) {
				return cfg.Hold(ctx, log, err)
			} else if err != nil {
				return fmt.Errorf("%s: record applied %s %s as seen: %w", name, env.EventType, env.EventID, err)
			}
		}
		return nil
	case permanent:
		return Refuse(ctx, log, name, reason, fmt.Errorf("%s: apply %s %s: %w", name, env.EventType, env.EventID, err))
	case effectFailed:
		return Refuse(ctx, log, name, ReasonEffectCondition,
			fmt.Errorf("%s: apply %s %s: effect %d's condition failed: %w", name, env.EventType, env.EventID, failed, err), "effect", failed)
	case err != nil:
		log.ErrorContext(ctx, name+": apply failed; the event will be redelivered", "error", err)
		return fmt.Errorf("%s: apply %s %s: %w", name, env.EventType, env.EventID, err)
	}
	log.InfoContext(ctx, name+": "+outcome.String(), "effects", len(effects))
	return nil
}
