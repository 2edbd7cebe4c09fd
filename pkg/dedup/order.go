package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Attribute names of an ordering item ("<consumer>#SEQ#<aggregate_type>#<aggregate_id>"),
// kept in the dedup table next to the markers (promise I4).
const (
	AttrLastSequence  = "last_sequence"  // N: the last applied sequence of the aggregate
	AttrLastEventID   = "last_event_id"  // S: the event that set it
	AttrAggregateType = "aggregate_type" // S
	// AttrBuffered (NS) holds the sequences of the aggregate waiting in the
	// resequencer buffer; DynamoDB removes the attribute when its last
	// member is deleted (sets cannot be empty), so its absence means
	// "nothing buffered".
	AttrBuffered = "buffered"
)

// SequenceInfix separates the consumer from the aggregate in an ordering
// item's key: "<consumer>#SEQ#<aggregate_type>#<aggregate_id>". Event ids
// are UUIDs, so an ordering key never equals a marker key.
const SequenceInfix = "#SEQ#"

// ErrSequenceGap reports an event whose sequence is more than one past the
// aggregate's last applied sequence: an earlier event has not been applied
// yet. Nothing was written; the event must be delivered again later (see
// ConsumerConfig.Hold). *GapError values wrap it.
var ErrSequenceGap = errors.New("dedup: sequence gap")

// ReasonSequenceGap is the dead-letter reason of an event whose gap did not
// close within ConsumerConfig.GapMaxReceives receives.
const ReasonSequenceGap = "sequence_gap"

// GapError is returned by an ordered Apply for an event that is not next:
// sequences Last+1..Sequence-1 of the aggregate have not been applied by
// this consumer. It wraps ErrSequenceGap and carries no *outbox.TxError.
type GapError struct {
	Consumer      string
	AggregateType string
	AggregateID   string
	// Last is the last applied sequence (0: none yet).
	Last int64
	// Sequence is the refused event's sequence (> Last+1).
	Sequence int64
	EventID  string
}

// Missing returns the inclusive range of sequences the event waits for.
func (e *GapError) Missing() (from, to int64) { return e.Last + 1, e.Sequence - 1 }

func (e *GapError) Error() string {
	from, to := e.Missing()
	return fmt.Sprintf("dedup: %s: event %s (sequence %d) waits for sequences %d..%d of %s %s",
		e.Consumer, e.EventID, e.Sequence, from, to, e.AggregateType, e.AggregateID)
}

func (e *GapError) Unwrap() error { return ErrSequenceGap }

// AsGapError returns the *GapError in err's chain, if any.
func AsGapError(err error) (*GapError, bool) {
	var g *GapError
	ok := errors.As(err, &g)
	return g, ok
}

// ItemGetter is the DynamoDB read an ordered Applier makes when its gate's
// condition fails (to tell a duplicate from an early event), with the SDK's
// exact signature. Implementations must be safe for concurrent use.
type ItemGetter interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// SequenceKey returns the ordering item's partition key value of an
// aggregate for a consumer: "<consumer>#SEQ#<aggregate_type>#<aggregate_id>".
func SequenceKey(consumer, aggregateType, aggregateID string) string {
	return consumer + SequenceInfix + aggregateType + "#" + aggregateID
}

// gateMode is how an ordered Apply conditions the ordering gate.
type gateMode int

const (
	// gateFast: the gate is exactly one short of the event and nothing is
	// buffered for the aggregate (attribute_not_exists(buffered)): the
	// event arrived in order and no successor waits. One transaction, no
	// read: order costs nothing when events arrive in order.
	gateFast gateMode = iota
	// gateBuffered: the gate is exactly one short of the event while
	// successors wait in the resequencer buffer; the update also removes
	// the event's own sequence from the buffered set (a no-op unless the
	// event itself was buffered) and, after the commit, the buffered
	// successors are drained.
	gateBuffered
)

// Gate returns the ordering item's Update for env (the last action of an
// ordered Apply transaction): SET last_sequence = env.Sequence, guarded by
// "no last_sequence yet" when env.Sequence is 1 and by last_sequence =
// env.Sequence-1 otherwise, and by attribute_not_exists(buffered): the
// fast path, taken when no successor of the aggregate waits in the
// resequencer buffer (Resequencer). The item never expires: it must
// outlive every later event of the aggregate.
func (a *Applier) Gate(env outbox.Envelope, now time.Time) (types.TransactWriteItem, error) {
	return a.gate(env, now, gateFast)
}

func (a *Applier) gate(env outbox.Envelope, now time.Time, mode gateMode) (types.TransactWriteItem, error) {
	last := expression.Name(AttrLastSequence)
	cond := expression.AttributeNotExists(last)
	if env.Sequence > 1 {
		cond = last.Equal(expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence-1, 10)}))
	}
	upd := expression.
		Set(last, expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(env.Sequence, 10)})).
		Set(expression.Name(AttrLastEventID), expression.Value(env.EventID)).
		Set(expression.Name(AttrConsumer), expression.Value(a.cfg.Consumer)).
		Set(expression.Name(AttrAggregateType), expression.Value(env.AggregateType)).
		Set(expression.Name(AttrAggregateID), expression.Value(env.AggregateID)).
		Set(expression.Name(AttrAppliedAt), expression.Value(now.UTC().Format(time.RFC3339Nano)))
	switch mode {
	case gateFast:
		cond = cond.And(expression.AttributeNotExists(expression.Name(AttrBuffered)))
	case gateBuffered:
		upd = upd.Delete(expression.Name(AttrBuffered), expression.Value(seqSet(env.Sequence)))
	}
	e, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("dedup: build ordering gate: %w", err)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(a.cfg.Table),
		Key:                       a.seqKey(env.AggregateType, env.AggregateID),
		UpdateExpression:          e.Update(),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	}}, nil
}

// seqSet is a one-element number set, for ADD / DELETE on AttrBuffered.
func seqSet(seq int64) *types.AttributeValueMemberNS {
	return &types.AttributeValueMemberNS{Value: []string{strconv.FormatInt(seq, 10)}}
}

func (a *Applier) seqKey(aggregateType, aggregateID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: SequenceKey(a.cfg.Consumer, aggregateType, aggregateID)}}
}

// GateState is what an ordering item says about one aggregate for one
// consumer: the last applied sequence and the sequences waiting in the
// resequencer buffer.
type GateState struct {
	// Last is the last applied sequence (0: none yet, or no starting point).
	Last int64
	// Buffered holds the sequences waiting in the buffer, ascending.
	Buffered []int64
}

// IsBuffered reports whether seq waits in the buffer.
func (s GateState) IsBuffered(seq int64) bool { return slices.Contains(s.Buffered, seq) }

// LastSequence returns the last sequence of the aggregate this consumer
// applied (0 when none), with a strongly consistent GetItem bounded by
// CallTimeout. It returns an error when the Applier is not ordered, the
// read fails or the item's last_sequence is not a number.
func (a *Applier) LastSequence(ctx context.Context, aggregateType, aggregateID string) (int64, error) {
	st, err := a.ReadGate(ctx, aggregateType, aggregateID)
	return st.Last, err
}

// ReadGate returns the aggregate's ordering state for this consumer with a
// strongly consistent GetItem bounded by CallTimeout (a missing item is the
// zero GateState). It returns an error when the Applier is not ordered, the
// read fails, or last_sequence or buffered hold something other than a
// number and a number set.
func (a *Applier) ReadGate(ctx context.Context, aggregateType, aggregateID string) (GateState, error) {
	if a.getter == nil {
		return GateState{}, errors.New("dedup: ordering state read on an unordered Applier")
	}
	if a.cfg.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.CallTimeout)
		defer cancel()
	}
	key := SequenceKey(a.cfg.Consumer, aggregateType, aggregateID)
	out, err := a.getter.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(a.cfg.Table),
		Key:            a.seqKey(aggregateType, aggregateID),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return GateState{}, fmt.Errorf("dedup: read %s: %w", key, err)
	}
	if out == nil || out.Item == nil {
		return GateState{}, nil
	}
	return decodeGate(key, out.Item)
}

func decodeGate(key string, item map[string]types.AttributeValue) (GateState, error) {
	var st GateState
	switch v := item[AttrLastSequence].(type) {
	case nil:
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return st, fmt.Errorf("dedup: %s %s %q: %w", key, AttrLastSequence, v.Value, err)
		}
		st.Last = n
	default:
		return st, fmt.Errorf("dedup: %s has no numeric %s", key, AttrLastSequence)
	}
	switch v := item[AttrBuffered].(type) {
	case nil:
	case *types.AttributeValueMemberNS:
		for _, s := range v.Value {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return st, fmt.Errorf("dedup: %s %s member %q: %w", key, AttrBuffered, s, err)
			}
			st.Buffered = append(st.Buffered, n)
		}
		slices.Sort(st.Buffered)
	default:
		return st, fmt.Errorf("dedup: %s %s is not a number set", key, AttrBuffered)
	}
	return st, nil
}

func (a *Applier) gapError(env outbox.Envelope, last int64) *GapError {
	return &GapError{Consumer: a.cfg.Consumer, AggregateType: env.AggregateType, AggregateID: env.AggregateID,
		Last: last, Sequence: env.Sequence, EventID: env.EventID}
}
