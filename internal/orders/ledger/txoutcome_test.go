package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/txoutcome"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Roles of the ledger's effect actions (the marker and the gate are
// txoutcome.RoleMarker and txoutcome.RoleGate).
const (
	roleEntry   = "entry"   // action 1: the entry Put
	roleBalance = "balance" // action 2: the balance Update
)

// cancelClient is the ledger's client with the shared harness's fake
// (txoutcome.Client) answering the two calls Apply makes.
type cancelClient struct {
	ledger.Client
	h *txoutcome.Client
}

func (c cancelClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return c.h.GetItem(ctx, in, o...)
}

func (c cancelClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return c.h.TransactWriteItems(ctx, in, o...)
}

// effectRole classifies the ledger's effect actions: the entry Put and
// the balance Update ("" for anything else).
func effectRole(it types.TransactWriteItem) string {
	switch {
	case it.Update != nil:
		return roleBalance
	case it.Put != nil:
		if pk, _ := it.Put.Item["pk"].(*types.AttributeValueMemberS); pk != nil && strings.HasPrefix(pk.Value, ledger.EntryPrefix) {
			return roleEntry
		}
	}
	return ""
}

// ledgerRules is the outcome precedence of a ledger delivery.
var ledgerRules = []txoutcome.Rule{
	txoutcome.R("committed", txoutcome.AllNone, txoutcome.Applied),
	txoutcome.R("marker exists", txoutcome.Is(txoutcome.RoleMarker, outbox.ReasonConditionalCheckFailed), txoutcome.Duplicate),
	txoutcome.R("entry exists (marker expired)", txoutcome.Is(roleEntry, outbox.ReasonConditionalCheckFailed), txoutcome.Duplicate),
	txoutcome.R("ValidationError", txoutcome.Has(outbox.ReasonValidation), txoutcome.Permanent(dedup.ReasonTransactionInvalid)),
	txoutcome.R("item collection full", txoutcome.Has(outbox.ReasonItemCollectionSize), txoutcome.Permanent(dedup.ReasonItemCollectionFull)),
	txoutcome.R("balance would overflow", txoutcome.Is(roleBalance, outbox.ReasonConditionalCheckFailed), txoutcome.Permanent(ledger.ReasonBalanceOverflow)),
	txoutcome.R("conflicts or throttling past the retries", txoutcome.Has(outbox.ReasonTransactionConflict, outbox.ReasonThrottling, outbox.ReasonProvisionedThroughput), txoutcome.Retry),
}

// TestLedgerCancellationOutcomes: every combination of the seven
// cancellation reason codes at every action of both ledger transactions (a
// payment: marker, entry, balance; an unpaid cancellation: marker only)
// maps to the one outcome ledgerRules names: applied, duplicate, retry (an
// error the queue redelivers) or permanent (sqsconsumer.Permanent, with
// its reason).
func TestLedgerCancellationOutcomes(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name  string
		roles []string
		env   func(t *testing.T) outbox.Envelope
	}{
		{"OrderPaid", []string{txoutcome.RoleMarker, roleEntry, roleBalance}, func(t *testing.T) outbox.Envelope {
			return envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
		}},
		{"unpaid OrderCancelled", []string{txoutcome.RoleMarker}, func(t *testing.T) outbox.Envelope {
			return envelope(t, "o-1", 2, order.EventOrderCancelled, order.Cancelled{OrderID: "o-1", Currency: "EUR"})
		}},
	}
	for _, sh := range shapes {
		for _, c := range txoutcome.Combos(sh.roles...) {
			var parts []string
			for _, r := range sh.roles {
				parts = append(parts, r+"="+c[r])
			}
			t.Run(sh.name+"/"+strings.Join(parts, ","), func(t *testing.T) {
				t.Parallel()
				client := cancelClient{h: &txoutcome.Client{Codes: c, Effect: effectRole, NoEffects: len(sh.roles) == 1}}
				l, err := ledger.New(client, ledger.Config{Ordering: dedup.Unordered, Table: "ledger", Logger: quiet, Dedup: dedup.Config{Table: "dedup",
					MaxAttempts: txoutcome.Attempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
				if err != nil {
					t.Fatal(err)
				}
				err = l.Handle(context.Background(), delivery(t, sh.env(t)))
				rule, want := "", txoutcome.Outcome{}
				for _, r := range ledgerRules {
					if r.When(c) {
						rule, want = r.Name, r.Want
						break
					}
				}
				got := txoutcome.Observe(err, client.h)
				if got != want {
					t.Fatalf("rule %q: got %+v (err %v), want %+v", rule, got, err, want)
				}
				if want == txoutcome.Retry && client.h.Calls != txoutcome.Attempts {
					t.Fatalf("rule %q: %d attempts, want %d", rule, client.h.Calls, txoutcome.Attempts)
				}
			})
		}
	}
}

// orderedLedgerRules is the outcome precedence of an ordered ledger
// delivery: the marker and the ordering gate first (txoutcome.Ordered: the
// gate's decision by the ordering item's state), then ledgerRules — except
// that an entry found booked (its marker expired) is recorded as seen, a
// second transaction of marker and gate, so the order's sequence advances:
// it is a duplicate only if that commits.
func orderedLedgerRules(state string) []txoutcome.Rule {
	entryExists := txoutcome.Is(roleEntry, outbox.ReasonConditionalCheckFailed)
	rest := []txoutcome.Rule{
		txoutcome.R("entry exists (marker expired); recorded as seen", func(c map[string]string) bool {
			return entryExists(c) && c[txoutcome.RoleMarker] == outbox.ReasonNone && c[txoutcome.RoleGate] == outbox.ReasonNone
		}, txoutcome.Duplicate),
		txoutcome.R("entry exists; recording it as seen fails for now", entryExists, txoutcome.Retry),
	}
	return txoutcome.Ordered(state, append(rest, ledgerRules[3:]...))
}

// TestLedgerOrderedCancellationOutcomes: the ordered ledger's transactions
// carry one more action, the ordering gate. Every combination of the seven
// cancellation reason codes at every action (a payment: marker, entry,
// balance, gate; an unpaid cancellation: marker, gate), and when the gate's
// condition failed each state of the ordering item, maps to the one outcome
// orderedLedgerRules names.
func TestLedgerOrderedCancellationOutcomes(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name  string
		roles []string
		env   func(t *testing.T) outbox.Envelope
	}{
		{"OrderPaid", []string{txoutcome.RoleMarker, roleEntry, roleBalance, txoutcome.RoleGate}, func(t *testing.T) outbox.Envelope {
			return envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
		}},
		{"unpaid OrderCancelled", []string{txoutcome.RoleMarker, txoutcome.RoleGate}, func(t *testing.T) outbox.Envelope {
			return envelope(t, "o-1", 2, order.EventOrderCancelled, order.Cancelled{OrderID: "o-1", Currency: "EUR"})
		}},
	}
	for _, sh := range shapes {
		for _, c := range txoutcome.Combos(sh.roles...) {
			for _, state := range txoutcome.States(c) {
				var parts []string
				for _, r := range sh.roles {
					parts = append(parts, r+"="+c[r])
				}
				t.Run(sh.name+"/"+strings.Join(parts, ",")+"/"+state, func(t *testing.T) {
					t.Parallel()
					client := cancelClient{h: &txoutcome.Client{Codes: c, Effect: effectRole, Last: txoutcome.GateLast[state], NoEffects: len(sh.roles) == 2}}
					l, err := ledger.New(client, ledger.Config{Table: "ledger", Logger: quiet, Dedup: dedup.Config{Table: "dedup",
						MaxAttempts: txoutcome.Attempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
					if err != nil {
						t.Fatal(err)
					}
					err = l.Handle(context.Background(), delivery(t, sh.env(t)))
					rule, want := "", txoutcome.Outcome{}
					for _, r := range orderedLedgerRules(state) {
						if r.When(c) {
							rule, want = r.Name, r.Want
							break
						}
					}
					got := txoutcome.Observe(err, client.h)
					if got != want {
						t.Fatalf("rule %q: got %+v (err %v), want %+v", rule, got, err, want)
					}
					// A retry is reported only after the retries of the
					// transaction that failed for now (the booking, the
					// "seen" record, or an adoption) ran out, unless a
					// reason repeating cannot fix is there.
					fixable := !txoutcome.Has(outbox.ReasonValidation, outbox.ReasonItemCollectionSize)(map[string]string{"m": c[txoutcome.RoleMarker], "g": c[txoutcome.RoleGate]})
					if want == txoutcome.Retry && fixable && client.h.Calls < txoutcome.Attempts {
						t.Fatalf("rule %q: %d attempts, want at least %d", rule, client.h.Calls, txoutcome.Attempts)
					}
				})
			}
		}
	}
}
