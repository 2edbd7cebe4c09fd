package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// chromiumPath finds Debian's chromium (or $CHROMIUM). Absent: the test is
// skipped with how to install it, except in CI (CI set), where .ci/run
// installs it and its absence fails the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if p := os.Getenv("CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := "headless Chromium not found (" + strings.Join(names, ", ") + "): install Debian's chromium package (apt-get install chromium) or set CHROMIUM to its path"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI installs it in .ci/run")
	}
	t.Skip(msg)
	return ""
}

// TestConsoleInBrowser drives the local console in headless Chromium against
// a real stack (Dynoxide, the stream event source mapping, the bus, the
// three consumers, the reconciler on make dev's defaults): an order created,
// paid and shipped through the HTTP API; every event's consumer outcomes
// must appear on the page as text ("ledger: applied"), with the hops'
// milliseconds. The notifier's queue refuses the bus (-refuse-delivery), so
// its events wait on its rule's DLQ: the page's buttons let the queue
// accept deliveries again and redrive the rule DLQ, and the page must then
// show them applied by the notifier. OrderShipped is parked by the bus's
// fault switch (-reject-type), the page's buttons lift the fault, redrive
// the record and run the reconciler, and the page must then show
// OrderShipped applied by its consumers, re-sent by the reconciler. With CONSOLE_SCREENSHOT=FILE
// the page is saved there as a PNG (make console-screenshot: docs/console.png).
func TestConsoleInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "console", Logger: quiet, ConsoleAddr: "127.0.0.1:0",
		ReconcileEvery: devstack.DevReconcileEvery, ReconcileAfter: devstack.DevReconcileAfter,
		RejectDetailTypes: []string{order.EventOrderShipped}, RefuseDeliveries: []string{routing.ConsumerNotifier}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()
	if s.ConsoleURL() == "" {
		t.Fatal("no console URL")
	}

	id := apiOrder(ctx, t, s.URL)
	bctx, bcancel := browser(ctx, t, chromium)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1360, 1000), chromedp.Navigate(s.ConsoleURL())); err != nil {
		t.Fatalf("open the console: %v", err)
	}

	// Every routed consumer's outcome of the placed and paid events, as
	// text; the notifier's wait on its rule's DLQ.
	want := map[string][]string{
		order.EventOrderPlaced: {"ledger: applied"},
		order.EventOrderPaid:   {"fulfilment: applied", "ledger: applied"},
	}
	waitRows(bctx, t, id, want, 30*time.Second)
	ruleDLQ := `div.rule-dlq[data-rule="notifier-order-events"]`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](fmt.Sprintf(`(() => { const d = document.querySelector(%q); return !!d && d.innerText.includes("2 message(s)") && d.innerText.includes(%q) })()`,
		ruleDLQ, sqsconsumer.RuleErrorNoPermissions), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the notifier rule's DLQ does not show the placed and paid events: %v", err)
	}
	click(bctx, t, `section.refusing button[data-action="/actions/stop-refusing"]`, "take the bus's deliveries again")
	click(bctx, t, ruleDLQ+` button[data-action="/actions/rule-dlq-redrive"]`, "2 message(s) redriven from console-notifier-order-events-rule-dlq to console-notifier; 0 left on the DLQ")
	waitRows(bctx, t, id, map[string][]string{order.EventOrderPlaced: {"notifier: applied"}, order.EventOrderPaid: {"notifier: applied"}}, 30*time.Second)
	waitPath(bctx, t, id, order.EventOrderPaid, []string{"committed", "relay", "published", " ms"})

	// OrderShipped is parked; lift the fault, redrive it from the page.
	parked := `tr.parked-record td`
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(parked))); err != nil {
		t.Fatalf("the parked OrderShipped is not shown: %v", err)
	}
	click(bctx, t, `section.fault button[data-action="/actions/stop-rejecting"]`, "accepts "+order.EventOrderShipped+" again")
	click(bctx, t, `tr.parked-record button[data-action="/actions/redrive"]`, "1 of 1 record(s) redriven")
	click(bctx, t, `header button[data-action="/actions/reconcile"]`, "reconciler ran")

	// The scheduled reconciler (every DevReconcileEvery) publishes it once
	// older than DevReconcileAfter.
	waitRows(bctx, t, id, map[string][]string{order.EventOrderShipped: {"ledger: applied", "notifier: applied"}}, 2*devPublishWithin())
	waitPath(bctx, t, id, order.EventOrderShipped, []string{"parked", "re-sent by the reconciler"})

	if out := os.Getenv("CONSOLE_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("console screenshot: %s (%d bytes)", out, len(png))
	}
}

// devPublishWithin is the longest a redriven record waits on make dev's
// defaults: its age reaching DevReconcileAfter, then the next run.
func devPublishWithin() time.Duration {
	return devstack.DevReconcileAfter + devstack.DevReconcileEvery
}

// apiOrder creates, pays and ships one order through the HTTP API.
func apiOrder(ctx context.Context, t *testing.T, base string) string {
	t.Helper()
	post := func(path, key, body string) []byte {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(post("/orders", "console-1", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`), &o); err != nil || o.ID == "" {
		t.Fatalf("create order: %v %q", err, o.ID)
	}
	post("/orders/"+o.ID+"/pay", "console-2", "")
	post("/orders/"+o.ID+"/ship", "console-3", "")
	return o.ID
}

// browser starts headless Chromium (no sandbox: CI containers run as root).
func browser(ctx context.Context, t *testing.T, path string) (context.Context, context.CancelFunc) {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	return bctx, func() { bcancel(); acancel() }
}

// waitRows waits until, for each event type of order id, the event's
// consumers cell shows every wanted text; it fails naming what is missing.
func waitRows(ctx context.Context, t *testing.T, id string, want map[string][]string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		js := fmt.Sprintf(`(() => { const o = {}; document.querySelectorAll('article[data-order=%q] tr.event').forEach(r => { o[r.dataset.type] = r.querySelector('td.consumers').innerText; }); return o; })()`, id)
		cells, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](js))
		var missing []string
		for typ, texts := range want {
			for _, w := range texts {
				if !strings.Contains(cells[typ], w) {
					missing = append(missing, fmt.Sprintf("%s %q (shown: %q)", typ, w, cells[typ]))
				}
			}
		}
		if err == nil && len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the console does not show: %s (err %v)", within, strings.Join(missing, "; "), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitPath waits until the path cell of event type typ of order id shows
// every wanted text, read in one script (the page re-renders as it polls,
// so a single read can land on a cell being replaced and see it empty); it
// fails naming what the cell shows after 10 s.
func waitPath(ctx context.Context, t *testing.T, id, typ string, want []string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const c = document.querySelector('article[data-order=%q] tr[data-type=%q] td.path'); return c ? c.innerText : ""; })()`, id, typ)
	deadline := time.Now().Add(10 * time.Second)
	for {
		path, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		var missing []string
		for _, w := range want {
			if !strings.Contains(path, w) {
				missing = append(missing, w)
			}
		}
		if err == nil && len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s's path %q does not show %q (err %v)", typ, path, missing, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// click presses the button at sel, confirms the page's dialog and waits for
// the action's result line to contain want.
func click(ctx context.Context, t *testing.T, sel, want string) {
	t.Helper()
	// The page re-renders as it polls: a node found by one DevTools call
	// may be gone by the next (a click by node id then fails with "Could
	// not find node"), so each click finds its button and clicks it in one
	// script, retried until the button is there.
	jsClick := func(s string) chromedp.Action[bool] {
		return chromedp.Poll[bool](fmt.Sprintf(`(() => { const b = document.querySelector(%q); if (!b) return false; b.click(); return true })()`, s),
			chromedp.WithPollingTimeout(30*time.Second))
	}
	_, err := chromedp.Run(ctx, jsClick(sel))
	if err == nil {
		err = chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#confirm-yes`)))
	}
	if err == nil {
		_, err = chromedp.Run(ctx, jsClick(`#confirm-yes`))
	}
	var result string
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.getElementById("result").innerText.includes(%q) || document.getElementById("result").className === "bad"`, want), chromedp.WithPollingTimeout(30*time.Second)))
	}
	if err == nil {
		result, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#result`)))
	}
	if err != nil {
		t.Fatalf("%s: %v (result %q)", sel, err, result)
	}
	if !strings.Contains(result, want) {
		t.Fatalf("%s: the result says %q, want %q", sel, result, want)
	}
	t.Logf("%s → %s", sel, bytes.TrimSpace([]byte(result)))
}
