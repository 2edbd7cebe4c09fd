package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// HashJSON returns the hex SHA-256 of v's JSON encoding: a payload hash for
// Do and WithPayloadHash. encoding/json sorts map keys, so equal values hash
// equally. Hash only the fields that define the request: an EventBridge
// event's "id" and "time" change when the same outbox event is re-sent, so
// hashing the whole event would refuse a legitimate redelivery.
func HashJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("idempotency: hash payload: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Option configures Wrap for handlers taking In.
type Option[In any] func(*wrapOptions[In])

type wrapOptions[In any] struct {
	hash         func(In) (string, error)
	allowMissing bool
}

// WithPayloadHash sets the payload hash function (default: PayloadHash,
// what identifies the request for each Lambda event source). Return a hash
// of the fields that identify the request, e.g. HashJSON of an event's
// detail (Powertools: payload_validation_jmespath).
func WithPayloadHash[In any](f func(In) (string, error)) Option[In] {
	return func(o *wrapOptions[In]) { o.hash = f }
}

// WithoutPayloadValidation turns payload validation off: a repeat with the
// same key replays the stored result whatever its payload.
func WithoutPayloadValidation[In any]() Option[In] {
	return func(o *wrapOptions[In]) { o.hash = nil }
}

// AllowMissingKey runs the handler without idempotency when the key
// function returns "" (counted in Metrics.NoKey), instead of failing with
// ErrNoKey (Powertools: raise_on_no_idempotency_key=False).
func AllowMissingKey[In any]() Option[In] {
	return func(o *wrapOptions[In]) { o.allowMissing = true }
}

// Wrap returns fn made idempotent with s: the shape of a Lambda handler
// (lambda.Start(Wrap(...))), usable with any event type.
//
// keyFn extracts the idempotency key from the input (for outbox consumers:
// the envelope's event_id; for an API: the Idempotency-Key header). The
// payload hash checked against the key's record is PayloadHash of the input
// unless WithPayloadHash or WithoutPayloadValidation says otherwise: the
// body of an SQS message, the source, detail-type and detail of an
// EventBridge event (also when an SQS body, an SNS message or an HTTP body
// carries it), the method, path, query and body of an HTTP request — never
// a delivery's receipt handle, receive count, ids or times, nor an
// EventBridge envelope's id, time or replay-name. An empty
// key fails with ErrNoKey unless AllowMissingKey is given; a keyFn error is
// returned wrapped with ErrNoKey. The result Out is stored as JSON, so it
// must round-trip through encoding/json; repeats return the decoded stored
// value. Errors are those of Store.Do; with ErrRecordTakenOver and
// ErrResultTooLarge the returned Out is this run's result.
func Wrap[In, Out any](s *Store, keyFn func(In) (string, error), fn func(context.Context, In) (Out, error), opts ...Option[In]) func(context.Context, In) (Out, error) {
	o := wrapOptions[In]{hash: func(in In) (string, error) { return PayloadHash(in) }}
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, in In) (Out, error) {
		var zero Out
		if s == nil || keyFn == nil || fn == nil {
			return zero, errors.New("idempotency: Wrap needs a store, a key function and a handler")
		}
		key, err := keyFn(in)
		if err != nil {
			return zero, fmt.Errorf("%w: %w", ErrNoKey, err)
		}
		if key == "" {
			if o.allowMissing {
				s.n.noKey.Add(1)
				return fn(ctx, in)
			}
			return zero, ErrNoKey
		}
		hash := ""
		if o.hash != nil {
			if hash, err = o.hash(in); err != nil {
				return zero, err
			}
		}
		res, err := s.Do(ctx, key, hash, func(ctx context.Context) ([]byte, error) {
			out, err := fn(ctx, in)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(out)
			if err != nil {
				return nil, fmt.Errorf("idempotency: encode result of %s: %w", key, err)
			}
			return b, nil
		})
		var out Out
		if len(res.Data) > 0 {
			if derr := json.Unmarshal(res.Data, &out); derr != nil && err == nil {
				return zero, fmt.Errorf("idempotency: decode stored result of %s: %w", key, derr)
			}
		}
		return out, err
	}
}
