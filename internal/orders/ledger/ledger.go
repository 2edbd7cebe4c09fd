// Package ledger is an event consumer that books order payments into
// per-currency account balances, exactly once per event (promise I3).
//
// # What it books
//
//   - OrderPaid: a credit entry of amount_minor; the currency's balance grows
//     by amount_minor.
//   - OrderCancelled with was_paid=true: a debit entry of refund_minor; the
//     balance shrinks by refund_minor.
//   - OrderCancelled with was_paid=false: no money moves; only the dedup
//     marker is written, so the event is acknowledged and recorded as seen.
//   - OrderPlaced, OrderShipped and any other detail-type: no money moves.
//     Ordered (the default), the event is checked like the others and only
//     its dedup marker and the order's ordering gate are written, so the
//     ledger's sequence for the order advances past it (the routing rule
//     sends the ledger every order event for that: internal/orders/routing). Unordered,
//     it is ignored with a log line and acknowledged.
//
// # Order (promise I4)
//
// By default the ledger is an ordered consumer (dedup.Ordered): it keeps
// the last applied sequence of each order ("ledger#SEQ#Order#<id>" in the
// dedup table) in the same transaction as the booking, so a refund
// (OrderCancelled with was_paid, sequence 3) is never booked before its
// payment (OrderPaid, sequence 2): an early event waits in the
// resequencer's buffer in the dedup table (dedup.Resequencer) and is
// booked right after its predecessor, by the invocation that books the
// predecessor. Only an event the buffer cannot take falls back to being
// held in the queue (dedup.ErrSequenceGap) and dead-lettered as
// sequence_gap when the gap does not close within Config.GapMaxReceives
// receives (dedup.ConsumerConfig.Hold; docs/ORDERING.md). Sweep drains what
// a crash left in the buffer and reports its oldest age.
//
// # Exactly once
//
// The dedup marker, the entry Put (attribute_not_exists) and the balance
// Update (ADD) go into ONE TransactWriteItems through dedup.Applier. A
// duplicate delivery fails the marker condition and changes nothing. If a
// marker has expired (TTL) and the event is delivered again, the entry's own
// condition catches it: the handler treats that as already booked.
//
// # Errors and redelivery
//
// Handle returns an error when the event must be delivered again or parked.
// Consumers run behind an SQS queue (pkg/sqsconsumer):
//   - Events retrying cannot fix are refused before anything is written and
//     returned wrapped in a *sqsconsumer.PermanentError with a reason, so the
//     SQS adapter dead-letters them at once to the consumer's alarmed DLQ
//     (I5): a source other than Config.ExpectedSource (forged_source), an
//     account other than Config.ExpectedAccount (forged_account), a
//     malformed detail (malformed_event, dedup.ErrMalformedEvent), an event
//     the order domain cannot emit (an order.Reason* reason such as
//     unknown_currency, amount_out_of_range, impossible_sequence,
//     foreign_aggregate_type, order_id_mismatch; ErrInvalidPayload), an
//     unsupported event_version (unsupported_version, ErrUnsupportedVersion)
//     and a booking that would overflow the balance (balance_overflow,
//     ErrBalanceOverflow). Each refusal is logged with its "reason". Money
//     is never silently dropped and never booked from a forged event.
//   - A cancelled transaction (actions: 0 the dedup marker, 1 the entry
//     Put, 2 the balance Update) maps to one outcome, strongest first: the
//     marker's condition → duplicate; the entry's condition → duplicate
//     (booked before the marker expired); ValidationError or
//     ItemCollectionSizeLimitExceeded anywhere → permanent
//     (dedup.ReasonTransactionInvalid, dedup.ReasonItemCollectionFull); the
//     balance's condition → permanent balance_overflow; otherwise
//     (TransactionConflict, throttling or unnamed reasons still there after
//     Config.Dedup.MaxAttempts tries: a hot balance item under concurrency)
//     → an error: the platform redelivers, and the marker makes the
//     redelivery safe. Any other DynamoDB error is also redelivered.
//
// # Balance range
//
// A balance is an int64 of minor units. Each booking is at most
// order.MaxAmountMinor (1e15), but enough valid bookings could still pass
// the int64 range (about 9,223 maximal payments), which would make Balance
// fail to decode the item. The balance ADD is therefore conditioned on the
// current balance leaving room for the delta (balance_minor BETWEEN
// MinInt64-delta AND MaxInt64-delta, or no balance yet); a booking that
// would overflow cancels the whole transaction (no marker, no entry) and is
// dead-lettered as balance_overflow for an operator.
//
// # Table
//
// One table with a single string partition key "pk" (CreateTableInput):
// balance items (AttrBalanceMinor, N, minor units) and "ENTRY#<event_id>"
// items. A currency's balance is write-sharded over BalanceShards items,
// "BALANCE#<currency>#<nn>" (BalanceKey): a booking updates the shard of
// its order (BalanceShard), so bookings of one currency spread over
// BalanceShards partitions instead of one hot item (DynamoDB: 1,000 write
// units/s per partition, 2 per transactional write: about 500 bookings/s
// per item, so 64,000 per currency with 128 shards) and conflict only when
// two bookings of the same shard meet. Balance sums the shards (one
// BatchGetItem); a "BALANCE#<currency>" item written before sharding is
// added to the sum, so existing tables keep their balances.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Attribute names of ledger items.
const (
	AttrPK           = "pk"            // S: "BALANCE#<currency>" or "ENTRY#<event_id>"
	AttrCurrency     = "currency"      // S: ISO 4217 code (both item kinds)
	AttrBalanceMinor = "balance_minor" // N: balance in minor units (balance items)
	AttrUpdatedAt    = "updated_at"    // S: RFC 3339, last booking (balance items)
	AttrEventID      = "event_id"      // S (entry items)
	AttrEventType    = "event_type"    // S (entry items)
	AttrOrderID      = "order_id"      // S (entry items)
	AttrAmountMinor  = "amount_minor"  // N: positive amount in minor units (entry items)
	AttrDirection    = "direction"     // S: DirectionCredit or DirectionDebit (entry items)
	AttrSequence     = "sequence"      // N: the event's aggregate sequence (entry items)
	AttrBookedAt     = "booked_at"     // S: RFC 3339 nanoseconds, UTC (entry items)
)

// Key prefixes of ledger items.
const (
	BalancePrefix = "BALANCE#"
	EntryPrefix   = "ENTRY#"
)

// BalanceShards is the number of balance items per currency: 128 items
// take 128 × 1,000 write units/s, about 64,000 bookings/s of one currency
// (2 units per transactional write), which is 128,000 order events/s when
// half the events move money. Fixed: Balance reads exactly these (two
// BatchGetItem calls: at most 100 keys each).
const BalanceShards = 128

// BalanceShard returns the shard (0..BalanceShards-1) of an order's
// bookings: FNV-1a of the order id, so an order's payment and refund land
// on the same item.
func BalanceShard(orderID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(orderID))
	return int(h.Sum32() % BalanceShards)
}

// BalanceKey returns the key of a currency's balance shard:
// "BALANCE#<currency>#<nn>".
func BalanceKey(currency string, shard int) string {
	return fmt.Sprintf("%s%s#%02d", BalancePrefix, currency, shard)
}

// BalanceCurrency returns the currency of a balance item's key, sharded
// ("BALANCE#EUR#07") or written before sharding ("BALANCE#EUR"), and false
// for any other key.
func BalanceCurrency(pk string) (string, bool) {
	rest, ok := strings.CutPrefix(pk, BalancePrefix)
	if !ok || rest == "" {
		return "", false
	}
	cur, _, _ := strings.Cut(rest, "#")
	return cur, cur != ""
}

// Entry directions.
const (
	DirectionCredit = "credit" // money in: the balance grows
	DirectionDebit  = "debit"  // money out (a refund): the balance shrinks
)

// DefaultMaxAttempts is the ledger's default bound on transaction attempts
// per delivery: higher than dedup's because balance items are hot.
const DefaultMaxAttempts = 8

// Errors returned by Handle for events that retrying cannot fix. Handle
// wraps each in a *sqsconsumer.PermanentError with a reason, so the
// consumer's SQS adapter dead-letters the event at once.
var (
	// ErrInvalidPayload reports an event the order domain cannot have
	// emitted (it also wraps the *order.ContractError naming the rule:
	// foreign aggregate type, order_id not the aggregate id, amount outside
	// 1..order.MaxAmountMinor, unknown ISO 4217 currency, impossible
	// sequence, a payload that does not decode, ...).
	ErrInvalidPayload = errors.New("ledger: invalid payload")
	// ErrBalanceOverflow reports a booking that would take a balance
	// outside the int64 range; nothing is written (reason
	// ReasonBalanceOverflow).
	ErrBalanceOverflow = errors.New("ledger: balance would overflow int64")
	// ErrUnsupportedVersion reports a known event type with an event_version
	// this consumer does not understand.
	ErrUnsupportedVersion = errors.New("ledger: unsupported event version")
)

// ReasonBalanceOverflow is the dead-letter reason of ErrBalanceOverflow.
const ReasonBalanceOverflow = "balance_overflow"

// Effect indexes in the Apply call (see dedup.EffectIndex).
const (
	effectEntry   = 0
	effectBalance = 1
)

// Client is the DynamoDB subset the Ledger calls, with the SDK's exact
// signatures; *dynamodb.Client satisfies it. Scan is used only by the audit
// helpers Balances and EntryCount; Query by the resequencer's sweep;
// BatchGetItem by Balance.
type Client interface {
	dedup.BufferClient
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	BatchGetItem(ctx context.Context, params *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// Config configures a Ledger: dedup.ConsumerConfig. Dedup.Consumer defaults to
// routing.ConsumerLedger, Dedup.MaxAttempts to DefaultMaxAttempts and
// Ordering to dedup.Ordered (a refund is never booked before its payment).
type Config = dedup.ConsumerConfig

// Ledger books order payments and refunds. It is safe for concurrent use.
type Ledger struct {
	client  Client
	cfg     Config
	applier *dedup.Applier
	reseq   *dedup.Resequencer // nil: unordered, or the resequencer disabled
	log     *slog.Logger
}

// New returns a Ledger, or an error if cfg does not validate (see
// dedup.NewConsumer).
func New(client Client, cfg Config) (*Ledger, error) {
	if cfg.ExpectedSource == "" {
		cfg.ExpectedSource = appenv.EventSource // the example's own source
	}
	c, err := dedup.NewConsumer(routing.ConsumerLedger, client, cfg, DefaultMaxAttempts, dedup.Ordered)
	if err != nil {
		return nil, err
	}
	l := &Ledger{client: client, cfg: c.Config, applier: c.Applier, log: c.Config.Logger}
	if l.reseq, err = c.Resequence(l.handle); err != nil {
		return nil, err
	}
	return l, nil
}

// Handle books one EventBridge event (see the package doc for what is
// booked). It returns nil when the event was applied, was a duplicate, was
// buffered until its predecessor is booked, moves no money, or is of a type
// the ledger ignores; it returns an error when the platform must redeliver
// or park the event (see "Errors and redelivery"). Buffered successors
// that its booking makes next are booked before it returns
// (dedup.Resequencer.Handle).
// Errors for events retrying cannot fix wrap *sqsconsumer.PermanentError
// with a reason (forged_source, forged_account, malformed_event, a
// order.Reason* value, balance_overflow, sequence_conflict) and one of dedup.ErrMalformedEvent,
// dedup.ErrForeignSource, dedup.ErrForeignAccount, ErrInvalidPayload,
// ErrUnsupportedVersion or ErrBalanceOverflow.
func (l *Ledger) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if l.reseq != nil {
		return l.reseq.Handle(ctx, ev)
	}
	if dedup.IsSweepTick(ev) {
		return nil // no buffer to sweep
	}
	return l.handle(ctx, ev)
}

// Config returns the ledger's effective configuration (defaults applied).
func (l *Ledger) Config() Config { return l.cfg }

// Sweep drains the order events a crash left waiting in the resequencer's
// buffer and reports what still waits (dedup.Resequencer.Sweep); a zero
// report when the ledger is unordered or its resequencer disabled.
func (l *Ledger) Sweep(ctx context.Context) (dedup.SweepReport, error) {
	if l.reseq == nil {
		return dedup.SweepReport{}, nil
	}
	return l.reseq.Sweep(ctx)
}

func (l *Ledger) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, log, err := l.cfg.Accept(ctx, l.log, ev)
	if err != nil {
		return err
	}
	log = log.With("idempotency_key", dedup.MarkerKey(l.cfg.Dedup.Consumer, env.EventID))

	ordered := l.cfg.Ordering == dedup.Ordered
	var b *booking
	switch env.EventType {
	case order.EventOrderPaid, order.EventOrderCancelled:
		b, err = bookingFor(env)
	case order.EventOrderPlaced, order.EventOrderShipped:
		if !ordered {
			log.InfoContext(ctx, "ledger: ignoring event type")
			return nil
		}
		// Moves no money, but holds a sequence of the order: checked like
		// the others and recorded, so the ordering gate advances past it.
		_, err = bookingFor(env)
	default:
		if !ordered {
			log.InfoContext(ctx, "ledger: ignoring event type")
			return nil
		}
		log.InfoContext(ctx, "ledger: event type not booked; advancing the order's sequence past it")
	}
	if err != nil {
		ce, _ := order.AsContractError(err)
		log.ErrorContext(ctx, "ledger: event refused", "reason", ce.Reason, "error", err)
		return sqsconsumer.Permanent(ce.Reason, err)
	}

	now := time.Now().UTC()
	var effects []types.TransactWriteItem
	if b != nil {
		effects, err = l.effects(env, *b, now)
		if err != nil {
			return err
		}
	}
	outcome, err := l.applier.ApplyEvent(ctx, env, effects)
	switch {
	case errors.Is(err, dedup.ErrSequenceGap):
		// An earlier event of the order is not booked yet: nothing was
		// written; hold it (redelivered), or dead-letter it past the bound.
		return l.cfg.Hold(ctx, log, err)
	case err != nil && b != nil && dedup.EffectConditionFailed(err, effectEntry):
		// The entry exists though the marker did not: the marker expired and
		// the event came back. The money moved the first time. Ordered, the
		// event is recorded as seen (marker and gate, no money) so the
		// order's sequence advances past it.
		log.WarnContext(ctx, "ledger: entry already booked; acknowledging redelivery")
		if ordered {
			if _, err := l.applier.ApplyEvent(ctx, env, nil); errors.Is(err, dedup.ErrSequenceGap) {
				return l.cfg.Hold(ctx, log, err)
			} else if err != nil {
				return fmt.Errorf("ledger: record booked %s %s as seen: %w", env.EventType, env.EventID, err)
			}
		}
		return nil
	case err != nil && permanentTx(err):
		reason, _ := dedup.PermanentReason(err)
		log.ErrorContext(ctx, "ledger: event refused", "reason", reason, "error", err)
		return sqsconsumer.Permanent(reason, fmt.Errorf("ledger: book %s %s: %w", env.EventType, env.EventID, err))
	case err != nil && b != nil && dedup.EffectConditionFailed(err, effectBalance):
		err = fmt.Errorf("%w: %s %d %s on %s (event %s)", ErrBalanceOverflow, b.direction, b.amount, b.currency, BalanceKey(b.currency, BalanceShard(b.orderID)), env.EventID)
		log.ErrorContext(ctx, "ledger: event refused", "reason", ReasonBalanceOverflow, "error", err)
		return sqsconsumer.Permanent(ReasonBalanceOverflow, err)
	case err != nil:
		log.ErrorContext(ctx, "ledger: booking failed; the event will be redelivered", "error", err)
		return fmt.Errorf("ledger: book %s %s: %w", env.EventType, env.EventID, err)
	case outcome == dedup.OutcomeBuffered:
		log.InfoContext(ctx, "ledger: early event buffered; booked right after its predecessor")
	case outcome == dedup.OutcomeDuplicate:
		log.InfoContext(ctx, "ledger: duplicate delivery acknowledged")
	case b == nil:
		log.InfoContext(ctx, "ledger: no money moved; event recorded")
	default:
		log.InfoContext(ctx, "ledger: booked", "direction", b.direction, "amount_minor", b.amount, "currency", b.currency)
	}
	return nil
}

// booking is the money movement of one event.
type booking struct {
	orderID   string
	direction string
	amount    int64 // 1..order.MaxAmountMinor, minor units
	currency  string
}

// bookingFor checks env against the order domain's event contract
// (order.CheckEvent) and returns the booking of a v1 OrderPaid or
// OrderCancelled envelope, or nil when no money moves. Errors are
// *order.ContractError values, wrapped with ErrUnsupportedVersion for
// order.ReasonUnsupportedVersion and with ErrInvalidPayload otherwise.
func bookingFor(env outbox.Envelope) (*booking, error) {
	p, err := order.CheckEvent(env)
	if err != nil {
		ce, _ := order.AsContractError(err)
		if ce != nil && ce.Reason == order.ReasonUnsupportedVersion {
			return nil, fmt.Errorf("%w: %w", ErrUnsupportedVersion, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
	}
	switch p := p.(type) {
	case order.Paid:
		return &booking{orderID: p.OrderID, direction: DirectionCredit, amount: p.AmountMinor, currency: p.Currency}, nil
	case order.Cancelled:
		if !p.WasPaid {
			return nil, nil
		}
		return &booking{orderID: p.OrderID, direction: DirectionDebit, amount: p.RefundMinor, currency: p.Currency}, nil
	}
	return nil, nil
}

// permanentTx reports whether err is a transaction DynamoDB refuses for
// good (dedup.PermanentReason).
func permanentTx(err error) bool {
	_, ok := dedup.PermanentReason(err)
	return ok
}

// effects returns the entry Put (effect 0) and the balance Update (effect 1).
func (l *Ledger) effects(env outbox.Envelope, b booking, now time.Time) ([]types.TransactWriteItem, error) {
	delta := b.amount
	if b.direction == DirectionDebit {
		delta = -delta
	}
	entryCond, err := expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return nil, fmt.Errorf("ledger: build entry condition: %w", err)
	}
	// The balance must stay within int64 whatever sequence of valid events
	// arrives (Balance decodes it into an int64; DynamoDB itself would store
	// 38 digits): apply the ADD only while the current balance leaves room
	// for delta, else cancel the transaction (ErrBalanceOverflow).
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if delta > 0 {
		hi -= delta
	} else {
		lo -= delta
	}
	balance := expression.Name(AttrBalanceMinor)
	upd, err := expression.NewBuilder().WithUpdate(
		expression.Add(balance, expression.Value(delta)).
			Set(expression.Name(AttrCurrency), expression.Value(b.currency)).
			Set(expression.Name(AttrUpdatedAt), expression.Value(now.Format(time.RFC3339Nano))),
	).WithCondition(expression.Or(
		expression.AttributeNotExists(balance),
		balance.Between(expression.Value(lo), expression.Value(hi)),
	)).Build()
	if err != nil {
		return nil, fmt.Errorf("ledger: build balance update: %w", err)
	}
	entry := map[string]types.AttributeValue{
		AttrPK:          &types.AttributeValueMemberS{Value: EntryPrefix + env.EventID},
		AttrEventID:     &types.AttributeValueMemberS{Value: env.EventID},
		AttrEventType:   &types.AttributeValueMemberS{Value: env.EventType},
		AttrOrderID:     &types.AttributeValueMemberS{Value: b.orderID},
		AttrAmountMinor: &types.AttributeValueMemberN{Value: strconv.FormatInt(b.amount, 10)},
		AttrCurrency:    &types.AttributeValueMemberS{Value: b.currency},
		AttrDirection:   &types.AttributeValueMemberS{Value: b.direction},
		AttrSequence:    &types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence, 10)},
		AttrBookedAt:    &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)},
	}
	table := aws.String(l.cfg.Table)
	return []types.TransactWriteItem{
		{Put: &types.Put{
			TableName:                 table,
			Item:                      entry,
			ConditionExpression:       entryCond.Condition(),
			ExpressionAttributeNames:  entryCond.Names(),
			ExpressionAttributeValues: entryCond.Values(),
		}},
		{Update: &types.Update{
			TableName:                 table,
			Key:                       pk(BalanceKey(b.currency, BalanceShard(b.orderID))),
			UpdateExpression:          upd.Update(),
			ConditionExpression:       upd.Condition(),
			ExpressionAttributeNames:  upd.Names(),
			ExpressionAttributeValues: upd.Values(),
		}},
	}, nil
}

func pk(v string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: v}}
}

// CreateTableInput returns the ledger table definition used by the local
// runtime and tests: partition key AttrPK (S), on-demand billing, no
// stream, and the ledger's consumer state beside its entries
// (dedup.WithStateIndex: the buffer index; TTL on dedup.TTLAttribute
// expires the dedup markers only — ledger items carry no such attribute
// and are kept).
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return dedup.WithStateIndex(&dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	})
}
