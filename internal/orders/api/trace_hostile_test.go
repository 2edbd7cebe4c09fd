package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/outboxtrace/otelsetup"
)

// TestHostileTraceHeadersNeverFailAWrite: with tracing on (SDK tracer
// provider, the W3C + X-Ray propagators, the API wrapped in otelhttp as
// app.instrumentHTTP does), whatever trace headers a client sends, a valid
// order request succeeds and every outbox record it writes carries trace
// fields the write side accepts (Envelope.CheckTrace): a client's trace
// header is never a reason to refuse an order or lose its event. Runs on a
// real HTTP server and Dynoxide. Not parallel: it installs the global
// tracer provider and restores the no-op one.
func TestHostileTraceHeadersNeverFailAWrite(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	if _, shutdown, err := otelsetup.Setup(context.Background(), otelsetup.Config{Enabled: true, ServiceName: "api-test", Exporter: exp, Sync: true}); err != nil {
		t.Fatal(err)
	} else {
		defer func() {
			_ = shutdown(context.Background())
			_, _, _ = otelsetup.Setup(context.Background(), otelsetup.Config{})
		}()
	}
	f := newFixture(t, ddbtest.New(t))
	srv := httptest.NewServer(otelhttp.NewHandler(f.h, "api"))
	defer srv.Close()

	const tp = "00-665b7c01a3e2f4b5c6d7e8f901234567-53995c3f42cd8ad8-01"
	// 32 list members of 30 characters each: within W3C's 32-member limit,
	// so OpenTelemetry's parser accepts it, but beyond 512 characters.
	var members []string
	for i := 0; i < 32; i++ {
		members = append(members, fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 26)))
	}
	long := strings.Join(members, ",")
	// two members with 256-character values (the grammar's maximum)
	bigValues := "big=" + strings.Repeat("y", 256) + ",a=1,b=" + strings.Repeat("z", 256)

	tests := []struct {
		name    string
		headers map[string]string
	}{
		{"no header", nil},
		{"valid traceparent", map[string]string{"traceparent": tp}},
		{"tracestate beyond 512 chars", map[string]string{"traceparent": tp, "tracestate": long}},
		{"tracestate with 256-char values", map[string]string{"traceparent": tp, "tracestate": bigValues}},
		{"33 tracestate members", map[string]string{"traceparent": tp, "tracestate": long + ",extra=1"}},
		{"tracestate control char", map[string]string{"traceparent": tp, "tracestate": "a=b\tc"}},
		{"version ff", map[string]string{"traceparent": "ff" + tp[2:]}},
		{"zero trace id", map[string]string{"traceparent": "00-" + strings.Repeat("0", 32) + "-53995c3f42cd8ad8-01"}},
		{"zero parent id", map[string]string{"traceparent": "00-665b7c01a3e2f4b5c6d7e8f901234567-" + strings.Repeat("0", 16) + "-01"}},
		{"upper case", map[string]string{"traceparent": strings.ToUpper(tp)}},
		{"extra field version 00", map[string]string{"traceparent": tp + "-extra"}},
		{"extra field future version", map[string]string{"traceparent": "cc" + tp[2:] + "-extra", "tracestate": "a=1"}},
		{"flags ff", map[string]string{"traceparent": tp[:53] + "ff"}},
		{"non-ASCII", map[string]string{"traceparent": tp[:10] + "é" + tp[12:]}},
		{"xray valid", map[string]string{"X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"}},
		{"xray and w3c with long tracestate", map[string]string{"traceparent": tp, "tracestate": long, "X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"}},
		{"xray upper case", map[string]string{"X-Amzn-Trace-Id": "Root=1-5759E988-BD862E3FE1BE46A994272793;Parent=53995C3F42CD8AD8;Sampled=1"}},
		{"xray huge parent", map[string]string{"X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=" + strings.Repeat("a", 4000) + ";Sampled=1"}},
		{"xray duplicate keys", map[string]string{"X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8;Parent=0000000000000000;Sampled=1;Sampled=7"}},
		{"xray zero root", map[string]string{"X-Amzn-Trace-Id": "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8;Sampled=1"}},
		{"xray garbage", map[string]string{"X-Amzn-Trace-Id": "Root=;;;=;Parent;Self=1-abc"}},
		{"xray version 2", map[string]string{"X-Amzn-Trace-Id": "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8"}},
		{"xray lineage and extra", map[string]string{"X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:1|68fd508a:5;Foo=" + strings.Repeat("b", 2000)}},
	}
	// An idempotent replay whose trace context differs (an HTTP client's
	// retry is a new span, often a new trace) is still recognised: 200,
	// the first order, nothing written.
	t.Run("idempotent replay with another trace", func(t *testing.T) {
		body := `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`
		var statuses []int
		for i, h := range []string{tp, "00-5759e988bd862e3fe1be46a994272793-0123456789abcdef-00"} {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "trace-replay")
			req.Header.Set("traceparent", h)
			req.Header.Set("tracestate", fmt.Sprintf("a=%d", i))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
		}
		if statuses[0] != http.StatusCreated || statuses[1] != http.StatusOK {
			t.Fatalf("statuses %v, want [201 200]", statuses)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send := func(method, path, body string) (int, string) {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				for k, v := range tt.headers {
					req.Header.Set(k, v)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			st, body := send("POST", "/orders", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`)
			if st != http.StatusCreated {
				t.Fatalf("create with %v: %d %s", tt.headers, st, body)
			}
			var id string
			if i := strings.Index(body, `"id":"`); i >= 0 {
				id = body[i+6:]
				id = id[:strings.IndexByte(id, '"')]
			}
			if st, body := send("POST", "/orders/"+id+"/pay", ""); st != http.StatusOK {
				t.Fatalf("pay with %v: %d %s", tt.headers, st, body)
			}
			recs := f.records(t, id)
			if len(recs) != 2 {
				t.Fatalf("order %s has %d outbox records, want 2", id, len(recs))
			}
			for _, r := range recs {
				if err := r.Envelope.CheckTrace(); err != nil {
					t.Errorf("stored record %d: %v", r.Envelope.Sequence, err)
				}
				if len(r.Envelope.TraceState) > outbox.MaxTraceStateLen {
					t.Errorf("stored tracestate of %d bytes", len(r.Envelope.TraceState))
				}
				if r.Envelope.TraceParent == "" {
					t.Errorf("record %d: no traceparent stored with tracing on", r.Envelope.Sequence)
				}
			}
		})
	}
}
