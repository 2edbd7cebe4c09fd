package operator

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// TestArchiveReachAndStartGap: the start-point check takes every bound of
// what the archive holds for the backfill — its creation, its retention
// window, the backfill's -from, whichever is latest — and names the one
// that binds; and it says which of the rule's event types the archive's
// pattern leaves out. The archives and rules are the local bus's
// (DescribeArchive and DescribeRule answer as EventBridge does: the
// archive's creation time, RetentionDays with 0 for forever, its
// EventPattern as given; DescribeRule by name and bus, never by ARN); the
// orders are items of a real orders table (Dynoxide). The check used to
// compare orders with the archive's creation only: the retention, -from and
// pattern rows fail on it.
func TestArchiveReachAndStartGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	var offset atomic.Int64 // the bus clock runs at now + offset
	clock := func() time.Time { return now.Add(time.Duration(offset.Load())) }
	bus, err := localrt.NewBus(localrt.BusConfig{Name: "ops-bus", Rules: routing.BusRules(appenv.EventSource), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close(ctx) })

	// Orders created 500, 380, 100 days and one hour ago; an idempotency
	// item of the same table, 600 days old, is not an order.
	env := ddbtest.New(t)
	table := ddbtest.Name("orders")
	env.CreateTable(t, order.CreateTableInput(table))
	for id, age := range map[string]time.Duration{"o-500d": 500 * day, "o-380d": 380 * day, "o-100d": 100 * day, "o-1h": time.Hour} {
		putItem(t, env.DDB, table, order.KeyPrefixOrder+id, order.KindOrder, id, now.Add(-age))
	}
	putItem(t, env.DDB, table, order.KeyPrefixIdempotency+"x#k", order.KindIdempotency, "", now.Add(-600*day))

	source := appenv.EventSource
	ledgerRule, fulfilmentRule := "ledger-order-payments", "fulfilment-order-payments"
	tests := []struct {
		name      string
		age       time.Duration // of the archive
		retention int32
		pattern   string
		rule      string // a rule name on ops-bus, or an ARN
		from      time.Time
		// want
		bound        string
		before       int
		example      string
		missing      []string
		wantInString []string
	}{
		{name: "forever retention: the creation binds", age: 400 * day, rule: ledgerRule,
			bound: BoundCreation, before: 1, example: "o-500d",
			wantInString: []string{"GAP: 1 order(s) began before the archive was created (2025-10-27T12:00:00Z)"}},
		{name: "retention longer than the archive's life: the creation binds", age: 200 * day, retention: 365, rule: ledgerRule,
			bound: BoundCreation, before: 2, example: "o-500d",
			wantInString: []string{"GAP: 2 order(s) began before the archive was created (2026-05-15T12:00:00Z)"}},
		{name: "retention bound: events older than 365 days are deleted", age: 400 * day, retention: 365, rule: ledgerRule,
			bound: BoundRetention, before: 2, example: "o-500d",
			wantInString: []string{"GAP: 2 order(s) began before the archive's retention window (365 days, oldest kept event time 2025-12-01T12:00:00Z)"}},
		{name: "-from later than creation and retention", age: 400 * day, retention: 365, rule: ledgerRule, from: now.Add(-50 * day),
			bound: BoundFrom, before: 3, example: "o-500d",
			wantInString: []string{"GAP: 3 order(s) began before the backfill's -from (2026-10-12T12:00:00Z)"}},
		{name: "-from earlier than the creation does not bind", age: 400 * day, rule: ledgerRule, from: now.Add(-450 * day),
			bound: BoundCreation, before: 1, example: "o-500d"},
		{name: "a young archive kept forever holds all but what came before it", age: 2 * day, rule: bus.RuleARN(ledgerRule),
			bound: BoundCreation, before: 3, example: "o-500d"},
		{name: "an archive of another source holds none of the rule's events", age: 600 * day, pattern: `{"source":["com.example.billing"]}`, rule: ledgerRule,
			bound: BoundCreation, missing: order.EventTypes,
			wantInString: []string{"no order began before the archive was created", "GAP: archive a-6's pattern {\"source\":[\"com.example.billing\"]} holds none of the events rule ledger-order-payments receives (OrderPlaced, OrderPaid, OrderShipped, OrderCancelled)"}},
		{name: "a detail-type filter leaves out the types an ordered rule needs", age: 600 * day, pattern: `{"source":["` + source + `"],"detail-type":["OrderPaid","OrderCancelled"]}`, rule: bus.RuleARN(ledgerRule),
			bound: BoundCreation, missing: []string{order.EventOrderPlaced, order.EventOrderShipped},
			wantInString: []string{"holds no OrderPlaced, OrderShipped events, which rule ledger-order-payments receives", "sequence_gap"}},
		{name: "the same filter holds every type an unordered rule needs", age: 600 * day, pattern: `{"source":["` + source + `"],"detail-type":["OrderPaid","OrderCancelled"]}`, rule: fulfilmentRule,
			bound: BoundCreation},
		{name: "the project's archive pattern holds everything", age: 600 * day, retention: config.DefaultArchiveRetentionDays, pattern: `{"source":["` + source + `"]}`, rule: ledgerRule,
			bound: BoundRetention, before: 2, example: "o-500d"},
	}
	for i, tc := range tests {
		name := "a-" + string(rune('0'+i))
		offset.Store(int64(-tc.age))
		in := &eventbridge.CreateArchiveInput{ArchiveName: aws.String(name), EventSourceArn: aws.String(bus.ARN()), RetentionDays: aws.Int32(tc.retention)}
		if tc.pattern != "" {
			in.EventPattern = aws.String(tc.pattern)
		}
		if _, err := bus.CreateArchive(ctx, in); err != nil {
			t.Fatalf("%s: create archive: %v", tc.name, err)
		}
	}
	offset.Store(0)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := CheckArchiveReach(ctx, bus, ReachOptions{Archive: "a-" + string(rune('0'+i)), Rule: tc.rule, Bus: "ops-bus", From: tc.from, Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			if r.Bound != tc.bound {
				t.Errorf("bound %s (start %s), want %s", r.Bound, r.Start.Format(time.RFC3339), tc.bound)
			}
			if !slices.Equal(r.Missing, tc.missing) || r.PatternNote != "" {
				t.Errorf("missing %v (note %q), want %v", r.Missing, r.PatternNote, tc.missing)
			}
			g, err := FindStartGap(ctx, env.DDB, table, r)
			if err != nil {
				t.Fatal(err)
			}
			if g.Before != tc.before || g.Example != tc.example {
				t.Errorf("%d order(s) before %s (example %q), want %d (%q)", g.Before, r.Start.Format(time.RFC3339), g.Example, tc.before, tc.example)
			}
			s := g.String()
			for _, want := range tc.wantInString {
				if !strings.Contains(s, want) {
					t.Errorf("the report lacks %q:\n%s", want, s)
				}
			}
			if got, want := strings.Contains(s, "GAP"), tc.before > 0 || len(tc.missing) > 0; got != want {
				t.Errorf("the report says GAP: %v, want %v:\n%s", got, want, s)
			}
		})
	}
}

// TestArchiveReachErrors: an unknown archive or rule is the EventBridge
// error; a rule ARN is described by its name and bus.
func TestArchiveReachErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bus, err := localrt.NewBus(localrt.BusConfig{Name: "ops-bus", Rules: routing.BusRules(appenv.EventSource)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close(ctx) })
	if _, err := bus.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String("a"), EventSourceArn: aws.String(bus.ARN())}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ archive, rule, want string }{
		{"nope", "ledger-order-payments", "archive nope: "},
		{"a", "nope", "rule nope: "},
		{"a", "arn:aws:events:us-east-1:000000000000:rule/other-bus/ledger-order-payments", "does not exist"},
		{"", "r", "required"},
	} {
		if _, err := CheckArchiveReach(ctx, bus, ReachOptions{Archive: tc.archive, Rule: tc.rule, Bus: "ops-bus"}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("archive %q rule %q: %v, want %q", tc.archive, tc.rule, err, tc.want)
		}
	}
	if _, err := CheckArchiveReach(ctx, bus, ReachOptions{Archive: "a", Rule: bus.RuleARN("ledger-order-payments")}); err != nil {
		t.Errorf("by rule ARN: %v", err)
	}
	// Another source than the rules': nothing to judge, and it says so.
	r, err := CheckArchiveReach(ctx, bus, ReachOptions{Archive: "a", Rule: "ledger-order-payments", Bus: "ops-bus", Source: "com.example.other"})
	if err != nil || len(r.Needed) != 0 || !strings.Contains(r.PatternNote, "matches none of the event types") || !strings.Contains(StartGap{Reach: r}.String(), "-source") {
		t.Errorf("rule of another source: %+v %v, want a note that nothing was judged", r, err)
	}
}

func putItem(t *testing.T, ddb *dynamodb.Client, table, pk, kind, id string, created time.Time) {
	t.Helper()
	item := map[string]types.AttributeValue{
		order.AttrPK: &types.AttributeValueMemberS{Value: pk}, order.AttrKind: &types.AttributeValueMemberS{Value: kind},
		order.AttrCreatedAt: &types.AttributeValueMemberS{Value: created.UTC().Format(time.RFC3339Nano)},
	}
	if id != "" {
		item[order.AttrID] = &types.AttributeValueMemberS{Value: id}
	}
	if _, err := ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatal(err)
	}
}
