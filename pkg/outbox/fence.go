package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Fencing by refusal (issue 34 item 5, docs/MULTI-REGION.md choice 5). In
// multi-Region mode (WriterConfig.Region set) every aggregate has a home
// Region, named by its home item (HomeKey, AttrHomeRegion) in the outbox
// table. The transaction of an aggregate's first event (sequence 1) writes
// the home item; every later transaction carries a ConditionCheck that the
// home item names this Region. Anywhere else the write is refused with a
// *NotHomeError, so while a Region is down its aggregates take no writes in
// the survivor, and an ordered consumer's gate never meets two different
// events at one sequence.
//
// Conditions are evaluated in the Region of the write only (DynamoDB
// developer guide, global tables, How it works): two Regions creating the
// same aggregate id at the same moment both pass. Aggregate ids must be
// unique across Regions (generated ids are); the fence protects every
// aggregate once its home item has replicated.

// MaxPartitionKeyBytes is DynamoDB's limit on a partition key value: 2,048
// bytes (DynamoDB developer guide, Service, account, and table quotas:
// "Partition key length"). The home key of an aggregate
// ("home#<type>#<id>") must fit.
const MaxPartitionKeyBytes = 2048

// MaxSortKeyBytes is DynamoDB's limit on a sort key value: 1,024 bytes
// (same quotas page: "Sort key length"). A request naming a longer key is
// refused whole (ValidationException), a BatchGetItem of 100 keys too.
const MaxSortKeyBytes = 1024

// MaxRegionEventIDBytes bounds an event id in multi-Region mode: a
// survivor's takeover mark on the record is keyed "<survivor>#<event_id>"
// (reconciler.MarkKey), a sort key of at most MaxSortKeyBytes with a
// Region name of up to config.MaxRegionNameLen bytes. A longer id could
// never be marked, so no survivor could take the record over. Generated
// ids (UUIDs, 36 bytes) are far below it.
const MaxRegionEventIDBytes = MaxSortKeyBytes - 1 - config.MaxRegionNameLen

// Errors of multi-Region mode.
var (
	// ErrNotHomeRegion: the aggregate's home Region is not this Writer's
	// Region (or the aggregate has no home item yet), so the write was
	// refused and nothing was written. It is final: repeating the write
	// in this Region cannot succeed. errors.As the error into a
	// *NotHomeError for the aggregate and its home.
	ErrNotHomeRegion = errors.New("outbox: the aggregate's home is another Region")
	// ErrKeyTooLong: an aggregate's home key (HomeKey) would exceed
	// MaxPartitionKeyBytes, so its writes cannot be fenced, or an event id
	// exceeds MaxRegionEventIDBytes, so no takeover mark could name it
	// (multi-Region mode). Returned before anything is sent.
	ErrKeyTooLong = errors.New("outbox: key exceeds DynamoDB's key length limit")
	// ErrNoRegion: Writer.ClaimHome was called on a Writer in
	// single-Region mode (WriterConfig.Region empty).
	ErrNoRegion = errors.New("outbox: the Writer has no Region (single-Region mode)")
)

// NotHomeError is a write refused because the aggregate's home is not the
// writer's Region. errors.Is(err, ErrNotHomeRegion) holds for it. It does
// not wrap the transaction's *TxError: the refusal is the outcome, not a
// condition a caller may retry or read as a conflict.
type NotHomeError struct {
	// AggregateType and AggregateID name the aggregate.
	AggregateType string
	AggregateID   string
	// Home is the Region the aggregate's home item names, or "" when the
	// aggregate has no home item (it was created before multi-Region mode,
	// or its home item has not replicated here yet): then claim it with
	// Writer.ClaimHome in the Region that is to write it. It is also ""
	// when DynamoDB returned no cancellation item (a server that lists the
	// reasons only in its message).
	Home string
	// Here is the Region of the refused write (WriterConfig.Region).
	Here string
}

func (e *NotHomeError) Error() string {
	if e.Home == "" {
		return fmt.Sprintf("outbox: %s %s has no home Region item, so %s refuses to write it: claim it with Writer.ClaimHome in the Region that is to write it (an aggregate created before multi-Region mode), or wait for its home item to replicate",
			e.AggregateType, e.AggregateID, e.Here)
	}
	return fmt.Sprintf("outbox: %s %s is homed in %s, not %s: write it in %s", e.AggregateType, e.AggregateID, e.Home, e.Here, e.Home)
}

// Unwrap returns ErrNotHomeRegion.
func (e *NotHomeError) Unwrap() error { return ErrNotHomeRegion }

// Region returns the Writer's Region (WriterConfig.Region), "" in
// single-Region mode.
func (w *Writer) Region() string { return w.cfg.Region }

// homeAction is one home item action of a transaction: its index in
// TransactItems, the aggregate it fences, and the writer's Region.
type homeAction struct {
	index         int
	aggregateType string
	aggregateID   string
	region        string
}

// aggregateStart is an aggregate of a change and the lowest sequence of its
// events in it, with the occurrence time of that event.
type aggregateStart struct {
	typ, id  string
	sequence int64
	at       int64 // Unix epoch milliseconds
}

// aggregateStarts returns the aggregates of events in order of first
// appearance, each with its lowest sequence in the change.
func aggregateStarts(events []Envelope) []aggregateStart {
	var out []aggregateStart
	at := map[[2]string]int{}
	for _, e := range events {
		k := [2]string{e.AggregateType, e.AggregateID}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, aggregateStart{typ: e.AggregateType, id: e.AggregateID, sequence: e.Sequence, at: e.OccurredAt.UnixMilli()})
			continue
		}
		if e.Sequence < out[i].sequence {
			out[i].sequence, out[i].at = e.Sequence, e.OccurredAt.UnixMilli()
		}
	}
	return out
}

// checkHomeKey returns ErrKeyTooLong (wrapped) when the aggregate's home key
// exceeds MaxPartitionKeyBytes.
func checkHomeKey(aggregateType, aggregateID string) error {
	if n := len(HomeKey(aggregateType, aggregateID).PK); n > MaxPartitionKeyBytes {
		return fmt.Errorf("%w: the home key of %s %.40s… is %d bytes, limit %d: shorten the aggregate type or id", ErrKeyTooLong, aggregateType, aggregateID, n, MaxPartitionKeyBytes)
	}
	return nil
}

// checkEventID returns ErrKeyTooLong (wrapped) when an event id is longer
// than MaxRegionEventIDBytes (multi-Region mode only).
func checkEventID(env Envelope) error {
	if n := len(env.EventID); n > MaxRegionEventIDBytes {
		return fmt.Errorf("%w: the event id of %s %.40s… is %d bytes, limit %d in multi-Region mode (a takeover mark's sort key holds it)", ErrKeyTooLong, env.EventType, env.EventID, n, MaxRegionEventIDBytes)
	}
	return nil
}

// homeItem returns the home item naming region as the aggregate's home.
func homeItem(aggregateType, aggregateID, region string, createdAtMs int64) map[string]types.AttributeValue {
	item := HomeKey(aggregateType, aggregateID).AttributeValues()
	item[AttrHomeRegion] = &types.AttributeValueMemberS{Value: region}
	item[AttrAggregateType] = &types.AttributeValueMemberS{Value: aggregateType}
	item[AttrAggregateID] = &types.AttributeValueMemberS{Value: aggregateID}
	item[AttrCreatedAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(createdAtMs, 10)}
	return item
}

// homeActions returns the fence of a change's events in multi-Region mode,
// to append after the outbox records (first is the index of the first):
// per aggregate, when its lowest sequence in the change is 1 (its creation)
// a Put of its home item naming w's Region, conditioned on the item not
// existing or already naming this Region (a home claimed with ClaimHome,
// or an aggregate created again after its records expired); otherwise a
// ConditionCheck that the home item names this Region. Both return the
// stored item when their condition fails (ReturnValuesOnConditionCheckFailure
// ALL_OLD), for the *NotHomeError's Home. It returns nothing when the
// Writer has no Region or the build is unfenced (the outbox_unfenced tag).
func (w *Writer) homeActions(events []Envelope, first int) ([]types.TransactWriteItem, []homeAction, error) {
	region := w.cfg.Region
	if !fenced || region == "" {
		return nil, nil, nil
	}
	here := expression.Equal(expression.Name(AttrHomeRegion), expression.Value(region))
	create, err := expression.NewBuilder().WithCondition(
		expression.Or(expression.AttributeNotExists(expression.Name(AttrPK)), here)).Build()
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: build home condition: %w", err)
	}
	check, err := expression.NewBuilder().WithCondition(here).Build()
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: build home condition: %w", err)
	}
	table := aws.String(w.cfg.Table)
	var items []types.TransactWriteItem
	var homes []homeAction
	for _, a := range aggregateStarts(events) {
		if err := checkHomeKey(a.typ, a.id); err != nil {
			return nil, nil, err
		}
		homes = append(homes, homeAction{index: first + len(items), aggregateType: a.typ, aggregateID: a.id, region: region})
		if a.sequence == 1 {
			items = append(items, types.TransactWriteItem{Put: &types.Put{
				TableName:                           table,
				Item:                                homeItem(a.typ, a.id, region, a.at),
				ConditionExpression:                 create.Condition(),
				ExpressionAttributeNames:            create.Names(),
				ExpressionAttributeValues:           create.Values(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}})
			continue
		}
		items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName:                           table,
			Key:                                 HomeKey(a.typ, a.id).AttributeValues(),
			ConditionExpression:                 check.Condition(),
			ExpressionAttributeNames:            check.Names(),
			ExpressionAttributeValues:           check.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
	}
	return items, homes, nil
}

// notHome returns the *NotHomeError of the first home action of te that
// failed its condition while its stored item (te.Items) names another
// Region or none, or nil.
func notHome(te *TxError, homes []homeAction) error {
	for _, h := range homes {
		if !te.ConditionFailed(h.index) {
			continue
		}
		home := homeRegionOf(te.Item(h.index))
		if home == h.region {
			// The stored home is this Region (a race with this Region's
			// own write): not a refusal; the caller's usual handling.
			continue
		}
		return &NotHomeError{AggregateType: h.aggregateType, AggregateID: h.aggregateID, Home: home, Here: h.region}
	}
	return nil
}

// homeRegionOf returns the AttrHomeRegion of a stored home item, or "".
func homeRegionOf(item map[string]types.AttributeValue) string {
	if s, ok := item[AttrHomeRegion].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// ClaimHome makes this Writer's Region the home of an aggregate that has no
// home item: one created before multi-Region mode, whose every write is
// refused (a *NotHomeError with Home "") until it is claimed. It writes the
// home item (HomeKey; AttrHomeRegion = WriterConfig.Region) with a
// TransactWriteItems of one Put conditioned on attribute_not_exists(pk),
// so it needs only dynamodb:PutItem on the outbox table.
//
// Claim an aggregate in one Region only, after the switch to multi-Region
// mode has reached every Region: the condition is evaluated in this Region
// alone, so claims made in two Regions before either replicated would both
// pass, and the later one would win under last-writer-wins.
//
// It returns nil when the home item was written or already names this
// Region; a *NotHomeError (errors.Is ErrNotHomeRegion) when it names
// another Region; ErrNoRegion in single-Region mode; an error for an empty
// aggregate type or id; ErrKeyTooLong (wrapped) when the home key exceeds
// MaxPartitionKeyBytes; otherwise a *TxError or the SDK's error.
func (w *Writer) ClaimHome(ctx context.Context, aggregateType, aggregateID string) error {
	region := w.cfg.Region
	switch {
	case region == "":
		return ErrNoRegion
	case aggregateType == "" || aggregateID == "":
		return errors.New("outbox: ClaimHome needs an aggregate type and id")
	}
	if err := checkHomeKey(aggregateType, aggregateID); err != nil {
		return err
	}
	cond, err := expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return fmt.Errorf("outbox: build home condition: %w", err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{
		TableName:                           aws.String(w.cfg.Table),
		Item:                                homeItem(aggregateType, aggregateID, region, time.Now().UnixMilli()),
		ConditionExpression:                 cond.Condition(),
		ExpressionAttributeNames:            cond.Names(),
		ExpressionAttributeValues:           cond.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}}
	_, err = w.client.TransactWriteItems(ctx, in)
	if err == nil {
		return nil
	}
	h := homeAction{index: 0, aggregateType: aggregateType, aggregateID: aggregateID, region: region}
	err = translateTxError(err, h)
	if te, ok := AsTxError(err); ok && te.ConditionFailed(0) && homeRegionOf(te.Item(0)) == region {
		return nil // already this Region's
	}
	if err != nil {
		return fmt.Errorf("outbox: claim the home of %s %s: %w", aggregateType, aggregateID, err)
	}
	return nil
}
