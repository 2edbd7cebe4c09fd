package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// ErrNotFound is returned (wrapped) when no outbox record matches.
var ErrNotFound = errors.New("no outbox record found")

// EventView is one outbox record as an operator reads it. Times are UTC;
// zero when the record does not hold them.
type EventView struct {
	Key           outbox.Key
	EventID       string
	EventType     string
	AggregateType string
	AggregateID   string
	Sequence      int64
	Status        string
	// OccurredAt is the envelope's occurred_at; CreatedAt the pending index
	// sort key (created_at_ms), from which the reconciler ages a record.
	OccurredAt time.Time
	CreatedAt  time.Time
	// PendingShard is set while the record is pending.
	PendingShard string
	// PublishedAt and BusEventID are set by the relay's (or reconciler's)
	// published mark: the EventBridge EventId of that publish.
	PublishedAt time.Time
	BusEventID  string
	// ExpiresAt is the TTL of a published record.
	ExpiresAt time.Time
	// ParkedAt and ParkedReason are set when the record was parked (they
	// stay after a redrive, which sets RedrivenAt).
	ParkedAt     time.Time
	ParkedReason string
	RedrivenAt   time.Time
	// Applied holds, by consumer, when its dedup marker says it applied the
	// event (filled by Applied; absent: not applied, or the marker expired).
	Applied map[string]time.Time
	// Idempotency holds, by consumer (idempotency namespace), the state of
	// its pkg/idempotency record for the event (filled by Idempotent;
	// absent: no record, or it expired).
	Idempotency map[string]IdempotencyView

	item map[string]types.AttributeValue
}

// IdempotencyView is one consumer's pkg/idempotency record of an event: a
// consumer with an effect outside DynamoDB (the fulfilment consumer's
// provider call) records its work there instead of a dedup marker.
type IdempotencyView struct {
	Status    string // idempotency.StatusCompleted or StatusInProgress
	UpdatedAt time.Time
	ExpiresAt time.Time
}

// viewOf reads an outbox item leniently: a record that would not decode as
// an envelope (a poison record) is still shown.
func viewOf(item map[string]types.AttributeValue) EventView {
	v := EventView{
		Key:           outbox.Key{PK: attrS(item, outbox.AttrPK), SK: attrS(item, outbox.AttrSK)},
		EventID:       attrS(item, outbox.AttrEventID),
		EventType:     attrS(item, outbox.AttrEventType),
		AggregateType: attrS(item, outbox.AttrAggregateType),
		AggregateID:   attrS(item, outbox.AttrAggregateID),
		Status:        attrS(item, outbox.AttrStatus),
		PendingShard:  attrS(item, outbox.AttrPendingShard),
		BusEventID:    attrS(item, outbox.AttrBusEventID),
		ParkedReason:  attrS(item, outbox.AttrParkedReason),
		OccurredAt:    parseTime(attrS(item, outbox.AttrOccurredAt)),
		PublishedAt:   parseTime(attrS(item, outbox.AttrPublishedAt)),
		ParkedAt:      parseTime(attrS(item, outbox.AttrParkedAt)),
		RedrivenAt:    parseTime(attrS(item, "redriven_at")),
		item:          item,
	}
	v.Sequence, _ = strconv.ParseInt(attrN(item, outbox.AttrSequence), 10, 64)
	if ms, err := strconv.ParseInt(attrN(item, outbox.AttrCreatedAt), 10, 64); err == nil {
		v.CreatedAt = time.UnixMilli(ms).UTC()
	}
	if s, err := strconv.ParseInt(attrN(item, outbox.AttrExpiresAt), 10, 64); err == nil {
		v.ExpiresAt = time.Unix(s, 0).UTC()
	}
	return v
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// FindEvent returns the outbox record(s) whose event_id is eventID (one,
// unless a writer broke the invariant). The outbox table has no event_id
// index, so this is a Scan with a filter, reading the whole table. It
// returns ErrNotFound (wrapped) when none matches.
func FindEvent(ctx context.Context, ddb DynamoDBAPI, table, eventID string) ([]EventView, error) {
	expr, err := expression.NewBuilder().
		WithFilter(expression.Name(outbox.AttrEventID).Equal(expression.Value(eventID))).Build()
	if err != nil {
		return nil, err
	}
	var out []EventView
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{
		TableName: aws.String(table), FilterExpression: expr.Filter(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("find event %s in %s: %w", eventID, table, err)
		}
		for _, it := range page.Items {
			out = append(out, viewOf(it))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("event %s in %s: %w", eventID, table, ErrNotFound)
	}
	return out, nil
}

// AggregateEvents returns the outbox records of one aggregate (partition
// "<aggregateType>#<aggregateID>") with sequence >= fromSeq, in sequence
// order: a consistent Query of the partition, sort key from
// outbox.KeyFor(…, fromSeq, 0) to the largest record sort key (so no home
// item, takeover mark or heartbeat sharing the partition is listed). It returns ErrNotFound (wrapped) when none
// matches.
func AggregateEvents(ctx context.Context, ddb DynamoDBAPI, table, aggregateType, aggregateID string, fromSeq int64) ([]EventView, error) {
	from := outbox.KeyFor(aggregateType, aggregateID, max(fromSeq, 0), 0)
	// Records' sort keys are digits (outbox.KeyFor); bounding the range
	// leaves out the multi-Region items that may share a partition with an
	// aggregate whose type and id spell their keys (the home item of Wallet
	// w-1, "home#Wallet#w-1"/"home", is in the partition of aggregate type
	// "home", id "Wallet#w-1"; likewise takeover marks and heartbeats).
	last := outbox.KeyFor(aggregateType, aggregateID, math.MaxInt64, 999)
	expr, err := expression.NewBuilder().WithKeyCondition(
		expression.Key(outbox.AttrPK).Equal(expression.Value(from.PK)).
			And(expression.Key(outbox.AttrSK).Between(expression.Value(from.SK), expression.Value(last.SK)))).Build()
	if err != nil {
		return nil, err
	}
	var out []EventView
	p := dynamodb.NewQueryPaginator(ddb, &dynamodb.QueryInput{
		TableName: aws.String(table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("events of %s from sequence %d in %s: %w", from.PK, fromSeq, table, err)
		}
		for _, it := range page.Items {
			out = append(out, viewOf(it))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("events of %s from sequence %d in %s: %w", from.PK, fromSeq, table, ErrNotFound)
	}
	return out, nil
}

// ConsumerState names a consumer and the table holding its dedup state
// (its own table, beside its effects).
type ConsumerState struct {
	Consumer, Table string
}

// Applied fills each view's Applied from the consumers' dedup markers,
// each in its own table (GetItem of dedup.MarkerKey(consumer, event_id),
// consistent).
func Applied(ctx context.Context, ddb DynamoDBAPI, consumers []ConsumerState, views []EventView) error {
	for i := range views {
		views[i].Applied = map[string]time.Time{}
		for _, c := range consumers {
			out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(c.Table), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{dedup.AttrPK: &types.AttributeValueMemberS{Value: dedup.MarkerKey(c.Consumer, views[i].EventID)}},
			})
			if err != nil {
				return fmt.Errorf("dedup marker of %s for %s in %s: %w", c.Consumer, views[i].EventID, c.Table, err)
			}
			if out.Item != nil {
				views[i].Applied[c.Consumer] = parseTime(attrS(out.Item, dedup.AttrAppliedAt))
			}
		}
	}
	return nil
}

// Idempotent fills each view's Idempotency from the idempotency records in
// table of the consumers given as namespaces (GetItem of
// idempotency.RecordKey(namespace, event_id), consistent).
func Idempotent(ctx context.Context, ddb DynamoDBAPI, table string, namespaces []string, views []EventView) error {
	for i := range views {
		views[i].Idempotency = map[string]IdempotencyView{}
		for _, ns := range namespaces {
			out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(table), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{idempotency.AttrPK: &types.AttributeValueMemberS{Value: idempotency.RecordKey(ns, views[i].EventID)}},
			})
			if err != nil {
				return fmt.Errorf("idempotency record of %s for %s in %s: %w", ns, views[i].EventID, table, err)
			}
			if out.Item == nil {
				continue
			}
			iv := IdempotencyView{Status: attrS(out.Item, idempotency.AttrStatus), UpdatedAt: parseTime(attrS(out.Item, idempotency.AttrUpdatedAt))}
			if sec, err := strconv.ParseInt(attrN(out.Item, idempotency.AttrExpiresAt), 10, 64); err == nil {
				iv.ExpiresAt = time.Unix(sec, 0).UTC()
			}
			views[i].Idempotency[ns] = iv
		}
	}
	return nil
}

// Write prints the view as "field value" lines, a blank line after.
func (v EventView) Write(w io.Writer) {
	line := func(k, val string) {
		if val != "" {
			fmt.Fprintf(w, "%-14s %s\n", k, val)
		}
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339Nano)
	}
	line("event_id", v.EventID)
	line("event_type", v.EventType)
	line("aggregate", v.AggregateType+" "+v.AggregateID)
	line("sequence", strconv.FormatInt(v.Sequence, 10))
	line("status", v.Status)
	line("key", v.Key.PK+" "+v.Key.SK)
	line("occurred_at", ts(v.OccurredAt))
	line("created_at", ts(v.CreatedAt))
	line("pending_shard", v.PendingShard)
	line("published_at", ts(v.PublishedAt))
	line("bus_event_id", v.BusEventID)
	line("expires_at", ts(v.ExpiresAt))
	line("parked_at", ts(v.ParkedAt))
	line("parked_reason", v.ParkedReason)
	line("redriven_at", ts(v.RedrivenAt))
	if v.Applied != nil {
		var parts []string
		for c, at := range v.Applied {
			parts = append(parts, c+" "+ts(at))
		}
		if len(parts) == 0 {
			parts = append(parts, "no consumer marker")
		}
		slices.Sort(parts)
		line("applied", strings.Join(parts, ", "))
	}
	if v.Idempotency != nil {
		var parts []string
		for c, r := range v.Idempotency {
			p := c + " " + r.Status + " " + ts(r.UpdatedAt)
			if !r.ExpiresAt.IsZero() {
				p += " (answers repeats until " + ts(r.ExpiresAt) + ")"
			}
			parts = append(parts, p)
		}
		if len(parts) == 0 {
			parts = append(parts, "no idempotency record")
		}
		slices.Sort(parts)
		line("idempotency", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}
