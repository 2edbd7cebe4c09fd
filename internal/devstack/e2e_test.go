package devstack_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	contract "github.com/ddb-outbox/ddb-outbox/events"
	"github.com/ddb-outbox/ddb-outbox/internal/devstack"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
)

// TestEndToEnd drives a few hundred orders with concurrent clients through
// the real HTTP API of the local stack (Dynoxide, emulated event source
// mapping, local bus, both consumers, reconciler) and audits the promises.
func TestEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{Prefix: "e2e", Logger: quiet, ReconcileEvery: time.Second, ReconcileAfter: 20 * time.Second})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	defer s.Close()

	rep := devstack.Drive(ctx, s.URL, devstack.DriveOptions{Orders: 300, Concurrency: 12, Seed: 7, Logger: quiet})
	if rep.Unexpected != 0 || rep.Ambiguous != 0 {
		t.Fatalf("API answers broke the contract: %s", rep)
	}
	if rep.Replays == 0 || rep.Conflicts == 0 || rep.Rejected == 0 {
		t.Fatalf("scenario mix did not exercise replays, conflicts and rejections: %s", rep)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	a, err := s.Audit(ctx)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	t.Log(a.Summary())
	for _, p := range a.Problems {
		t.Error(p)
	}
	// Every committed change has exactly one outbox record; every
	// acknowledged change was committed and nothing else was (a rejected or
	// conflicting request produced no event).
	if int64(a.Committed) != rep.Acked || a.Events != a.Committed {
		t.Errorf("committed=%d acked=%d events=%d", a.Committed, rep.Acked, a.Events)
	}
	// The fulfilment provider shipped every paid order once (it honours
	// Idempotency-Key), and cancelled the shipments of paid cancellations.
	sa, err := s.AuditShipments(ctx)
	if err != nil {
		t.Fatalf("audit shipments: %v", err)
	}
	if sa.Expected == 0 || sa.Shipments != sa.Expected || sa.Duplicates != 0 || sa.Missing != 0 || sa.NotCancelled != 0 || len(sa.Problems) > 0 {
		t.Errorf("shipments %+v", sa)
	}
	// Every outbox record is published.
	if a.Published != a.Events || a.Pending != 0 || a.Parked != 0 {
		t.Errorf("published=%d pending=%d parked=%d of %d", a.Published, a.Pending, a.Parked, a.Events)
	}
	// Each consumer applied each event exactly once.
	if a.Notifications != a.Events || a.LedgerApplied != a.LedgerExpected {
		t.Errorf("notifications=%d events=%d ledger=%d/%d", a.Notifications, a.Events, a.LedgerApplied, a.LedgerExpected)
	}
	if !a.OK() {
		t.Errorf("audit: %s", a.Summary())
	}
	// The ledger balance equals paid minus refunded (checked per currency by
	// the audit; here the total is also non-trivial).
	var total int64
	for _, b := range a.Balances {
		total += b
	}
	if total <= 0 {
		t.Errorf("ledger balances %v: no money moved", a.Balances)
	}

	// The audit itself can fail: remove one notification and it reports the loss.
	var one map[string]any
	_ = json.Unmarshal(s.Bus.Events()[0], &one)
	detail, _ := one["detail"].(map[string]any)
	eventID, _ := detail["event_id"].(string)
	if _, err := s.DDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Settings.NotificationsTable),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: notifier.NotificationPrefix + eventID}},
	}); err != nil {
		t.Fatalf("delete notification: %v", err)
	}
	if b, err := s.Audit(ctx); err != nil || b.Lost != 1 || b.OK() {
		t.Errorf("audit after deleting a notification: lost=%d ok=%v err=%v, want lost=1", b.Lost, b.OK(), err)
	}

	// Every emitted event validates against its JSON Schema.
	published := s.Bus.Events()
	if len(published) < a.Events {
		t.Fatalf("bus saw %d events, outbox has %d", len(published), a.Events)
	}
	for _, raw := range published {
		var ev struct {
			Detail json.RawMessage `json:"detail"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("bus event: %v", err)
		}
		if err := contract.Validate(ev.Detail); err != nil {
			t.Fatalf("event does not validate: %v\n%s", err, ev.Detail)
		}
	}
}
