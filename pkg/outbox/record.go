package outbox

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of an outbox record. The CDK construct, the stream filter
// and the relay use these constants.
const (
	AttrPK            = "pk"             // S: "<aggregate_type>#<aggregate_id>"
	AttrSK            = "sk"             // S: "%020d#%03d" sequence and index in the change
	AttrEventID       = "event_id"       // S
	AttrEventType     = "event_type"     // S
	AttrEventVersion  = "event_version"  // N
	AttrAggregateType = "aggregate_type" // S
	AttrAggregateID   = "aggregate_id"   // S
	AttrSequence      = "sequence"       // N
	AttrOccurredAt    = "occurred_at"    // S, RFC 3339 nanoseconds, UTC
	AttrCorrelationID = "correlation_id" // S, optional
	AttrCausationID   = "causation_id"   // S, optional
	AttrActor         = "actor"          // S, optional: Envelope.Actor, who made the change
	AttrTraceParent   = "traceparent"    // S, optional: Envelope.TraceParent, the writer's W3C trace context
	AttrTraceState    = "tracestate"     // S, optional: Envelope.TraceState
	AttrPayload       = "payload"        // S, the payload JSON object as text (kept byte-exact)
	AttrStatus        = "status"         // S: StatusPending, StatusPublished or StatusParked
	AttrPendingShard  = "pending_shard"  // S, sparse: present only while pending
	AttrCreatedAt     = "created_at_ms"  // N, Unix epoch milliseconds; pending index sort key
	AttrPublishedAt   = "published_at"   // S, RFC 3339, set when marked published
	AttrExpiresAt     = "expires_at"     // N, Unix epoch seconds; the TTL attribute, set only when published
	AttrParkedReason  = "parked_reason"  // S, why the record could not be published
	AttrParkedAt      = "parked_at"      // S, RFC 3339
	AttrBusEventID    = "bus_event_id"   // S, the EventBridge EventId of the publish that marked it
	AttrClaimedUntil  = "claimed_until"  // N, Unix epoch milliseconds; a reconciler run's claim on a pending record (see pkg/reconciler)
)

// PendingIndexName is the sparse global secondary index of unpublished
// records: partition key AttrPendingShard, sort key AttrCreatedAt, projection ALL.
const PendingIndexName = "pending"

// TTLAttribute is the outbox table's TTL attribute (Unix epoch seconds).
const TTLAttribute = AttrExpiresAt

// Record statuses.
const (
	StatusPending   = "PENDING"
	StatusPublished = "PUBLISHED"
	StatusParked    = "PARKED"
)

// Key is the primary key of an outbox record.
type Key struct {
	PK string
	SK string
}

// AttributeValues returns the key as a DynamoDB key map.
func (k Key) AttributeValues() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrPK: &types.AttributeValueMemberS{Value: k.PK},
		AttrSK: &types.AttributeValueMemberS{Value: k.SK},
	}
}

// KeyFor returns the outbox key of the index-th event (0-based) of a change
// that brought the aggregate to sequence.
func KeyFor(aggregateType, aggregateID string, sequence int64, index int) Key {
	return Key{
		PK: aggregateType + "#" + aggregateID,
		SK: fmt.Sprintf("%020d#%03d", sequence, index),
	}
}

// PendingShard returns the pending index partition value for an event id:
// "p<NN>" with NN = FNV-1a(eventID) mod shards. shards below 1 count as 1
// (callers validate the setting; see config.MaxPendingShards).
func PendingShard(eventID string, shards int) string {
	if shards < 1 {
		shards = 1
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(eventID))
	return ShardName(int(h.Sum32() % uint32(shards)))
}

// ShardName returns the pending index partition value of shard i.
func ShardName(i int) string { return fmt.Sprintf("p%02d", i) }

// Record is an outbox record as stored: the envelope plus delivery state.
type Record struct {
	Key      Key
	Envelope Envelope
	Status   string
	// PendingShard is empty once the record left the pending index.
	PendingShard string
	CreatedAt    time.Time
	// ExpiresAt is zero while the record has no TTL.
	ExpiresAt time.Time
	// OriginRegion is the Region whose writer committed the record
	// (AttrOriginRegion), "" for a record written in single-Region mode
	// (the attribute is then absent).
	OriginRegion string
	// RedriveGeneration counts the origin Region's redrives of the record
	// (AttrRedriveGeneration); 0 when the attribute is absent (never
	// redriven in multi-Region mode).
	RedriveGeneration int64
}

// NewRecord returns the pending record for the index-th envelope of a change.
func NewRecord(env Envelope, index, shards int) Record {
	return NewRecordIn("", env, index, shards)
}

// NewRecordIn returns the pending record for the index-th envelope of a
// change written in region: stamped with OriginRegion = region and kept in
// the Region's pending shard (PendingShardIn). An empty region returns
// exactly NewRecord's record (single-Region mode).
func NewRecordIn(region string, env Envelope, index, shards int) Record {
	return Record{
		Key:          KeyFor(env.AggregateType, env.AggregateID, env.Sequence, index),
		Envelope:     env,
		Status:       StatusPending,
		PendingShard: PendingShardIn(region, env.EventID, shards),
		CreatedAt:    env.OccurredAt,
		OriginRegion: region,
	}
}

// Item returns the record as a DynamoDB item. AttrOriginRegion and
// AttrRedriveGeneration are written only when set (non-empty, non-zero), so
// a single-Region record's item is unchanged.
func (r Record) Item() map[string]types.AttributeValue {
	e := r.Envelope
	item := map[string]types.AttributeValue{
		AttrPK:            &types.AttributeValueMemberS{Value: r.Key.PK},
		AttrSK:            &types.AttributeValueMemberS{Value: r.Key.SK},
		AttrEventID:       &types.AttributeValueMemberS{Value: e.EventID},
		AttrEventType:     &types.AttributeValueMemberS{Value: e.EventType},
		AttrEventVersion:  &types.AttributeValueMemberN{Value: strconv.Itoa(e.EventVersion)},
		AttrAggregateType: &types.AttributeValueMemberS{Value: e.AggregateType},
		AttrAggregateID:   &types.AttributeValueMemberS{Value: e.AggregateID},
		AttrSequence:      &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Sequence, 10)},
		AttrOccurredAt:    &types.AttributeValueMemberS{Value: e.OccurredAt.UTC().Format(time.RFC3339Nano)},
		AttrPayload:       &types.AttributeValueMemberS{Value: string(e.Payload)},
		AttrStatus:        &types.AttributeValueMemberS{Value: r.Status},
		AttrCreatedAt:     &types.AttributeValueMemberN{Value: strconv.FormatInt(r.CreatedAt.UnixMilli(), 10)},
	}
	if e.CorrelationID != "" {
		item[AttrCorrelationID] = &types.AttributeValueMemberS{Value: e.CorrelationID}
	}
	if e.CausationID != "" {
		item[AttrCausationID] = &types.AttributeValueMemberS{Value: e.CausationID}
	}
	if e.Actor != "" {
		item[AttrActor] = &types.AttributeValueMemberS{Value: e.Actor}
	}
	if e.TraceParent != "" {
		item[AttrTraceParent] = &types.AttributeValueMemberS{Value: e.TraceParent}
	}
	if e.TraceState != "" {
		item[AttrTraceState] = &types.AttributeValueMemberS{Value: e.TraceState}
	}
	if r.PendingShard != "" {
		item[AttrPendingShard] = &types.AttributeValueMemberS{Value: r.PendingShard}
	}
	if !r.ExpiresAt.IsZero() {
		item[AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(r.ExpiresAt.Unix(), 10)}
	}
	if r.OriginRegion != "" {
		item[AttrOriginRegion] = &types.AttributeValueMemberS{Value: r.OriginRegion}
	}
	if r.RedriveGeneration != 0 {
		item[AttrRedriveGeneration] = &types.AttributeValueMemberN{Value: strconv.FormatInt(r.RedriveGeneration, 10)}
	}
	return item
}

// RecordFromItem decodes a stored outbox item (AttrOriginRegion and
// AttrRedriveGeneration when present). It returns an error wrapping
// ErrInvalidEnvelope when a required attribute is missing or has the wrong
// type, or when the decoded envelope does not validate.
func RecordFromItem(item map[string]types.AttributeValue) (Record, error) {
	var r Record
	var errs []string
	str := func(name string, required bool) string {
		v, ok := item[name]
		if !ok {
			if required {
				errs = append(errs, name+" missing")
			}
			return ""
		}
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			errs = append(errs, name+" is not a string (S)")
			return ""
		}
		return s.Value
	}
	num := func(name string, required bool) int64 {
		v, ok := item[name]
		if !ok {
			if required {
				errs = append(errs, name+" missing")
			}
			return 0
		}
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			errs = append(errs, name+" is not a number (N)")
			return 0
		}
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			errs = append(errs, name+" is not an int64")
		}
		return i
	}
	r.Key = Key{PK: str(AttrPK, true), SK: str(AttrSK, true)}
	e := &r.Envelope
	e.EventID = str(AttrEventID, true)
	e.EventType = str(AttrEventType, true)
	e.EventVersion = int(num(AttrEventVersion, true))
	e.AggregateType = str(AttrAggregateType, true)
	e.AggregateID = str(AttrAggregateID, true)
	e.Sequence = num(AttrSequence, true)
	if s := str(AttrOccurredAt, true); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			errs = append(errs, AttrOccurredAt+" is not RFC 3339")
		}
		e.OccurredAt = t.UTC()
	}
	e.CorrelationID = str(AttrCorrelationID, false)
	e.CausationID = str(AttrCausationID, false)
	e.Actor = str(AttrActor, false)
	e.TraceParent = str(AttrTraceParent, false)
	e.TraceState = str(AttrTraceState, false)
	e.Payload = json.RawMessage(str(AttrPayload, true))
	r.Status = str(AttrStatus, false)
	r.PendingShard = str(AttrPendingShard, false)
	if ms := num(AttrCreatedAt, false); ms != 0 {
		r.CreatedAt = time.UnixMilli(ms).UTC()
	}
	if s := num(AttrExpiresAt, false); s != 0 {
		r.ExpiresAt = time.Unix(s, 0).UTC()
	}
	r.OriginRegion = str(AttrOriginRegion, false)
	r.RedriveGeneration = num(AttrRedriveGeneration, false)
	if len(errs) > 0 {
		return r, fmt.Errorf("%w: outbox item %s/%s: %v", ErrInvalidEnvelope, r.Key.PK, r.Key.SK, errs)
	}
	if err := r.Envelope.Validate(); err != nil {
		return r, fmt.Errorf("outbox item %s/%s: %w", r.Key.PK, r.Key.SK, err)
	}
	return r, nil
}

// CreateTableInput returns the outbox table definition used by the local
// runtime and tests: composite key (AttrPK, AttrSK), on-demand billing, a
// stream with NEW_IMAGE, and the sparse pending index. The CDK construct
// declares the same shape (plus TTL on TTLAttribute, PITR and encryption).
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrSK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrPendingShard), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrCreatedAt), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(PendingIndexName),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrPendingShard), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrCreatedAt), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
		StreamSpecification: &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: types.StreamViewTypeNewImage,
		},
	}
}

// StreamFilterPattern returns the event source mapping filter pattern that
// selects only INSERT records of outbox items (records carrying an event id in
// their new image). MODIFY records (the relay's own marking), REMOVE records
// (TTL deletions) and foreign items never reach the relay. The CDK stack and
// the local poller use this one value. Syntax: Lambda event filtering,
// https://docs.aws.amazon.com/lambda/latest/dg/with-ddb-filtering.html
func StreamFilterPattern() map[string]any {
	return map[string]any{
		"eventName": []any{"INSERT"},
		"dynamodb": map[string]any{
			"NewImage": map[string]any{
				AttrEventID: map[string]any{"S": []any{map[string]any{"exists": true}}},
			},
		},
	}
}
