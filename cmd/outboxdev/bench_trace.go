package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ddb-outbox/ddb-outbox/internal/bench"
	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// Tracing overhead (issue 15), kept apart from the rest of the bench so it
// merges as one section: `outboxdev bench -trace-overhead` runs only this.
//
// Arms, alternated in rounds on fresh local stacks (Dynoxide) so drift hits
// both alike: "off" = no tracer provider (the default; nothing
// instrumented), "on" = outboxtrace.Setup with every span sampled (100 %)
// and exported through the SDK's batch processor to an in-process sink that
// drops them, with the API (otelhttp) and AWS SDK clients (otelaws)
// instrumented. Measured per arm: POST /orders latency, sequential (the
// write path: HTTP, repository, TransactWriteItems with the trace context
// stored), and the relay's stream handler time per record (decode,
// PutEvents to the local bus, mark published).

// discardExporter is the in-process OTLP stand-in of the "on" arm: it takes
// every batch and drops it, counting spans.
type discardExporter struct{ spans atomic.Int64 }

func (d *discardExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	d.spans.Add(int64(len(s)))
	return nil
}
func (d *discardExporter) Shutdown(context.Context) error { return nil }

type traceArm struct {
	writes       []time.Duration
	relay        time.Duration
	relayRecords int
	spans        int64
	orders       int
}

// runTraceOverhead measures both arms over rounds of n orders each and
// prints (and writes under out/) a side-by-side table.
func runTraceOverhead(ctx context.Context, out string, n, rounds int) error {
	arms := map[bool]*traceArm{false: {}, true: {}}
	for r := 0; r < rounds; r++ {
		for _, on := range []bool{r%2 == 1, r%2 == 0} { // alternate which arm goes first
			if err := traceRound(ctx, on, n, arms[on]); err != nil {
				return err
			}
		}
	}
	_, _, _ = otelsetup.Setup(ctx, otelsetup.Config{}) // off again
	off, on := arms[false], arms[true]
	po, pn := bench.NewPercentiles(off.writes), bench.NewPercentiles(on.writes)
	ro := float64(off.relay.Microseconds()) / float64(max(off.relayRecords, 1))
	rn := float64(on.relay.Microseconds()) / float64(max(on.relayRecords, 1))
	var b strings.Builder
	fmt.Fprintf(&b, "## Tracing overhead (outboxdev bench -trace-overhead)\n\n")
	fmt.Fprintf(&b, "%d rounds x %d orders per arm, arms alternated on fresh local stacks (Dynoxide); on = 100 %% sampled, batch-exported to an in-process sink; off = no tracer provider.\n\n", rounds, n)
	fmt.Fprintf(&b, "| path | off | on | on/off |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| write: POST /orders p50 (ms) | %.2f | %.2f | %.2f |\n", po.P50, pn.P50, pn.P50/po.P50)
	fmt.Fprintf(&b, "| write: POST /orders p95 (ms) | %.2f | %.2f | %.2f |\n", po.P95, pn.P95, pn.P95/po.P95)
	fmt.Fprintf(&b, "| write: POST /orders mean (ms) | %.2f | %.2f | %.2f |\n", po.Mean, pn.Mean, pn.Mean/po.Mean)
	fmt.Fprintf(&b, "| relay: handler time per record (µs) | %.0f | %.0f | %.2f |\n", ro, rn, rn/ro)
	fmt.Fprintf(&b, "| spans exported per order (create: all hops) | 0 | %.1f | |\n", float64(on.spans)/float64(max(on.orders, 1)))
	fmt.Fprintf(&b, "\nrecords through the relay: off %d, on %d; write samples: off %d, on %d; host %d CPUs shared.\n",
		off.relayRecords, on.relayRecords, len(off.writes), len(on.writes), runtime.NumCPU())
	fmt.Print(b.String())
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(out, "bench-trace-overhead-"+time.Now().UTC().Format("20060102T150405Z")+".md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Println("report:", path)
	return nil
}

// traceRound runs one arm on a fresh stack: n sequential creates, drained.
func traceRound(ctx context.Context, on bool, n int, arm *traceArm) error {
	exp := &discardExporter{}
	_, shutdown, err := otelsetup.Setup(ctx, otelsetup.Config{Enabled: on, ServiceName: "bench", Exporter: exp})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	timeRelay := func(h localrt.StreamHandler) localrt.StreamHandler {
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			start := time.Now()
			resp, err := h(ctx, ev)
			d := time.Since(start)
			mu.Lock()
			arm.relay += d
			arm.relayRecords += len(ev.Records)
			mu.Unlock()
			return resp, err
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "benchtrace", APIAddr: "127.0.0.1:0", Logger: quiet, Tracing: on,
		ReconcileEvery: time.Hour, ReconcileAfter: time.Hour, WrapStream: timeRelay})
	if err != nil {
		return err
	}
	defer s.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < n; i++ {
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/orders", strings.NewReader(`{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /orders: %d", resp.StatusCode)
		}
		arm.writes = append(arm.writes, time.Since(start))
	}
	if err := s.Drain(ctx); err != nil {
		return err
	}
	s.Close()
	if err := shutdown(ctx); err != nil {
		return err
	}
	arm.spans += exp.spans.Load()
	arm.orders += n
	return nil
}
