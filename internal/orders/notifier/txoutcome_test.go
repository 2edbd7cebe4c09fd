package notifier_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/txoutcome"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Roles of the notifier's effect actions (the marker and the gate are
// txoutcome.RoleMarker and txoutcome.RoleGate).
const (
	roleNotification = "notification" // action 1: the notification Put
	roleView         = "view"         // action 2: the order view Update (absent in the re-run)
)

// cancelClient is the notifier's client with the shared harness's fake
// (txoutcome.Client) answering the two calls Apply makes.
type cancelClient struct {
	notifier.Client
	h *txoutcome.Client
}

func (c cancelClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return c.h.GetItem(ctx, in, o...)
}

func (c cancelClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return c.h.TransactWriteItems(ctx, in, o...)
}

// effectRole classifies the notifier's effect actions: the notification
// Put and the order view Update ("" for anything else).
func effectRole(it types.TransactWriteItem) string {
	switch {
	case it.Update != nil:
		return roleView
	case it.Put != nil:
		if pk, _ := it.Put.Item["pk"].(*types.AttributeValueMemberS); pk != nil && strings.HasPrefix(pk.Value, notifier.NotificationPrefix) {
			return roleNotification
		}
	}
	return ""
}

// notifierRules is the outcome precedence of a notifier delivery. When
// only the view's condition failed, the notifier re-runs the transaction
// without the view: the marker's and notification's codes decide then.
var notifierRules = []txoutcome.Rule{
	txoutcome.R("committed", txoutcome.AllNone, txoutcome.Applied),
	txoutcome.R("marker exists", txoutcome.Is(txoutcome.RoleMarker, outbox.ReasonConditionalCheckFailed), txoutcome.Duplicate),
	txoutcome.R("notification exists (marker expired)", txoutcome.Is(roleNotification, outbox.ReasonConditionalCheckFailed), txoutcome.Duplicate),
	txoutcome.R("ValidationError", txoutcome.Has(outbox.ReasonValidation), txoutcome.Permanent(dedup.ReasonTransactionInvalid)),
	txoutcome.R("item collection full", txoutcome.Has(outbox.ReasonItemCollectionSize), txoutcome.Permanent(dedup.ReasonItemCollectionFull)),
	txoutcome.R("view is newer; re-run commits", func(c map[string]string) bool {
		return c[roleView] == outbox.ReasonConditionalCheckFailed && c[txoutcome.RoleMarker] == outbox.ReasonNone && c[roleNotification] == outbox.ReasonNone
	}, txoutcome.Applied),
	txoutcome.R("conflicts or throttling past the retries", txoutcome.Has(outbox.ReasonTransactionConflict, outbox.ReasonThrottling, outbox.ReasonProvisionedThroughput), txoutcome.Retry),
}

// TestNotifierCancellationOutcomes: every combination of the seven
// cancellation reason codes at every action of the notifier's transaction
// (marker, notification, view; and the re-run without the view) maps to
// the one outcome notifierRules names: applied, duplicate, retry (an error
// the queue redelivers) or permanent (sqsconsumer.Permanent, with its
// reason).
func TestNotifierCancellationOutcomes(t *testing.T) {
	t.Parallel()
	roles := []string{txoutcome.RoleMarker, roleNotification, roleView}
	for _, c := range txoutcome.Combos(roles...) {
		var parts []string
		for _, r := range roles {
			parts = append(parts, r+"="+c[r])
		}
		t.Run(strings.Join(parts, ","), func(t *testing.T) {
			t.Parallel()
			client := cancelClient{h: &txoutcome.Client{Codes: c, Effect: effectRole}}
			n, err := notifier.New(client, notifier.Config{Ordering: dedup.Unordered, Table: "notifications", Logger: quiet, Dedup: dedup.Config{Table: "dedup",
				MaxAttempts: txoutcome.Attempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
			if err != nil {
				t.Fatal(err)
			}
			env := envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
			err = n.Handle(context.Background(), delivery(t, env))
			rule, want := "", txoutcome.Outcome{}
			for _, r := range notifierRules {
				if r.When(c) {
					rule, want = r.Name, r.Want
					break
				}
			}
			got := txoutcome.Observe(err, client.h)
			if got != want {
				t.Fatalf("rule %q: got %+v (err %v), want %+v", rule, got, err, want)
			}
		})
	}
}

// orderedNotifierRules is the outcome precedence of an ordered notifier
// delivery: the marker and the ordering gate first (txoutcome.Ordered: the
// gate's decision by the ordering item's state), then notifierRules —
// except that a notification found recorded (its marker expired) is
// recorded as seen, a second transaction of marker and gate, so the
// order's sequence advances: a duplicate only if that commits.
func orderedNotifierRules(state string) []txoutcome.Rule {
	noteExists := txoutcome.Is(roleNotification, outbox.ReasonConditionalCheckFailed)
	// The re-run without the view keeps the gate: it commits only if the
	// gate's code is None.
	viewNewer := txoutcome.R("view is newer; re-run (with the gate) commits", func(c map[string]string) bool {
		return c[roleView] == outbox.ReasonConditionalCheckFailed && c[txoutcome.RoleMarker] == outbox.ReasonNone &&
			c[roleNotification] == outbox.ReasonNone && c[txoutcome.RoleGate] == outbox.ReasonNone
	}, txoutcome.Applied)
	rest := []txoutcome.Rule{
		txoutcome.R("notification exists (marker expired); recorded as seen", func(c map[string]string) bool {
			return noteExists(c) && c[txoutcome.RoleMarker] == outbox.ReasonNone && c[txoutcome.RoleGate] == outbox.ReasonNone
		}, txoutcome.Duplicate),
		txoutcome.R("notification exists; recording it as seen fails for now", noteExists, txoutcome.Retry),
		notifierRules[3], notifierRules[4], viewNewer, notifierRules[6],
	}
	return txoutcome.Ordered(state, rest)
}

// TestNotifierOrderedCancellationOutcomes: the ordered notifier's
// transaction carries one more action, the ordering gate. Every
// combination of the seven cancellation reason codes at marker,
// notification, view and gate, and when the gate's condition failed each
// state of the ordering item, maps to the one outcome
// orderedNotifierRules names.
func TestNotifierOrderedCancellationOutcomes(t *testing.T) {
	t.Parallel()
	roles := []string{txoutcome.RoleMarker, roleNotification, roleView, txoutcome.RoleGate}
	for _, c := range txoutcome.Combos(roles...) {
		for _, state := range txoutcome.States(c) {
			var parts []string
			for _, r := range roles {
				parts = append(parts, r+"="+c[r])
			}
			t.Run(strings.Join(parts, ",")+"/"+state, func(t *testing.T) {
				t.Parallel()
				client := cancelClient{h: &txoutcome.Client{Codes: c, Effect: effectRole, Last: txoutcome.GateLast[state]}}
				n, err := notifier.New(client, notifier.Config{Table: "notifications", Logger: quiet, Dedup: dedup.Config{Table: "dedup",
					MaxAttempts: txoutcome.Attempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
				if err != nil {
					t.Fatal(err)
				}
				env := envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
				err = n.Handle(context.Background(), delivery(t, env))
				rule, want := "", txoutcome.Outcome{}
				for _, r := range orderedNotifierRules(state) {
					if r.When(c) {
						rule, want = r.Name, r.Want
						break
					}
				}
				got := txoutcome.Observe(err, client.h)
				if got != want {
					t.Fatalf("rule %q: got %+v (err %v), want %+v", rule, got, err, want)
				}
			})
		}
	}
}
