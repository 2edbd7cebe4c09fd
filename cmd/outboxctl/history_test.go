package main

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestHistory: history lists an aggregate's events from the outbox table
// (sequence, type, time, event id, status), the id before or after the
// flags, and says which sequences the table no longer has.
func TestHistory(t *testing.T) {
	w := newWorld(t)
	for _, args := range [][]string{{"history", "-table", w.table, "o-1"}, {"history", "o-1", "-table", w.table}} {
		out, err := w.ctl(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		mustContain(t, "history o-1", out, "1\tOrderPlaced\t", w.ids["o-1/1"], "2\tOrderPaid\t", w.ids["o-1/2"], "\tPUBLISHED\t", "3\tOrderShipped\t", "\tPARKED\t", "3 event(s) of Order o-1\n")
		if strings.Contains(out, "no longer") {
			t.Errorf("history of a whole aggregate says sequences expired:\n%s", out)
		}
	}
	// the first record expired (TTL): history says so
	k := outbox.KeyFor("Order", "o-1", 1, 0)
	if _, err := w.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(w.table), Key: k.AttributeValues()}); err != nil {
		t.Fatal(err)
	}
	out, err := w.ctl(t, "history", "-table", w.table, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "history after expiry", out, "2 event(s)", "sequences 1..1 are no longer in "+w.table, "archive")
	out, err = w.ctl(t, "history", "-table", w.table, "o-404")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "history of an unknown aggregate", out, "0 event(s)", "no record of this aggregate")
	if _, err := w.ctl(t, "history", "-table", w.table); !errors.Is(err, errUsage) {
		t.Errorf("history without an id: %v", err)
	}
}

// TestBackfillAndReplays: backfill replays the archive to one rule (the
// notifier's) and reports progress until COMPLETED; replays lists it;
// usage and unknown names are clear errors.
func TestBackfillAndReplays(t *testing.T) {
	t.Setenv(appenv.EnvOrdersTable, "")
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.bus.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String("ctl-archive"), EventSourceArn: aws.String(w.bus.ARN()),
		EventPattern: aws.String(`{"source":["` + appenv.EventSource + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	var entries []ebtypes.PutEventsRequestEntry
	for _, typ := range []string{"OrderPlaced", "OrderPaid", "OrderShipped"} {
		entries = append(entries, ebtypes.PutEventsRequestEntry{EventBusName: aws.String("ctl-bus"), Source: aws.String(appenv.EventSource),
			DetailType: aws.String(typ), Detail: aws.String(`{"event_id":"` + typ + `"}`), Time: aws.Time(time.Now())})
	}
	if out, err := w.bus.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries}); err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	for range 3 { // the live deliveries
		<-w.events
	}
	var notifierRule string
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerNotifier {
			notifierRule = r.Name
		}
	}
	time.Sleep(1100 * time.Millisecond) // -to is now, rounded up to the next second
	out, err := w.ctl(t, "backfill", "-archive", "ctl-archive", "-rule", notifierRule, "-bus", "ctl-bus", "-settle", "-1s", "-poll", "20ms", "-name", "nb-1")
	if err != nil {
		t.Fatalf("backfill: %v\n%s", err, out)
	}
	mustContain(t, "backfill", out, "nb-1\t", "COMPLETED", "100.0%", "replayed to "+notifierRule, "start point not checked")
	got := map[string]bool{}
	for range 3 {
		select {
		case ev := <-w.events:
			got[ev.DetailType] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("the notifier got %d of the 3 replayed events", len(got))
		}
	}
	out, err = w.ctl(t, "replays")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "replays", out, "nb-1\tCOMPLETED", "1 replay(s)")

	if _, err := w.ctl(t, "backfill", "-archive", "ctl-archive"); !errors.Is(err, errUsage) {
		t.Errorf("backfill without -rule: %v", err)
	}
	if _, err := w.ctl(t, "backfill", "-archive", "nope", "-rule", notifierRule, "-bus", "ctl-bus", "-settle", "-1s"); err == nil || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Errorf("backfill of an unknown archive: %v", err)
	}
	if _, err := w.ctl(t, "backfill", "-archive", "ctl-archive", "-rule", "nope", "-bus", "ctl-bus", "-settle", "-1s"); err == nil || !strings.Contains(err.Error(), "rule nope") ||
		!strings.Contains(err.Error(), "the bus's rules: ") || !strings.Contains(err.Error(), notifierRule) {
		t.Errorf("backfill to an unknown rule: %v, want the error to list the bus's rules (%s among them)", err, notifierRule)
	}
	if _, err := w.ctl(t, "backfill", "-archive", "ctl-archive", "-rule", notifierRule, "-settle", "-1s"); err == nil || !strings.Contains(err.Error(), "no -bus given") {
		t.Errorf("backfill without -bus, the rule on the outbox's bus: %v, want it to name -bus", err)
	}
	future := time.Now().Add(365 * 24 * time.Hour).UTC().Format(time.RFC3339)
	if _, err := w.ctl(t, "backfill", "-archive", "ctl-archive", "-rule", notifierRule, "-bus", "ctl-bus", "-to", future); err == nil || !strings.Contains(err.Error(), "is in the future") {
		t.Errorf("backfill -to %s: %v, want refused before anything starts", future, err)
	}
	out, err = w.ctl(t, "replays")
	if err != nil || strings.Contains(out, "2 replay(s)") {
		t.Errorf("after the refused backfills: %q, %v; want still one replay", out, err)
	}
}

var keptRE = regexp.MustCompile(`oldest kept event time ([^)]+)\)`)

// TestBackfillStartPointNamesTheBindingLimit: backfill -orders-table judges
// the start point against everything that bounds the archive, through the
// AWS front as against AWS: an archive created 400 days ago that keeps
// events 30 days holds nothing older than 30 days, so the orders of 100 and
// 400 days ago are reported against its retention window (not its
// creation), a later -from is reported as the bound, and a pattern that
// takes only payments and cancellations is reported as leaving out the
// other types the notifier's rule receives — even without -orders-table.
func TestBackfillStartPointNamesTheBindingLimit(t *testing.T) {
	t.Setenv(appenv.EnvOrdersTable, "")
	var offset atomic.Int64
	w := newWorld(t, func(c *localrt.BusConfig) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	ctx := context.Background()
	now := time.Now().UTC()
	day := 24 * time.Hour
	ordersTable := "ctl-orders-" + strconv.FormatInt(now.UnixNano(), 36)
	if _, err := w.ddb.CreateTable(ctx, order.CreateTableInput(ordersTable)); err != nil {
		t.Fatal(err)
	}
	for id, age := range map[string]time.Duration{"o-old": 400 * day, "o-mid": 100 * day, "o-new": time.Hour} {
		if _, err := w.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ordersTable), Item: map[string]types.AttributeValue{
			order.AttrPK: &types.AttributeValueMemberS{Value: order.KeyPrefixOrder + id}, order.AttrKind: &types.AttributeValueMemberS{Value: order.KindOrder},
			order.AttrID: &types.AttributeValueMemberS{Value: id}, order.AttrCreatedAt: &types.AttributeValueMemberS{Value: now.Add(-age).Format(time.RFC3339Nano)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	offset.Store(int64(-401 * day)) // the archive was created 401 days ago
	if _, err := w.bus.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String("ctl-payments"), EventSourceArn: aws.String(w.bus.ARN()), RetentionDays: aws.Int32(30),
		EventPattern: aws.String(`{"source":["` + appenv.EventSource + `"],"detail-type":["OrderPaid","OrderCancelled"]}`)}); err != nil {
		t.Fatal(err)
	}
	offset.Store(0)
	var notifierRule string
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerNotifier {
			notifierRule = r.Name
		}
	}
	patternGap := "holds no OrderPlaced, OrderShipped events, which rule " + notifierRule + " receives"
	from := now.Add(-10 * time.Minute).Truncate(time.Second)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"retention binds", []string{"-orders-table", ordersTable},
			[]string{"GAP: 2 order(s) began before the archive's retention window (30 days, oldest kept event time ", "(order o-old)", patternGap}},
		{"-from binds", []string{"-orders-table", ordersTable, "-from", from.Format(time.RFC3339)},
			[]string{"GAP: 3 order(s) began before the backfill's -from (" + from.Format(time.RFC3339) + ")", patternGap}},
		{"no orders table: the pattern is still judged", nil,
			[]string{patternGap, "start point not checked"}},
	}
	for i, tc := range tests {
		args := append([]string{"backfill", "-archive", "ctl-payments", "-rule", notifierRule, "-bus", "ctl-bus", "-settle", "-1s", "-poll", "20ms",
			"-name", "sp-" + strconv.Itoa(i)}, tc.args...)
		out, err := w.ctl(t, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		mustContain(t, tc.name, out, tc.want...)
		if m := keptRE.FindStringSubmatch(out); m != nil {
			kept, err := time.Parse(time.RFC3339, m[1])
			if d := kept.Sub(now.Add(-30 * day)); err != nil || d < -time.Minute || d > time.Minute {
				t.Errorf("%s: oldest kept event time %s, want now − 30 days (%s)", tc.name, m[1], now.Add(-30*day).Format(time.RFC3339))
			}
		}
		if strings.Contains(out, "before the archive was created") {
			t.Errorf("%s: reported against the archive's creation, which does not bind:\n%s", tc.name, out)
		}
	}
}
