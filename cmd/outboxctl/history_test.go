package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
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
	t.Setenv(config.EnvOrdersTable, "")
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.bus.CreateArchive(ctx, &eventbridge.CreateArchiveInput{ArchiveName: aws.String("ctl-archive"), EventSourceArn: aws.String(w.bus.ARN()),
		EventPattern: aws.String(`{"source":["` + config.DefaultEventSource + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	var entries []ebtypes.PutEventsRequestEntry
	for _, typ := range []string{"OrderPlaced", "OrderPaid", "OrderShipped"} {
		entries = append(entries, ebtypes.PutEventsRequestEntry{EventBusName: aws.String("ctl-bus"), Source: aws.String(config.DefaultEventSource),
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
