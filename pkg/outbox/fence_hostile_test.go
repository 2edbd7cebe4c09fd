package outbox_test

import (
	"context"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestFencingHostileChanges: changes a careless or racing caller may send
// in a Region that is not the aggregate's home. Each is refused with the
// foreign aggregate's *NotHomeError and writes nothing (the home item of a
// new aggregate in the same change is not written either). Update does not
// retry a refusal.
func TestFencingHostileChanges(t *testing.T) {
	t.Parallel()
	env, _, wallets, ob := walletTables(t, outbox.WriterConfig{})
	a, _ := regionWriter(t, env, ob, regionA)
	b, bCalls := regionWriter(t, env, ob, regionB)
	ctx := context.Background()
	if _, err := a.Update(ctx, walletInput(wallets, "w-1"), deposit(10)); err != nil {
		t.Fatalf("A creates: %v", err)
	}
	ev := func(id string, seq int64) outbox.Envelope {
		e := envelope(t, map[string]any{})
		e.AggregateType, e.AggregateID, e.Sequence = "Wallet", id, seq
		return e
	}
	cases := []struct {
		name   string
		events []outbox.Envelope
	}{
		// Two aggregates, one new here and one homed in A.
		{"new and foreign", []outbox.Envelope{ev("w-new", 1), ev("w-1", 2)}},
		// The same foreign aggregate twice in one change.
		{"foreign twice", []outbox.Envelope{ev("w-1", 2), ev("w-1", 3)}},
		// A creation (sequence 1) of an aggregate whose home item and
		// first record already replicated here: both conditions fail; the
		// refusal, not a conflict, is the answer.
		{"creation of a foreign aggregate", []outbox.Envelope{ev("w-1", 1)}},
		// Sequence 1 after a later one of the same aggregate.
		{"creation out of order", []outbox.Envelope{ev("w-1", 5), ev("w-1", 1)}},
	}
	// Update's retry loop stops at the refusal: one transaction, no retry.
	if _, err := b.Update(ctx, walletInput(wallets, "w-1"), deposit(5)); err == nil {
		t.Fatal("B's Update of w-1 succeeded")
	} else {
		wantNotHome(t, err, "w-1", regionA, regionB)
	}
	if n := bCalls.tx.Load(); n != 1 {
		t.Fatalf("B's refused Update sent %d transactions, want 1 (a refusal is final)", n)
	}
	for _, c := range cases {
		err := b.Write(ctx, nil, c.events)
		wantNotHome(t, err, "w-1", regionA, regionB)
		if h := homeOf(t, env, ob, "Wallet", "w-new"); h != nil {
			t.Fatalf("%s: the refused change wrote w-new's home item %v", c.name, h)
		}
		if got := sequences(t, env, ob, "Wallet#w-1"); len(got) != 1 {
			t.Fatalf("%s: outbox holds sequences %v of w-1, want [1]", c.name, got)
		}
	}
}
