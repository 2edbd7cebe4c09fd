package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
)

// TestConsoleDeadLetterSwitchAndActions: with -dead-letter
// ledger:OrderShipped the ledger's DLQ holds the event with reason
// local_fault, and the console shows it (message, reason) and the
// event's outcome "dead-lettered"; a cross-site action is refused (403) and
// changes nothing; the DLQ's redrive button moves the
// message back (and the switch, still on, sends it to the DLQ again).
func TestConsoleDeadLetterSwitchAndActions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "consoledlq", Logger: quiet, ConsoleAddr: "127.0.0.1:0",
		DeadLetterTypes: map[string][]string{routing.ConsumerLedger: {order.EventOrderShipped}}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()
	apiOrder(ctx, t, s.URL)
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	dlq := s.Consumers[routing.ConsumerLedger].DLQ
	if v, _ := dlq.Counts(); v != 1 {
		t.Fatalf("ledger DLQ holds %d messages, want the OrderShipped", v)
	}
	page := get(t, s.ConsoleURL()+"/view")
	for _, w := range []string{"consoledlq-ledger-dlq <small>1 message(s)", "reason <b>local_fault</b>", `data-consumer="ledger" data-outcome="dead_lettered">ledger: <b>dead-lettered</b>`,
		"Fault switch: consumers dead-letter <b>ledger: OrderShipped</b>"} {
		if !strings.Contains(page, w) {
			t.Errorf("the console does not show %q", w)
		}
	}

	form := url.Values{"consumer": {routing.ConsumerLedger}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.ConsoleURL()+"/actions/consumer-redrive", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || dlq.Moved() != 0 {
		t.Fatalf("a cross-site action: status %d, want 403 and nothing moved", resp.StatusCode)
	}
	// A request that is not a browser's (no Origin, no Sec-Fetch-Site) is served.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.ConsoleURL()+"/actions/consumer-redrive", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "1 message(s) redriven from consoledlq-ledger-dlq to consoledlq-ledger;") ||
		!strings.Contains(string(body), "they come back") {
		t.Fatalf("consumer redrive: %d %s", resp.StatusCode, body)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := dlq.Counts(); v != 1 {
		t.Errorf("after the redrive with the switch on the DLQ holds %d messages, want the OrderShipped back", v)
	}

	// A redrive of a record that is not parked (another click won, or no
	// such record) says nothing was redriven, never "now PENDING".
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.ConsoleURL()+"/actions/redrive", strings.NewReader(url.Values{"pk": {"x"}, "sk": {"y"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "nothing redriven") || strings.Contains(string(body), "PENDING") {
		t.Errorf("redrive of a record that is not parked: %d %q, want 422 saying nothing was redriven", resp.StatusCode, body)
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return string(b)
}
