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
//   - Any other detail-type: ignored with a log line and acknowledged (the
//     EventBridge rule should not route it here; see pkg/routing).
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
// Handle returns an error when the event must be delivered again or parked:
//   - a malformed event or payload (wraps dedup.ErrMalformedEvent or
//     ErrInvalidPayload) or an unsupported event_version
//     (ErrUnsupportedVersion). Retrying cannot fix these: the asynchronous
//     Lambda invocation from the EventBridge rule retries (2 times by
//     default) and then sends the event to the function's on-failure
//     destination / the rule target's DLQ, where it is alarmed (I5). Money is
//     never silently dropped.
//   - a transaction still cancelled by TransactionConflict or throttling after
//     Config.Dedup.MaxAttempts tries (a hot balance item under concurrency),
//     or any other DynamoDB error: the platform redelivers, and the marker
//     makes the redelivery safe.
//
// # Table
//
// One table with a single string partition key "pk" (CreateTableInput):
// "BALANCE#<currency>" items (AttrBalanceMinor, N, minor units) and
// "ENTRY#<event_id>" items. Balance items are hot keys: every booking of a
// currency updates the same item, which limits throughput to roughly 1,000
// writes/s per currency and produces TransactionConflict under concurrency.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/routing"
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

// Entry directions.
const (
	DirectionCredit = "credit" // money in: the balance grows
	DirectionDebit  = "debit"  // money out (a refund): the balance shrinks
)

// DefaultMaxAttempts is the ledger's default bound on transaction attempts
// per delivery: higher than dedup's because balance items are hot.
const DefaultMaxAttempts = 8

// Errors returned by Handle for events that retrying cannot fix.
var (
	// ErrInvalidPayload reports a payload that does not decode or breaks a
	// rule (empty order_id, non-positive amount, bad currency code).
	ErrInvalidPayload = errors.New("ledger: invalid payload")
	// ErrUnsupportedVersion reports a known event type with an event_version
	// this consumer does not understand.
	ErrUnsupportedVersion = errors.New("ledger: unsupported event version")
)

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// Client is the DynamoDB subset the Ledger calls, with the SDK's exact
// signatures; *dynamodb.Client satisfies it. Scan is used only by the audit
// helpers Balances and EntryCount.
type Client interface {
	dedup.TransactWriter
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Config configures a Ledger: dedup.ConsumerConfig. Dedup.Consumer defaults to
// routing.ConsumerLedger and Dedup.MaxAttempts to DefaultMaxAttempts.
type Config = dedup.ConsumerConfig

// Ledger books order payments and refunds. It is safe for concurrent use.
type Ledger struct {
	client  Client
	cfg     Config
	applier *dedup.Applier
	log     *slog.Logger
}

// New returns a Ledger, or an error if cfg does not validate (see
// dedup.NewConsumer).
func New(client Client, cfg Config) (*Ledger, error) {
	c, err := dedup.NewConsumer(routing.ConsumerLedger, client, cfg, DefaultMaxAttempts)
	if err != nil {
		return nil, err
	}
	return &Ledger{client: client, cfg: c.Config, applier: c.Applier, log: c.Config.Logger}, nil
}

// Handle books one EventBridge event (see the package doc for what is
// booked). It returns nil when the event was applied, was a duplicate, moves
// no money, or is of a type the ledger ignores; it returns an error when the
// platform must redeliver or park the event (see "Errors and redelivery").
func (l *Ledger) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		l.log.ErrorContext(ctx, "ledger: malformed event", "bus_event_id", ev.ID, "detail_type", ev.DetailType, "error", err)
		return err
	}
	log := l.log.With("event_id", env.EventID, "event_type", env.EventType, "aggregate_id", env.AggregateID,
		"sequence", env.Sequence, "idempotency_key", dedup.MarkerKey(l.cfg.Dedup.Consumer, env.EventID))

	var b *booking
	switch env.EventType {
	case order.EventOrderPaid, order.EventOrderCancelled:
		if env.EventVersion != order.EventVersion {
			err := fmt.Errorf("%w: %s v%d (event %s)", ErrUnsupportedVersion, env.EventType, env.EventVersion, env.EventID)
			log.ErrorContext(ctx, "ledger: unsupported event version", "error", err)
			return err
		}
		b, err = bookingFor(env)
		if err != nil {
			log.ErrorContext(ctx, "ledger: invalid payload", "error", err)
			return err
		}
	default:
		log.InfoContext(ctx, "ledger: ignoring event type")
		return nil
	}

	now := time.Now().UTC()
	var effects []types.TransactWriteItem
	if b != nil {
		effects, err = l.effects(env, *b, now)
		if err != nil {
			return err
		}
	}
	applied, err := l.applier.Apply(ctx, env, effects)
	switch {
	case err != nil && b != nil && dedup.EffectConditionFailed(err, 0):
		// The entry exists though the marker did not: the marker expired and
		// the event came back. The money moved the first time.
		log.WarnContext(ctx, "ledger: entry already booked; acknowledging redelivery")
		return nil
	case err != nil:
		log.ErrorContext(ctx, "ledger: booking failed; the event will be redelivered", "error", err)
		return fmt.Errorf("ledger: book %s %s: %w", env.EventType, env.EventID, err)
	case !applied:
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
	amount    int64 // > 0, minor units
	currency  string
}

// bookingFor returns the booking of a v1 OrderPaid or OrderCancelled
// envelope, nil when no money moves, or an error wrapping ErrInvalidPayload.
func bookingFor(env outbox.Envelope) (*booking, error) {
	var b booking
	switch env.EventType {
	case order.EventOrderPaid:
		var p order.Paid
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", ErrInvalidPayload, env.EventType, env.EventID, err)
		}
		b = booking{orderID: p.OrderID, direction: DirectionCredit, amount: p.AmountMinor, currency: p.Currency}
	case order.EventOrderCancelled:
		var p order.Cancelled
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", ErrInvalidPayload, env.EventType, env.EventID, err)
		}
		if p.OrderID == "" {
			return nil, fmt.Errorf("%w: %s %s: order_id is empty", ErrInvalidPayload, env.EventType, env.EventID)
		}
		if !p.WasPaid {
			return nil, nil
		}
		b = booking{orderID: p.OrderID, direction: DirectionDebit, amount: p.RefundMinor, currency: p.Currency}
	}
	switch {
	case b.orderID == "":
		return nil, fmt.Errorf("%w: %s %s: order_id is empty", ErrInvalidPayload, env.EventType, env.EventID)
	case b.amount <= 0:
		return nil, fmt.Errorf("%w: %s %s: amount %d must be > 0", ErrInvalidPayload, env.EventType, env.EventID, b.amount)
	case !currencyRE.MatchString(b.currency):
		return nil, fmt.Errorf("%w: %s %s: currency %q is not an ISO 4217 code", ErrInvalidPayload, env.EventType, env.EventID, b.currency)
	}
	return &b, nil
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
	upd, err := expression.NewBuilder().WithUpdate(
		expression.Add(expression.Name(AttrBalanceMinor), expression.Value(delta)).
			Set(expression.Name(AttrCurrency), expression.Value(b.currency)).
			Set(expression.Name(AttrUpdatedAt), expression.Value(now.Format(time.RFC3339Nano))),
	).Build()
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
			Key:                       pk(BalancePrefix + b.currency),
			UpdateExpression:          upd.Update(),
			ExpressionAttributeNames:  upd.Names(),
			ExpressionAttributeValues: upd.Values(),
		}},
	}, nil
}

func pk(v string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: v}}
}

// CreateTableInput returns the ledger table definition used by the local
// runtime and tests: partition key AttrPK (S), on-demand billing, no stream,
// no TTL (ledger items are kept).
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	}
}
