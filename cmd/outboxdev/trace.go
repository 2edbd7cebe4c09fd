package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// Jaeger's default ports (cmd/jaeger all-in-one, memory storage): the
// OTLP/HTTP receiver and the query UI.
const (
	jaegerOTLP = "127.0.0.1:4318"
	jaegerUI   = "http://127.0.0.1:16686"
)

// traceServiceName is the service.name the local stack's spans carry: one
// process runs every function, so one service; each span's name says the hop.
const traceServiceName = "ddb-outbox-dev"

// startTracing starts the Jaeger binary (built by `make bin/jaeger` from the
// tools/jaeger module) unless endpoint is given, waits for its UI, and
// installs the OTLP tracer provider. It returns a stop function that
// flushes the spans and stops Jaeger (which keeps traces in memory only).
func startTracing(ctx context.Context, jaegerBin, endpoint string) (ui string, stop func(), err error) {
	var cmd *exec.Cmd
	if endpoint == "" {
		if _, err := os.Stat(jaegerBin); err != nil {
			return "", nil, fmt.Errorf("-trace needs Jaeger at %s: run `make bin/jaeger` (builds the tools/jaeger module's go tool), or pass -trace-endpoint HOST:PORT of an OTLP/HTTP receiver: %w", jaegerBin, err)
		}
		logf, err := os.CreateTemp("", "outboxdev-jaeger-*.log")
		if err != nil {
			return "", nil, err
		}
		cmd = exec.Command(jaegerBin)
		cmd.Stdout, cmd.Stderr = logf, logf
		dieWithUs(cmd)
		if err := cmd.Start(); err != nil {
			return "", nil, fmt.Errorf("start jaeger: %w", err)
		}
		if err := waitHTTP(ctx, jaegerUI, 30*time.Second); err != nil {
			_ = cmd.Process.Kill()
			return "", nil, fmt.Errorf("jaeger did not come up (log: %s): %w", logf.Name(), err)
		}
		endpoint, ui = jaegerOTLP, jaegerUI
	}
	_, shutdown, err := otelsetup.Setup(ctx, otelsetup.Config{Enabled: true, ServiceName: traceServiceName, Endpoint: endpoint})
	if err != nil {
		if cmd != nil {
			_ = cmd.Process.Kill()
		}
		return "", nil, err
	}
	return ui, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
		if cmd != nil {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
			}
		}
	}, nil
}

// waitHTTP polls url until it answers or the timeout passes.
func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out waiting for " + url)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// traceSearchURL is the Jaeger search page of one order's traces.
func traceSearchURL(ui, orderID string) string {
	return ui + "/search?service=" + traceServiceName + "&tags=%7B%22outbox.aggregate_id%22%3A%22" + orderID + "%22%7D"
}

//go:embed traceview/index.html
var traceViewFS embed.FS

// serveTraceView serves, on addr, a one-page waterfall of a trace
// (/?trace=<id>) read from Jaeger's query API, which it proxies under /api/.
// It stands in for the Jaeger UI: the Go module of cmd/jaeger embeds only a
// placeholder page (the UI is a separately built web app, not served by the
// registries reachable here). It returns the base URL and a close function.
func serveTraceView(addr, jaegerUIURL string) (string, func(), error) {
	target, err := url.Parse(jaegerUIURL)
	if err != nil {
		return "", nil, err
	}
	sub, _ := fs.Sub(traceViewFS, "traceview")
	mux := http.NewServeMux()
	mux.Handle("/api/", httputil.NewSingleHostReverseProxy(target))
	mux.Handle("/", http.FileServerFS(sub))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("trace view: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
