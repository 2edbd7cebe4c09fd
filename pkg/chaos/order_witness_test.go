package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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
	key := dedup.SequenceKey("ledger", "Order", "o-1")
	got := w.commits[key]
	if len(got) != 2 || got[0].seq != 1 || got[1].seq != 2 || got[0].done.After(got[1].sent) {
		t.Fatalf("commits of %s = %+v; want sequences 1 then 2 (3 was refused)", key, got)
	}
	if n, inv, _ := w.audit(); n != 2 || inv != 0 {
		t.Errorf("audit = %d witnessed, %d inversions; want 2, 0", n, inv)
	}
}

// TestOrderWitnessAudit: an inversion is counted only when the higher
// sequence's call was answered before the lower one's was sent; overlapping
// calls prove nothing.
func TestOrderWitnessAudit(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newOrderWitness()
	// o-1: sequence 2 answered at 5 ms, sequence 1 sent at 10 ms: inverted.
	w.record("ledger#SEQ#Order#o-1", gateCommit{seq: 1, sent: at(10), done: at(20)})
	w.record("ledger#SEQ#Order#o-1", gateCommit{seq: 2, sent: at(0), done: at(5)})
	// o-2: overlapping calls (2 sent before 1, answered after 1 was sent).
	w.record("ledger#SEQ#Order#o-2", gateCommit{seq: 1, sent: at(10), done: at(40)})
	w.record("ledger#SEQ#Order#o-2", gateCommit{seq: 2, sent: at(5), done: at(35)})
	// o-3 of another consumer: in order.
	w.record("notifier#SEQ#Order#o-3", gateCommit{seq: 1, sent: at(0), done: at(1)})
	w.record("notifier#SEQ#Order#o-3", gateCommit{seq: 2, sent: at(2), done: at(3)})
	n, inv, problems := w.audit()
	if n != 6 || inv != 1 || len(problems) != 1 || !strings.Contains(problems[0], "o-1: sequence 2 committed") {
		t.Errorf("audit = %d, %d, %q; want 6 witnessed, 1 inversion on o-1", n, inv, problems)
	}
}
