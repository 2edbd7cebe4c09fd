package statement_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/examples/wallet/statement"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

func event(t *testing.T, seq int64, typ string, payload any) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: wallet.AggregateType, ID: "acc-1", Sequence: seq},
		outbox.Event{Type: typ, Version: 1, Payload: payload}, outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// GIVEN the statement's effects applied straight to its table, without the
// ordering gate
// WHEN an account's third event comes before its second
// THEN its balance update's condition fails (the effect depends on its
// predecessor: order matters), and in order the balance and lines are right;
// the second event applied again fails on its line (effect 0, the one
// NewHandler names with dedup.AppliedIf).
func TestEffectsDependOnPredecessor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := dynoxide.Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
	if _, err := ddb.CreateTable(ctx, statement.Table("statement")); err != nil {
		t.Fatal(err)
	}
	effects := statement.Effects("statement")
	apply := func(env outbox.Envelope) error {
		acts, err := effects(ctx, env)
		if err != nil {
			return err
		}
		_, err = ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: acts})
		return outbox.TranslateTxError(err)
	}
	opened := event(t, 1, wallet.EventAccountOpened, wallet.Opened{AccountID: "acc-1", Owner: "o", Currency: "EUR"})
	deposited := event(t, 2, wallet.EventAmountDeposited, wallet.Deposited{AccountID: "acc-1", Amount: 100, Balance: 100})
	withdrawn := event(t, 3, wallet.EventAmountWithdrawn, wallet.Withdrawn{AccountID: "acc-1", Amount: 30, Balance: 70})

	if err := apply(opened); err != nil {
		t.Fatal(err)
	}
	var txErr *outbox.TxError
	if err := apply(withdrawn); !errors.As(err, &txErr) || txErr.FirstConditionFailed() != 1 {
		t.Fatalf("sequence 3 before 2: %v, want the balance update (action 1) to fail its condition", err)
	}
	for _, env := range []outbox.Envelope{deposited, withdrawn} {
		if err := apply(env); err != nil {
			t.Fatalf("sequence %d in order: %v", env.Sequence, err)
		}
	}
	if err := apply(deposited); !errors.As(err, &txErr) || txErr.FirstConditionFailed() != 0 {
		t.Fatalf("sequence 2 again: %v, want the line Put (action 0) to fail its condition", err)
	}
	b, ok, err := statement.GetBalance(ctx, ddb, "statement", "acc-1")
	if err != nil || !ok || b.Balance != 70 || b.Sequence != 3 || b.Currency != "EUR" {
		t.Fatalf("balance = %+v, %v, %v; want 70 EUR at sequence 3", b, ok, err)
	}
	lines, err := statement.Lines(ctx, ddb, "statement", "acc-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ amount, balance int64 }{{0, 0}, {100, 100}, {-30, 70}}
	for i, l := range lines {
		if l.Amount != want[i].amount || l.Balance != want[i].balance || l.Sequence != int64(i+1) {
			t.Errorf("line %d = %+v, want amount %d balance %d", i+1, l, want[i].amount, want[i].balance)
		}
	}
}

// GIVEN an event type the consumer does not act on, and a payload that does
// not decode
// WHEN the effects are built
// THEN the first has no effects (recorded as seen: the gate moves past it)
// and the second is a permanent failure (dead-lettered as malformed).
func TestEffectsUnknownAndMalformed(t *testing.T) {
	effects := statement.Effects("statement")
	acts, err := effects(context.Background(), event(t, 2, "OwnerRenamed", map[string]string{"owner": "x"}))
	if err != nil || len(acts) != 0 {
		t.Fatalf("unknown type: %d effects, %v; want none, nil", len(acts), err)
	}
	_, err = effects(context.Background(), event(t, 2, wallet.EventAmountDeposited, map[string]string{"amount": "ten"}))
	var perm *sqsconsumer.PermanentError
	if !errors.As(err, &perm) || perm.Reason != sqsconsumer.ReasonMalformedEvent {
		t.Fatalf("malformed payload: %v, want a permanent %s", err, sqsconsumer.ReasonMalformedEvent)
	}
}
