package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Takeover items, takeover marks and heartbeats live in the outbox table
// beside the records (docs/MULTI-REGION.md, choice 4). Each has one writing
// Region, so global tables' last-writer-wins never has two writers to
// choose between:
//
//   - takeover item: PK TakeoverPK ("takeover"), SK "<failed>#<survivor>"
//     (TakeoverKey), written by the survivor only (DeclareTakeover,
//     ReleaseTakeover). One partition holds every takeover ever declared,
//     so one Query lists them (ListTakeovers), and two survivors of one
//     failed Region (three Regions or more) write two items, never one.
//   - takeover mark: PK "takeover#<failed>#mark", SK "<survivor>#<event_id>"
//     (MarkKey), written by the survivor only: its claim on one of the
//     failed Region's records and, once sent, the proof that it published
//     it. The survivor never writes the failed Region's record.
//   - heartbeat: PK "heartbeat#<region>", SK "heartbeat" (HeartbeatKey),
//     written by that Region's reconciler on every multi-Region run: its
//     age as read in another Region bounds that Region's inbound
//     replication lag plus one schedule period.
//
// None carries event_id, status or pending_shard, so the relay's stream
// filter and handler, the pending index, ListParked and the operator's
// status scans never see them; an outbox record's sort key is digits
// (outbox.KeyFor), so none of these keys collide with a record's.
const (
	// TakeoverPK is the partition key of every takeover item.
	TakeoverPK = "takeover"
	// HeartbeatSK is the sort key of a heartbeat item.
	HeartbeatSK = "heartbeat"

	// AttrTakeoverState (S) is a takeover item's state (TakeoverActive,
	// TakeoverReleased) or a mark's (MarkClaimed, MarkPublished,
	// MarkFailed).
	AttrTakeoverState = "takeover_state"
	// AttrFailedRegion and AttrSurvivorRegion (S) name a takeover's Regions.
	AttrFailedRegion   = "failed_region"
	AttrSurvivorRegion = "survivor_region"
	// AttrLagMarginMs (N, milliseconds) is the takeover's lag margin.
	AttrLagMarginMs = "lag_margin_ms"
	// AttrDeclaredBy and AttrDeclaredAt (S, RFC 3339) say who declared the
	// takeover and when; AttrReleasedBy and AttrReleasedAt who released it.
	AttrDeclaredBy = "declared_by"
	AttrDeclaredAt = "declared_at"
	AttrReleasedBy = "released_by"
	AttrReleasedAt = "released_at"
	// AttrMarkEventID, AttrMarkRecordPK and AttrMarkRecordSK (S) name the
	// failed Region's record a mark is about (not event_id, pk, sk: a mark
	// is not an outbox record).
	AttrMarkEventID  = "mark_event_id"
	AttrMarkRecordPK = "record_pk"
	AttrMarkRecordSK = "record_sk"
	// AttrMarkReason (S) is why a mark is MarkFailed.
	AttrMarkReason = "mark_reason"
	// AttrHeartbeatAtMs (N, Unix epoch milliseconds) and AttrHeartbeatAt
	// (S, RFC 3339) are a heartbeat's time.
	AttrHeartbeatAtMs = "heartbeat_at_ms"
	AttrHeartbeatAt   = "heartbeat_at"
)

// Takeover and mark states (AttrTakeoverState).
const (
	TakeoverActive   = "ACTIVE"
	TakeoverReleased = "RELEASED"
	MarkClaimed      = "CLAIMED"
	MarkPublished    = "PUBLISHED"
	MarkFailed       = "FAILED"
)

// MaxLagMargin bounds TakeoverDecl.LagMargin: a margin beyond a day is a
// typo (hours for minutes), and would keep the takeover from publishing
// anything the operator expects.
const MaxLagMargin = 24 * time.Hour

// Errors of the takeover commands.
var (
	// ErrTakeoverActive: DeclareTakeover found the takeover already ACTIVE
	// (release it first to change its margin).
	ErrTakeoverActive = errors.New("reconciler: the takeover is already active")
	// ErrNoTakeover: ReleaseTakeover found no ACTIVE takeover of that pair.
	ErrNoTakeover = errors.New("reconciler: no active takeover of that Region by that survivor")
	// ErrBadTakeover: the declaration is refused (same Regions, a bad
	// Region name, a lag margin out of range).
	ErrBadTakeover = errors.New("reconciler: bad takeover declaration")
)

// TakeoverKey returns the key of the takeover item of failed by survivor.
func TakeoverKey(failed, survivor string) outbox.Key {
	return outbox.Key{PK: TakeoverPK, SK: failed + "#" + survivor}
}

// MarkKey returns the key of survivor's takeover mark on the failed
// Region's record with event id eventID.
func MarkKey(failed, survivor, eventID string) outbox.Key {
	return outbox.Key{PK: "takeover#" + failed + "#mark", SK: survivor + "#" + eventID}
}

// HeartbeatKey returns the key of region's heartbeat item.
func HeartbeatKey(region string) outbox.Key {
	return outbox.Key{PK: "heartbeat#" + region, SK: HeartbeatSK}
}

// TakeoverDecl is an operator's decision that Failed is down and Survivor
// publishes its replicated pending records.
type TakeoverDecl struct {
	// Failed is the Region declared down; Survivor the Region whose
	// reconciler takes over (the Region the declaring client writes in).
	// Both must be Region names (config.ValidRegionName) and differ.
	Failed, Survivor string
	// LagMargin is added to the survivor's ReconcileAfter: only the failed
	// Region's records older than both are published, so a record its own
	// relay or reconciler may still be publishing (replication lag) is
	// left alone. 0 to MaxLagMargin.
	LagMargin time.Duration
	// DeclaredBy names the operator (free text, e.g. a user or ticket).
	DeclaredBy string
}

// Validate returns an error wrapping ErrBadTakeover for a declaration
// DeclareTakeover refuses.
func (d TakeoverDecl) Validate() error {
	for _, r := range []struct{ flag, v string }{{"failed", d.Failed}, {"survivor", d.Survivor}} {
		if err := config.ValidRegionName(r.v); err != nil {
			return fmt.Errorf("%w: %s Region: %w", ErrBadTakeover, r.flag, err)
		}
	}
	switch {
	case d.Failed == d.Survivor:
		return fmt.Errorf("%w: the survivor %s cannot take over itself", ErrBadTakeover, d.Survivor)
	case d.LagMargin < 0:
		return fmt.Errorf("%w: lag margin %s is negative", ErrBadTakeover, d.LagMargin)
	case d.LagMargin > MaxLagMargin:
		return fmt.Errorf("%w: lag margin %s is above %s", ErrBadTakeover, d.LagMargin, MaxLagMargin)
	}
	return nil
}

// Takeover is a takeover item as ListTakeovers reads it.
type Takeover struct {
	Failed, Survivor string
	// State is TakeoverActive or TakeoverReleased.
	State string
	// LagMargin is the item's lag_margin_ms, at most MaxLagMargin; a
	// margin missing, negative or not a whole number reads as MaxLagMargin
	// (fail safe: a survivor waits longest rather than not at all).
	LagMargin  time.Duration
	DeclaredBy string
	DeclaredAt time.Time
	ReleasedBy string
	// ReleasedAt is zero while the takeover is active.
	ReleasedAt time.Time
}

// Active reports whether the takeover is in force.
func (t Takeover) Active() bool { return t.State == TakeoverActive }

// TakeoverAPI is the DynamoDB subset of the takeover commands, with the
// SDK's exact signatures (*dynamodb.Client satisfies it).
type TakeoverAPI interface {
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// DeclareTakeover writes the takeover item of d (PutItem in the client's
// Region, which must be d.Survivor: only the survivor writes it),
// conditioned on no ACTIVE item of the pair (a released one is replaced).
// From the survivor's next reconciler run on, that run also sweeps
// d.Failed's pending shards (see Reconciler.Run). It never happens by
// itself: a replication stall looks exactly like an outage. Errors:
// ErrBadTakeover (d.Validate), ErrTakeoverActive, or the store's error.
func DeclareTakeover(ctx context.Context, ddb TakeoverAPI, table string, d TakeoverDecl, now time.Time) error {
	if err := d.Validate(); err != nil {
		return err
	}
	key := TakeoverKey(d.Failed, d.Survivor)
	item := key.AttributeValues()
	item[AttrTakeoverState] = &types.AttributeValueMemberS{Value: TakeoverActive}
	item[AttrFailedRegion] = &types.AttributeValueMemberS{Value: d.Failed}
	item[AttrSurvivorRegion] = &types.AttributeValueMemberS{Value: d.Survivor}
	item[AttrLagMarginMs] = &types.AttributeValueMemberN{Value: strconv.FormatInt(d.LagMargin.Milliseconds(), 10)}
	item[AttrDeclaredAt] = &types.AttributeValueMemberS{Value: now.UTC().Format(time.RFC3339Nano)}
	if d.DeclaredBy != "" {
		item[AttrDeclaredBy] = &types.AttributeValueMemberS{Value: d.DeclaredBy}
	}
	state := expression.Name(AttrTakeoverState)
	expr, err := expression.NewBuilder().WithCondition(
		expression.AttributeNotExists(expression.Name(outbox.AttrPK)).Or(state.NotEqual(expression.Value(TakeoverActive)))).Build()
	if err != nil {
		return err
	}
	_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: item,
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("declare takeover of %s by %s: %w", d.Failed, d.Survivor, ErrTakeoverActive)
	}
	if err != nil {
		return fmt.Errorf("declare takeover of %s by %s: %w", d.Failed, d.Survivor, err)
	}
	return nil
}

// ReleaseTakeover ends the takeover of failed by survivor (UpdateItem in
// the survivor's Region: state RELEASED, released_at, released_by),
// conditioned on it being ACTIVE. The item stays, so the failed Region's
// reconciler keeps adopting the survivor's marks once it is back. The
// survivor's next run no longer sweeps failed's shards (a run already
// going finishes its round). Errors: ErrBadTakeover for bad names,
// ErrNoTakeover, or the store's error.
func ReleaseTakeover(ctx context.Context, ddb TakeoverAPI, table, failed, survivor, releasedBy string, now time.Time) error {
	if err := (TakeoverDecl{Failed: failed, Survivor: survivor}).Validate(); err != nil {
		return err
	}
	upd := expression.Set(expression.Name(AttrTakeoverState), expression.Value(TakeoverReleased)).
		Set(expression.Name(AttrReleasedAt), expression.Value(now.UTC().Format(time.RFC3339Nano)))
	if releasedBy != "" {
		upd = upd.Set(expression.Name(AttrReleasedBy), expression.Value(releasedBy))
	}
	expr, err := expression.NewBuilder().WithUpdate(upd).
		WithCondition(expression.Name(AttrTakeoverState).Equal(expression.Value(TakeoverActive))).Build()
	if err != nil {
		return err
	}
	_, err = ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: TakeoverKey(failed, survivor).AttributeValues(),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("release takeover of %s by %s: %w", failed, survivor, ErrNoTakeover)
	}
	if err != nil {
		return fmt.Errorf("release takeover of %s by %s: %w", failed, survivor, err)
	}
	return nil
}

// ListTakeovers returns every takeover item in the client's Region's
// replica (one Query of TakeoverPK, strongly consistent: the local
// Region's view, which for another Region's items lags by the replication
// delay), active and released, sorted by failed then survivor Region.
func ListTakeovers(ctx context.Context, ddb QueryAPI, table string) ([]Takeover, error) {
	expr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key(outbox.AttrPK).Equal(expression.Value(TakeoverPK))).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	}
	var out []Takeover
	p := dynamodb.NewQueryPaginator(ddb, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("list takeovers in %s: %w", table, err)
		}
		for _, it := range page.Items {
			out = append(out, takeoverFromItem(it))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Failed != out[j].Failed {
			return out[i].Failed < out[j].Failed
		}
		return out[i].Survivor < out[j].Survivor
	})
	return out, nil
}

func takeoverFromItem(it map[string]types.AttributeValue) Takeover {
	t := Takeover{
		Failed: str(it[AttrFailedRegion]), Survivor: str(it[AttrSurvivorRegion]), State: str(it[AttrTakeoverState]),
		DeclaredBy: str(it[AttrDeclaredBy]), ReleasedBy: str(it[AttrReleasedBy]),
	}
	if t.Failed == "" || t.Survivor == "" { // fall back on the key
		t.Failed, t.Survivor, _ = strings.Cut(str(it[outbox.AttrSK]), "#")
	}
	// A margin that is missing, negative or not a whole number fails safe:
	// the longest margin, never none.
	t.LagMargin = MaxLagMargin
	if n, ok := it[AttrLagMarginMs].(*types.AttributeValueMemberN); ok {
		if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil && ms >= 0 {
			t.LagMargin = time.Duration(min(ms, MaxLagMargin.Milliseconds())) * time.Millisecond
		}
	}
	t.DeclaredAt, _ = time.Parse(time.RFC3339Nano, str(it[AttrDeclaredAt]))
	t.ReleasedAt, _ = time.Parse(time.RFC3339Nano, str(it[AttrReleasedAt]))
	return t
}

// Heartbeat is a Region's last multi-Region reconciler run as the reading
// Region's replica has it.
type Heartbeat struct {
	Region string
	// At is the run's time by the writing Region's clock; zero when the
	// Region has no heartbeat item here (never ran, or not replicated yet).
	At time.Time
}

// Age returns now − At (0 when At is zero).
func (h Heartbeat) Age(now time.Time) time.Duration {
	if h.At.IsZero() {
		return 0
	}
	return now.Sub(h.At)
}

// HeartbeatAPI is the GetItem method with the SDK's exact signature.
type HeartbeatAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// ReadHeartbeats reads each Region's heartbeat item (GetItem, strongly
// consistent in the client's Region). A Region without one has a zero At.
func ReadHeartbeats(ctx context.Context, ddb HeartbeatAPI, table string, regions []string) ([]Heartbeat, error) {
	out := make([]Heartbeat, 0, len(regions))
	for _, r := range regions {
		got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), Key: HeartbeatKey(r).AttributeValues(), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return out, fmt.Errorf("read heartbeat of %s: %w", r, err)
		}
		h := Heartbeat{Region: r}
		if n, ok := got.Item[AttrHeartbeatAtMs].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				h.At = time.UnixMilli(ms).UTC()
			}
		}
		out = append(out, h)
	}
	return out, nil
}
