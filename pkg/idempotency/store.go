package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of an idempotency record.
const (
	AttrPK               = "pk"                 // S: "<namespace>#<key>" (see RecordKey)
	AttrStatus           = "status"             // S: StatusInProgress or StatusCompleted
	AttrToken            = "token"              // S: random token of the attempt that wrote the record
	AttrInProgressExpiry = "in_progress_expiry" // N: Unix epoch milliseconds (IN_PROGRESS only)
	AttrExpiresAt        = "expires_at"         // N: Unix epoch seconds; the TTL attribute
	AttrPayloadHash      = "payload_hash"       // S: the caller's payload hash ("" when validation is off)
	AttrData             = "data"               // B: the effect's result (COMPLETED only)
	AttrUpdatedAt        = "updated_at"         // S: RFC 3339 nanoseconds, UTC
)

// TTLAttribute is the table's TTL attribute (Unix epoch seconds); enable TTL
// on it so expired records are eventually deleted.
const TTLAttribute = AttrExpiresAt

// Record statuses (AttrStatus values).
const (
	StatusInProgress = "IN_PROGRESS"
	StatusCompleted  = "COMPLETED"
)

// Defaults and limits for Config.
const (
	// DefaultExpiry is how long a COMPLETED record answers repeats: 1 hour,
	// as Powertools' expires_after_seconds.
	DefaultExpiry = time.Hour
	// DefaultInProgressExpiry bounds an IN_PROGRESS record when the context
	// has no deadline: 15 minutes, Lambda's maximum function timeout, so no
	// live invocation is ever taken over.
	DefaultInProgressExpiry = 15 * time.Minute
	// DefaultCallTimeout bounds one DynamoDB call: 5 s.
	DefaultCallTimeout = 5 * time.Second
	// DefaultMaxResultBytes bounds the stored result: 300 KiB, leaving room
	// under DynamoDB's 400 KB item limit for the other attributes.
	DefaultMaxResultBytes = 300 * 1024
	// MaxKeyBytes is the longest key stored verbatim; longer keys are stored
	// as "sha256:<hex>" (DynamoDB partition keys are at most 2048 bytes).
	MaxKeyBytes = 1024
	// startAttempts bounds PutItem attempts when the stored record changes
	// between the failed condition and its evaluation here.
	startAttempts = 3
)

// Errors returned by Do and Wrap.
var (
	// ErrInProgress: another invocation holds the key IN_PROGRESS and its
	// in-progress expiry has not passed. Retryable: deliver the event again
	// later (Powertools: IdempotencyAlreadyInProgressError).
	ErrInProgress = errors.New("idempotency: already in progress")
	// ErrPayloadMismatch: the key was first used with another payload hash.
	// Not retryable: the caller reused a key for a different request
	// (Powertools: IdempotencyValidationError).
	ErrPayloadMismatch = errors.New("idempotency: same key, different payload")
	// ErrNoKey: the key function found no key (Powertools:
	// IdempotencyKeyError with raise_on_no_idempotency_key).
	ErrNoKey = errors.New("idempotency: no idempotency key")
	// ErrRecordTakenOver: the effect ran and returned, but the record had
	// been taken over by another attempt (this one outlived its in-progress
	// expiry), so the result was not stored. Result.Data is this run's result;
	// retry to get the owner's.
	ErrRecordTakenOver = errors.New("idempotency: record taken over by another attempt")
	// ErrResultTooLarge: the effect's result is longer than
	// Config.MaxResultBytes. The record is left IN_PROGRESS (the effect
	// happened; deleting it would invite a second run) until its
	// in-progress expiry.
	ErrResultTooLarge = errors.New("idempotency: result too large to store")
)

// API is the DynamoDB subset a Store calls, with the SDK's exact signatures:
// *dynamodb.Client satisfies it. Implementations must be safe for concurrent
// use. IAM: dynamodb:GetItem, PutItem, UpdateItem, DeleteItem on the table.
type API interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Config configures a Store. Zero values take the defaults.
type Config struct {
	// Table is the idempotency table (partition key AttrPK, type S; see
	// CreateTableInput). Required.
	Table string
	// Namespace prefixes every key ("<namespace>#<key>") so that functions
	// can share a table and one function's key never replays another's
	// result (Powertools prefixes with the function name). Required; must
	// not contain '#'.
	Namespace string
	// Expiry is how long a COMPLETED record answers repeats. Default
	// DefaultExpiry (1 h). At least one second. It must outlast the
	// redelivery window of the event source for duplicates to be absorbed
	// here rather than by the provider's own key.
	Expiry time.Duration
	// InProgressExpiry is the in-progress expiry used when the context has
	// no deadline. Default DefaultInProgressExpiry (15 min).
	InProgressExpiry time.Duration
	// CallTimeout bounds one DynamoDB call. Default 5 s.
	CallTimeout time.Duration
	// MaxResultBytes bounds a stored result. Default 300 KiB.
	MaxResultBytes int
	// CacheSize enables an in-memory LRU cache of COMPLETED records of up to
	// CacheSize entries for warm invocations (Powertools use_local_cache,
	// local_cache_max_items). 0 disables it. A cached record is used until
	// its expires_at.
	CacheSize int
	// BeforeComplete, when set, is called after the effect succeeded and
	// before the COMPLETED write. A non-nil error simulates the function
	// dying there: nothing more is written (the record stays IN_PROGRESS
	// until its in-progress expiry) and Do returns the error. For tests and
	// chaos runs only.
	BeforeComplete func(ctx context.Context, key string) error
	// Logger receives a line per take-over, lost record and failed delete.
	// Default slog.Default().
	Logger *slog.Logger
	// Now returns the current time; default time.Now. For tests.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Expiry == 0 {
		c.Expiry = DefaultExpiry
	}
	if c.InProgressExpiry == 0 {
		c.InProgressExpiry = DefaultInProgressExpiry
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first invalid setting (after defaults).
func (c Config) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("idempotency: Config.Table is required")
	case c.Namespace == "":
		return errors.New("idempotency: Config.Namespace is required")
	case strings.ContainsRune(c.Namespace, '#'):
		return fmt.Errorf("idempotency: Config.Namespace %q must not contain '#'", c.Namespace)
	case c.Expiry < time.Second:
		return fmt.Errorf("idempotency: Config.Expiry %s is shorter than one second", c.Expiry)
	case c.InProgressExpiry < time.Second:
		return fmt.Errorf("idempotency: Config.InProgressExpiry %s is shorter than one second", c.InProgressExpiry)
	case c.CallTimeout < 0:
		return fmt.Errorf("idempotency: Config.CallTimeout %s is negative", c.CallTimeout)
	case c.MaxResultBytes < 0:
		return fmt.Errorf("idempotency: Config.MaxResultBytes %d is negative", c.MaxResultBytes)
	case c.CacheSize < 0:
		return fmt.Errorf("idempotency: Config.CacheSize %d is negative", c.CacheSize)
	}
	return nil
}

// Metrics are a Store's counters since it was built (a snapshot; see
// Store.Metrics). Export them as EMF metrics or log them per invocation.
type Metrics struct {
	// Runs counts effects started (the record was won).
	Runs int64
	// StoreHits counts repeats answered from a COMPLETED record in DynamoDB.
	StoreHits int64
	// CacheHits counts repeats answered from the in-memory cache (no
	// DynamoDB call).
	CacheHits int64
	// InProgress counts ErrInProgress answers (concurrent duplicates).
	InProgress int64
	// TakenOver counts IN_PROGRESS records whose in-progress expiry had
	// passed and that a new attempt took over (a dead or timed-out
	// invocation: the effect may have happened once already).
	TakenOver int64
	// Expired counts COMPLETED records past their expiry that were run again.
	Expired int64
	// PayloadMismatches counts ErrPayloadMismatch answers.
	PayloadMismatches int64
	// Failures counts effects that returned an error (record deleted).
	Failures int64
	// LostRecords counts ErrRecordTakenOver answers.
	LostRecords int64
	// NoKey counts calls run without idempotency because the key was
	// missing and AllowMissingKey was set.
	NoKey int64
}

type counters struct {
	runs, storeHits, cacheHits, inProgress, takenOver, expired, mismatches, failures, lost, noKey atomic.Int64
}

// Store keeps idempotency records in one DynamoDB table. It is safe for
// concurrent use; build one per process (outside the Lambda handler) so the
// cache survives warm invocations.
type Store struct {
	client API
	cfg    Config
	cache  *lru // nil when Config.CacheSize is 0
	n      counters
}

// NewStore returns a Store, or an error when client is nil or cfg does not
// validate.
func NewStore(client API, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("idempotency: nil DynamoDB client")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{client: client, cfg: cfg}
	if cfg.CacheSize > 0 {
		s.cache = newLRU(cfg.CacheSize)
	}
	return s, nil
}

// Config returns the store's effective configuration.
func (s *Store) Config() Config { return s.cfg }

// Metrics returns a snapshot of the store's counters.
func (s *Store) Metrics() Metrics {
	return Metrics{
		Runs: s.n.runs.Load(), StoreHits: s.n.storeHits.Load(), CacheHits: s.n.cacheHits.Load(),
		InProgress: s.n.inProgress.Load(), TakenOver: s.n.takenOver.Load(), Expired: s.n.expired.Load(),
		PayloadMismatches: s.n.mismatches.Load(), Failures: s.n.failures.Load(), LostRecords: s.n.lost.Load(),
		NoKey: s.n.noKey.Load(),
	}
}

// RecordKey returns the AttrPK value of key in namespace:
// "<namespace>#<key>", or "<namespace>#sha256:<hex>" when key is longer
// than MaxKeyBytes.
func RecordKey(namespace, key string) string {
	if len(key) > MaxKeyBytes {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return namespace + "#" + key
}

// Key returns the DynamoDB key map of key's record in this store, for
// GetItem (e.g. an operator's view).
func (s *Store) Key(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: RecordKey(s.cfg.Namespace, key)}}
}

// CreateTableInput returns an idempotency table definition: partition key
// AttrPK (S), on-demand billing, no stream. Enable TTL on TTLAttribute
// after creating it (UpdateTimeToLive; the CDK construct declares it).
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	}
}
