package chaos

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestOrderWitnessRecordsCommittedGates sends ordered Apply transactions
// through an SDK client carrying the witness to a real HTTP server: the
// answered ones are recorded with their gate's key and sequence, a refused
// one (HTTP 400) is not.
func TestOrderWitnessRecordsCommittedGates(t *testing.T) {
	var refuse atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if refuse.Load() {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ValidationException","message":"refused"}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	w := newOrderWitness()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String(srv.URL), RetryMaxAttempts: 1}
	w.apply(&cfg)
	a, err := dedup.NewApplier(dynamodb.NewFromConfig(cfg), dedup.Config{Table: "dedup", Consumer: "ledger", Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for seq := int64(1); seq <= 3; seq++ {
		refuse.Store(seq == 3)
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: "o-1", Sequence: seq},
			outbox.Event{Type: "OrderPaid", Version: 1, Payload: map[string]any{"order_id": "o-1"}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		applied, err := a.Apply(ctx, env, nil)
		if (seq < 3) != (err == nil && applied) {
			t.Fatalf("Apply sequence %d = %v, %v", seq, applied, err)
		}
	}
	key := "dedup/" + dedup.SequenceKey("ledger", "Order", "o-1")
	got := w.attempts[key]
	if len(got) != 3 || got[0].seq != 1 || got[1].seq != 2 || got[2].seq != 3 || got[0].done.After(got[1].sent) ||
		got[0].outcome != committed || got[1].outcome != committed || got[2].outcome != refused {
		t.Fatalf("attempts on %s = %+v; want sequences 1, 2 committed, then 3 refused", key, got)
	}
	if n, inv, _ := w.audit(nil); n != 2 || inv != 0 {
		t.Errorf("audit = %d witnessed, %d inversions; want 2, 0", n, inv)
	}
}

// TestOrderWitnessAudit: an inversion is counted only when the higher
// sequence's first committed attempt was answered before the lower one's
// first attempt that may have committed was sent; overlapping calls, a late
// idempotent 200 and refused attempts prove nothing.
func TestOrderWitnessAudit(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	att := func(seq int64, sent, done int, o outcome) gateAttempt {
		return gateAttempt{seq: seq, sent: at(sent), done: at(done), outcome: o}
	}
	for _, tc := range []struct {
		name       string
		attempts   []gateAttempt
		floor      int64 // a starting point
		witnessed  int
		inversions int
	}{
		{"in order", []gateAttempt{att(1, 0, 1, committed), att(2, 2, 3, committed), att(3, 4, 5, committed)}, 0, 3, 0},
		{"2 answered before 1 was sent", []gateAttempt{att(1, 10, 20, committed), att(2, 0, 5, committed)}, 0, 2, 1},
		{"3 before 1 and 2", []gateAttempt{att(1, 10, 11, committed), att(2, 12, 13, committed), att(3, 0, 5, committed)}, 0, 3, 2},
		{"overlapping calls", []gateAttempt{att(1, 10, 40, committed), att(2, 5, 35, committed)}, 0, 2, 0},
		// 1's answer was lost (unknown) at 0..2, 2 committed at 5..6, the SDK's
		// retry of 1 got DynamoDB's idempotent 200 at 10..11.
		{"late idempotent 200", []gateAttempt{att(1, 0, 2, unknown), att(2, 5, 6, committed), att(1, 10, 11, committed)}, 0, 2, 0},
		// 1 was refused at 0..1 (a gap: nothing written), committed at 10..11;
		// 2 answered at 6: an inversion.
		{"refused attempt is not a bound", []gateAttempt{att(1, 0, 1, refused), att(2, 5, 6, committed), att(1, 10, 11, committed)}, 0, 2, 1},
		{"never committed", []gateAttempt{att(1, 10, 11, unknown), att(2, 0, 5, refused)}, 0, 0, 0},
		// A starting point after 1: 2 and 3 are this table's; 1's late
		// attempt (a replayed duplicate whose answer was lost) bounds no
		// commit. Without the starting point it reads as two inversions.
		{"duplicate below a starting point", []gateAttempt{att(2, 0, 1, committed), att(3, 2, 3, committed), att(1, 10, 11, unknown)}, 1, 2, 0},
		{"the same without it", []gateAttempt{att(2, 0, 1, committed), att(3, 2, 3, committed), att(1, 10, 11, unknown)}, 0, 2, 2},
		{"an inversion above a starting point", []gateAttempt{att(2, 10, 11, committed), att(3, 0, 5, committed)}, 1, 2, 1},
	} {
		w := newOrderWitness()
		for _, a := range tc.attempts {
			w.record("ledger#SEQ#Order#o-1", a)
		}
		n, inv, problems := w.audit(map[string]int64{"ledger#SEQ#Order#o-1": tc.floor})
		if n != tc.witnessed || inv != tc.inversions || len(problems) != inv {
			t.Errorf("%s: audit = %d witnessed, %d inversions, %q; want %d, %d", tc.name, n, inv, problems, tc.witnessed, tc.inversions)
		}
	}
	w := newOrderWitness()
	w.record("ledger#SEQ#Order#o-1", att(1, 10, 20, committed))
	w.record("ledger#SEQ#Order#o-1", att(2, 0, 5, committed))
	w.record("notifier#SEQ#Order#o-1", att(1, 0, 1, committed))
	w.record("notifier#SEQ#Order#o-1", att(2, 2, 3, committed))
	if _, inv, problems := w.audit(nil); inv != 1 || !strings.Contains(problems[0], "ledger#SEQ#Order#o-1: sequence 2 committed") {
		t.Errorf("two consumers: %d inversions, %q; want 1 on the ledger's item", inv, problems)
	}
}

// TestOrderWitnessFollowsTheResequencer runs a ledger on Dynoxide with the
// witness on its client: sequence 3 arrives before 2 and waits in the
// buffer. The witness sees the buffer write as no gate (it sets no
// last_sequence, though its condition holds numbers), the payment's apply
// as gate 2 and the refund's apply from the buffer as gate 3, and counts
// one event buffered and drained.
func TestOrderWitnessFollowsTheResequencer(t *testing.T) {
	env := ddbtest.New(t)
	lt, dt := ddbtest.Name("ledger"), ddbtest.Name("dedup")
	env.CreateTable(t, ledger.CreateTableInput(lt))
	env.CreateTable(t, dedup.CreateTableInput(dt))
	w := newOrderWitness()
	cfg := env.Config.Copy()
	w.apply(&cfg)
	l, err := ledger.New(dynamodb.NewFromConfig(cfg), ledger.Config{Table: lt, Dedup: dedup.Config{Table: dt},
		Logger: slog.New(slog.DiscardHandler), Resequencer: dedup.ResequencerConfig{Metrics: io.Discard}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := "o-witness"
	evs := []outbox.Event{
		{Type: order.EventOrderPlaced, Version: 1, Payload: order.Placed{OrderID: id, CustomerID: "c-1", AmountMinor: 700, Currency: "EUR"}},
		{Type: order.EventOrderPaid, Version: 1, Payload: order.Paid{OrderID: id, AmountMinor: 700, Currency: "EUR"}},
		{Type: order.EventOrderCancelled, Version: 1, Payload: order.Cancelled{OrderID: id, WasPaid: true, RefundMinor: 700, Currency: "EUR"}},
	}
	deliver := func(i int) {
		t.Helper()
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: id, Sequence: int64(i + 1)},
			evs[i], outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		detail, _ := env.Detail()
		if err := l.Handle(ctx, events.EventBridgeEvent{Version: "0", ID: uuid.NewString(), DetailType: env.EventType,
			Source: "com.ddb-outbox.orders", AccountID: "123456789012", Region: "eu-west-1", Detail: detail}); err != nil {
			t.Fatalf("sequence %d: %v", i+1, err)
		}
	}
	deliver(0)
	deliver(2)
	deliver(1)
	witnessed, inversions, problems := w.audit(nil)
	if witnessed != 3 || inversions != 0 {
		t.Fatalf("witnessed %d gates, %d inversions %v; want 3, 0", witnessed, inversions, problems)
	}
	keys := make([]string, 0, len(w.attempts))
	for k := range w.attempts {
		keys = append(keys, k)
	}
	if len(keys) != 1 || !strings.HasSuffix(keys[0], id) {
		t.Fatalf("gate keys %v", keys)
	}
	for _, a := range w.attempts[keys[0]] {
		if a.seq < 1 || a.seq > 3 {
			t.Fatalf("a gate attempt with sequence %d (a buffer write read as a gate?)", a.seq)
		}
	}
	if b, d, longest, alarms := w.bufferStats(time.Minute); b != 1 || d != 1 || longest <= 0 || alarms != 0 {
		t.Fatalf("bufferStats = %d buffered, %d drained, longest %s, %d alarms; want 1, 1", b, d, longest, alarms)
	}
}
