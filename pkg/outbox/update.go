package outbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/retry"
)

// ItemReader is the DynamoDB method Writer.Update reads the aggregate with,
// with the SDK's exact signature. *dynamodb.Client satisfies it (and
// TransactWriter): give NewWriter a client that has both to use Update.
type ItemReader interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// DefaultUpdateMaxAttempts is WriterConfig.UpdateMaxAttempts's default:
// the transactions one Update sends before ErrConflict.
const DefaultUpdateMaxAttempts = 8

// DefaultVersionAttribute is UpdateInput.VersionAttribute's default.
const DefaultVersionAttribute = "version"

// Errors of Writer.Update.
var (
	// ErrConflict: every attempt of an Update lost the race for the
	// aggregate (its version changed between the read and the write, or
	// DynamoDB cancelled the transaction for a conflict or throttling) and
	// WriterConfig.UpdateMaxAttempts were spent. The error wraps the last
	// attempt's *TxError too. Nothing of the failed attempts was written.
	ErrConflict = errors.New("outbox: the aggregate kept changing under the update")
	// ErrNoItemReader: the Writer's client has no GetItem (ItemReader), so
	// Update cannot read the aggregate.
	ErrNoItemReader = errors.New("outbox: Writer.Update needs a client with GetItem (ItemReader; *dynamodb.Client has it)")
	// ErrInvalidUpdate: an UpdateInput or a Change that cannot be written
	// (a missing field, a version attribute that is not a number, a
	// Change.Item whose key differs from UpdateInput.Key).
	ErrInvalidUpdate = errors.New("outbox: invalid update")
)

// UpdateInput names the aggregate Writer.Update changes and where its state
// lives.
type UpdateInput struct {
	// AggregateType and AggregateID identify the aggregate in its events
	// (Envelope.AggregateType, AggregateID; the outbox record's key).
	// Required.
	AggregateType string
	AggregateID   string
	// Table is the table of the aggregate's item (your table). Required.
	Table string
	// Key is the aggregate item's primary key in Table (partition key and,
	// if the table has one, sort key), e.g. {"id": S "acc-1"}. Required.
	Key map[string]types.AttributeValue
	// VersionAttribute is the top-level Number attribute of the item that
	// holds the aggregate's version: the sequence of its last event.
	// Default DefaultVersionAttribute ("version"). An item without it is at
	// version 0. The name is taken literally (a dot in it is part of the
	// name, not a document path); a name with [ or ] is refused
	// (ErrInvalidUpdate).
	VersionAttribute string
	// Metadata goes onto every envelope of the change (correlation,
	// causation, actor, trace context).
	Metadata Metadata
}

// Current is the aggregate as Update read it, with a consistent read.
type Current struct {
	// Version is the aggregate's version: the sequence of its last event;
	// 0 when the item does not exist yet (a create) or has no version
	// attribute.
	Version int64
	// Item is the aggregate's item, nil when it does not exist.
	Item map[string]types.AttributeValue
}

// Exists reports whether the aggregate's item exists.
func (c Current) Exists() bool { return c.Item != nil }

// Change is what the caller's change function returns: the aggregate's new
// state, other business writes of the same transaction, and the events that
// announce the change.
type Change struct {
	// Item is the aggregate's new item, put in place of the one read (Key's
	// attributes are added if missing; VersionAttribute is set by Update to
	// the new version). Nil keeps the item as it is and only moves its
	// version (an Update action; on a create, an item of Key and version).
	Item map[string]types.AttributeValue
	// Writes are other business writes committed in the same transaction
	// (other items or tables: not the aggregate's own item). Their
	// conditions are the caller's: a condition that fails is returned as
	// the *TxError, not retried.
	Writes []types.TransactWriteItem
	// Events are what happened, in order; at least one (ErrNoEvents). Event
	// i gets sequence Current.Version+1+i, and the aggregate's new version
	// is Current.Version+len(Events).
	Events []Event
}

// UpdateResult is what a successful Update wrote.
type UpdateResult struct {
	// Version is the aggregate's version after the change.
	Version int64
	// Events are the envelopes written, with their sequences
	// (Version-len(Events)+1 .. Version).
	Events []Envelope
	// Attempts is the number of transactions sent (1 without a conflict).
	Attempts int
}

// ChangeFunc computes a change from the aggregate as read. It may run more
// than once for one Update (once per attempt, each time on a fresh read):
// it must not have effects of its own outside what it returns. An error it
// returns ends Update with that error, and nothing is written.
type ChangeFunc func(ctx context.Context, cur Current) (Change, error)

// Update is the versioned write of an aggregate and its events: it reads
// the aggregate's item (GetItem, ConsistentRead), runs change on it, and
// commits in ONE TransactWriteItems the aggregate's new item with
// VersionAttribute = version+n, change.Writes, and one outbox record per
// event with sequences version+1 .. version+n. The aggregate write is
// conditioned on the version still being what was read (attribute_not_exists
// of VersionAttribute at version 0: a create is the same path), and each
// outbox record on not existing. The sequence of an event and the version of
// its aggregate are the same number, written together: an aggregate's
// sequences are gap-free and unique by construction, which is what an
// ordered consumer's gate needs (docs/ORDERING.md).
//
// Transaction actions, for a *TxError's reasons: 0 the aggregate's item,
// 1..len(Writes) the Writes, then the outbox records, then (multi-Region
// mode) the aggregate's home action: the home item's Put when the change
// creates it (version 0), else a ConditionCheck that its home is
// WriterConfig.Region (see Write).
//
// A conflict — the aggregate action cancelled with ConditionalCheckFailed
// (another writer moved the version), or a cancellation whose reasons are
// all retryable (TransactionConflict, throttling) — re-reads the aggregate
// and runs change again, after a backoff (WriterConfig.UpdateRetryBase,
// UpdateRetryMax, full jitter), up to WriterConfig.UpdateMaxAttempts
// transactions; the decision reads the cancellation reasons (TxError), never
// the message.
//
// Errors:
//   - change's own error, unchanged; nothing is written;
//   - ErrInvalidUpdate (wrapped) for a missing UpdateInput field, a
//     VersionAttribute name with [ or ], a stored version that is not a
//     Number from 0 to MaxSafeInteger, or a Change.Item whose key differs;
//   - Write's pre-send errors (ErrNoEvents, ErrInvalidEnvelope,
//     ErrEntryTooLarge, ErrTransactionTooLarge, ErrDuplicateAction, …):
//     DynamoDB's limits are checked with CheckTransaction before sending;
//   - ErrConflict wrapping the last *TxError once the attempts are spent;
//   - a *NotHomeError (errors.Is ErrNotHomeRegion) in multi-Region mode
//     when the aggregate's home is another Region or it has none: final,
//     never retried, nothing written;
//   - a *TxError whose failed condition is one of Writes' or an outbox
//     record's (not retried: repeating cannot help), or ValidationError;
//   - ErrNoItemReader when the Writer's client has no GetItem;
//   - the SDK's error of GetItem or TransactWriteItems, or ctx's error.
func (w *Writer) Update(ctx context.Context, in UpdateInput, change ChangeFunc) (UpdateResult, error) {
	reader, ok := w.client.(ItemReader)
	if !ok {
		return UpdateResult{}, ErrNoItemReader
	}
	if in.VersionAttribute == "" {
		in.VersionAttribute = DefaultVersionAttribute
	}
	switch {
	case in.AggregateType == "" || in.AggregateID == "":
		return UpdateResult{}, fmt.Errorf("%w: AggregateType and AggregateID are required", ErrInvalidUpdate)
	case in.Table == "":
		return UpdateResult{}, fmt.Errorf("%w: Table is required", ErrInvalidUpdate)
	case len(in.Key) == 0:
		return UpdateResult{}, fmt.Errorf("%w: Key is required", ErrInvalidUpdate)
	case in.Key[in.VersionAttribute] != nil:
		return UpdateResult{}, fmt.Errorf("%w: VersionAttribute %q is a key attribute", ErrInvalidUpdate, in.VersionAttribute)
	case strings.ContainsAny(in.VersionAttribute, "[]"):
		// The expression builder reads brackets as a list index even in
		// a literal name: the condition would test another attribute
		// than the one read and written.
		return UpdateResult{}, fmt.Errorf("%w: VersionAttribute %q holds a bracket; name a top-level attribute without [ ]", ErrInvalidUpdate, in.VersionAttribute)
	}
	keyNames := make([]string, 0, len(in.Key))
	for n := range in.Key {
		keyNames = append(keyNames, n)
	}
	sort.Strings(keyNames)
	keys := []TableKeys{{Table: in.Table, Names: keyNames}}
	wait := retry.New(w.cfg.UpdateRetryBase, w.cfg.UpdateRetryMax)
	for attempt := 1; ; attempt++ {
		cur, err := w.readAggregate(ctx, reader, in)
		if err != nil {
			return UpdateResult{}, err
		}
		ch, err := change(ctx, cur)
		if err != nil {
			return UpdateResult{}, err
		}
		aggWrite, envs, err := w.versionedWrite(in, cur, ch)
		if err != nil {
			return UpdateResult{}, err
		}
		tx, homes, err := w.build(append([]types.TransactWriteItem{aggWrite}, ch.Writes...), envs, keys)
		if err != nil {
			return UpdateResult{}, err
		}
		_, err = w.client.TransactWriteItems(ctx, tx)
		if err == nil {
			return UpdateResult{Version: cur.Version + int64(len(envs)), Events: envs, Attempts: attempt}, nil
		}
		err = translateTxError(err, homes...)
		if errors.Is(err, ErrNotHomeRegion) {
			// Final: another Region is the aggregate's home; reading
			// again cannot change that.
			return UpdateResult{}, err
		}
		te, ok := AsTxError(err)
		if !ok {
			return UpdateResult{}, err
		}
		// The version moved (action 0's condition), or nothing but
		// contention and throttling: read again and rerun the change.
		first := te.FirstConditionFailed()
		conflict := (first == 0 && !te.Invalid() && !te.CollectionFull()) || te.Retryable()
		if !conflict {
			return UpdateResult{}, err
		}
		if attempt >= w.cfg.UpdateMaxAttempts {
			return UpdateResult{}, fmt.Errorf("%w: %s %s after %d attempts: %w", ErrConflict, in.AggregateType, in.AggregateID, attempt, err)
		}
		if err := retry.Sleep(ctx, wait.NextBackOff()); err != nil {
			return UpdateResult{}, err
		}
	}
}

// readAggregate reads the aggregate's item with a consistent read.
func (w *Writer) readAggregate(ctx context.Context, reader ItemReader, in UpdateInput) (Current, error) {
	out, err := reader.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(in.Table), Key: in.Key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Current{}, fmt.Errorf("outbox: read %s %s: %w", in.AggregateType, in.AggregateID, err)
	}
	if out.Item == nil {
		return Current{}, nil
	}
	cur := Current{Item: out.Item}
	switch v := out.Item[in.VersionAttribute].(type) {
	case nil:
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || n < 0 || n > MaxSafeInteger {
			return Current{}, fmt.Errorf("%w: %s %s: %s = %q is not a version (a whole number 0..MaxSafeInteger)", ErrInvalidUpdate, in.AggregateType, in.AggregateID, in.VersionAttribute, v.Value)
		}
		cur.Version = n
	default:
		return Current{}, fmt.Errorf("%w: %s %s: %s is a %T, not a Number", ErrInvalidUpdate, in.AggregateType, in.AggregateID, in.VersionAttribute, v)
	}
	return cur, nil
}

// versionedWrite returns the aggregate's write, conditioned on the version
// read, and the change's envelopes with their sequences.
func (w *Writer) versionedWrite(in UpdateInput, cur Current, ch Change) (types.TransactWriteItem, []Envelope, error) {
	if len(ch.Events) == 0 {
		return types.TransactWriteItem{}, nil, ErrNoEvents
	}
	envs := make([]Envelope, len(ch.Events))
	for i, ev := range ch.Events {
		env, err := NewEnvelope(Aggregate{Type: in.AggregateType, ID: in.AggregateID, Sequence: cur.Version + 1 + int64(i)}, ev, in.Metadata)
		if err != nil {
			return types.TransactWriteItem{}, nil, err
		}
		envs[i] = env
	}
	next := &types.AttributeValueMemberN{Value: strconv.FormatInt(cur.Version+int64(len(envs)), 10)}
	// A literal, top-level name: the item is read and put with
	// VersionAttribute as a top-level attribute, so a dot in it must not
	// become a document path in the condition and the update.
	version := expression.NameNoDotSplit(in.VersionAttribute)
	cond := expression.AttributeNotExists(version)
	if cur.Version > 0 {
		cond = expression.Equal(version, expression.Value(cur.Version))
	}
	if ch.Item == nil {
		expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(expression.Set(version, expression.Value(next))).Build()
		if err != nil {
			return types.TransactWriteItem{}, nil, fmt.Errorf("outbox: build version update: %w", err)
		}
		return types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(in.Table),
			Key:                       in.Key,
			UpdateExpression:          expr.Update(),
			ConditionExpression:       expr.Condition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		}}, envs, nil
	}
	item := maps.Clone(ch.Item)
	for n, v := range in.Key {
		if got, ok := item[n]; ok && scalarString(got) != scalarString(v) {
			return types.TransactWriteItem{}, nil, fmt.Errorf("%w: Change.Item's %s differs from UpdateInput.Key", ErrInvalidUpdate, n)
		}
		item[n] = v
	}
	item[in.VersionAttribute] = next
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return types.TransactWriteItem{}, nil, fmt.Errorf("outbox: build version condition: %w", err)
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(in.Table),
		Item:                      item,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}}, envs, nil
}
