// Package notifier is an event consumer that records one customer
// notification per order event, exactly once (promise I3), and maintains an
// order status read model that never goes backwards.
//
// # What one event does
//
// In ONE TransactWriteItems (through dedup.Applier):
//
//  0. the dedup marker "notifier#<event_id>" (attribute_not_exists);
//  1. the notification item "NOTIFICATION#<event_id>" (attribute_not_exists)
//     with the order id, event type, sequence and a rendered message;
//  2. the order view item "ORDERVIEW#<aggregate_id>" (status, last_sequence),
//     with condition attribute_not_exists(pk) OR last_sequence < :seq.
//
// Streams and EventBridge do not keep order across items, and redeliveries
// may come late: the event's sequence, not arrival order, decides. When only
// the view condition fails (a later event is already reflected), the
// transaction is re-run without the view update, so the marker and the
// notification are still recorded once and the view stays where it is.
//
// Ordered (the default, dedup.Ordered; promise I4): the transaction also
// carries the ordering gate "notifier#SEQ#Order#<id>" (last action), so an
// order's notifications are recorded in sequence order: an early event
// waits in the resequencer's buffer (dedup.Resequencer) and is recorded
// right after its predecessor; only an event the buffer cannot take is
// held in the queue (dedup.ErrSequenceGap) and dead-lettered as
// sequence_gap when the gap does not close within Config.GapMaxReceives
// receives (dedup.ConsumerConfig.Hold; docs/ORDERING.md). Unordered, the
// view condition alone keeps the view from going backwards.
//
// Unknown detail-types are ignored with a log line (ordered: recorded as
// seen, marker and gate only, so later events are not held behind them). Errors follow the same
// policy as internal/orders/ledger: an event from another source or account, a
// malformed event, an event the order domain cannot emit
// (order.CheckEvent: e.g. a sequence the state machine never produces,
// which would otherwise freeze the view, or text with control characters)
// and an unsupported event_version are refused before anything is written
// and returned wrapped in a *sqsconsumer.PermanentError with a reason, so
// they are dead-lettered at once; conflicts that outlast the bounded retries
// are returned so the platform redelivers.
//
// A cancelled transaction maps to one outcome, strongest first: the
// marker's condition → duplicate; the notification's condition → duplicate;
// ValidationError or ItemCollectionSizeLimitExceeded anywhere → permanent
// (dedup.ReasonTransactionInvalid, dedup.ReasonItemCollectionFull); the
// view's condition alone → re-run without the view (then the same rules);
// otherwise (conflicts, throttling, unnamed reasons past the retries) → an
// error, redelivered.
//
// # Rendering
//
// Messages are built from the checked payload, and every piece of stored
// text in them (order id, customer id, reason) goes through RenderText:
// control, format and line-separator characters and noncharacters become
// visible \u{XXXX} escapes and the piece is cut to a bounded length, so a
// message is one line of displayable text that is also legal in an SQS
// message body, whatever reached the table.
package notifier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Attribute names of notifier items.
const (
	AttrPK            = "pk"              // S: "NOTIFICATION#<event_id>" or "ORDERVIEW#<order_id>"
	AttrEventID       = "event_id"        // S (notification items)
	AttrEventType     = "event_type"      // S (notification items)
	AttrOrderID       = "order_id"        // S (both)
	AttrMessage       = "message"         // S: the rendered text (notification items)
	AttrSequence      = "sequence"        // N: the event's sequence (notification items)
	AttrCreatedAt     = "created_at"      // S: RFC 3339 nanoseconds, UTC (notification items)
	AttrStatus        = "status"          // S: one of the Status* values (view items)
	AttrLastSequence  = "last_sequence"   // N: sequence of the event the view reflects (view items)
	AttrLastEventID   = "last_event_id"   // S (view items)
	AttrLastEventType = "last_event_type" // S (view items)
	AttrUpdatedAt     = "updated_at"      // S: RFC 3339 nanoseconds, UTC (view items)
	AttrExpiresAt     = "expires_at"      // N: epoch seconds; notification items when Config.ItemRetention > 0
)

// TTLAttribute is the notifications table's TTL attribute: a notification
// (customer data) expires Config.ItemRetention after it was recorded
// (appenv.EnvNotificationRetentionSeconds); views never expire.
const TTLAttribute = AttrExpiresAt

// Key prefixes of notifier items.
const (
	NotificationPrefix = "NOTIFICATION#"
	ViewPrefix         = "ORDERVIEW#"
)

// Order view statuses, one per order event type.
const (
	StatusPlaced    = "PLACED"
	StatusPaid      = "PAID"
	StatusShipped   = "SHIPPED"
	StatusCancelled = "CANCELLED"
)

// statusOf maps the order event types the notifier handles to a view status.
var statusOf = map[string]string{
	order.EventOrderPlaced:    StatusPlaced,
	order.EventOrderPaid:      StatusPaid,
	order.EventOrderShipped:   StatusShipped,
	order.EventOrderCancelled: StatusCancelled,
}

// Effect indexes in the Apply call (see dedup.EffectIndex).
const (
	effectNotification = 0
	effectView         = 1
)

// Errors returned by Handle for events that retrying cannot fix. Handle
// wraps each in a *sqsconsumer.PermanentError with a reason.
var (
	// ErrInvalidPayload reports an event the order domain cannot have
	// emitted; it also wraps the *order.ContractError naming the rule.
	ErrInvalidPayload = errors.New("notifier: invalid payload")
	// ErrUnsupportedVersion reports a known event type with an event_version
	// this consumer does not understand.
	ErrUnsupportedVersion = errors.New("notifier: unsupported event version")
)

// Client is the DynamoDB subset the Notifier calls, with the SDK's exact
// signatures; *dynamodb.Client satisfies it. Scan is used only by the audit
// helper NotificationCount; Query by the resequencer's sweep.
type Client interface {
	dedup.BufferClient
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Config configures a Notifier: dedup.ConsumerConfig. Dedup.Consumer defaults to
// routing.ConsumerNotifier and Ordering to dedup.Ordered (a customer never
// reads "shipped" before "paid").
type Config = dedup.ConsumerConfig

// Notifier records notifications and the order view. It is safe for
// concurrent use.
type Notifier struct {
	client  Client
	cfg     Config
	applier *dedup.Applier
	reseq   *dedup.Resequencer // nil: unordered, or the resequencer disabled
	log     *slog.Logger
}

// New returns a Notifier, or an error if cfg does not validate (see
// dedup.NewConsumer).
func New(client Client, cfg Config) (*Notifier, error) {
	if cfg.ExpectedSource == "" {
		cfg.ExpectedSource = appenv.EventSource // the example's own source
	}
	c, err := dedup.NewConsumer(routing.ConsumerNotifier, client, cfg, 0, dedup.Ordered)
	if err != nil {
		return nil, err
	}
	n := &Notifier{client: client, cfg: c.Config, applier: c.Applier, log: c.Config.Logger}
	if n.reseq, err = c.Resequence(n.handle); err != nil {
		return nil, err
	}
	return n, nil
}

// Sweep drains the order events a crash left waiting in the resequencer's
// buffer and reports what still waits (dedup.Resequencer.Sweep); a zero
// report when the notifier is unordered or its resequencer disabled.
func (n *Notifier) Sweep(ctx context.Context) (dedup.SweepReport, error) {
	if n.reseq == nil {
		return dedup.SweepReport{}, nil
	}
	return n.reseq.Sweep(ctx)
}

// payload holds the fields of every v1 order payload the notifier renders.
type payload struct {
	OrderID     string
	CustomerID  string
	AmountMinor int64
	Currency    string
	Reason      string
	WasPaid     bool
	RefundMinor int64
}

// payloadOf flattens a payload returned by order.CheckEvent.
func payloadOf(v any) payload {
	switch p := v.(type) {
	case order.Placed:
		return payload{OrderID: p.OrderID, CustomerID: p.CustomerID, AmountMinor: p.AmountMinor, Currency: p.Currency}
	case order.Paid:
		return payload{OrderID: p.OrderID, AmountMinor: p.AmountMinor, Currency: p.Currency}
	case order.Shipped:
		return payload{OrderID: p.OrderID}
	case order.Cancelled:
		return payload{OrderID: p.OrderID, Reason: p.Reason, WasPaid: p.WasPaid, RefundMinor: p.RefundMinor, Currency: p.Currency}
	}
	return payload{}
}

// Handle records the notification for one EventBridge event and advances the
// order view if the event is newer than what it shows. It returns nil when
// the event was applied, was a duplicate, or is of a type the notifier
// ignores; otherwise an error the platform must act on (see the package
// doc). Refused events (nothing written) return an error wrapping a
// *sqsconsumer.PermanentError whose reason is dedup.ReasonForeignSource,
// dedup.ReasonForeignAccount, dedup.ReasonMalformedEvent or an
// order.Reason* value, and one of dedup.ErrForeignSource,
// dedup.ErrForeignAccount, dedup.ErrMalformedEvent, ErrUnsupportedVersion or
// ErrInvalidPayload. An early event is buffered (nil) and recorded right
// after its predecessor, by the run that records the predecessor
// (dedup.Resequencer.Handle).
func (n *Notifier) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if n.reseq != nil {
		return n.reseq.Handle(ctx, ev)
	}
	if dedup.IsSweepTick(ev) {
		return nil // no buffer to sweep
	}
	return n.handle(ctx, ev)
}

func (n *Notifier) handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, log, err := n.cfg.Accept(ctx, n.log, ev)
	if err != nil {
		return err
	}
	log = log.With("idempotency_key", dedup.MarkerKey(n.cfg.Dedup.Consumer, env.EventID))
	status, known := statusOf[env.EventType]
	if !known && n.cfg.Ordering == dedup.Ordered {
		// It holds a sequence of the aggregate: record it as seen so the
		// ordering gate advances past it.
		_, err := n.applier.ApplyEvent(ctx, env, nil)
		if errors.Is(err, dedup.ErrSequenceGap) {
			return n.cfg.Hold(ctx, log, err)
		}
		if err != nil {
			return fmt.Errorf("notifier: advance past %s %s: %w", env.EventType, env.EventID, err)
		}
		log.InfoContext(ctx, "notifier: event type not notified; advanced the sequence past it")
		return nil
	}
	if !known {
		log.InfoContext(ctx, "notifier: ignoring event type")
		return nil
	}
	checked, err := order.CheckEvent(env)
	if err != nil {
		ce, _ := order.AsContractError(err)
		sentinel := ErrInvalidPayload
		if ce.Reason == order.ReasonUnsupportedVersion {
			sentinel = ErrUnsupportedVersion
		}
		err = fmt.Errorf("%w: %w", sentinel, err)
		log.ErrorContext(ctx, "notifier: event refused", "reason", ce.Reason, "error", err)
		return sqsconsumer.Permanent(ce.Reason, err)
	}
	p := payloadOf(checked)

	now := time.Now().UTC()
	note, err := n.notificationPut(env, p, now)
	if err != nil {
		return err
	}
	view, err := n.viewUpdate(env, p.OrderID, status, now)
	if err != nil {
		return err
	}
	outcome, err := n.applier.ApplyEvent(ctx, env, []types.TransactWriteItem{note, view})
	if errors.Is(err, dedup.ErrSequenceGap) {
		// An earlier event of the order is not recorded yet: nothing was
		// written; hold it (redelivered), or dead-letter it past the bound.
		return n.cfg.Hold(ctx, log, err)
	}
	viewSkipped := false
	_, permanent := dedup.PermanentReason(err)
	if err != nil && dedup.EffectConditionFailed(err, effectView) && !dedup.EffectConditionFailed(err, effectNotification) && !permanent {
		// The view already reflects this or a later event: record the
		// notification (and marker) without touching the view.
		viewSkipped = true
		outcome, err = n.applier.ApplyEvent(ctx, env, []types.TransactWriteItem{note})
		if errors.Is(err, dedup.ErrSequenceGap) {
			return n.cfg.Hold(ctx, log, err)
		}
	}
	switch {
	case err != nil && dedup.EffectConditionFailed(err, effectNotification):
		// Recorded before its marker expired. Ordered, record the event as
		// seen (marker and gate) so the order's sequence advances past it.
		log.WarnContext(ctx, "notifier: notification already recorded; acknowledging redelivery")
		if n.cfg.Ordering == dedup.Ordered {
			if _, err := n.applier.ApplyEvent(ctx, env, nil); errors.Is(err, dedup.ErrSequenceGap) {
				return n.cfg.Hold(ctx, log, err)
			} else if err != nil {
				return fmt.Errorf("notifier: record %s %s as seen: %w", env.EventType, env.EventID, err)
			}
		}
		return nil
	case err != nil && permanentTx(err):
		reason, _ := dedup.PermanentReason(err)
		log.ErrorContext(ctx, "notifier: event refused", "reason", reason, "error", err)
		return sqsconsumer.Permanent(reason, fmt.Errorf("notifier: record %s %s: %w", env.EventType, env.EventID, err))
	case err != nil:
		log.ErrorContext(ctx, "notifier: apply failed; the event will be redelivered", "error", err)
		return fmt.Errorf("notifier: record %s %s: %w", env.EventType, env.EventID, err)
	case outcome == dedup.OutcomeBuffered:
		log.InfoContext(ctx, "notifier: early event buffered; recorded right after its predecessor")
	case outcome == dedup.OutcomeDuplicate:
		log.InfoContext(ctx, "notifier: duplicate delivery acknowledged")
	default:
		log.InfoContext(ctx, "notifier: notification recorded", "view_updated", !viewSkipped)
	}
	return nil
}

// permanentTx reports whether err is a transaction DynamoDB refuses for
// good (dedup.PermanentReason).
func permanentTx(err error) bool {
	_, ok := dedup.PermanentReason(err)
	return ok
}

func (n *Notifier) notificationPut(env outbox.Envelope, p payload, now time.Time) (types.TransactWriteItem, error) {
	cond, err := expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("notifier: build notification condition: %w", err)
	}
	item := map[string]types.AttributeValue{
		AttrPK:        &types.AttributeValueMemberS{Value: NotificationPrefix + env.EventID},
		AttrEventID:   &types.AttributeValueMemberS{Value: env.EventID},
		AttrEventType: &types.AttributeValueMemberS{Value: env.EventType},
		AttrOrderID:   &types.AttributeValueMemberS{Value: p.OrderID},
		AttrMessage:   &types.AttributeValueMemberS{Value: render(env.EventType, p)},
		AttrSequence:  &types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence, 10)},
		AttrCreatedAt: &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)},
	}
	if r := n.cfg.ItemRetention; r > 0 {
		item[TTLAttribute] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(r).Unix(), 10)}
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(n.cfg.Table),
		Item:                      item,
		ConditionExpression:       cond.Condition(),
		ExpressionAttributeNames:  cond.Names(),
		ExpressionAttributeValues: cond.Values(),
	}}, nil
}

// viewUpdate moves ORDERVIEW#<aggregate_id> to status at env.Sequence, only
// if the view is absent or older.
func (n *Notifier) viewUpdate(env outbox.Envelope, orderID, status string, now time.Time) (types.TransactWriteItem, error) {
	seq := expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence, 10)})
	e, err := expression.NewBuilder().
		WithCondition(expression.Or(
			expression.AttributeNotExists(expression.Name(AttrPK)),
			expression.Name(AttrLastSequence).LessThan(seq),
		)).
		WithUpdate(expression.
			Set(expression.Name(AttrStatus), expression.Value(status)).
			Set(expression.Name(AttrLastSequence), seq).
			Set(expression.Name(AttrOrderID), expression.Value(orderID)).
			Set(expression.Name(AttrLastEventID), expression.Value(env.EventID)).
			Set(expression.Name(AttrLastEventType), expression.Value(env.EventType)).
			Set(expression.Name(AttrUpdatedAt), expression.Value(now.Format(time.RFC3339Nano)))).
		Build()
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("notifier: build view update: %w", err)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(n.cfg.Table),
		Key:                       pk(ViewPrefix + env.AggregateID),
		UpdateExpression:          e.Update(),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}}, nil
}

func pk(v string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: v}}
}

// render returns the customer-facing message for an order event, e.g.
// "Payment of 12.50 EUR received for order o-1." (see FormatMoney). Stored
// text goes through RenderText.
func render(eventType string, p payload) string {
	id := RenderText(p.OrderID, order.MaxIDLen)
	switch eventType {
	case order.EventOrderPlaced:
		return fmt.Sprintf("Order %s placed by customer %s for %s.", id, RenderText(p.CustomerID, order.MaxCustomerIDLen), FormatMoney(p.AmountMinor, p.Currency))
	case order.EventOrderPaid:
		return fmt.Sprintf("Payment of %s received for order %s.", FormatMoney(p.AmountMinor, p.Currency), id)
	case order.EventOrderShipped:
		return fmt.Sprintf("Order %s has shipped.", id)
	case order.EventOrderCancelled:
		var b strings.Builder
		fmt.Fprintf(&b, "Order %s was cancelled", id)
		if p.Reason != "" {
			fmt.Fprintf(&b, " (%s)", RenderText(p.Reason, order.MaxReasonLen))
		}
		b.WriteString(".")
		if p.WasPaid {
			fmt.Fprintf(&b, " A refund of %s is on its way.", FormatMoney(p.RefundMinor, p.Currency))
		}
		return b.String()
	}
	return fmt.Sprintf("Order %s: %s.", id, RenderText(eventType, 128))
}

// RenderText returns s made safe to show in a one-line customer message:
// every code point order.CheckText refuses (controls such as ESC, CR, LF;
// format characters such as U+202E; line/paragraph separators;
// noncharacters; U+FFFD or invalid UTF-8) is replaced by the visible escape
// "\\u{XXXX}" (U+FFFD for an invalid byte), and the result is cut to at most
// maxBytes bytes of whole code points with "…" appended when cut. The
// result is valid UTF-8 and legal in an SQS message body. Events are
// checked before rendering, so this is defence in depth for text that
// reached the table some other way.
func RenderText(s string, maxBytes int) string {
	var b strings.Builder
	for _, r := range s {
		piece := string(r)
		if order.IsForbiddenRune(r) {
			piece = fmt.Sprintf("\\u{%04X}", r)
		}
		if b.Len()+len(piece) > maxBytes {
			b.WriteString("…")
			break
		}
		b.WriteString(piece)
	}
	return b.String()
}

// FormatMoney renders an amount in minor units as "<major>.<minor> <CUR>"
// with the currency's ISO 4217 exponent (order.CurrencyExponent; 2 for a
// code it does not know),
// e.g. FormatMoney(1250, "EUR") = "12.50 EUR", FormatMoney(500, "JPY") =
// "500 JPY". It uses integer arithmetic only.
func FormatMoney(minor int64, currency string) string {
	digits, ok := order.CurrencyExponent(currency)
	if !ok {
		digits = 2
	}
	sign := ""
	u := uint64(minor) //nolint:gosec // G115: two's complement on purpose, negated below
	if minor < 0 {
		sign, u = "-", -u // two's complement: also right for math.MinInt64
	}
	if digits == 0 {
		return fmt.Sprintf("%s%d %s", sign, u, currency)
	}
	div := uint64(1)
	for i := 0; i < digits; i++ {
		div *= 10
	}
	return fmt.Sprintf("%s%d.%0*d %s", sign, u/div, digits, u%div, currency)
}

// CreateTableInput returns the notifications table definition used by the
// local runtime and tests: partition key AttrPK (S), on-demand billing, no
// stream, and the notifier's consumer state beside its notifications
// (dedup.WithStateIndex: the buffer index; TTL on TTLAttribute, which
// dedup.TTLAttribute is too, expires notifications and dedup markers).
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return dedup.WithStateIndex(&dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	})
}
