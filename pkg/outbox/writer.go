package outbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/internal/sqsmsg"
)

// TransactWriter is the one DynamoDB method the Writer calls, with the SDK's
// exact signature, so *dynamodb.Client satisfies it and tests can fake it.
type TransactWriter interface {
	TransactWriteItems(ctx context.Context, params *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// DynamoDB transaction limits. Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
const (
	MaxTransactionActions = 100
	MaxTransactionBytes   = 4 * 1024 * 1024
	// MaxItemBytes is DynamoDB's item size limit (400 KB).
	MaxItemBytes = 400 * 1024
)

// Errors returned by Writer.Write before anything is sent.
var (
	// ErrNoEvents: a change must record at least one event.
	ErrNoEvents = errors.New("outbox: a change must record at least one event")
	// ErrEntryTooLarge: an event's EventBridge entry exceeds MaxEntryBytes.
	ErrEntryTooLarge = errors.New("outbox: event entry exceeds the EventBridge size limit")
	// ErrTransactionTooLarge: more than 100 actions, more than 4 MB, or an
	// item over 400 KB.
	ErrTransactionTooLarge = errors.New("outbox: transaction exceeds DynamoDB limits")
	// ErrDuplicateAction: two actions in one transaction touch the same item.
	ErrDuplicateAction = errors.New("outbox: two actions in one transaction target the same item")
	// ErrUndeliverableText: an event's detail holds characters Amazon SQS
	// refuses in a message body (outside #x9 | #xA | #xD | #x20–#xD7FF |
	// #xE000–#xFFFD | #x10000–#x10FFFF, e.g. U+FFFE, U+FFFF), or a \uXXXX
	// escape of a lone surrogate (sqsmsg.CheckJSON). Every consumer
	// receives events through an SQS queue, and the rule DLQs are SQS too,
	// so such an event could be published and then never delivered.
	ErrUndeliverableText = errors.New("outbox: event detail holds characters SQS refuses")
)

// WriterConfig configures a Writer. Zero values take the defaults.
type WriterConfig struct {
	// Table is the outbox table name. Required.
	Table string
	// Region is the writer's Region in multi-Region mode
	// (config.RegionFromEnv; "" = single-Region mode): every record is
	// stamped with outbox.AttrOriginRegion and a Region pending shard, and
	// every aggregate's home Region is checked in the same transaction
	// (docs/MULTI-REGION.md).
	Region string
	// Source is the EventBridge Source the relay publishes with (the
	// relay's config.EnvEventSource; relay.PublisherConfig.Source); it
	// counts toward the entry size. Required: events of a team's outbox go
	// out under its own source (a reverse-DNS name such as
	// "com.example.wallet"; EventBridge refuses sources starting with
	// "aws."), which its consumers check (dedup.ConsumerConfig.ExpectedSource).
	Source string
	// PendingShards is the number of pending index shards. Default 16.
	PendingShards int
	// MaxEntryBytes is the EventBridge entry size limit. Default 262144.
	MaxEntryBytes int
	// Keys names the key attributes of the tables the business writes go
	// to, for the one-action-per-item check of Put actions
	// (CheckTransaction); a table not listed is taken to be keyed by
	// pk/sk (KeyAttributeNames), the outbox table's names.
	Keys []TableKeys
	// UpdateMaxAttempts bounds the transactions one Writer.Update sends
	// (the first included) before it gives up with ErrConflict. Default
	// DefaultUpdateMaxAttempts (8).
	UpdateMaxAttempts int
	// UpdateRetryBase and UpdateRetryMax shape the wait before each of
	// Update's retries: exponential from UpdateRetryBase, doubling, capped
	// at UpdateRetryMax, full jitter (each wait uniform in [0, the capped
	// delay]). Defaults 10 ms and 500 ms.
	UpdateRetryBase time.Duration
	UpdateRetryMax  time.Duration
}

func (c *WriterConfig) setDefaults() {
	if c.PendingShards == 0 {
		c.PendingShards = config.DefaultPendingShards
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = config.DefaultMaxEntryBytes
	}
	if c.UpdateMaxAttempts == 0 {
		c.UpdateMaxAttempts = DefaultUpdateMaxAttempts
	}
	if c.UpdateRetryBase == 0 {
		c.UpdateRetryBase = 10 * time.Millisecond
	}
	if c.UpdateRetryMax == 0 {
		c.UpdateRetryMax = 500 * time.Millisecond
	}
}

// Validate reports a configuration error: a missing Table or Source, a
// Source starting with "aws.", a setting out of range, or a Region that is
// not shaped like an AWS Region code (config.ValidRegionName).
func (c WriterConfig) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("outbox: WriterConfig.Table is required")
	case c.Source == "":
		return errors.New("outbox: WriterConfig.Source is required: the EventBridge source your relay publishes with (config.EnvEventSource), e.g. com.example.wallet")
	case strings.HasPrefix(c.Source, "aws."):
		return fmt.Errorf("outbox: WriterConfig.Source %q starts with \"aws.\", which EventBridge refuses for PutEvents", c.Source)
	case c.PendingShards < 1 || c.PendingShards > config.MaxPendingShards:
		return fmt.Errorf("outbox: PendingShards %d out of range 1..%d", c.PendingShards, config.MaxPendingShards)
	case c.MaxEntryBytes < 1024:
		return fmt.Errorf("outbox: MaxEntryBytes %d is too small", c.MaxEntryBytes)
	case c.UpdateMaxAttempts < 1:
		return fmt.Errorf("outbox: UpdateMaxAttempts %d is below 1", c.UpdateMaxAttempts)
	case c.UpdateRetryBase < 0 || c.UpdateRetryMax < c.UpdateRetryBase:
		return fmt.Errorf("outbox: UpdateRetryBase %v and UpdateRetryMax %v: want 0 <= base <= max", c.UpdateRetryBase, c.UpdateRetryMax)
	}
	if c.Region != "" {
		if err := config.ValidRegionName(c.Region); err != nil {
			return fmt.Errorf("outbox: WriterConfig.Region: %w", err)
		}
	}
	return nil
}

// Writer appends outbox records to a caller's transaction and commits it.
// It is safe for concurrent use.
type Writer struct {
	client TransactWriter
	cfg    WriterConfig
}

// NewWriter returns a Writer, or an error if cfg does not validate.
func NewWriter(client TransactWriter, cfg WriterConfig) (*Writer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Writer{client: client, cfg: cfg}, nil
}

// Config returns the writer's effective configuration.
func (w *Writer) Config() WriterConfig { return w.cfg }

// WriteOption changes one Write call.
type WriteOption func(*writeOptions)

type writeOptions struct {
	token string
}

// WithClientRequestToken sets the TransactWriteItems ClientRequestToken
// (1..36 characters), making a repeated identical call within 10 minutes a
// no-op on DynamoDB. Derive it deterministically, e.g. from an idempotency key
// with RequestToken.
func WithClientRequestToken(token string) WriteOption {
	return func(o *writeOptions) { o.token = token }
}

// Write commits writes (the business change) and one outbox record per
// envelope in a single TransactWriteItems call. The outbox puts follow the
// business writes, so CancellationReasons index i < len(writes) points at a
// business write.
//
// In multi-Region mode (WriterConfig.Region set) every record is stamped
// with AttrOriginRegion and kept in the Region's pending shard
// (PendingShardIn), and the transaction is fenced (docs/MULTI-REGION.md):
// after the outbox puts comes one home action per aggregate of events, in
// order of first appearance — a Put of its home item (HomeKey, naming this
// Region; conditioned on it not existing or already naming this Region)
// when the aggregate's lowest sequence in the change is 1, otherwise a
// ConditionCheck that the home item names this Region. They count toward
// the 100-action and 4 MB limits. The writer's IAM role then needs
// dynamodb:ConditionCheckItem on the outbox table besides
// dynamodb:PutItem.
//
// Errors, all before any request is sent unless stated:
//   - ErrNoEvents when events is empty;
//   - an error wrapping ErrInvalidEnvelope when an envelope does not validate,
//     also wrapping ErrUnsafeNumber when it holds a number beyond
//     ±MaxSafeInteger (Envelope.ValidateForPublish);
//   - ErrEntryTooLarge when an event's entry exceeds MaxEntryBytes;
//   - ErrTransactionTooLarge past 100 actions, 4 MB or a 400 KB item;
//   - ErrDuplicateAction when two actions name the same item;
//   - ErrKeyTooLong (wrapped; multi-Region mode) when an aggregate's home
//     key exceeds MaxPartitionKeyBytes or an event id exceeds
//     MaxRegionEventIDBytes;
//   - after sending: a *NotHomeError (errors.Is ErrNotHomeRegion;
//     multi-Region mode) when a home action failed because the aggregate's
//     home is another Region or it has no home item — nothing was written;
//     a *TxError (see AsTxError) when DynamoDB cancels the transaction
//     otherwise; or the SDK's error.
func (w *Writer) Write(ctx context.Context, writes []types.TransactWriteItem, events []Envelope, opts ...WriteOption) error {
	in, homes, err := w.build(writes, events, nil, opts...)
	if err != nil {
		return err
	}
	if _, err := w.client.TransactWriteItems(ctx, in); err != nil {
		return translateTxError(err, homes...)
	}
	return nil
}

// Build validates and assembles the TransactWriteItems input Write would send.
// It returns the same errors as Write's pre-send checks. In multi-Region
// mode the home actions follow the outbox records; a caller sending the
// input itself sees a refusal as a *TxError whose failed condition is one
// of them (Write returns a *NotHomeError instead).
func (w *Writer) Build(writes []types.TransactWriteItem, events []Envelope, opts ...WriteOption) (*dynamodb.TransactWriteItemsInput, error) {
	in, _, err := w.build(writes, events, nil, opts...)
	return in, err
}

// build is Build with extra key names for CheckTransaction (the aggregate
// table's, for Update). It also returns the transaction's home actions
// (multi-Region mode), for translateTxError.
func (w *Writer) build(writes []types.TransactWriteItem, events []Envelope, keys []TableKeys, opts ...WriteOption) (*dynamodb.TransactWriteItemsInput, []homeAction, error) {
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if len(events) == 0 {
		return nil, nil, ErrNoEvents
	}
	items := make([]types.TransactWriteItem, 0, len(writes)+len(events))
	items = append(items, writes...)
	cond, err := expression.NewBuilder().
		WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: build condition: %w", err)
	}
	for i, env := range events {
		if err := env.ValidateForPublish(); err != nil {
			return nil, nil, err
		}
		if w.cfg.Region != "" {
			if err := checkEventID(env); err != nil {
				return nil, nil, err
			}
		}
		detail, err := env.Detail()
		if err != nil {
			return nil, nil, err
		}
		if err := sqsmsg.CheckJSON(string(detail), sqsmsg.MaxMaxBytes); errors.Is(err, sqsmsg.ErrInvalidContents) {
			return nil, nil, fmt.Errorf("%w: %s %s: %v", ErrUndeliverableText, env.EventType, env.EventID, err)
		}
		if size := EntrySize(w.cfg.Source, env.EventType, detail); size > w.cfg.MaxEntryBytes {
			return nil, nil, fmt.Errorf("%w: %s %s is %d bytes, limit %d", ErrEntryTooLarge, env.EventType, env.EventID, size, w.cfg.MaxEntryBytes)
		}
		rec := NewRecordIn(w.cfg.Region, env, i, w.cfg.PendingShards)
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName:                 aws.String(w.cfg.Table),
			Item:                      rec.Item(),
			ConditionExpression:       cond.Condition(),
			ExpressionAttributeNames:  cond.Names(),
			ExpressionAttributeValues: cond.Values(),
		}})
	}
	fence, homes, err := w.homeActions(events, len(items))
	if err != nil {
		return nil, nil, err
	}
	items = append(items, fence...)
	if err := CheckTransaction(items, append(keys, w.cfg.Keys...)...); err != nil {
		return nil, nil, err
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}
	if o.token != "" {
		in.ClientRequestToken = aws.String(o.token)
	}
	return in, homes, nil
}

// TableKeys names a table's key attributes — its partition key and, when it
// has one, its sort key — for CheckTransaction's one-action-per-item check
// of Put actions, which carry their key inside the item.
type TableKeys struct {
	Table string
	Names []string
}

// CheckTransaction checks DynamoDB's TransactWriteItems limits on items: at
// most 100 actions, at most 4 MB in all, no item over 400 KB (item sizes are
// estimated as attribute name plus value bytes), and at most one action per
// item (TransactWriteItems API reference). It returns
// ErrTransactionTooLarge or ErrDuplicateAction (wrapped). Key identity uses
// the Key map of Update, Delete and ConditionCheck actions, and for a Put
// the item's key attributes: those keys names for its table, or else
// KeyAttributeNames (pk, sk); a Put on a table whose key attributes are
// neither given nor pk/sk is identified by its whole item.
func CheckTransaction(items []types.TransactWriteItem, keys ...TableKeys) error {
	if len(items) > MaxTransactionActions {
		return fmt.Errorf("%w: %d actions, limit %d", ErrTransactionTooLarge, len(items), MaxTransactionActions)
	}
	names := make(map[string][]string, len(keys))
	for _, k := range keys {
		names[k.Table] = k.Names
	}
	seen := make(map[string]int, len(items))
	total := 0
	for i, it := range items {
		table, key, size := actionTarget(it, names)
		if size > MaxItemBytes {
			return fmt.Errorf("%w: action %d item is about %d bytes, limit %d", ErrTransactionTooLarge, i, size, MaxItemBytes)
		}
		total += size
		id := table + "\x00" + key
		if j, dup := seen[id]; dup {
			return fmt.Errorf("%w: actions %d and %d on table %s", ErrDuplicateAction, j, i, table)
		}
		seen[id] = i
	}
	if total > MaxTransactionBytes {
		return fmt.Errorf("%w: about %d bytes, limit %d", ErrTransactionTooLarge, total, MaxTransactionBytes)
	}
	return nil
}

// actionTarget returns the table, a canonical key string and the estimated
// size in bytes of one transaction action.
func actionTarget(it types.TransactWriteItem, names map[string][]string) (table, key string, size int) {
	switch {
	case it.Put != nil:
		// A Put carries its key inside the item: the table's key names
		// when given, else the conventional ones.
		t := aws.ToString(it.Put.TableName)
		return t, keyString(pickKey(it.Put.Item, names[t])), ItemSize(it.Put.Item)
	case it.Update != nil:
		return aws.ToString(it.Update.TableName), keyString(it.Update.Key), ItemSize(it.Update.Key) + ItemSize(it.Update.ExpressionAttributeValues)
	case it.Delete != nil:
		return aws.ToString(it.Delete.TableName), keyString(it.Delete.Key), ItemSize(it.Delete.Key)
	case it.ConditionCheck != nil:
		return aws.ToString(it.ConditionCheck.TableName), keyString(it.ConditionCheck.Key), ItemSize(it.ConditionCheck.Key)
	}
	return "", "", 0
}

// KeyAttributeNames lists the attribute names CheckTransaction treats as key
// attributes of a Put item on a table it is given no TableKeys for (the
// conventions of this project's tables).
var KeyAttributeNames = []string{AttrPK, AttrSK}

func pickKey(item map[string]types.AttributeValue, names []string) map[string]types.AttributeValue {
	if len(names) == 0 {
		names = KeyAttributeNames
	}
	k := make(map[string]types.AttributeValue, 2)
	for _, n := range names {
		if v, ok := item[n]; ok {
			k[n] = v
		}
	}
	if len(k) == 0 {
		return item
	}
	return k
}

func keyString(key map[string]types.AttributeValue) string {
	names := make([]string, 0, len(key))
	for n := range key {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for _, n := range names {
		s += n + "=" + scalarString(key[n]) + ";"
	}
	return s
}

func scalarString(v types.AttributeValue) string {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return "S:" + t.Value
	case *types.AttributeValueMemberN:
		return "N:" + t.Value
	case *types.AttributeValueMemberB:
		return "B:" + string(t.Value)
	}
	return fmt.Sprintf("%T", v)
}

// ItemSize estimates the stored size in bytes of an item: the UTF-8 length
// of every attribute name plus its value (numbers counted by digit, as an
// upper bound). Source:
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return len(t.Value)
	case *types.AttributeValueMemberN:
		return len(t.Value)/2 + 1
	case *types.AttributeValueMemberB:
		return len(t.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range t.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range t.Value {
			n += len(s)/2 + 1
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range t.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberM:
		return 3 + ItemSize(t.Value) + len(t.Value)
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range t.Value {
			n += 1 + valueSize(e)
		}
		return n
	}
	return 0
}
