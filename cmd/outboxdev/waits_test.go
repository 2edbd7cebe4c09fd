package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
)

// TestSettleProgressSaysWhatItWaitsFor: demo -attach names the pending
// records, the reconciler's knobs and the ordered consumers' hold.
func TestSettleProgressSaysWhatItWaitsFor(t *testing.T) {
	started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := devstack.State{Console: "http://127.0.0.1:8090", ReconcileEvery: 5 * time.Second, ReconcileAfter: 10 * time.Second, Started: started}
	got := settleProgress(devstack.Audit{Events: 40, Pending: 3, Parked: 1, Lost: 2}, 12*time.Second, st, started.Add(12*time.Second))
	for _, w := range []string{"after 12s", "3 of 40 outbox records pending", "1 parked", "2 event(s) not yet applied",
		"older than 10s (-reconcile-after)", "every 5s (-reconcile-every), the next in 3s", "ordered consumer holds"} {
		if !strings.Contains(got, w) {
			t.Errorf("progress %q lacks %q", got, w)
		}
	}
	if got := settleProgress(devstack.Audit{Events: 40}, time.Second, st, started); strings.Contains(got, "reconciler") || strings.Contains(got, "holds") {
		t.Errorf("nothing pending or held, yet: %q", got)
	}
	if got := settleIntro(st); !strings.Contains(got, "console: http://127.0.0.1:8090") {
		t.Errorf("intro %q does not point to the console", got)
	}
}

// TestParseDeadLetter: -dead-letter takes CONSUMER:TYPE pairs of known
// consumers and event types, and refuses anything else naming the choices.
func TestParseDeadLetter(t *testing.T) {
	got, err := parseDeadLetter(" ledger:OrderShipped, notifier:OrderPaid,ledger:OrderPaid ")
	if err != nil || strings.Join(got["ledger"], ",") != "OrderShipped,OrderPaid" || strings.Join(got["notifier"], ",") != "OrderPaid" {
		t.Fatalf("parse: %v, %v", got, err)
	}
	if got, err := parseDeadLetter(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"ledger":              "CONSUMER:DETAIL_TYPE",
		"ledger:":             "CONSUMER:DETAIL_TYPE",
		"billing:OrderPaid":   "no consumer \"billing\" (the consumers: ledger, notifier, fulfilment)",
		"ledger:OrderRefused": "no event type \"OrderRefused\"",
	} {
		if _, err := parseDeadLetter(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", in, err, want)
		}
	}
}
