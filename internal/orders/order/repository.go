package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace"
)

// Client is the DynamoDB API the Repository reads with, with the SDK's exact
// signature; *dynamodb.Client satisfies it. Writes go through outbox.Writer.
type Client interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// RepositoryConfig configures a Repository. Zero values take the defaults.
type RepositoryConfig struct {
	// Table is the orders table name. Required.
	Table string
	// Client reads orders and idempotency records. Required.
	Client Client
	// Writer commits every change with its outbox records. Required.
	Writer *outbox.Writer
	// IdempotencyTTL is how long an idempotency record is honoured.
	// Default DefaultIdempotencyTTL (24 h).
	IdempotencyTTL time.Duration
	// MaxAttempts bounds the tries of one Create or Update when DynamoDB
	// cancels the transaction for a conflict or throttling (>= 1).
	// Default DefaultMaxAttempts.
	MaxAttempts int
	// BaseBackoff is the first retry delay; it doubles per attempt, with
	// full jitter. Default DefaultBaseBackoff.
	BaseBackoff time.Duration
	// CallTimeout bounds each DynamoDB call. Default 5 s.
	CallTimeout time.Duration
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// Logger receives one record per committed change. Default slog.Default().
	Logger *slog.Logger
}

func (c *RepositoryConfig) setDefaults() {
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BaseBackoff == 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration error.
func (c RepositoryConfig) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("order: RepositoryConfig.Table is required")
	case c.Client == nil:
		return errors.New("order: RepositoryConfig.Client is required")
	case c.Writer == nil:
		return errors.New("order: RepositoryConfig.Writer is required")
	case c.IdempotencyTTL < time.Minute:
		return fmt.Errorf("order: IdempotencyTTL %s is shorter than a minute", c.IdempotencyTTL)
	case c.MaxAttempts < 1:
		return fmt.Errorf("order: MaxAttempts %d must be >= 1", c.MaxAttempts)
	case c.BaseBackoff < 0 || c.CallTimeout < 0:
		return errors.New("order: BaseBackoff and CallTimeout must not be negative")
	}
	return nil
}

// Repository stores orders in DynamoDB. Every change is one
// TransactWriteItems holding the order write and its outbox records
// (outbox.Writer), so a change and its events commit together (I1) and each
// event's sequence is the order's version after the change (I4). It is safe
// for concurrent use.
type Repository struct {
	cfg RepositoryConfig
}

// NewRepository returns a Repository, or an error if cfg does not validate.
func NewRepository(cfg RepositoryConfig) (*Repository, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Repository{cfg: cfg}, nil
}

// CreateMeta carries request metadata of a create.
type CreateMeta struct {
	// Actor is the authenticated caller making the change (see
	// ValidateActor). It is stored on the order (CreatedBy, UpdatedBy) and
	// in every envelope (actor), and it scopes IdempotencyKey. Required
	// with IdempotencyKey; optional otherwise.
	Actor string
	// IdempotencyKey, when set (see ValidateIdempotencyKey), makes the
	// create idempotent for IdempotencyTTL within Actor's keys: see
	// Repository.Create.
	IdempotencyKey string
	// RequestHash identifies the request body (e.g. hex SHA-256 of its
	// canonical form). Required with IdempotencyKey.
	RequestHash string
	// CorrelationID is copied onto every envelope.
	CorrelationID string
	// CausationID is copied onto every envelope; default IdempotencyKey.
	CausationID string
}

// UpdateMeta carries request metadata of an update.
type UpdateMeta struct {
	// Actor is the authenticated caller making the change (see
	// ValidateActor); stored as the order's UpdatedBy and in every envelope.
	// Optional.
	Actor string
	// ExpectedVersion, when > 0, is the version the caller last saw (HTTP
	// If-Match); Update returns ErrVersionConflict if the stored version
	// differs.
	ExpectedVersion int64
	// CorrelationID is copied onto every envelope.
	CorrelationID string
	// CausationID is copied onto every envelope (e.g. the request id).
	CausationID string
}

// UpdateFunc changes o in place and returns the events the change caused.
// It may run more than once (retries after a transaction conflict), each
// time on a freshly read order, so it must have no other side effects.
type UpdateFunc func(o *Order) ([]outbox.Event, error)

// ValidateIdempotencyKey returns an error wrapping ErrValidation unless key
// is 1..MaxIdempotencyKeyLen bytes of printable ASCII (0x21..0x7e) other than
// ',' (API Gateway joins repeated headers with commas, so a comma would make
// one key look like several).
func ValidateIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKeyLen {
		return fmt.Errorf("%w: idempotency key must be 1..%d characters", ErrValidation, MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e || key[i] == ',' {
			return fmt.Errorf("%w: idempotency key must be printable ASCII without spaces or commas", ErrValidation)
		}
	}
	return nil
}

// Get returns the order with id, read consistently, or an error wrapping
// ErrNotFound.
func (r *Repository) Get(ctx context.Context, id string) (Order, error) {
	if err := ValidateID(id); err != nil {
		return Order{}, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	o, found, err := r.getOrder(ctx, id)
	if err != nil {
		return Order{}, err
	}
	if !found {
		return Order{}, fmt.Errorf("%w: order %s", ErrNotFound, id)
	}
	return o, nil
}

// Create stores the new order o (from Place, version 1) and its events in one
// transaction: the order put (attribute_not_exists), with an idempotency key
// also the idempotency record put, then the outbox records.
//
// With meta.IdempotencyKey set, the first create under a key wins for
// IdempotencyTTL (24 h): a repeat by the same meta.Actor with the same
// RequestHash writes nothing and returns the order as it was first created
// with created=false; a repeat by the same actor with another RequestHash
// returns ErrIdempotencyKeyReused. Keys are scoped to the actor (see
// IdempotencyKey): the same key from another actor is an independent
// request. Concurrent creates with one actor and key create exactly one
// order. Every attempt of one call sends the identical transaction; with a
// key it carries the ClientRequestToken
// outbox.RequestToken(IdempotencyScope(actor), key, hash).
//
// A cancelled transaction (outbox.TxError; actions: 0 the order put, 1 the
// idempotency record put when keyed, then the outbox puts) maps to one
// outcome, strongest first: the idempotency record's condition failed →
// read it back (the first order, created=false, or
// ErrIdempotencyKeyReused); ValidationError anywhere → ErrValidation;
// ItemCollectionSizeLimitExceeded → ErrUnavailable; the order put's
// condition → ErrAlreadyExists; an outbox put's condition → ErrAlreadyExists;
// otherwise (conflicts, throttling, unnamed reasons) retry the identical
// transaction (same token), and when MaxAttempts run out: ErrUnavailable if throttling or no
// conflict was named, ErrConcurrentRequest for conflicts alone.
//
// Errors: ErrValidation (bad order, key, actor, or a key without hash or
// actor; or DynamoDB's ValidationError), ErrIdempotencyKeyReused,
// ErrAlreadyExists, ErrConcurrentRequest, ErrUnavailable,
// outbox.ErrNoEvents and the other outbox.Writer errors, or a wrapped SDK
// error.
func (r *Repository) Create(ctx context.Context, o *Order, events []outbox.Event, meta CreateMeta) (Order, bool, error) {
	if o == nil {
		return Order{}, false, fmt.Errorf("%w: nil order", ErrValidation)
	}
	if err := (PlaceInput{ID: o.ID, CustomerID: o.CustomerID, AmountMinor: o.AmountMinor, Currency: o.Currency}).Validate(); err != nil {
		return Order{}, false, err
	}
	if o.Version < 1 || o.Status == "" {
		return Order{}, false, fmt.Errorf("%w: a new order needs a status and version >= 1 (use Place)", ErrValidation)
	}
	key := meta.IdempotencyKey
	if key != "" {
		if err := ValidateIdempotencyKey(key); err != nil {
			return Order{}, false, err
		}
		if meta.RequestHash == "" {
			return Order{}, false, fmt.Errorf("%w: request hash is required with an idempotency key", ErrValidation)
		}
		if meta.Actor == "" {
			return Order{}, false, fmt.Errorf("%w: an idempotency key needs the actor it belongs to", ErrValidation)
		}
	}
	if meta.Actor != "" {
		if err := ValidateActor(meta.Actor); err != nil {
			return Order{}, false, err
		}
	}
	created := *o
	created.CreatedBy, created.UpdatedBy = meta.Actor, meta.Actor
	o = &created
	if meta.CausationID == "" {
		meta.CausationID = key
	}
	// The trace context of ctx's span (the API request's) goes onto every
	// envelope, so it is stored in the same transaction; built once, like
	// the rest, so every attempt sends the identical transaction.
	tp, ts := outboxtrace.Capture(ctx)
	envs, err := envelopes(*o, 0, events, outbox.Metadata{CorrelationID: meta.CorrelationID, CausationID: meta.CausationID, Actor: meta.Actor, TraceParent: tp, TraceState: ts})
	if err != nil {
		return Order{}, false, err
	}
	orderPut, err := r.orderPut(*o, 0)
	if err != nil {
		return Order{}, false, err
	}
	writes := []types.TransactWriteItem{orderPut}
	// Every attempt of this Create sends the identical transaction (built
	// once, here); with a key it also carries the same ClientRequestToken,
	// so a request repeated by the client within 10 minutes is recognised
	// by DynamoDB too.
	var opts []outbox.WriteOption
	if key != "" {
		idemPut, err := r.idempotencyPut(*o, meta.Actor, key, meta.RequestHash)
		if err != nil {
			return Order{}, false, err
		}
		writes = append(writes, idemPut)
		opts = append(opts, outbox.WithClientRequestToken(outbox.RequestToken(IdempotencyScope(meta.Actor), key, meta.RequestHash)))
	}

	var lastErr error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := r.backoff(ctx, attempt); err != nil {
				return Order{}, false, err
			}
		}
		if key != "" {
			first, found, err := r.replay(ctx, meta.Actor, key, meta.RequestHash)
			if err != nil || found {
				return first, false, err
			}
		}
		err := r.write(ctx, writes, envs, opts...)
		if err == nil {
			r.logCommitted(ctx, "order created", *o, envs, key)
			return *o, true, nil
		}
		lastErr = err
		if te, ok := outbox.AsTxError(err); ok {
			// Outcomes, strongest first (see outbox.TxError): the
			// idempotency record proves the request was already served.
			switch {
			case key != "" && te.ConditionFailed(1):
				// A create with this key committed first: the next round
				// reads its record back (the same order: 200, or another
				// body: ErrIdempotencyKeyReused).
				continue
			case te.Invalid():
				return Order{}, false, fmt.Errorf("%w: DynamoDB refused order %s: %w", ErrValidation, o.ID, err)
			case te.CollectionFull():
				r.cfg.Logger.ErrorContext(ctx, "order create refused: item collection full", "aggregate_id", o.ID, "error", err.Error())
				return Order{}, false, fmt.Errorf("%w: order %s: %w", ErrUnavailable, o.ID, err)
			case te.ConditionFailed(0):
				return Order{}, false, fmt.Errorf("%w: order %s", ErrAlreadyExists, o.ID)
			case te.FirstConditionFailed() >= 0:
				// An outbox record of this new order already exists: its
				// history is taken (ids are generated; this signals a bug).
				r.cfg.Logger.WarnContext(ctx, "order create refused: outbox record exists", "aggregate_id", o.ID, "error", err.Error())
				return Order{}, false, fmt.Errorf("%w: order %s: an outbox record of it exists", ErrAlreadyExists, o.ID)
			}
			continue // Retryable: conflicts, throttling, unnamed reasons
		}
		var mismatch *types.IdempotentParameterMismatchException
		var inProgress *types.TransactionInProgressException
		var conflict *types.TransactionConflictException
		if errors.As(err, &mismatch) || errors.As(err, &inProgress) || errors.As(err, &conflict) {
			// Same ClientRequestToken as a concurrent or earlier attempt with
			// this key: read that attempt's result back.
			continue
		}
		return Order{}, false, fmt.Errorf("create order %s: %w", o.ID, err)
	}
	if key != "" {
		if first, found, err := r.replay(ctx, meta.Actor, key, meta.RequestHash); err != nil || found {
			return first, false, err
		}
	}
	if busy(lastErr) {
		return Order{}, false, fmt.Errorf("%w: order %s after %d attempts: %w", ErrUnavailable, o.ID, r.cfg.MaxAttempts, lastErr)
	}
	return Order{}, false, fmt.Errorf("%w: order %s after %d attempts: %v", ErrConcurrentRequest, o.ID, r.cfg.MaxAttempts, lastErr)
}

// busy reports whether the last error of an exhausted retry loop means
// "retry later" (HTTP 503) rather than contention (409): a cancellation
// with throttling, or whose reasons name no conflict (none or unknown
// codes).
func busy(err error) bool {
	te, ok := outbox.AsTxError(err)
	return ok && (te.Throttled() || !te.Has(outbox.ReasonTransactionConflict))
}

// Update reads the order id (consistent read), runs fn on it and commits the
// result with fn's events in one transaction whose order put is conditioned
// on the version read (optimistic concurrency). It returns the updated order.
//
// fn must change the order through its methods (Pay, Ship, Cancel): each
// event must raise the version by one, or all events share one new version.
// When DynamoDB cancels the transaction for a conflict or throttling, Update
// backs off and retries from the read, at most MaxAttempts times.
//
// A cancelled transaction (outbox.TxError; actions: 0 the order put, then
// the outbox puts) maps to one outcome, strongest first: ValidationError
// anywhere → ErrValidation; ItemCollectionSizeLimitExceeded →
// ErrUnavailable; the order put's condition → ErrVersionConflict; an outbox
// put's condition (that sequence is already recorded) → ErrVersionConflict;
// otherwise retry from the read, and when MaxAttempts run out:
// ErrUnavailable if throttling or no conflict was named, ErrVersionConflict
// for conflicts alone.
//
// Errors: ErrNotFound; ErrVersionConflict when meta.ExpectedVersion is set
// and differs, when the stored version changed between read and write, or
// when conflicts outlast the retries; ErrUnavailable; ErrValidation; fn's
// own error unchanged (e.g. ErrInvalidTransition, ErrValidation);
// outbox.ErrNoEvents when fn returns no event; other outbox.Writer errors or
// a wrapped SDK error.
func (r *Repository) Update(ctx context.Context, id string, fn UpdateFunc, meta UpdateMeta) (Order, error) {
	if err := ValidateID(id); err != nil {
		return Order{}, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	var lastErr error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := r.backoff(ctx, attempt); err != nil {
				return Order{}, err
			}
		}
		cur, found, err := r.getOrder(ctx, id)
		if err != nil {
			return Order{}, err
		}
		if !found {
			return Order{}, fmt.Errorf("%w: order %s", ErrNotFound, id)
		}
		if meta.ExpectedVersion > 0 && cur.Version != meta.ExpectedVersion {
			return Order{}, fmt.Errorf("%w: order %s is at version %d, expected %d", ErrVersionConflict, id, cur.Version, meta.ExpectedVersion)
		}
		next := cur
		events, err := fn(&next)
		if err != nil {
			return Order{}, err
		}
		if next.ID != cur.ID || next.CreatedAt != cur.CreatedAt {
			return Order{}, fmt.Errorf("order %s: update must not change the id or creation time", id)
		}
		if meta.Actor != "" {
			next.UpdatedBy = meta.Actor
		}
		tp, ts := outboxtrace.Capture(ctx) // the request's trace context, stored with the events
		envs, err := envelopes(next, cur.Version, events, outbox.Metadata{CorrelationID: meta.CorrelationID, CausationID: meta.CausationID, Actor: meta.Actor, TraceParent: tp, TraceState: ts})
		if err != nil {
			return Order{}, err
		}
		put, err := r.orderPut(next, cur.Version)
		if err != nil {
			return Order{}, err
		}
		err = r.write(ctx, []types.TransactWriteItem{put}, envs)
		if err == nil {
			r.logCommitted(ctx, "order updated", next, envs, "")
			return next, nil
		}
		lastErr = err
		if te, ok := outbox.AsTxError(err); ok {
			// Outcomes, strongest first (see outbox.TxError). A retry reads
			// the order again and builds a new transaction (new event ids),
			// so it carries a new ClientRequestToken.
			switch {
			case te.Invalid():
				return Order{}, fmt.Errorf("%w: DynamoDB refused the update of order %s: %w", ErrValidation, id, err)
			case te.CollectionFull():
				r.cfg.Logger.ErrorContext(ctx, "order update refused: item collection full", "aggregate_id", id, "error", err.Error())
				return Order{}, fmt.Errorf("%w: order %s: %w", ErrUnavailable, id, err)
			case te.ConditionFailed(0):
				return Order{}, fmt.Errorf("%w: order %s changed since version %d was read", ErrVersionConflict, id, cur.Version)
			case te.FirstConditionFailed() >= 0:
				// The outbox already holds an event at the sequence this
				// change would take: another change claimed that version.
				r.cfg.Logger.WarnContext(ctx, "order update refused: outbox record for the next sequence exists",
					"aggregate_id", id, "sequence", cur.Version+1, "error", err.Error())
				return Order{}, fmt.Errorf("%w: order %s: sequence %d is already in the outbox", ErrVersionConflict, id, cur.Version+1)
			}
			continue // Retryable: conflicts, throttling, unnamed reasons
		}
		var conflict *types.TransactionConflictException
		if errors.As(err, &conflict) {
			continue
		}
		return Order{}, fmt.Errorf("update order %s: %w", id, err)
	}
	if busy(lastErr) {
		return Order{}, fmt.Errorf("%w: order %s after %d attempts: %w", ErrUnavailable, id, r.cfg.MaxAttempts, lastErr)
	}
	return Order{}, fmt.Errorf("%w: order %s: contention outlasted %d attempts: %v", ErrVersionConflict, id, r.cfg.MaxAttempts, lastErr)
}

// replay reads the live idempotency record of key. found is true when it
// exists and has not expired; then it returns the order as first created,
// or ErrIdempotencyKeyReused when hash differs.
func (r *Repository) replay(ctx context.Context, actor, key, hash string) (Order, bool, error) {
	item, err := r.getItem(ctx, IdempotencyKey(actor, key))
	if err != nil || item == nil {
		return Order{}, false, err
	}
	var rec idempotencyItem
	if err := attributevalue.UnmarshalMap(item, &rec); err != nil {
		return Order{}, false, fmt.Errorf("decode idempotency record %q: %w", key, err)
	}
	if rec.ExpiresAt <= r.cfg.Now().Unix() {
		return Order{}, false, nil // expired, awaiting TTL deletion
	}
	if rec.RequestHash != hash {
		return Order{}, true, fmt.Errorf("%w: key %q", ErrIdempotencyKeyReused, key)
	}
	return rec.Order.order(), true, nil
}

func (r *Repository) getOrder(ctx context.Context, id string) (Order, bool, error) {
	item, err := r.getItem(ctx, OrderKey(id))
	if err != nil || item == nil {
		return Order{}, false, err
	}
	var it orderItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return Order{}, false, fmt.Errorf("decode order %s: %w", id, err)
	}
	return it.order(), true, nil
}

// getItem returns the item at key (consistent read), or nil when absent.
func (r *Repository) getItem(ctx context.Context, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	out, err := r.cfg.Client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(r.cfg.Table),
		Key:            key,
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", keyString(key), r.cfg.Table, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

func (r *Repository) write(ctx context.Context, writes []types.TransactWriteItem, envs []outbox.Envelope, opts ...outbox.WriteOption) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	return r.cfg.Writer.Write(ctx, writes, envs, opts...)
}

// backoff sleeps before retry attempt (1-based) a wait uniform in
// [0, BaseBackoff · 2^(attempt-1)] (full jitter on cenkalti/backoff, as the
// library's pkg/internal/retry, which Go keeps private to pkg/), or until
// ctx ends.
func (r *Repository) backoff(ctx context.Context, attempt int) error {
	b := &backoff.ExponentialBackOff{InitialInterval: r.cfg.BaseBackoff / 2, RandomizationFactor: 1, Multiplier: 2,
		MaxInterval: r.cfg.BaseBackoff << min(attempt, 16)}
	b.Reset()
	var d time.Duration
	for range attempt {
		d = b.NextBackOff()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (r *Repository) logCommitted(ctx context.Context, msg string, o Order, envs []outbox.Envelope, key string) {
	for _, env := range envs {
		attrs := []slog.Attr{
			slog.String("aggregate_id", o.ID),
			slog.Int64("sequence", env.Sequence),
			slog.String("event_id", env.EventID),
			slog.String("event_type", env.EventType),
		}
		if key != "" {
			attrs = append(attrs, slog.String("idempotency_key", key))
		}
		if env.Actor != "" {
			attrs = append(attrs, slog.String("actor", env.Actor))
		}
		if env.CausationID != "" {
			attrs = append(attrs, slog.String("causation_id", env.CausationID))
		}
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
	}
}
