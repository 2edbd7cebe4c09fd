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
// Unknown detail-types are ignored with a log line. Errors follow the same
// policy as pkg/ledger: a malformed event or payload and an unsupported
// event_version are returned (the platform retries, then parks the event in
// the on-failure destination / DLQ); conflicts that outlast the bounded
// retries are returned so the platform redelivers.
package notifier

import (
	"context"
	"encoding/json"
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

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/routing"
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
)

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

// Errors returned by Handle for events that retrying cannot fix.
var (
	// ErrInvalidPayload reports a payload that does not decode or has no
	// order_id.
	ErrInvalidPayload = errors.New("notifier: invalid payload")
	// ErrUnsupportedVersion reports a known event type with an event_version
	// this consumer does not understand.
	ErrUnsupportedVersion = errors.New("notifier: unsupported event version")
)

// Client is the DynamoDB subset the Notifier calls, with the SDK's exact
// signatures; *dynamodb.Client satisfies it. Scan is used only by the audit
// helper NotificationCount.
type Client interface {
	dedup.TransactWriter
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Config configures a Notifier: dedup.ConsumerConfig. Dedup.Consumer defaults to
// routing.ConsumerNotifier.
type Config = dedup.ConsumerConfig

// Notifier records notifications and the order view. It is safe for
// concurrent use.
type Notifier struct {
	client  Client
	cfg     Config
	applier *dedup.Applier
	log     *slog.Logger
}

// New returns a Notifier, or an error if cfg does not validate (see
// dedup.NewConsumer).
func New(client Client, cfg Config) (*Notifier, error) {
	c, err := dedup.NewConsumer(routing.ConsumerNotifier, client, cfg, 0)
	if err != nil {
		return nil, err
	}
	return &Notifier{client: client, cfg: c.Config, applier: c.Applier, log: c.Config.Logger}, nil
}

// payload holds the fields of every v1 order payload the notifier renders.
type payload struct {
	OrderID     string `json:"order_id"`
	CustomerID  string `json:"customer_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
	WasPaid     bool   `json:"was_paid"`
	RefundMinor int64  `json:"refund_minor"`
}

// Handle records the notification for one EventBridge event and advances the
// order view if the event is newer than what it shows. It returns nil when
// the event was applied, was a duplicate, or is of a type the notifier
// ignores; otherwise an error the platform must act on (see the package doc).
func (n *Notifier) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, err := dedup.DecodeEnvelope(ev)
	if err != nil {
		n.log.ErrorContext(ctx, "notifier: malformed event", "bus_event_id", ev.ID, "detail_type", ev.DetailType, "error", err)
		return err
	}
	log := n.log.With("event_id", env.EventID, "event_type", env.EventType, "aggregate_id", env.AggregateID,
		"sequence", env.Sequence, "idempotency_key", dedup.MarkerKey(n.cfg.Dedup.Consumer, env.EventID))
	status, known := statusOf[env.EventType]
	if !known {
		log.InfoContext(ctx, "notifier: ignoring event type")
		return nil
	}
	if env.EventVersion != order.EventVersion {
		err := fmt.Errorf("%w: %s v%d (event %s)", ErrUnsupportedVersion, env.EventType, env.EventVersion, env.EventID)
		log.ErrorContext(ctx, "notifier: unsupported event version", "error", err)
		return err
	}
	var p payload
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		err = fmt.Errorf("%w: %s %s: %v", ErrInvalidPayload, env.EventType, env.EventID, err)
		log.ErrorContext(ctx, "notifier: invalid payload", "error", err)
		return err
	}
	if p.OrderID == "" {
		err := fmt.Errorf("%w: %s %s: order_id is empty", ErrInvalidPayload, env.EventType, env.EventID)
		log.ErrorContext(ctx, "notifier: invalid payload", "error", err)
		return err
	}

	now := time.Now().UTC()
	note, err := n.notificationPut(env, p, now)
	if err != nil {
		return err
	}
	view, err := n.viewUpdate(env, p.OrderID, status, now)
	if err != nil {
		return err
	}
	applied, err := n.applier.Apply(ctx, env, []types.TransactWriteItem{note, view})
	viewSkipped := false
	if err != nil && dedup.EffectConditionFailed(err, effectView) && !dedup.EffectConditionFailed(err, effectNotification) {
		// The view already reflects this or a later event: record the
		// notification (and marker) without touching the view.
		viewSkipped = true
		applied, err = n.applier.Apply(ctx, env, []types.TransactWriteItem{note})
	}
	switch {
	case err != nil && dedup.EffectConditionFailed(err, effectNotification):
		log.WarnContext(ctx, "notifier: notification already recorded; acknowledging redelivery")
		return nil
	case err != nil:
		log.ErrorContext(ctx, "notifier: apply failed; the event will be redelivered", "error", err)
		return fmt.Errorf("notifier: record %s %s: %w", env.EventType, env.EventID, err)
	case !applied:
		log.InfoContext(ctx, "notifier: duplicate delivery acknowledged")
	default:
		log.InfoContext(ctx, "notifier: notification recorded", "view_updated", !viewSkipped)
	}
	return nil
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
// "Payment of 12.50 EUR received for order o-1." (see FormatMoney).
func render(eventType string, p payload) string {
	switch eventType {
	case order.EventOrderPlaced:
		return fmt.Sprintf("Order %s placed by customer %s for %s.", p.OrderID, p.CustomerID, FormatMoney(p.AmountMinor, p.Currency))
	case order.EventOrderPaid:
		return fmt.Sprintf("Payment of %s received for order %s.", FormatMoney(p.AmountMinor, p.Currency), p.OrderID)
	case order.EventOrderShipped:
		return fmt.Sprintf("Order %s has shipped.", p.OrderID)
	case order.EventOrderCancelled:
		var b strings.Builder
		fmt.Fprintf(&b, "Order %s was cancelled", p.OrderID)
		if p.Reason != "" {
			fmt.Fprintf(&b, " (%s)", p.Reason)
		}
		b.WriteString(".")
		if p.WasPaid {
			fmt.Fprintf(&b, " A refund of %s is on its way.", FormatMoney(p.RefundMinor, p.Currency))
		}
		return b.String()
	}
	return fmt.Sprintf("Order %s: %s.", p.OrderID, eventType)
}

// minorDigits lists ISO 4217 currencies whose exponent is not 2.
var minorDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	"CLF": 4, "UYW": 4,
}

// FormatMoney renders an amount in minor units as "<major>.<minor> <CUR>"
// with the currency's ISO 4217 exponent (2 unless listed in minorDigits),
// e.g. FormatMoney(1250, "EUR") = "12.50 EUR", FormatMoney(500, "JPY") =
// "500 JPY". It uses integer arithmetic only.
func FormatMoney(minor int64, currency string) string {
	digits, ok := minorDigits[currency]
	if !ok {
		digits = 2
	}
	sign := ""
	u := uint64(minor)
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
// stream.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	}
}
