package dedup

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
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

// Config configures an Applier. Zero values take the defaults.
type Config struct {
	// Table is the dedup marker table name (partition key "pk", type S; see
	// CreateTableInput). Required.
	Table string
	// Consumer names the consumer (e.g. routing.ConsumerLedger); it prefixes
	// the marker key so consumers can share one table. Required; must not
	// contain '#'.
	Consumer string
	// Retention is how long a marker is kept before its TTL expires it.
	// Default config.DefaultDedupRetention (7 days). Minimum one hour.
	Retention time.Duration
	// MaxAttempts bounds TransactWriteItems calls per Apply when the
	// transaction is cancelled only by conflicts or throttling. Default 5.
	MaxAttempts int
	// BaseBackoff is the first retry delay; it doubles per attempt with full
	// jitter, capped at MaxBackoff. Defaults 20 ms and 1 s.
	BaseBackoff time.Duration
	// MaxBackoff caps one retry delay.
	MaxBackoff time.Duration
	// CallTimeout bounds one TransactWriteItems call. Default 10 s.
	CallTimeout time.Duration
	// Now returns the current time; default time.Now. For tests.
	Now func() time.Time
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
	case c.Retention < time.Hour:
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
//     earlier delivery. Nothing changed; acknowledge the delivery.
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
// Ordered (Config.Ordered): the ordering gate (Gate) is the last action,
// 1+len(effects). When its condition fails, the ordering item is read
// (LastSequence, strongly consistent) and decides, after the marker's
// condition and before everything else:
//   - env.Sequence <= last: (false, nil), a duplicate (applied before, even
//     if its marker has expired);
//   - env.Sequence > last+1: (false, err) with a *GapError (ErrSequenceGap)
//     naming the missing range; nothing was written, deliver it again later;
//   - env.Sequence == last+1: the item moved after the transaction read it;
//     the gate's failure counts as a conflict: the transaction is sent again
//     (bounded by MaxAttempts) unless another reason repeating cannot fix
//     (ValidationError, ItemCollectionSizeLimitExceeded, an effect's
//     condition) is there, which is returned at once as a *outbox.TxError.
//
// A failed read is returned as an error (redeliver).
//
// With tracing on, the outcome is recorded on ctx's span (the consumer's
// per-message span, pkg/sqsconsumer): outboxtrace.OutcomeApplied,
// OutcomeDuplicate (marker or ordering gate) or OutcomeHeld (early event).
func (a *Applier) Apply(ctx context.Context, env outbox.Envelope, effects []types.TransactWriteItem) (bool, error) {
	if err := env.Validate(); err != nil {
		return false, err
	}
	items := make([]types.TransactWriteItem, 0, 1+len(effects))
	items = append(items, a.Marker(env, a.cfg.Now()))
	items = append(items, effects...)
	gate := -1
	if a.cfg.Ordered {
		g, err := a.Gate(env, a.cfg.Now())
		if err != nil {
			return false, err
		}
		gate = len(items)
		items = append(items, g)
	}
	if err := outbox.CheckTransaction(items); err != nil {
		return false, fmt.Errorf("dedup: event %s: %w", env.EventID, err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}

	var last error
	for attempt := 1; attempt <= a.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, a.backoff(attempt-1)); err != nil {
				return false, fmt.Errorf("dedup: event %s: %w (last: %v)", env.EventID, err, last)
			}
		}
		err := a.call(ctx, in)
		if err == nil {
			outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeApplied)
			return true, nil
		}
		err = outbox.TranslateTxError(err)
		te, ok := outbox.AsTxError(err)
		if !ok {
			return false, fmt.Errorf("dedup: apply event %s: %w", env.EventID, err)
		}
		if te.ConditionFailed(MarkerIndex) {
			outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeDuplicate)
			return false, nil // already applied
		}
		if gate >= 0 && te.ConditionFailed(gate) {
			outcome, gap, err := a.judgeGate(ctx, env)
			switch {
			case err != nil:
				return false, fmt.Errorf("dedup: apply event %s: ordering gate failed: %w", env.EventID, err)
			case outcome == gateDuplicate:
				outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeDuplicate)
				return false, nil
			case outcome == gateEarly:
				outboxtrace.SetOutcome(ctx, outboxtrace.OutcomeHeld)
				return false, gap
			}
			// gateMoved: the gate's failure was a race, like a conflict.
			// Another reason repeating cannot fix decides at once.
			if te.Invalid() || te.CollectionFull() || effectConditionFailed(te, gate) {
				return false, fmt.Errorf("dedup: apply event %s: %w", env.EventID, te)
			}
			last = te
			continue
		}
		if !te.Retryable() {
			return false, fmt.Errorf("dedup: apply event %s: %w", env.EventID, te)
		}
		last = te
	}
	return false, fmt.Errorf("dedup: apply event %s: gave up after %d attempts: %w", env.EventID, a.cfg.MaxAttempts, last)
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

// backoff returns the delay before retry n (1-based): full jitter over
// min(MaxBackoff, BaseBackoff*2^(n-1)).
func (a *Applier) backoff(n int) time.Duration {
	d := a.cfg.BaseBackoff
	for i := 1; i < n && d < a.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, a.cfg.MaxBackoff)
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Dead-letter reasons of transactions DynamoDB refuses for good (see
// PermanentReason).
const (
	// ReasonTransactionInvalid: an action of the Apply transaction has
	// ValidationError (e.g. an item over 400 KB, a type mismatch).
	ReasonTransactionInvalid = "transaction_invalid"
	// ReasonItemCollectionFull: an action has
	// ItemCollectionSizeLimitExceeded (an item collection of a table with
	// a local secondary index reached 10 GB).
	ReasonItemCollectionFull = "item_collection_full"
)

// PermanentReason returns ReasonTransactionInvalid or
// ReasonItemCollectionFull when err from Apply carries a *outbox.TxError
// that repeating cannot fix (outbox.TxError.Invalid, CollectionFull), so a
// consumer dead-letters the event at once (sqsconsumer.Permanent) instead of
// letting it be redelivered until the queue gives up. It returns "", false
// for any other error (retry it).
//
// The outcome of every Apply cancellation, strongest first: the marker's
// condition → duplicate (Apply returns false, nil); an effect whose failed
// condition proves the event was applied before (the consumer's check, e.g.
// the ledger entry or the notification exists) → duplicate; PermanentReason
// → permanent; the consumer's other effect conditions (its own policy);
// otherwise (conflicts, throttling, unnamed reasons that outlasted
// MaxAttempts) → retry.
func PermanentReason(err error) (string, bool) {
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

// CreateTableInput returns the dedup table definition used by the local
// runtime and tests: partition key AttrPK (S), on-demand billing, no stream.
// It holds the markers and the ordered consumers' ordering items
// (SequenceKey).
// The CDK construct declares the same shape plus TTL on TTLAttribute.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	}
}
