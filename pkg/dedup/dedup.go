package dedup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Attribute names of a dedup marker item.
const (
	AttrPK          = "pk"           // S: "<consumer>#<event_id>"
	AttrConsumer    = "consumer"     // S: the consumer name
	AttrEventID     = "event_id"     // S: the envelope event_id
	AttrEventType   = "event_type"   // S
	AttrAggregateID = "aggregate_id" // S
	AttrSequence    = "sequence"     // N: the envelope sequence
	AttrAppliedAt   = "applied_at"   // S: RFC 3339 nanoseconds, UTC
	AttrExpiresAt   = "expires_at"   // N: Unix epoch seconds; the TTL attribute
)

// TTLAttribute is the dedup table's TTL attribute (Unix epoch seconds). The
// CDK construct enables TTL on it.
const TTLAttribute = AttrExpiresAt

// MarkerIndex is the index of the marker Put in the transaction Apply sends;
// effects[i] is action i+1 (see EffectIndex and FailedEffect).
const MarkerIndex = 0

// Defaults for Config.
const (
	DefaultMaxAttempts = 5
	DefaultBaseBackoff = 20 * time.Millisecond
	DefaultMaxBackoff  = time.Second
	DefaultCallTimeout = 10 * time.Second
)

// ErrMalformedEvent reports an EventBridge event whose detail is not a valid
// outbox envelope. Retrying cannot fix it: it is a poison message.
var ErrMalformedEvent = errors.New("dedup: malformed event")

// TransactWriter is the one DynamoDB method the Applier calls, with the SDK's
// exact signature, so *dynamodb.Client satisfies it and tests can fake it.
// Implementations must be safe for concurrent use.
type TransactWriter interface {
	TransactWriteItems(ctx context.Context, params *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// MinRetention is the shortest Config.Retention (DEDUP_RETENTION_SECONDS)
// accepted: one hour.
const MinRetention = time.Hour

// Config configures an Applier. Zero values take the defaults.
type Config struct {
	// Table is the dedup marker table name (partition key "pk", type S; see
	// CreateTableInput). Required.
	Table string
	// Consumer names the consumer (e.g. "wallet-projection"); it prefixes
	// the marker key so consumers can share one table. Required; must not
	// contain '#'.
	Consumer string
	// Retention is how long a marker is kept before its TTL expires it.
	// Default config.DefaultDedupRetention (7 days). Minimum MinRetention
	// (one hour).
	Retention time.Duration
	// MaxAttempts bounds TransactWriteItems calls per Apply when the
	// transaction is cancelled only by conflicts or throttling. Default 5.
	MaxAttempts int
	// BaseBackoff is the first retry delay; it doubles per attempt, capped
	// at MaxBackoff, each wait drawn uniformly from [0, that delay] (full
	// jitter, as every retry of the library). Defaults 20 ms and 1 s.
	BaseBackoff time.Duration
	// MaxBackoff caps one retry delay.
	MaxBackoff time.Duration
	// CallTimeout bounds one TransactWriteItems call. Default 10 s.
	CallTimeout time.Duration
	// Now returns the current time; default time.Now. For tests.
	Now func() time.Time
	// Keys names the key attributes of the tables the effects write, for
	// the one-action-per-item check of Put actions
	// (outbox.CheckTransaction); a table not listed is taken to be keyed by
	// pk/sk. The state's own items are keyed by AttrPK.
	Keys []outbox.TableKeys
	// Ordered makes Apply an ordered apply (promise I4): the transaction
	// gets one more action, the ordering gate (Gate), after the effects,
	// and an event that is not next for its aggregate is refused with a
	// *GapError (nothing written) or acknowledged as a duplicate. The
	// client passed to NewApplier must then also implement ItemGetter.
	Ordered bool
}

func (c *Config) setDefaults() {
	if c.Retention == 0 {
		c.Retention = config.DefaultDedupRetention
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BaseBackoff == 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error.
func (c Config) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("dedup: Config.Table is required")
	case c.Consumer == "":
		return errors.New("dedup: Config.Consumer is required")
	case strings.ContainsRune(c.Consumer, '#'):
		return fmt.Errorf("dedup: Config.Consumer %q must not contain '#'", c.Consumer)
	case c.Retention < MinRetention:
		return fmt.Errorf("dedup: Config.Retention %s is shorter than one hour", c.Retention)
	case c.MaxAttempts < 1:
		return fmt.Errorf("dedup: Config.MaxAttempts %d must be >= 1", c.MaxAttempts)
	case c.BaseBackoff < 0 || c.MaxBackoff < c.BaseBackoff:
		return fmt.Errorf("dedup: backoff %s..%s is invalid", c.BaseBackoff, c.MaxBackoff)
	case c.CallTimeout < 0:
		return fmt.Errorf("dedup: Config.CallTimeout %s is negative", c.CallTimeout)
	}
	return nil
}

// Applier applies an event's side effect together with its dedup marker.
// It is safe for concurrent use.
type Applier struct {
	client TransactWriter
	getter ItemGetter // ordered appliers only
	cfg    Config
	cond   expression.Expression
}

// NewApplier returns an Applier, or an error if cfg does not validate or
// cfg.Ordered is set and client does not implement ItemGetter.
func NewApplier(client TransactWriter, cfg Config) (*Applier, error) {
	if client == nil {
		return nil, errors.New("dedup: nil TransactWriter")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cond, err := expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return nil, fmt.Errorf("dedup: build marker condition: %w", err)
	}
	a := &Applier{client: client, cfg: cfg, cond: cond}
	if cfg.Ordered {
		g, ok := client.(ItemGetter)
		if !ok {
			return nil, errors.New("dedup: Config.Ordered needs a client with GetItem (ItemGetter)")
		}
		a.getter = g
	}
	return a, nil
}

// Config returns the applier's effective configuration.
func (a *Applier) Config() Config { return a.cfg }

// MarkerKey returns the marker's partition key value for an event id:
// "<consumer>#<event_id>".
func MarkerKey(consumer, eventID string) string { return consumer + "#" + eventID }

// Key returns this applier's marker key map for an event id, for GetItem.
func (a *Applier) Key(eventID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrPK: &types.AttributeValueMemberS{Value: MarkerKey(a.cfg.Consumer, eventID)},
	}
}

// Marker returns the marker Put (action 0 of every Apply transaction) for env,
// applied at now.
func (a *Applier) Marker(env outbox.Envelope, now time.Time) types.TransactWriteItem {
	now = now.UTC()
	item := map[string]types.AttributeValue{
		AttrPK:          &types.AttributeValueMemberS{Value: MarkerKey(a.cfg.Consumer, env.EventID)},
		AttrConsumer:    &types.AttributeValueMemberS{Value: a.cfg.Consumer},
		AttrEventID:     &types.AttributeValueMemberS{Value: env.EventID},
		AttrEventType:   &types.AttributeValueMemberS{Value: env.EventType},
		AttrAggregateID: &types.AttributeValueMemberS{Value: env.AggregateID},
		AttrSequence:    &types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence, 10)},
		AttrAppliedAt:   &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)},
		AttrExpiresAt:   &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(a.cfg.Retention).Unix(), 10)},
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(a.cfg.Table),
		Item:                      item,
		ConditionExpression:       a.cond.Condition(),
		ExpressionAttributeNames:  a.cond.Names(),
		ExpressionAttributeValues: a.cond.Values(),
	}}
}

// Apply commits the dedup marker for env and the side-effect actions effects
// in one TransactWriteItems call (the marker is action 0, effects[i] is action
// i+1). effects may be empty: the event is then only recorded as seen.
//
// Results:
//   - (true, nil): marker and effects committed, this delivery applied the event.
//   - (false, nil): the marker already exists; the event was applied by an
//     earlier delivery. Nothing changed; acknowledge the delivery. Ordered
//     with a Resequencer, also: the event is early and now waits in the
//     buffer (ApplyEvent tells the two apart).
//   - (false, err) with err wrapping outbox.ErrInvalidEnvelope: env does not
//     validate; nothing was sent.
//   - (false, err) with err wrapping outbox.ErrTransactionTooLarge or
//     outbox.ErrDuplicateAction: the transaction breaks DynamoDB limits
//     (100 actions, 4 MB, one action per item); nothing was sent.
//   - (false, err) with a *outbox.TxError in err's chain (outbox.AsTxError):
//     the transaction was cancelled, either by an effect's condition (see
//     FailedEffect), by reasons repeating cannot fix (PermanentReason:
//     ValidationError, ItemCollectionSizeLimitExceeded), or by conflicts,
//     throttling or unnamed reasons that outlasted MaxAttempts. Nothing was
//     written.
//   - (false, err) with the SDK's error otherwise, or the context's error.
//
// Ordered (Config.Ordered): see ApplyEvent.
func (a *Applier) Apply(ctx context.Context, env outbox.Envelope, effects []types.TransactWriteItem) (bool, error) {
	o, err := a.ApplyEvent(ctx, env, effects)
	return o == OutcomeApplied, err
}

// ApplyEvent is Apply with the outcome named: OutcomeApplied,
// OutcomeDuplicate or, ordered with a Resequencer, OutcomeBuffered. Errors
// are Apply's.
//
// Ordered (Config.Ordered): the ordering gate (Gate) is the last action,
// 1+len(effects), conditioned on the aggregate's last applied sequence
// being env.Sequence-1 and on no successor waiting in the buffer: an event
// that arrives in order costs one transaction, as unordered. When DynamoDB
// cancels it, the cancellation reasons are read once, strongest first: the
// marker's condition (applied before), then the gate's condition — which
// decides even when an effect's condition failed with it (an effect that
// depends on its predecessor's effect fails while the predecessor is still
// committing; that is not the effect's answer) — then ValidationError or
// ItemCollectionSizeLimitExceeded (permanent), then an effect's condition
// that failed while the gate held (the effect's own answer, returned as a
// *outbox.TxError: FailedEffect), then conflicts and throttling (sent
// again). After the marker's or the gate's condition the ordering item is
// read (ReadGate, strongly consistent) and the decision table
// (docs/ORDERING.md "The decision table") gives the action:
//   - applied (marker) and the gate past it: OutcomeDuplicate;
//   - applied and next: the gate adopts it (last_sequence = sequence, not
//     applied again): OutcomeDuplicate;
//   - applied and ahead of the gate (a replay in another order): stored in
//     the buffer as applied and adopted in turn (OutcomeDuplicate); without
//     a Resequencer, a *GapError (held in its queue until its turn);
//   - not applied and the gate past it: OutcomeDuplicate (applied before its
//     marker expired, or before the consumer's starting point);
//   - not applied, next, successors buffered: sent again without the buffer
//     condition (its own buffer item deleted in the same transaction); the
//     Resequencer applies the successors after it (Resequencer.Handle);
//   - not applied, next, nothing buffered: the gate moved after the
//     transaction read it (a race): sent again, bounded by MaxAttempts,
//     unless ValidationError or ItemCollectionSizeLimitExceeded was there
//     too (returned at once as a *outbox.TxError);
//   - not applied and ahead (early): run by a Resequencer, stored in the
//     buffer (OutcomeBuffered; acknowledge it) in one transaction
//     conditioned on the gate still being short of it — if the predecessor
//     committed in between, the event is applied instead. A duplicate of a
//     buffered event is OutcomeDuplicate; another event claiming a
//     buffered sequence is a *sqsconsumer.PermanentError
//     (ReasonSequenceConflict). Without a Resequencer, or when the buffer
//     cannot take it (ResequencerConfig.MaxDepth events of the aggregate
//     wait already, or the event is over MaxBufferedEventBytes), it is
//     (0, err) with a *GapError (ErrSequenceGap): nothing was written,
//     deliver it again later (ConsumerConfig.Hold).
//
// Whenever the read shows the next sequence buffered (a crash left it), the
// Resequencer drains it after the handler returns. A failed read is
// returned as an error: redeliver.
//
// With tracing on, the outcome is recorded on ctx's span (the consumer's
// per-message span, pkg/sqsconsumer): outboxtrace.OutcomeApplied,
// OutcomeDuplicate (marker or ordering gate) or OutcomeHeld (buffered or
// refused as early).
func (a *Applier) ApplyEvent(ctx context.Context, env outbox.Envelope, effects []types.TransactWriteItem) (Outcome, error) {
	if err := env.Validate(); err != nil {
		return 0, err
	}
	if a.cfg.Ordered {
		return a.applyOrdered(ctx, env, effects)
	}
	in, _, err := a.transaction(env, effects, gateFast, false)
	if err != nil {
		return 0, err
	}
	var last error
	for attempt := 1; attempt <= a.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, a.backoff(attempt-1)); err != nil {
				return 0, fmt.Errorf("dedup: event %s: %w (last: %v)", env.EventID, err, last)
			}
		}
		err := a.call(ctx, in)
		if err == nil {
			setOutcome(ctx, nil, OutcomeApplied)
			return OutcomeApplied, nil
		}
		err = outbox.TranslateTxError(err)
		te, ok := outbox.AsTxError(err)
		switch {
		case !ok:
			return 0, fmt.Errorf("dedup: apply event %s: %w", env.EventID, err)
		case te.ConditionFailed(MarkerIndex):
			setOutcome(ctx, nil, OutcomeDuplicate)
			return OutcomeDuplicate, nil // already applied
		case !te.Retryable():
			return 0, fmt.Errorf("dedup: apply event %s: %w", env.EventID, te)
		}
		last = te
	}
	return 0, fmt.Errorf("dedup: apply event %s: gave up after %d attempts: %w", env.EventID, a.cfg.MaxAttempts, last)
}

// outcomeHeld is an early event refused with a *GapError (trace outcome
// "held"; nothing recorded on the run's state).
const outcomeHeld = Outcome(-1)

// transaction builds an Apply transaction: the marker (action 0), effects,
// and for an ordered Applier the gate in mode (returned index; -1 when
// unordered) and, with delBuffer, the Delete of env's buffer item.
func (a *Applier) transaction(env outbox.Envelope, effects []types.TransactWriteItem, mode gateMode, delBuffer bool) (*dynamodb.TransactWriteItemsInput, int, error) {
	now := a.cfg.Now()
	items := make([]types.TransactWriteItem, 0, 3+len(effects))
	items = append(items, a.Marker(env, now))
	items = append(items, effects...)
	gate := -1
	if a.cfg.Ordered {
		g, err := a.gate(env, now, mode)
		if err != nil {
			return nil, 0, err
		}
		gate = len(items)
		items = append(items, g)
		if delBuffer {
			items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(a.cfg.Table),
				Key: map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: BufferKey(a.cfg.Consumer, env.AggregateType, env.AggregateID, env.Sequence)}}}})
		}
	}
	if limit := MaxEffects(a.cfg.Ordered); len(effects) > limit {
		// Ordered: checked on every path, not only a drain's (which adds
		// the buffer item's Delete), so an event's fate does not depend
		// on whether it arrived early.
		return nil, 0, fmt.Errorf("dedup: event %s: %w: %d effects, at most %d", env.EventID, outbox.ErrTransactionTooLarge, len(effects), limit)
	}
	if err := outbox.CheckTransaction(items, a.cfg.Keys...); err != nil {
		return nil, 0, fmt.Errorf("dedup: event %s: %w", env.EventID, err)
	}
	return &dynamodb.TransactWriteItemsInput{TransactItems: items}, gate, nil
}

func (a *Applier) call(ctx context.Context, in *dynamodb.TransactWriteItemsInput) error {
	if a.cfg.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.CallTimeout)
		defer cancel()
	}
	_, err := a.client.TransactWriteItems(ctx, in)
	return err
}

// backoff returns the delay before retry n (1-based): uniform in
// [0, min(MaxBackoff, BaseBackoff · 2^(n-1))] (pkg/internal/retry).
func (a *Applier) backoff(n int) time.Duration {
	return retry.Delay(a.cfg.BaseBackoff, a.cfg.MaxBackoff, n)
}

func sleep(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }

// Dead-letter reasons of transactions DynamoDB refuses for good (see
// PermanentReason).
const (
	// ReasonTransactionInvalid: an action of the Apply transaction has
	// ValidationError (e.g. an item over 400 KB, a type mismatch), or the
	// transaction was refused before sending (too many effects, two
	// actions on one item; PermanentReason).
	ReasonTransactionInvalid = "transaction_invalid"
	// ReasonItemCollectionFull: an action has
	// ItemCollectionSizeLimitExceeded (an item collection of a table with
	// a local secondary index reached 10 GB).
	ReasonItemCollectionFull = "item_collection_full"
)

// MaxEffects is the most effects one event's Apply transaction takes
// beside the protocol's own actions, within DynamoDB's
// outbox.MaxTransactionActions (100): 99 for an unordered Applier (the
// dedup marker), 97 for an ordered one (the marker, the ordering gate, and
// the Delete of its buffer item when the resequencer drains an early
// event). More is refused before sending (outbox.ErrTransactionTooLarge),
// on every path alike.
func MaxEffects(ordered bool) int {
	if ordered {
		return outbox.MaxTransactionActions - 3
	}
	return outbox.MaxTransactionActions - 1
}

// PermanentReason returns ReasonTransactionInvalid or
// ReasonItemCollectionFull when err from Apply carries a *outbox.TxError
// that repeating cannot fix (outbox.TxError.Invalid, CollectionFull), or
// ReasonTransactionInvalid when Apply refused the transaction before
// sending it (outbox.ErrTransactionTooLarge: more than MaxEffects effects or
// over DynamoDB's size limits; outbox.ErrDuplicateAction: two actions on
// one item, e.g. an effect on the event's own dedup marker or ordering
// gate), so a consumer dead-letters the event at once
// (sqsconsumer.Permanent) instead of letting it be redelivered until the
// queue gives up. It returns "", false for any other error (retry it).
//
// The outcome of every Apply cancellation, strongest first: the marker's
// condition → duplicate (Apply returns false, nil); an effect whose failed
// condition proves the event was applied before (the consumer's check, e.g.
// an entry keyed by the event id exists; AppliedIf) → duplicate; PermanentReason
// → permanent; the consumer's other effect conditions (its own policy);
// otherwise (conflicts, throttling, unnamed reasons that outlasted
// MaxAttempts) → retry.
func PermanentReason(err error) (string, bool) {
	if errors.Is(err, outbox.ErrTransactionTooLarge) || errors.Is(err, outbox.ErrDuplicateAction) {
		return ReasonTransactionInvalid, true
	}
	te, ok := outbox.AsTxError(err)
	switch {
	case !ok:
		return "", false
	case te.Invalid():
		return ReasonTransactionInvalid, true
	case te.CollectionFull():
		return ReasonItemCollectionFull, true
	}
	return "", false
}

// EffectIndex returns the transaction action index of effects[i] in an Apply
// call (i+1: the marker is action 0).
func EffectIndex(i int) int { return i + 1 }

// FailedEffect returns the index into the effects passed to Apply of the
// first effect whose condition failed, if err carries a *outbox.TxError with
// such a failure. For an ordered Applier the gate is the action after the
// effects: an index equal to len(effects) is the gate (Apply only returns
// that after a moved gate outlasted MaxAttempts).
func FailedEffect(err error) (int, bool) {
	te, ok := outbox.AsTxError(err)
	if !ok {
		return -1, false
	}
	for i := 1; i < len(te.Reasons); i++ {
		if te.ConditionFailed(i) {
			return i - 1, true
		}
	}
	return -1, false
}

// effectConditionFailed reports whether an action between the marker and
// end (exclusive) failed its condition.
func effectConditionFailed(te *outbox.TxError, end int) bool {
	for i := 1; i < end && i < len(te.Reasons); i++ {
		if te.ConditionFailed(i) {
			return true
		}
	}
	return false
}

// EffectConditionFailed reports whether err carries a *outbox.TxError in
// which effects[i] of the Apply call failed its condition.
func EffectConditionFailed(err error, i int) bool {
	te, ok := outbox.AsTxError(err)
	return ok && te.ConditionFailed(EffectIndex(i))
}

// CreateTableInput returns a table definition for a consumer's state alone
// (a consumer whose effects live outside DynamoDB, and tests): partition
// key AttrPK (S), on-demand billing, no stream, and the state index
// (WithStateIndex). It holds the markers, the ordered consumer's ordering
// items (SequenceKey) and its buffered events (BufferKey). Keep a
// consumer's state in the same table as its DynamoDB effects where it has
// them (ConsumerConfig.Dedup.Table defaults to ConsumerConfig.Table). The
// CDK construct declares the same shape plus TTL on TTLAttribute.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return WithStateIndex(&dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	})
}

// WithStateIndex adds what a consumer's state needs to the definition of
// the table that holds it (a consumer's own table, partition key "pk" of
// type S): the sparse global secondary index BufferIndex over the
// resequencer's buffer items (partition key AttrBufferShard, sort key
// AttrBufferedAt, both S, projecting BufferIndexAttributes) and its
// attribute definitions. Only buffer items carry those attributes, so the
// index holds nothing else. It returns in, changed; TTL (on TTLAttribute)
// is set on the table after it is created (UpdateTimeToLive).
func WithStateIndex(in *dynamodb.CreateTableInput) *dynamodb.CreateTableInput {
	in.AttributeDefinitions = append(in.AttributeDefinitions,
		types.AttributeDefinition{AttributeName: aws.String(AttrBufferShard), AttributeType: types.ScalarAttributeTypeS},
		types.AttributeDefinition{AttributeName: aws.String(AttrBufferedAt), AttributeType: types.ScalarAttributeTypeS})
	in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
		IndexName: aws.String(BufferIndex),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrBufferShard), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrBufferedAt), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: BufferIndexAttributes},
	})
	return in
}
