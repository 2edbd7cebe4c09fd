package devstack_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// TestConsoleRuleDLQRedrive: with -refuse-delivery ledger the ledger's
// queue refuses the bus, so each event of an order lands on the ledger
// rule's DLQ at once, with EventBridge's attributes, and the ledger books
// nothing; nobody plants a message there through the AWS front. The
// console shows the fault and the rule DLQ (its messages, their error
// code); a cross-site press of its redrive button is refused (403) and
// moves nothing. After "Accept deliveries", the button moves the events
// back with operator.RedriveRuleDLQ (the code of outboxctl
// rule-dlq-redrive), the ledger books the payment once, and a second press
// moves nothing. Real HTTP against a running stack.
func TestConsoleRuleDLQRedrive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "ruledlq", Logger: slog.New(slog.DiscardHandler), ConsoleAddr: "127.0.0.1:0", AWSAddr: "127.0.0.1:0",
		RefuseDeliveries: []string{routing.ConsumerLedger}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()
	const rule = "ledger-order-payments"
	p := s.Rules[rule]
	if p == nil || p.Consumer != routing.ConsumerLedger {
		t.Fatalf("rules %v: no %s to the ledger", s.RuleNames(), rule)
	}
	apiOrder(ctx, t, s.URL)
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.DLQ.Counts(); v != 3 {
		t.Fatalf("the ledger rule's DLQ holds %d messages, want the order's 3 events", v)
	}
	if n, err := s.Ledger.EntryCount(ctx); err != nil || n != 0 {
		t.Fatalf("the ledger booked %d entries (%v) while its queue refused the bus", n, err)
	}
	msgs, err := sqsconsumer.Peek(ctx, p.DLQ, p.DLQ.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("peek: %v, %d", err, len(msgs))
	}
	for _, m := range msgs {
		if r := m.Rule; r == nil || r.RuleARN != p.ARN || r.TargetARN != s.Consumers[routing.ConsumerLedger].Queue.ARN() || r.ErrorCode != sqsconsumer.RuleErrorNoPermissions || r.RetryAttempts != "0" {
			t.Errorf("rule DLQ message %+v", r)
		}
	}
	client := sqs.NewFromConfig(dynoxide.AWSConfig(s.AWSURL))
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(p.DLQ.URL()), MessageBody: aws.String(msgs[0].Body)})
	if ae := (smithy.APIError)(nil); !errors.As(err, &ae) || ae.ErrorCode() != localrt.ErrorCodeAccessDenied {
		t.Errorf("a SendMessage to the rule DLQ through the AWS front: %v, want AccessDenied", err)
	}

	page := get(t, s.ConsoleURL()+"/view")
	for _, w := range []string{"Fault switch: the queues of <b>ledger</b> refuse the bus", "ruledlq-ledger-order-payments-rule-dlq <small>3 message(s), rule ledger-order-payments → ledger",
		`data-action="/actions/rule-dlq-redrive" data-rule="ledger-order-payments"`, "<b>" + sqsconsumer.RuleErrorNoPermissions + "</b> to " + s.Consumers[routing.ConsumerLedger].Queue.ARN()} {
		if !strings.Contains(page, w) {
			t.Errorf("the console does not show %q", w)
		}
	}
	press := func(action string, form url.Values, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.ConsoleURL()+action, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	form := url.Values{"rule": {rule}}
	if code, _ := press("/actions/rule-dlq-redrive", form, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden || p.DLQ.Len() != 3 {
		t.Fatalf("a cross-site redrive: status %d, DLQ %d; want 403 and nothing moved", code, p.DLQ.Len())
	}
	if code, _ := press("/actions/stop-refusing", nil, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden || len(s.Refusing()) == 0 {
		t.Fatalf("a cross-site stop-refusing: status %d, refusing %v; want 403, still refusing", code, s.Refusing())
	}
	if code, body := press("/actions/stop-refusing", nil, map[string]string{"Origin": s.ConsoleURL(), "Sec-Fetch-Site": "same-origin"}); code != http.StatusOK || len(s.Refusing()) != 0 {
		t.Fatalf("stop-refusing: %d %s, refusing %v", code, body, s.Refusing())
	}
	code, body := press("/actions/rule-dlq-redrive", form, map[string]string{"Origin": s.ConsoleURL(), "Sec-Fetch-Site": "same-origin"})
	if code != http.StatusOK || !strings.Contains(body, "3 message(s) redriven from ruledlq-ledger-order-payments-rule-dlq to ruledlq-ledger; 0 left on the DLQ") {
		t.Fatalf("rule DLQ redrive: %d %s", code, body)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Ledger.EntryCount(ctx); err != nil || n != 1 {
		t.Errorf("after the redrive the ledger holds %d entries (%v), want the payment once", n, err)
	}
	if code, body := press("/actions/rule-dlq-redrive", form, nil); code != http.StatusOK || !strings.Contains(body, "0 message(s) redriven") {
		t.Errorf("a second redrive: %d %s, want nothing moved", code, body)
	}
	if code, body := press("/actions/rule-dlq-redrive", url.Values{"rule": {"no-such-rule"}}, nil); code != http.StatusUnprocessableEntity {
		t.Errorf("redrive of an unknown rule: %d %s, want 422", code, body)
	}
}
