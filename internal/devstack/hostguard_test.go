package devstack_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
)

// TestLocalServersRefuseForeignHost: the API and the AWS front answer 403
// to a request whose Host is not a loopback name or address, the listen
// host or an allowed name — a page on an attacker's domain that resolves
// to 127.0.0.1 (DNS rebinding) reaches neither — and serve the rest.
// Real HTTP requests against a running stack.
func TestLocalServersRefuseForeignHost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "hostguard", AWSAddr: "127.0.0.1:0",
		AllowedHosts: []string{"orders.dev.example"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	apiPort := port(t, s.URL)
	awsPort := port(t, s.AWSURL)
	api := func(host string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/orders/none", nil)
		req.Host = host
		return status(t, req)
	}
	front := func(host string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.AWSURL+"/", strings.NewReader(`{}`))
		req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Host = host
		return status(t, req)
	}
	tests := []struct {
		host    string
		allowed bool
	}{
		{"127.0.0.1:%s", true},
		{"localhost:%s", true},
		{"LOCALHOST:%s", true},
		{"app.localhost:%s", true},
		{"[::1]:%s", true},
		{"127.0.0.2:%s", true},
		{"orders.dev.example:%s", true}, // Options.AllowedHosts
		{"evil.example:%s", false},
		{"localhost.evil.example:%s", false},
		{"127.0.0.1.nip.io:%s", false},
		{"192.0.2.1:%s", false},
		{"evil.example", false},
	}
	for _, tc := range tests {
		for name, call := range map[string]struct {
			do   func(string) int
			port string
		}{"API": {api, apiPort}, "AWS front": {front, awsPort}} {
			host := tc.host
			if strings.Contains(host, "%s") {
				host = strings.ReplaceAll(host, "%s", call.port)
			}
			got := call.do(host)
			if tc.allowed && got == http.StatusForbidden {
				t.Errorf("%s with Host %q: 403, want it served", name, host)
			}
			if !tc.allowed && got != http.StatusForbidden {
				t.Errorf("%s with Host %q: %d, want 403 (foreign Host)", name, host, got)
			}
		}
	}
}

// TestExposedListenAddressWarns: an API or AWS front address beyond
// loopback is logged as a warning; a loopback one is not.
func TestExposedListenAddressWarns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "exposed", APIAddr: "0.0.0.0:0", AWSAddr: "127.0.0.1:0", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	out := buf.String()
	if !strings.Contains(out, "API listens beyond loopback") {
		t.Errorf("no warning for the API on 0.0.0.0; log:\n%s", out)
	}
	if strings.Contains(out, "AWS front listens beyond loopback") {
		t.Errorf("a warning for the AWS front on 127.0.0.1; log:\n%s", out)
	}
}

func port(t *testing.T, u string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func status(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
