package devstack_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// browserHeaders are what a browser sends with a request a page of origin
// makes to another server: Sec-Fetch-Site (every current browser) and
// Origin; site "" leaves Sec-Fetch-Site out (a browser too old to send it).
type browserHeaders struct{ origin, site string }

func (b browserHeaders) set(req *http.Request) {
	if b.origin != "" {
		req.Header.Set("Origin", b.origin)
	}
	if b.site != "" {
		req.Header.Set("Sec-Fetch-Site", b.site)
	}
}

// TestLocalServersRefuseCrossSiteRequests: a page on any other origin —
// another web site, or another local port — cannot change the local
// stack's state through the developer's browser: its POSTs to the API
// (POST /orders/{id}/pay with an empty body needs no CORS preflight), the
// console and the AWS front get 403 and change nothing. Same-origin
// browser requests and non-browser clients (no Origin, no Sec-Fetch-Site:
// curl, Go, the AWS SDK) are served. Real HTTP requests against a running
// stack.
func TestLocalServersRefuseCrossSiteRequests(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "xsite", AWSAddr: "127.0.0.1:0", ConsoleAddr: "127.0.0.1:0",
		RejectDetailTypes: []string{order.EventOrderCancelled}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	crossSite := []browserHeaders{
		{"https://evil.example", "cross-site"},
		{"http://localhost:3000", "same-site"}, // another local port is another origin
		{"https://evil.example", ""},           // Origin only: a browser without Sec-Fetch-Site
	}
	do := func(method, url, body string, b browserHeaders, hdr map[string]string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		b.set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	status := func(id string) string {
		code, body := do(http.MethodGet, s.URL+"/orders/"+id, "", browserHeaders{}, nil)
		var o struct{ Status string }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &o) != nil {
			t.Fatalf("GET order: %d %s", code, body)
		}
		return o.Status
	}

	// API: a non-browser client creates the order.
	code, body := do(http.MethodPost, s.URL+"/orders", `{"customer_id":"c-1","amount_minor":100,"currency":"EUR"}`, browserHeaders{},
		map[string]string{"Content-Type": "application/json"})
	var o struct{ ID string }
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &o) != nil {
		t.Fatalf("non-browser POST /orders: %d %s, want 201", code, body)
	}
	for _, b := range crossSite {
		if code, body := do(http.MethodPost, s.URL+"/orders/"+o.ID+"/pay", "", b, nil); code != http.StatusForbidden || !strings.Contains(body, "cross_origin_request") {
			t.Errorf("API: cross-site pay %+v: %d %s, want 403 cross_origin_request", b, code, body)
		}
	}
	if st := status(o.ID); st != "PLACED" {
		t.Fatalf("after refused cross-site pays the order is %s, want PLACED", st)
	}
	// A cross-site GET reads nothing it may see (the browser keeps the
	// answer from the page) and changes nothing: served.
	if code, _ := do(http.MethodGet, s.URL+"/orders/"+o.ID, "", crossSite[0], nil); code != http.StatusOK {
		t.Errorf("API: cross-site GET: %d, want 200", code)
	}
	if code, body := do(http.MethodPost, s.URL+"/orders/"+o.ID+"/pay", "", browserHeaders{s.URL, "same-origin"}, nil); code != http.StatusOK {
		t.Errorf("API: same-origin pay: %d %s, want 200", code, body)
	}
	if st := status(o.ID); st != "PAID" {
		t.Errorf("after the same-origin pay the order is %s, want PAID", st)
	}

	// Console: the bus rejects OrderCancelled until "Stop rejecting".
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for _, b := range crossSite {
		if code, body := do(http.MethodPost, s.ConsoleURL()+"/actions/stop-rejecting", "", b, form); code != http.StatusForbidden {
			t.Errorf("console: cross-site stop-rejecting %+v: %d %s, want 403", b, code, body)
		}
	}
	if len(s.Rejecting()) == 0 {
		t.Fatal("a refused cross-site console action stopped the rejecting")
	}
	if code, body := do(http.MethodPost, s.ConsoleURL()+"/actions/reconcile", "", browserHeaders{s.ConsoleURL(), "same-origin"}, form); code != http.StatusOK {
		t.Errorf("console: same-origin reconcile: %d %s, want 200", code, body)
	}
	if code, body := do(http.MethodPost, s.ConsoleURL()+"/actions/stop-rejecting", "", browserHeaders{}, form); code != http.StatusOK || len(s.Rejecting()) != 0 {
		t.Errorf("console: non-browser stop-rejecting: %d %s, rejecting %v; want 200 and nothing rejected", code, body, s.Rejecting())
	}

	// AWS front: a page cannot send to a queue; the SDK can.
	q := s.Consumers[routing.ConsumerLedger].DLQ
	before, _ := q.Counts()
	send := `{"QueueUrl":"` + q.URL() + `","MessageBody":"planted"}`
	sqsHdr := map[string]string{"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"}
	for _, b := range crossSite {
		if code, body := do(http.MethodPost, s.AWSURL+"/", send, b, sqsHdr); code != http.StatusForbidden || !strings.Contains(body, "AccessDeniedException") {
			t.Errorf("AWS front: cross-site SendMessage %+v: %d %s, want 403 AccessDeniedException", b, code, body)
		}
	}
	if after, _ := q.Counts(); after != before {
		t.Errorf("a refused cross-site SendMessage reached the queue: %d → %d messages", before, after)
	}
	client := sqs.NewFromConfig(dynoxide.AWSConfig(s.AWSURL))
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String("from the SDK")}); err != nil {
		t.Errorf("AWS front: SDK SendMessage: %v", err)
	}
	if after, _ := q.Counts(); after != before+1 {
		t.Errorf("the SDK's SendMessage: %d → %d messages, want one more", before, after)
	}
}
