package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestRejectTypeParksAndAWSFrontServesTheStack starts the stack as
// `outboxdev dev -reject-type OrderShipped` does, ships an order, and checks
// through the AWS front (real SDK clients, dummy credentials, the one
// endpoint) what an operator sees: the OrderShipped record parked with the
// bus's error code, the others published, the parked-records queue holding
// one message, the consumer queues listed; PutEvents through the front
// takes the same rejecting path; the redriven record is published by the
// reconciler.
func TestRejectTypeParksAndAWSFrontServesTheStack(t *testing.T) {
	tests := []struct{ name, opt, code string }{
		{"default code", "", devstack.DefaultRejectCode},
		{"InvalidArgument", localrt.ErrorCodeInvalidArgument, localrt.ErrorCodeInvalidArgument},
	}
	for _, tc := range tests {
		code := tc.code
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			s, err := devstack.Start(ctx, devstack.Options{Prefix: "adm", Logger: quiet, AWSAddr: "127.0.0.1:0",
				RejectDetailTypes: []string{"OrderShipped"}, RejectCode: tc.opt,
				ReconcileEvery: 200 * time.Millisecond, ReconcileAfter: time.Millisecond})
			if err != nil {
				t.Fatalf("start stack: %v", err)
			}
			defer s.Close()
			if !strings.HasPrefix(s.AWSURL, "http://127.0.0.1:") {
				t.Fatalf("AWSURL = %q", s.AWSURL)
			}

			id := placePayShip(ctx, t, s.URL)
			if err := s.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			cfg := dynoxide.AWSConfig(s.AWSURL)
			ddb := dynamodb.NewFromConfig(cfg)
			sq := sqs.NewFromConfig(cfg)

			views, err := operator.AggregateEvents(ctx, ddb, s.Settings.OutboxTable, "Order", id, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, v := range views {
				got[v.EventType] = v.Status
				if v.EventType == "OrderShipped" && !strings.Contains(v.ParkedReason, code) {
					t.Errorf("parked reason %q does not name %s", v.ParkedReason, code)
				}
			}
			want := map[string]string{"OrderPlaced": outbox.StatusPublished, "OrderPaid": outbox.StatusPublished, "OrderShipped": outbox.StatusParked}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s is %q, want %s (all: %v)", k, got[k], v, got)
				}
			}
			refs, err := operator.DiscoverQueues(ctx, sq, "adm-")
			if err != nil {
				t.Fatal(err)
			}
			depth := map[string]int{}
			for _, d := range operator.Depths(ctx, sq, refs) {
				if d.Err != nil {
					t.Fatal(d.Err)
				}
				depth[d.Name] = d.Visible + d.InFlight
			}
			// The parked-records DLQ holds the OrderShipped record's message;
			// a second one for the same record is the duplicate relay.Park
			// documents (the reconciler re-sent the record while the relay
			// was parking it), never another record's.
			if d := depth["adm-parked"]; d < 1 {
				t.Errorf("queue adm-parked depth %d, want the parked record's message", d)
			}
			for _, m := range s.ParkedQueue.Messages() {
				var pm relay.ParkedMessage
				if err := json.Unmarshal([]byte(m.Body), &pm); err != nil {
					t.Fatalf("parked message %q: %v", m.Body, err)
				}
				if shipped := views[len(views)-1]; pm.EventID != shipped.EventID {
					t.Errorf("parked message for event %s, want only the OrderShipped record's %s", pm.EventID, shipped.EventID)
				}
			}
			for name, n := range map[string]int{"adm-relay-onfailure": 0, "adm-ledger": 0, "adm-ledger-dlq": 0, "adm-notifier": 0, "adm-notifier-dlq": 0} {
				if d, ok := depth[name]; !ok || d != n {
					t.Errorf("queue %s depth %d (listed %v), want %d", name, d, ok, n)
				}
			}

			// PutEvents through the front goes the same way.
			eb := eventbridge.NewFromConfig(cfg)
			out, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
				{EventBusName: aws.String(s.Settings.EventBus), Source: aws.String(s.Settings.Source), DetailType: aws.String("OrderShipped"), Detail: aws.String(`{}`)},
			}})
			if err != nil || out.FailedEntryCount != 1 || aws.ToString(out.Entries[0].ErrorCode) != code {
				t.Fatalf("PutEvents OrderShipped through the front = %+v, %v; want %s", out, err, code)
			}

			// Sending to a consumer DLQ through the front reaches the stack's queue.
			if _, err := sq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.Consumers["ledger"].DLQ.URL()), MessageBody: aws.String("{}")}); err != nil {
				t.Fatal(err)
			}
			if n := s.Consumers["ledger"].DLQ.Len(); n != 1 {
				t.Fatalf("ledger DLQ holds %d after a send through the front", n)
			}
			if _, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")}); !isNoQueue(err) {
				t.Fatalf("GetQueueUrl(nope): %v", err)
			}

			// Redrive: the reconciler publishes it through the rejecting bus
			// again, so it parks again (the cause is not fixed): parked_at
			// moves and redriven_at is set.
			parked := views[len(views)-1]
			if err := relay.Redrive(ctx, ddb, s.Settings.OutboxTable, 16, parked.Key, time.Now()); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				again, err := operator.FindEvent(ctx, ddb, s.Settings.OutboxTable, parked.EventID)
				if err != nil {
					t.Fatal(err)
				}
				if v := again[0]; v.Status == outbox.StatusParked && !v.RedrivenAt.IsZero() && v.ParkedAt.After(parked.ParkedAt) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the redriven record was not parked again by the reconciler: %+v", again[0])
				}
				time.Sleep(100 * time.Millisecond)
			}

			// Replay (the default, requeue): the published OrderPaid
			// becomes pending and the reconciler publishes it again.
			paid := views[1]
			if _, err := operator.Requeue(ctx, ddb, s.Settings.OutboxTable, 16, []operator.EventView{paid}, time.Now()); err != nil {
				t.Fatal(err)
			}
			for {
				again, err := operator.FindEvent(ctx, ddb, s.Settings.OutboxTable, paid.EventID)
				if err != nil {
					t.Fatal(err)
				}
				if v := again[0]; v.Status == outbox.StatusPublished && v.PublishedAt.After(paid.PublishedAt) && v.BusEventID != paid.BusEventID {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the requeued record was not published again by the reconciler: %+v", again[0])
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

func isNoQueue(err error) bool {
	var e *sqstypes.QueueDoesNotExist
	return errors.As(err, &e)
}

// placePayShip creates an order, pays and ships it through the API and
// returns its id.
func placePayShip(ctx context.Context, t *testing.T, api string) string {
	t.Helper()
	post := func(path, body string) map[string]any {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "adm-1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var o map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&o)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %v", path, resp.StatusCode, o)
		}
		return o
	}
	o := post("/orders", `{"customer_id":"c-1","amount_minor":1999,"currency":"EUR"}`)
	id, _ := o["id"].(string)
	post("/orders/"+id+"/pay", "")
	post("/orders/"+id+"/ship", "")
	return id
}
