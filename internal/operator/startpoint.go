package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The bounds of what an archive can give a backfill (ArchiveReach.Bound):
// which of them decides the earliest event time the backfill delivers.
const (
	// BoundCreation: the archive's creation. An archive takes only the
	// events a bus accepts after it exists ("incoming events might not
	// immediately start being sent to the archive", API_CreateArchive).
	BoundCreation = "creation"
	// BoundRetention: the archive's retention window. DescribeArchive's
	// RetentionDays is "the number of days to retain events in the archive
	// before they are deleted" (API_Archive); 0 keeps them indefinitely
	// ("Default value is 0. If set to 0, events are retained indefinitely",
	// API_CreateArchive; eb-archive: "By default, EventBridge stores events
	// in an archive indefinitely"). An event older than now − RetentionDays
	// may be gone.
	// https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_Archive.html
	// https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_CreateArchive.html
	// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-archive.html
	BoundRetention = "retention"
	// BoundFrom: the backfill's own start (-from): a replay sends only the
	// events whose time is at or after it (API_StartReplay EventStartTime).
	BoundFrom = "from"
)

// ReachOptions say which archive, which consumer and which backfill
// CheckArchiveReach judges.
type ReachOptions struct {
	// Archive is the archive's name or ARN. Required.
	Archive string
	// Rule is the consumer's rule: its ARN, or its name on Bus. Required.
	Rule string
	// Bus is the event bus name of Rule when Rule is a name.
	Bus string
	// Source is the Source the outbox publishes its events with
	// (config.EnvEventSource); default appenv.EventSource.
	Source string
	// EventTypes are the event types the outbox publishes; default
	// order.EventTypes.
	EventTypes []string
	// From is the backfill's start (zero: none given, the archive's
	// creation).
	From time.Time
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// ArchiveReach is what an archive can give one consumer's backfill: the
// earliest event time it still holds for the backfill, what bounds it, and
// which of the consumer's event types its pattern leaves out.
type ArchiveReach struct {
	// Archive is the archive's name; Created when it was created.
	Archive string
	Created time.Time
	// RetentionDays is DescribeArchive's RetentionDays (0: forever);
	// OldestKept is now − RetentionDays days (zero when forever): events
	// archived before it may have been deleted.
	RetentionDays int32
	OldestKept    time.Time
	// From is the backfill's start (zero: none given).
	From time.Time
	// Start is the latest of Created, OldestKept and From: the earliest
	// event time the backfill can deliver. Bound names which one it is
	// (BoundCreation, BoundRetention, BoundFrom).
	Start time.Time
	Bound string
	// Pattern is the archive's event pattern ("": every event); Rule and
	// RulePattern the consumer's rule (name) and its pattern.
	Pattern, Rule, RulePattern string
	// Needed are the outbox's event types the rule matches; Missing those
	// of them the archive's pattern does not take (so a replay never
	// delivers them), in the order of ReachOptions.EventTypes.
	Needed, Missing []string
	// PatternNote says why a pattern could not be judged ("": it was).
	PatternNote string
}

// CheckArchiveReach describes the archive (DescribeArchive) and the
// consumer's rule (DescribeRule) and says what a backfill of the rule from
// the archive can deliver: from which event time (the latest of the
// archive's creation, its retention window and o.From), and which of the
// outbox's event types the rule receives that the archive's pattern never
// took. Patterns are judged on one sample event per type, the relay's
// PutEvents entry as the bus delivers it (source o.Source, the type as
// detail-type, an outbox envelope of an order as detail) with the local
// runtime's EventBridge pattern matcher (localrt.Pattern): a pattern that
// filters on payload values is judged for that sample only, and one the
// matcher does not model is reported in PatternNote, not judged.
// DescribeArchive shows the archive as it is now: an UpdateArchive that
// changed its pattern or retention is not seen (events archived before
// followed the old pattern).
//
// Errors: a missing archive or rule (before any call), an EventBridge
// call's error (ResourceNotFoundException for an unknown archive or rule).
func CheckArchiveReach(ctx context.Context, api ReplayAPI, o ReachOptions) (ArchiveReach, error) {
	if o.Archive == "" || o.Rule == "" {
		return ArchiveReach{}, fmt.Errorf("archive reach: an archive and a rule are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Source == "" {
		o.Source = appenv.EventSource
	}
	if len(o.EventTypes) == 0 {
		o.EventTypes = order.EventTypes
	}
	name := archiveNameOf(o.Archive)
	a, err := api.DescribeArchive(ctx, &eventbridge.DescribeArchiveInput{ArchiveName: aws.String(name)})
	if err != nil {
		return ArchiveReach{}, fmt.Errorf("archive %s: %w", name, err)
	}
	ruleName, bus := o.Rule, o.Bus
	if strings.HasPrefix(o.Rule, "arn:") {
		ruleName, bus = ruleOfARN(o.Rule)
	}
	rule, err := api.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(ruleName), EventBusName: nilIfEmpty(bus)})
	if err != nil {
		return ArchiveReach{}, fmt.Errorf("rule %s: %w", o.Rule, err)
	}
	r := ArchiveReach{Archive: name, Created: aws.ToTime(a.CreationTime).UTC(), RetentionDays: aws.ToInt32(a.RetentionDays),
		From: o.From.UTC(), Pattern: aws.ToString(a.EventPattern), Rule: ruleName, RulePattern: aws.ToString(rule.EventPattern)}
	r.Start, r.Bound = r.Created, BoundCreation
	if r.RetentionDays > 0 {
		r.OldestKept = o.Now().UTC().Add(-time.Duration(r.RetentionDays) * 24 * time.Hour)
		if r.OldestKept.After(r.Start) {
			r.Start, r.Bound = r.OldestKept, BoundRetention
		}
	}
	if r.From.After(r.Start) {
		r.Start, r.Bound = r.From, BoundFrom
	}
	r.Needed, r.Missing, r.PatternNote = typesReached(o, aws.ToString(a.ArchiveArn), r.Pattern, r.RulePattern)
	return r, nil
}

// ruleOfARN returns the rule name and bus of a rule ARN
// ("arn:aws:events:<region>:<account>:rule/<name>" on the default bus,
// ".../rule/<bus>/<name>" on another): DescribeRule takes a name and a bus,
// not an ARN (API_DescribeRule: Name is 1..64 of [.\-_A-Za-z0-9]).
func ruleOfARN(arn string) (name, bus string) {
	i := strings.Index(arn, ":rule/")
	if i < 0 {
		return arn, ""
	}
	path := arn[i+len(":rule/"):]
	if j := strings.LastIndex(path, "/"); j >= 0 {
		return path[j+1:], path[:j]
	}
	return path, ""
}

// typesReached returns the event types of o the rule's pattern matches
// (needed) and those of them the archive's pattern does not (missing),
// judged on a sample event per type; note says why it could not judge.
func typesReached(o ReachOptions, archiveARN, archivePattern, rulePattern string) (needed, missing []string, note string) {
	compile := func(what, p string) (*localrt.Pattern, bool) {
		if p == "" {
			return nil, true // no pattern: every event
		}
		c, err := localrt.CompilePattern(p)
		if err != nil {
			note = fmt.Sprintf("the %s's pattern could not be judged (%v): check by hand that it takes every event type the rule receives", what, err)
			return nil, false
		}
		return c, true
	}
	archive, okA := compile("archive", archivePattern)
	rule, okR := compile("rule", rulePattern)
	if !okA || !okR {
		return nil, nil, note
	}
	region, account := "us-east-1", "000000000000"
	if parts := strings.Split(archiveARN, ":"); len(parts) >= 5 {
		region, account = parts[3], parts[4]
	}
	for _, typ := range o.EventTypes {
		ev := sampleEvent(o.Source, typ, region, account, o.Now())
		if rule != nil && !rule.Match(ev) {
			continue
		}
		needed = append(needed, typ)
		if archive != nil && !archive.Match(ev) {
			missing = append(missing, typ)
		}
	}
	if len(needed) == 0 {
		return nil, nil, fmt.Sprintf("the rule's pattern matches none of the event types %s of source %s: the archive's pattern was not judged (give the outbox's source: -source)",
			strings.Join(o.EventTypes, ", "), o.Source)
	}
	return needed, missing, ""
}

// sampleEvent is an event of typ as the bus delivers the relay's entry
// (eb-events-structure), with an outbox envelope of an order as detail.
func sampleEvent(source, typ, region, account string, now time.Time) map[string]any {
	env := outbox.Envelope{EventID: "00000000-0000-7000-8000-000000000000", EventType: typ, EventVersion: order.EventVersion,
		AggregateType: order.AggregateType, AggregateID: "sample", Sequence: 1, OccurredAt: now.UTC(), Payload: json.RawMessage(`{}`)}
	detail, _ := env.Detail()
	raw, _ := json.Marshal(map[string]any{"version": "0", "id": "00000000-0000-0000-0000-000000000000", "detail-type": typ,
		"source": source, "account": account, "time": now.UTC().Format(time.RFC3339), "region": region,
		"resources": []string{}, "detail": json.RawMessage(detail)})
	var ev map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	_ = dec.Decode(&ev)
	return ev
}

// limit names the binding bound of r, e.g. "the archive's retention window
// (365 days, oldest kept event time 2025-01-02T03:04:05Z)".
func (r ArchiveReach) limit() string {
	switch r.Bound {
	case BoundRetention:
		return fmt.Sprintf("the archive's retention window (%d days, oldest kept event time %s)", r.RetentionDays, r.OldestKept.Format(time.RFC3339))
	case BoundFrom:
		return fmt.Sprintf("the backfill's -from (%s)", r.From.Format(time.RFC3339))
	}
	return fmt.Sprintf("the archive was created (%s)", r.Created.Format(time.RFC3339))
}

// PatternGap says what the archive's pattern leaves out of the consumer's
// events, or "" when it leaves out nothing (or could not be judged: then
// PatternNote says so).
func (r ArchiveReach) PatternGap() string {
	if len(r.Missing) == 0 {
		return ""
	}
	which := "holds no " + strings.Join(r.Missing, ", ") + " events, which rule " + r.Rule + " receives"
	if len(r.Missing) == len(r.Needed) {
		which = "holds none of the events rule " + r.Rule + " receives (" + strings.Join(r.Missing, ", ") + ")"
	}
	return fmt.Sprintf("GAP: archive %s's pattern %s %s: a replay never delivers them, for any order. "+
		"An ordered consumer holds the next event after each of them as a sequence gap and dead-letters it (sequence_gap). "+
		"Widen the archive's pattern (UpdateArchive; it takes only events published from then on) and send the rest from the outbox table (outboxctl replay, within its PublishedRetention)",
		r.Archive, r.Pattern, which)
}

// StartGap is what an archive cannot give a consumer that starts from it:
// the aggregates whose history began before the earliest event the
// backfill can deliver (ArchiveReach.Start).
type StartGap struct {
	// Reach is the archive's reach the orders were checked against.
	Reach ArchiveReach
	// Before counts the orders created before Reach.Start; Earliest is the
	// first one's creation time and Example its id.
	Before   int
	Earliest time.Time
	Example  string
}

// FindStartGap scans the orders table (an operator tool's Scan: about
// table-size / 4 KB × 0.5 read units) for orders created before r.Start:
// their first events are not in what the backfill delivers (created before
// the archive, deleted past its retention, or before -from), so a consumer
// backfilled from the archive misses the start of their history, and an
// ordered one holds their next event as a sequence gap. An order's
// creation time stands for its first event's time (the event's time is
// its occurred_at, which is the creation). A zero Before: as far as time
// goes the backfill delivers every order's whole history (see also
// r.PatternGap).
func FindStartGap(ctx context.Context, ddb DynamoDBAPI, ordersTable string, r ArchiveReach) (StartGap, error) {
	g := StartGap{Reach: r}
	expr, err := expression.NewBuilder().
		WithFilter(expression.Name(order.AttrKind).Equal(expression.Value(order.KindOrder))).
		WithProjection(expression.NamesList(expression.Name(order.AttrID), expression.Name(order.AttrCreatedAt))).Build()
	if err != nil {
		return g, err
	}
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(ordersTable), FilterExpression: expr.Filter(),
		ProjectionExpression: expr.Projection(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return g, fmt.Errorf("scan %s: %w", ordersTable, err)
		}
		for _, it := range page.Items {
			created, _ := time.Parse(time.RFC3339Nano, str(it, order.AttrCreatedAt))
			if created.IsZero() || !created.Before(r.Start) {
				continue
			}
			g.Before++
			if g.Earliest.IsZero() || created.Before(g.Earliest) {
				g.Earliest, g.Example = created, str(it, order.AttrID)
			}
		}
	}
	return g, nil
}

// String says what the gap means for the consumer, in one paragraph per
// finding: the orders that began before the binding bound (named, with its
// figures), and what the archive's pattern leaves out.
func (g StartGap) String() string {
	var lines []string
	if g.Before == 0 {
		lines = append(lines, fmt.Sprintf("no order began before %s: as far as time goes the archive holds every order's whole history", g.Reach.limit()))
	} else {
		lines = append(lines, fmt.Sprintf("GAP: %d order(s) began before %s, the first %s (order %s): their first events are not in the archive for this backfill. "+
			"A consumer whose table is empty cannot get their history from a replay: an ordered one holds their next event as a sequence gap and dead-letters it (sequence_gap). "+
			"Declare where it starts for them (outboxctl consumer-baseline -from-orders-table), or rebuild it from a backup taken before %s",
			g.Before, g.Reach.limit(), g.Earliest.Format(time.RFC3339), g.Example, g.Reach.Start.Format(time.RFC3339)))
	}
	if pg := g.Reach.PatternGap(); pg != "" {
		lines = append(lines, pg)
	}
	if g.Reach.PatternNote != "" {
		lines = append(lines, g.Reach.PatternNote)
	}
	return strings.Join(lines, "\n")
}
