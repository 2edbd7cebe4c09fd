package fulfilment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// ConsumerName is the consumer's name: its idempotency namespace, its
// function (functions/fulfilment) and its queue.
const ConsumerName = "fulfilment"

// Attribute names of a shipments table item (one per order).
const (
	AttrPK               = "pk"                 // S: the order id
	AttrShipmentID       = "shipment_id"        // S: the provider's shipment id
	AttrStatus           = "status"             // S: StatusCreated or StatusCancelled
	AttrAmountMinor      = "amount_minor"       // N: minor units
	AttrCurrency         = "currency"           // S: ISO 4217
	AttrCreatedEventID   = "created_event_id"   // S: the OrderPaid event_id
	AttrCancelledEventID = "cancelled_event_id" // S: the OrderCancelled event_id
	AttrCreatedAt        = "created_at"         // S: RFC 3339 nanoseconds, UTC
	AttrCancelledAt      = "cancelled_at"       // S: RFC 3339 nanoseconds, UTC
	AttrUpdatedAt        = "updated_at"         // S: RFC 3339 nanoseconds, UTC
)

// Shipment statuses in the shipments table.
const (
	StatusCreated   = "created"
	StatusCancelled = "cancelled"
)

// Dead-letter reasons of this consumer (besides dedup's and order's).
const (
	ReasonPayloadMismatch   = "payload_mismatch"
	ReasonDuplicateShipment = "duplicate_shipment"
	// ReasonProviderOrderMismatch: the provider's answer is about another
	// order or shipment than the one asked for (or does not say).
	ReasonProviderOrderMismatch = "provider_order_mismatch"
)

// DefaultCallTimeout bounds one DynamoDB call on the shipments table.
const DefaultCallTimeout = 5 * time.Second

// Errors returned by Handle (see the package documentation).
var (
	// ErrNoShipment: a paid order's cancellation arrived before its shipment
	// was recorded. Retryable.
	ErrNoShipment = errors.New("fulfilment: no shipment recorded for the order yet")
	// ErrDuplicateShipment: the provider answered with a shipment id other
	// than the one recorded for the order (a provider that ignores
	// Idempotency-Key created a second shipment). Dead-lettered with
	// ReasonDuplicateShipment.
	ErrDuplicateShipment = errors.New("fulfilment: provider created a second shipment for the order")
	// ErrProviderOrderMismatch: the provider answered about another order or
	// shipment than the one asked for (a provider that lost its state and
	// reuses shipment ids, a mixed-up answer), or without saying which. Never
	// recorded as a success: dead-lettered with ReasonProviderOrderMismatch.
	ErrProviderOrderMismatch = errors.New("fulfilment: the provider's answer is about another order")
)

// Shipper is the provider API the consumer calls; *ProviderClient
// implements it.
type Shipper interface {
	CreateShipment(ctx context.Context, key string, req ShipmentRequest) (ProviderShipment, error)
	CancelShipment(ctx context.Context, key, shipmentID string) (ProviderShipment, error)
}

// Config configures a Fulfilment consumer. Zero values take the defaults.
type Config struct {
	// Table is the shipments table (pk = order id; CreateTableInput).
	// Required.
	Table string
	// Idempotency configures the idempotency records. Idempotency.Table is
	// required (it may be Table itself: record keys start with
	// "fulfilment#", order ids never contain '#'); Namespace defaults to
	// ConsumerName.
	Idempotency idempotency.Config
	// Provider configures the provider client; ignored when New is given a
	// Shipper.
	Provider ProviderConfig
	// ExpectedSource and ExpectedAccount: see dedup.ConsumerConfig.
	// ExpectedSource defaults to appenv.EventSource.
	ExpectedSource  string
	ExpectedAccount string
	// CallTimeout bounds one DynamoDB call on Table. Default 5 s.
	CallTimeout time.Duration
	// Logger receives one line per handled event. Default slog.Default().
	Logger *slog.Logger
	// Now returns the current time; default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Idempotency.Namespace == "" {
		c.Idempotency.Namespace = ConsumerName
	}
	if c.ExpectedSource == "" {
		c.ExpectedSource = appenv.EventSource
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Idempotency.Logger == nil {
		c.Idempotency.Logger = c.Logger
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first invalid setting (after defaults); the
// idempotency and provider settings are validated by their constructors.
func (c Config) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("fulfilment: Config.Table is required")
	case c.CallTimeout < 0:
		return fmt.Errorf("fulfilment: Config.CallTimeout %s is negative", c.CallTimeout)
	case c.ExpectedAccount != "" && !accountID(c.ExpectedAccount):
		return fmt.Errorf("fulfilment: Config.ExpectedAccount %q is not a 12-digit AWS account id", c.ExpectedAccount)
	}
	return nil
}

func accountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Fulfilment is the consumer. It is safe for concurrent use; build one per
// Lambda instance.
type Fulfilment struct {
	ddb    idempotency.API
	cfg    Config
	origin dedup.ConsumerConfig
	store  *idempotency.Store
	ship   Shipper
	log    *slog.Logger
}

// New returns a consumer using ddb for both tables. shipper is the provider
// API; nil builds a *ProviderClient from cfg.Provider. Errors: an invalid
// Config, idempotency.Config or ProviderConfig, or a nil ddb.
func New(ddb idempotency.API, shipper Shipper, cfg Config) (*Fulfilment, error) {
	if ddb == nil {
		return nil, errors.New("fulfilment: nil DynamoDB client")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store, err := idempotency.NewStore(ddb, cfg.Idempotency)
	if err != nil {
		return nil, fmt.Errorf("fulfilment: %w", err)
	}
	if shipper == nil {
		pc, err := NewProviderClient(cfg.Provider)
		if err != nil {
			return nil, err
		}
		shipper = pc
	}
	return &Fulfilment{
		ddb: ddb, cfg: cfg, store: store, ship: shipper, log: cfg.Logger,
		origin: dedup.ConsumerConfig{ExpectedSource: cfg.ExpectedSource, ExpectedAccount: cfg.ExpectedAccount, Dedup: dedup.Config{Consumer: ConsumerName}},
	}, nil
}

// Metrics returns the idempotency counters (replays, in-progress conflicts,
// take-overs, ...).
func (f *Fulfilment) Metrics() idempotency.Metrics { return f.store.Metrics() }

// Outcome is the stored result of one event (the idempotency record's data).
type Outcome struct {
	OrderID    string `json:"order_id"`
	ShipmentID string `json:"shipment_id"`
	Status     string `json:"status"`
}

// Handle applies one EventBridge event (see the package documentation for
// what it does and which errors are permanent).
func (f *Fulfilment) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	env, log, err := f.origin.Accept(ctx, f.log, ev)
	if err != nil {
		return err
	}
	log = log.With("idempotency_key", idempotency.RecordKey(f.cfg.Idempotency.Namespace, env.EventID))
	if env.EventType != order.EventOrderPaid && env.EventType != order.EventOrderCancelled {
		log.InfoContext(ctx, "fulfilment: ignoring event type")
		return nil
	}
	p, err := order.CheckEvent(env)
	if err != nil {
		ce, _ := order.AsContractError(err)
		log.ErrorContext(ctx, "fulfilment: event refused", "reason", ce.Reason, "error", err)
		return sqsconsumer.Permanent(ce.Reason, err)
	}
	var effect idempotency.Effect
	switch p := p.(type) {
	case order.Paid:
		effect = func(ctx context.Context) ([]byte, error) { return f.create(ctx, env, p) }
	case order.Cancelled:
		if !p.WasPaid {
			log.InfoContext(ctx, "fulfilment: order cancelled before payment; nothing shipped")
			return nil
		}
		effect = func(ctx context.Context) ([]byte, error) { return f.cancel(ctx, env, p) }
	default:
		return nil
	}
	hash, err := idempotency.HashJSON(struct {
		Type     string `json:"type"`
		Version  int    `json:"version"`
		OrderID  string `json:"order_id"`
		Sequence int64  `json:"sequence"`
		Payload  any    `json:"payload"`
	}{env.EventType, env.EventVersion, env.AggregateID, env.Sequence, p})
	if err != nil {
		return err
	}

	res, err := f.store.Do(ctx, env.EventID, hash, effect)
	switch {
	case errors.Is(err, idempotency.ErrPayloadMismatch):
		log.ErrorContext(ctx, "fulfilment: event refused", "reason", ReasonPayloadMismatch, "error", err)
		return sqsconsumer.Permanent(ReasonPayloadMismatch, err)
	case err != nil:
		if pe, ok := sqsconsumer.AsPermanent(err); ok {
			log.ErrorContext(ctx, "fulfilment: event refused", "reason", pe.Reason, "error", err)
			return err
		}
		log.WarnContext(ctx, "fulfilment: not applied; the event will be redelivered", "error", err)
		return fmt.Errorf("fulfilment: %s %s: %w", env.EventType, env.EventID, err)
	}
	var out Outcome
	_ = json.Unmarshal(res.Data, &out)
	log.InfoContext(ctx, "fulfilment: applied", "source", string(res.Source), "shipment_id", out.ShipmentID, "status", out.Status)
	return nil
}

// create asks the provider for a shipment and records it. The shipments
// table is read first: a shipment recorded by this event (a redelivery
// after the idempotency record expired, when a provider whose key window is
// shorter would ship again) is the answer, without a provider call; one
// recorded by another event is refused (duplicate_shipment) before any call.
func (f *Fulfilment) create(ctx context.Context, env outbox.Envelope, p order.Paid) ([]byte, error) {
	rec, err := f.Shipment(ctx, p.OrderID)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if rec.CreatedEventID != env.EventID {
			return nil, sqsconsumer.Permanent(ReasonDuplicateShipment, fmt.Errorf("%w: order %s already has shipment %s, created for event %s; event %s was not sent to the provider",
				ErrDuplicateShipment, p.OrderID, rec.ShipmentID, rec.CreatedEventID, env.EventID))
		}
		f.log.InfoContext(ctx, "fulfilment: shipment already recorded for this event; provider not called",
			"event_id", env.EventID, "shipment_id", rec.ShipmentID, "status", rec.Status)
		return json.Marshal(Outcome{OrderID: p.OrderID, ShipmentID: rec.ShipmentID, Status: StatusCreated})
	}
	sh, err := f.ship.CreateShipment(ctx, env.EventID, ShipmentRequest{OrderID: p.OrderID, AmountMinor: p.AmountMinor, Currency: p.Currency})
	if err != nil {
		return nil, err
	}
	if sh.OrderID != p.OrderID {
		return nil, mismatch("create shipment", p.OrderID, sh)
	}
	now := f.cfg.Now().UTC().Format(time.RFC3339Nano)
	id := expression.Name(AttrShipmentID)
	upd := expression.Set(id, expression.Value(sh.ID)).
		Set(expression.Name(AttrAmountMinor), expression.Value(p.AmountMinor)).
		Set(expression.Name(AttrCurrency), expression.Value(p.Currency)).
		Set(expression.Name(AttrStatus), expression.IfNotExists(expression.Name(AttrStatus), expression.Value(StatusCreated))).
		Set(expression.Name(AttrCreatedEventID), expression.IfNotExists(expression.Name(AttrCreatedEventID), expression.Value(env.EventID))).
		Set(expression.Name(AttrCreatedAt), expression.IfNotExists(expression.Name(AttrCreatedAt), expression.Value(now))).
		Set(expression.Name(AttrUpdatedAt), expression.Value(now))
	cond := expression.AttributeNotExists(expression.Name(AttrPK)).Or(id.Equal(expression.Value(sh.ID)))
	if err := f.update(ctx, p.OrderID, upd, cond); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			rec, _ := f.Shipment(ctx, p.OrderID)
			had := ""
			if rec != nil {
				had = rec.ShipmentID
			}
			return nil, sqsconsumer.Permanent(ReasonDuplicateShipment, fmt.Errorf("%w: order %s has shipment %s, provider answered %s for event %s",
				ErrDuplicateShipment, p.OrderID, had, sh.ID, env.EventID))
		}
		return nil, fmt.Errorf("record shipment %s of order %s: %w", sh.ID, p.OrderID, err)
	}
	return json.Marshal(Outcome{OrderID: p.OrderID, ShipmentID: sh.ID, Status: StatusCreated})
}

// mismatch is the permanent error of a provider answer about another order
// (or shipment) than the one asked for.
func mismatch(op, orderID string, sh ProviderShipment) error {
	return sqsconsumer.Permanent(ReasonProviderOrderMismatch, fmt.Errorf("%w: %s for order %s answered shipment %q of order %q (status %q)",
		ErrProviderOrderMismatch, op, orderID, sh.ID, sh.OrderID, sh.Status))
}

// cancel cancels the order's recorded shipment at the provider and marks it.
// A shipment already recorded cancelled (a redelivery after the idempotency
// record expired) is the answer, without a provider call. The provider's
// answer must be about that shipment of that order, cancelled.
func (f *Fulfilment) cancel(ctx context.Context, env outbox.Envelope, p order.Cancelled) ([]byte, error) {
	rec, err := f.Shipment(ctx, p.OrderID)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: order %s", ErrNoShipment, p.OrderID)
	}
	if rec.Status == StatusCancelled {
		f.log.InfoContext(ctx, "fulfilment: shipment already recorded cancelled; provider not called",
			"event_id", env.EventID, "shipment_id", rec.ShipmentID, "cancelled_event_id", rec.CancelledEventID)
		return json.Marshal(Outcome{OrderID: p.OrderID, ShipmentID: rec.ShipmentID, Status: StatusCancelled})
	}
	sh, err := f.ship.CancelShipment(ctx, env.EventID, rec.ShipmentID)
	if err != nil {
		return nil, err
	}
	if sh.OrderID != p.OrderID || sh.ID != rec.ShipmentID || sh.Status != StatusCancelled {
		return nil, mismatch("cancel shipment "+rec.ShipmentID, p.OrderID, sh)
	}
	now := f.cfg.Now().UTC().Format(time.RFC3339Nano)
	upd := expression.Set(expression.Name(AttrStatus), expression.Value(StatusCancelled)).
		Set(expression.Name(AttrCancelledEventID), expression.Value(env.EventID)).
		Set(expression.Name(AttrCancelledAt), expression.IfNotExists(expression.Name(AttrCancelledAt), expression.Value(now))).
		Set(expression.Name(AttrUpdatedAt), expression.Value(now))
	cond := expression.Name(AttrShipmentID).Equal(expression.Value(rec.ShipmentID))
	if err := f.update(ctx, p.OrderID, upd, cond); err != nil {
		return nil, fmt.Errorf("record cancellation of shipment %s: %w", rec.ShipmentID, err)
	}
	return json.Marshal(Outcome{OrderID: p.OrderID, ShipmentID: sh.ID, Status: StatusCancelled})
}

func (f *Fulfilment) update(ctx context.Context, orderID string, upd expression.UpdateBuilder, cond expression.ConditionBuilder) error {
	ex, err := expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("build shipment update: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	_, err = f.ddb.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(f.cfg.Table),
		Key:                       key(orderID),
		UpdateExpression:          ex.Update(),
		ConditionExpression:       ex.Condition(),
		ExpressionAttributeNames:  ex.Names(),
		ExpressionAttributeValues: ex.Values(),
	})
	return err
}

func key(orderID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: orderID}}
}

// ShipmentRecord is an order's shipment as recorded in the shipments table.
type ShipmentRecord struct {
	OrderID          string `json:"order_id"`
	ShipmentID       string `json:"shipment_id"`
	Status           string `json:"status"`
	AmountMinor      int64  `json:"amount_minor"`
	Currency         string `json:"currency"`
	CreatedEventID   string `json:"created_event_id"`
	CancelledEventID string `json:"cancelled_event_id,omitempty"`
	CreatedAt        string `json:"created_at"`
	CancelledAt      string `json:"cancelled_at,omitempty"`
}

// Shipment reads orderID's shipment (strongly consistent GetItem bounded by
// CallTimeout), for the consumer itself and for views (outboxctl, an HTTP
// GET). It returns nil without error when none is recorded.
func (f *Fulfilment) Shipment(ctx context.Context, orderID string) (*ShipmentRecord, error) {
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	out, err := f.ddb.GetItem(cctx, &dynamodb.GetItemInput{
		TableName: aws.String(f.cfg.Table), Key: key(orderID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("fulfilment: get shipment of %s: %w", orderID, err)
	}
	if out.Item == nil {
		return nil, nil
	}
	s := func(name string) string {
		if v, ok := out.Item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	rec := &ShipmentRecord{
		OrderID: s(AttrPK), ShipmentID: s(AttrShipmentID), Status: s(AttrStatus), Currency: s(AttrCurrency),
		CreatedEventID: s(AttrCreatedEventID), CancelledEventID: s(AttrCancelledEventID),
		CreatedAt: s(AttrCreatedAt), CancelledAt: s(AttrCancelledAt),
	}
	if v, ok := out.Item[AttrAmountMinor].(*types.AttributeValueMemberN); ok {
		rec.AmountMinor, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	return rec, nil
}

// CreateTableInput returns the shipments table definition: partition key
// AttrPK (S, the order id), on-demand billing, no stream, no TTL.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	}
}
