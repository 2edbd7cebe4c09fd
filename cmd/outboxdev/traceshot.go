package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// runTraceScreenshot is `outboxdev trace-screenshot`: Jaeger and the local
// stack with tracing on; one order created, paid and shipped through the
// HTTP API, its OrderPaid lost by the relay after publishing (so the
// reconciler re-sends it and every consumer absorbs a duplicate); the pay
// request's trace looked up through Jaeger's HTTP API and its page loaded in
// headless Chromium (Debian's chromium package), saved as a PNG.
func runTraceScreenshot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("trace-screenshot", flag.ExitOnError)
	out := fs.String("out", filepath.Join("results", "trace-one-order.png"), "screenshot file (PNG)")
	jaegerBin := fs.String("jaeger", filepath.Join("bin", "jaeger"), "the Jaeger binary (make bin/jaeger)")
	chromium := fs.String("chromium", "chromium", "headless Chromium binary (Debian package chromium)")
	endpoint := endpointFlag(fs)
	_ = fs.Parse(args)
	if _, err := exec.LookPath(*chromium); err != nil {
		return fmt.Errorf("%s not found: install Debian's chromium package (apt-get install chromium): %w", *chromium, err)
	}
	ui, stop, err := startTracing(ctx, *jaegerBin, "")
	if err != nil {
		return err
	}
	defer stop()

	var target atomic.Pointer[string]
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{Endpoint: *endpoint, APIAddr: "127.0.0.1:0", Prefix: "traceshot", Logger: quiet, Tracing: true,
		ReconcileEvery: 500 * time.Millisecond, ReconcileAfter: time.Second,
		LoseAfterPublish: func(e outbox.Envelope) bool {
			id := target.Load()
			return id != nil && e.AggregateID == *id && e.EventType == "OrderPaid"
		}})
	if err != nil {
		return err
	}
	defer s.Close()

	var created struct {
		ID string `json:"id"`
	}
	if err := call(ctx, s.URL+"/orders", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`, &created); err != nil {
		return err
	}
	target.Store(&created.ID)
	for _, cmd := range []string{"pay", "ship"} {
		if err := call(ctx, s.URL+"/orders/"+created.ID+"/"+cmd, "", nil); err != nil {
			return err
		}
	}
	fmt.Println("order", created.ID, "created, paid and shipped; waiting for the reconciler's re-send")

	traceID, err := waitForTrace(ctx, ui, created.ID, "outbox resend OrderPaid", 60*time.Second)
	if err != nil {
		return err
	}
	view, closeView, err := serveTraceView("127.0.0.1:0", ui)
	if err != nil {
		return err
	}
	defer closeView()
	page := view + "/?order=" + created.ID // every trace of the order: create, pay (with the re-send), ship
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	abs, _ := filepath.Abs(*out)
	profile, err := os.MkdirTemp("", "outboxdev-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, *chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+profile, "--window-size=1600,1500", "--virtual-time-budget=15000", "--screenshot="+abs, page)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chromium: %w\n%s", err, b)
	}
	fmt.Printf("trace page  %s (Jaeger API: %s/api/traces/%s)\none order   %s\nscreenshot  %s\n", page, ui, traceID, traceSearchURL(ui, created.ID), abs)
	return nil
}

// call POSTs body to u and decodes a 2xx JSON answer into out.
func call(ctx context.Context, u, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", u, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// waitForTrace flushes the tracer provider and asks Jaeger's HTTP API
// (/api/traces) for the order's traces until one holds a span named span;
// it returns that trace's id.
func waitForTrace(ctx context.Context, ui, orderID, span string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	q := url.Values{"service": {traceServiceName}, "tags": {`{"outbox.aggregate_id":"` + orderID + `"}`}, "limit": {"50"}, "lookback": {"1h"}}
	for time.Now().Before(deadline) {
		if f, ok := otel.GetTracerProvider().(interface{ ForceFlush(context.Context) error }); ok {
			_ = f.ForceFlush(ctx)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ui+"/api/traces?"+q.Encode(), nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var body struct {
				Data []struct {
					TraceID string `json:"traceID"`
					Spans   []struct {
						OperationName string `json:"operationName"`
					} `json:"spans"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			for _, t := range body.Data {
				dups := 0
				found := false
				for _, s := range t.Spans {
					found = found || s.OperationName == span
					if strings.HasPrefix(s.OperationName, "consume ") {
						dups++
					}
				}
				// the re-send and the six consumer deliveries (applied + duplicate)
				if found && dups >= 6 && err == nil {
					return t.TraceID, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return "", errors.New("no trace with " + span + " for order " + orderID + " in Jaeger within " + timeout.String())
}
