package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// ConsumerConfig is the configuration every consumer shares
// (ConsumerConfigFromEnv reads it from the consumer construct's variables;
// NewConsumer builds the Consumer, Consumer.Handler its event handler).
// Zero values take the defaults.
type ConsumerConfig struct {
	// Table is the consumer's own table name. Required.
	Table string
	// Dedup configures the dedup markers, and for an ordered consumer its
	// ordering gates and resequencer buffer: the consumer's state.
	// Dedup.Table defaults to Table: the state lives beside the effects,
	// in the consumer's own table, so that (1) a backup or point-in-time
	// restore of that one table restores effects and state as one unit
	// (DynamoDB restores each table on its own, to the second: two tables
	// restored "to the same time" are not promised to agree), and (2) no
	// other consumer's role, which may not write that table, can write
	// this consumer's markers, gates or buffer (docs/SECURITY-MODEL.md).
	// The table then needs the state index (WithStateIndex) and TTL on
	// TTLAttribute. Dedup.Consumer defaults to the consumer's name.
	Dedup Config
	// ItemRetention is how long the consumer keeps the items it writes
	// where it supports expiry (e.g. notifications: TTL attribute
	// "expires_at", epoch seconds). 0 keeps them forever (what a consumer
	// keeping money entries wants).
	ItemRetention time.Duration
	// CallTimeout bounds one read call (GetItem, Scan page). Default
	// DefaultCallTimeout (10 s).
	CallTimeout time.Duration
	// Logger receives one line per handled event. Default slog.Default().
	Logger *slog.Logger
	// ExpectedSource is the EventBridge "source" every event must carry: the
	// Source the relay publishes with (config.EnvEventSource). Required.
	// Events with another source are refused by CheckOrigin
	// (ErrForeignSource).
	ExpectedSource string
	// ExpectedAccount, when set, is the 12-digit AWS account id every event's
	// "account" must equal: the account of the relay's bus. Empty: the
	// account is not checked (the local runtime uses "000000000000").
	ExpectedAccount string
	// Ordering selects whether the consumer applies an aggregate's events
	// in sequence order (promise I4; docs/ORDERING.md): OrderingDefault
	// takes the consumer's own default (NewConsumer's ordering argument), Ordered or Unordered override it. Ordered sets
	// Dedup.Ordered: the dedup transaction carries the ordering gate.
	Ordering Ordering
	// GapMaxReceives is the receive (SQS ApproximateReceiveCount, read with
	// sqsconsumer.MessageFromContext) on which an ordered consumer gives up
	// holding an event that waits for earlier sequences and dead-letters it
	// with ReasonSequenceGap (Hold). It must not exceed the consumer
	// queue's maxReceiveCount, or the redrive policy moves the event first,
	// without the reason. Default config.DefaultConsumerGapMaxReceives (5,
	// the stack's maxReceiveCount). With the resequencer (the default) it
	// bounds only the fallback: events the buffer cannot take.
	GapMaxReceives int
	// Resequencer configures the ordered consumer's buffer for early events
	// (Resequencer; docs/ORDERING.md). Unordered consumers ignore it.
	Resequencer ResequencerConfig
}

// Ordering is a consumer's ordered-apply mode (ConsumerConfig.Ordering).
type Ordering string

// Ordering modes.
const (
	// OrderingDefault takes the consumer's default mode.
	OrderingDefault Ordering = ""
	// Unordered applies every event once, in arrival order (promise I3
	// only): an event whose predecessor has not arrived is applied anyway.
	Unordered Ordering = "unordered"
	// Ordered applies an aggregate's events once each and in sequence order
	// (I3 and I4): an early event is held until its predecessors are
	// applied, and dead-lettered with ReasonSequenceGap when the gap does
	// not close within GapMaxReceives receives.
	Ordered Ordering = "ordered"
)

// Errors returned by CheckOrigin. Retrying cannot fix them: consumers
// dead-letter the event (reasons ReasonForeignSource, ReasonForeignAccount).
var (
	// ErrForeignSource: the event's source is not ExpectedSource.
	ErrForeignSource = errors.New("dedup: event from an unexpected source")
	// ErrForeignAccount: the event's account is not ExpectedAccount.
	ErrForeignAccount = errors.New("dedup: event from an unexpected account")
)

// Machine-readable reasons for events CheckOrigin or DecodeEnvelope refuse,
// for a consumer's dead-letter step (sqsconsumer.Permanent).
const (
	ReasonForeignSource  = "forged_source"
	ReasonForeignAccount = "forged_account"
	ReasonMalformedEvent = "malformed_event"
)

// CheckOrigin refuses an EventBridge event whose source is not
// ExpectedSource (an error wrapping ErrForeignSource) or, when
// ExpectedAccount is set, whose account is not ExpectedAccount (wrapping
// ErrForeignAccount). EventBridge sets "account" to the account that called
// PutEvents, so the account check stops events put by another account that
// a too-broad bus policy let in; the source check stops other producers on
// a shared bus. Neither stops a principal of the same account that may call
// events:PutEvents on the bus (it can set any source not starting with
// "aws."): the bus resource policy is the control for that
// (docs/SECURITY-MODEL.md).
func (c ConsumerConfig) CheckOrigin(ev events.EventBridgeEvent) error {
	src := c.ExpectedSource
	if src == "" || ev.Source != src {
		return fmt.Errorf("%w: event %s has source %q, want %q", ErrForeignSource, ev.ID, clip(ev.Source, 256), src)
	}
	if c.ExpectedAccount != "" && ev.AccountID != c.ExpectedAccount {
		return fmt.Errorf("%w: event %s has account %q, want %q", ErrForeignAccount, ev.ID, clip(ev.AccountID, 64), c.ExpectedAccount)
	}
	return nil
}

// Decode checks the event's origin (CheckOrigin) and then decodes its
// envelope (DecodeEnvelope). Errors wrap ErrForeignSource, ErrForeignAccount
// or ErrMalformedEvent; OriginReason names them.
func (c ConsumerConfig) Decode(ev events.EventBridgeEvent) (outbox.Envelope, error) {
	if err := c.CheckOrigin(ev); err != nil {
		return outbox.Envelope{}, err
	}
	return DecodeEnvelope(ev)
}

// OriginReason returns the Reason* constant for an error from Decode or
// CheckOrigin, and "" for any other error.
func OriginReason(err error) string {
	switch {
	case errors.Is(err, ErrForeignSource):
		return ReasonForeignSource
	case errors.Is(err, ErrForeignAccount):
		return ReasonForeignAccount
	case errors.Is(err, ErrMalformedEvent):
		return ReasonMalformedEvent
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Consumer is what a consumer builds from a ConsumerConfig: the effective
// configuration and its dedup Applier.
type Consumer struct {
	Config  ConsumerConfig
	Applier *Applier
}

// Resequence returns the Resequencer running h (the consumer's own
// handler), or nil, nil when the consumer is unordered or
// Config.Resequencer.Disabled is set. It returns NewResequencer's error
// (e.g. a client without Query).
func (c Consumer) Resequence(h sqsconsumer.EventHandler) (*Resequencer, error) {
	if c.Config.Ordering != Ordered || c.Config.Resequencer.Disabled {
		return nil, nil
	}
	rc := c.Config.Resequencer
	if rc.LastReceive == 0 {
		rc.LastReceive = c.Config.GapMaxReceives
	}
	r, err := NewResequencer(c.Applier, h, rc, c.Config.Logger)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Config.Dedup.Consumer, err)
	}
	return r, nil
}

// NewConsumer applies the defaults (Dedup.Consumer = name; Dedup.Table =
// Table; Dedup.MaxAttempts
// = maxAttempts when unset and maxAttempts > 0; Ordering = ordering when unset, or Ordered
// when Dedup.Ordered is set; GapMaxReceives =
// config.DefaultConsumerGapMaxReceives), sets Dedup.Ordered from Ordering,
// validates cfg and builds the Applier. Errors name the consumer: a nil
// client, an empty Table, an empty ExpectedSource or one starting with
// "aws." (EventBridge refuses those in PutEvents), a negative CallTimeout, an ExpectedAccount that
// is not 12 digits, an unknown Ordering, a GapMaxReceives below 1, or an
// invalid Dedup config (an ordered consumer's client must implement
// ItemGetter).
func NewConsumer(name string, client TransactWriter, cfg ConsumerConfig, maxAttempts int, ordering Ordering) (Consumer, error) {
	if client == nil {
		return Consumer{}, fmt.Errorf("%s: nil client", name)
	}
	if cfg.Dedup.Consumer == "" {
		cfg.Dedup.Consumer = name
	}
	if cfg.Dedup.Table == "" {
		cfg.Dedup.Table = cfg.Table
	}
	if cfg.Dedup.MaxAttempts == 0 && maxAttempts > 0 {
		cfg.Dedup.MaxAttempts = maxAttempts
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Ordering == OrderingDefault {
		cfg.Ordering = ordering
		if cfg.Dedup.Ordered {
			cfg.Ordering = Ordered
		}
	}
	if cfg.Ordering == OrderingDefault {
		cfg.Ordering = Unordered
	}
	cfg.Dedup.Ordered = cfg.Ordering == Ordered
	if cfg.GapMaxReceives == 0 {
		cfg.GapMaxReceives = config.DefaultConsumerGapMaxReceives
	}
	if cfg.Resequencer.LastReceive == 0 {
		cfg.Resequencer.LastReceive = cfg.GapMaxReceives
	}
	cfg.Resequencer.setDefaults()
	if err := cfg.Resequencer.Validate(); err != nil {
		return Consumer{}, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case cfg.Ordering != Ordered && cfg.Ordering != Unordered:
		return Consumer{}, fmt.Errorf("%s: Config.Ordering %q is neither %q nor %q", name, cfg.Ordering, Ordered, Unordered)
	case cfg.GapMaxReceives < 1:
		return Consumer{}, fmt.Errorf("%s: Config.GapMaxReceives %d must be >= 1", name, cfg.GapMaxReceives)
	case cfg.Table == "":
		return Consumer{}, errors.New(name + ": Config.Table is required")
	case cfg.ExpectedSource == "":
		return Consumer{}, errors.New(name + ": Config.ExpectedSource is required: the EventBridge source your relay publishes with (config.EnvEventSource)")
	case reservedSource(cfg.ExpectedSource):
		return Consumer{}, fmt.Errorf("%s: Config.ExpectedSource %q starts with \"aws.\", which EventBridge's PutEvents refuses: no event of your relay can carry it", name, cfg.ExpectedSource)
	case cfg.CallTimeout < 0:
		return Consumer{}, fmt.Errorf("%s: Config.CallTimeout %s is negative", name, cfg.CallTimeout)
	case cfg.ExpectedAccount != "" && !accountID(cfg.ExpectedAccount):
		return Consumer{}, fmt.Errorf("%s: Config.ExpectedAccount %q is not a 12-digit AWS account id", name, cfg.ExpectedAccount)
	}
	a, err := NewApplier(client, cfg.Dedup)
	if err != nil {
		return Consumer{}, fmt.Errorf("%s: %w", name, err)
	}
	return Consumer{Config: cfg, Applier: a}, nil
}

// reservedSource reports whether an event source starts with "aws.", the
// prefix EventBridge keeps for AWS services (PutEventsRequestEntry.Source).
func reservedSource(s string) bool { return strings.HasPrefix(s, "aws.") }

// accountID reports whether s is a 12-digit AWS account id.
func accountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Refuse logs an event a consumer refuses, at ERROR with its reason and
// attrs, and returns err as a *sqsconsumer.PermanentError with that reason,
// so the consumer's SQS adapter dead-letters it at once (pkg/sqsconsumer).
func Refuse(ctx context.Context, log *slog.Logger, consumer, reason string, err error, attrs ...any) error {
	log.ErrorContext(ctx, consumer+": event refused", append([]any{"reason", reason, "error", err}, attrs...)...)
	return sqsconsumer.Permanent(reason, err)
}

// Accept is the first step of every consumer's Handle: it decodes ev with
// Decode (origin checks, then the envelope) and returns the envelope and log
// with the envelope's keys (event_id, event_type, aggregate_id, sequence,
// and actor when set). An event Decode refuses is logged and returned as a
// *sqsconsumer.PermanentError (Refuse) with OriginReason's reason, wrapping
// ErrForeignSource, ErrForeignAccount or ErrMalformedEvent.
func (c ConsumerConfig) Accept(ctx context.Context, log *slog.Logger, ev events.EventBridgeEvent) (outbox.Envelope, *slog.Logger, error) {
	env, err := c.Decode(ev)
	if err != nil {
		return env, log, Refuse(ctx, log, c.Dedup.Consumer, OriginReason(err), err,
			"bus_event_id", ev.ID, "detail_type", ev.DetailType, "source", ev.Source, "account", ev.AccountID)
	}
	log = log.With("event_id", env.EventID, "event_type", env.EventType, "aggregate_id", env.AggregateID, "sequence", env.Sequence)
	if env.Actor != "" {
		log = log.With("actor", env.Actor)
	}
	return env, log, nil
}

// Hold is an ordered consumer's answer to an Apply error wrapping a
// *GapError (errors.Is(err, ErrSequenceGap)): the event is early, nothing
// was written. Below GapMaxReceives receives of the SQS message being
// handled (sqsconsumer.MessageFromContext; a call without one counts as
// below) it logs the hold at INFO and returns err, so the message is
// reported failed and comes back (sqsconsumer's RetryDelay: seconds). On
// receive GapMaxReceives or later it logs at ERROR and returns
// sqsconsumer.Permanent(ReasonSequenceGap, "waiting for sequences A..B of
// <aggregate>"): the event is dead-lettered with the missing range, never
// applied early and never dropped. Redriving the DLQ (the missing event and
// the held ones) lets them through in order. Any other err is returned
// unchanged.
func (c ConsumerConfig) Hold(ctx context.Context, log *slog.Logger, err error) error {
	gap, ok := AsGapError(err)
	if !ok {
		return err
	}
	from, to := gap.Missing()
	receives := 0
	if m, ok := sqsconsumer.MessageFromContext(ctx); ok {
		receives = sqsconsumer.ReceiveCount(m)
	}
	maxReceives := c.GapMaxReceives
	if maxReceives < 1 {
		maxReceives = config.DefaultConsumerGapMaxReceives
	}
	if receives >= maxReceives {
		return Refuse(ctx, log, c.Dedup.Consumer, ReasonSequenceGap,
			fmt.Errorf("waiting for sequences %d..%d of %s %s after %d receives: %w", from, to, gap.AggregateType, gap.AggregateID, receives, err),
			"missing_from", from, "missing_to", to, "receive_count", receives)
	}
	log.InfoContext(ctx, c.Dedup.Consumer+": event held until earlier sequences are applied",
		"missing_from", from, "missing_to", to, "receive_count", receives, "gap_max_receives", maxReceives)
	return fmt.Errorf("%s: hold: %w", c.Dedup.Consumer, err)
}
