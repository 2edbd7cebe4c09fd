package notifier_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Roles of the actions in the notifier's Apply transaction.
const (
	roleMarker       = "marker"       // action 0: the dedup marker Put
	roleNotification = "notification" // action 1: the notification Put
	roleView         = "view"         // action 2: the order view Update (absent in the re-run)
	roleGate         = "gate"         // last action when ordered: the ordering gate Update
)

// cancelClient cancels every TransactWriteItems whose actions have a code
// other than None in codes[role] (the same codes on every attempt) and
// counts commits otherwise.
type cancelClient struct {
	notifier.Client
	mu      sync.Mutex
	codes   map[string]string
	calls   int
	commits int
	// last is the ordering item's last_sequence GetItem returns (0: no item).
	last int64
	// noEffects: the event's Apply transaction has no effect actions, so
	// any commit is the apply (else only commits with an effect are).
	noEffects bool
	// buffered counts committed resequencer buffer writes (a buffer item
	// Put and the gate's ADD: they always commit here).
	buffered int
	// seen counts committed transactions without the consumer's effect
	// (marker and gate only: an event recorded as seen).
	seen int
}

// roleBuffer is the resequencer's buffer item Put (its transaction always
// commits in this fake).
const roleBuffer = "buffer"

// GetItem answers the ordered notifier's read of its ordering item.
func (c *cancelClient) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if c.last == 0 {
		return &dynamodb.GetItemOutput{}, nil
	}
	return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{"pk": in.Key["pk"],
		dedup.AttrLastSequence: &types.AttributeValueMemberN{Value: strconv.FormatInt(c.last, 10)}}}, nil
}

func notifierRole(it types.TransactWriteItem) string {
	if it.Update != nil {
		if pk, _ := it.Update.Key["pk"].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, dedup.SequenceInfix) {
			return roleGate
		}
		return roleView
	}
	pk, _ := it.Put.Item["pk"].(*types.AttributeValueMemberS)
	if pk != nil && strings.Contains(pk.Value, dedup.BufferInfix) {
		return roleBuffer
	}
	if pk != nil && strings.HasPrefix(pk.Value, notifier.NotificationPrefix) {
		return roleNotification
	}
	return roleMarker
}

func (c *cancelClient) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	cancel, effect := false, false
	for _, it := range in.TransactItems {
		switch r := notifierRole(it); {
		case r == roleBuffer:
			c.buffered++
			return &dynamodb.TransactWriteItemsOutput{}, nil
		case r != roleMarker && r != roleGate:
			effect = true
		}
	}
	for i, it := range in.TransactItems {
		code := c.codes[notifierRole(it)]
		if code == "" {
			code = outbox.ReasonNone
		}
		reasons[i].Code = aws.String(code)
		cancel = cancel || code != outbox.ReasonNone
	}
	if cancel {
		return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
	}
	if effect || c.noEffects {
		c.commits++
	} else {
		c.seen++
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// consumerOutcome is what Handle did with one delivery.
type consumerOutcome struct {
	kind   string // "applied", "duplicate", "retry", "permanent"
	reason string // the dead-letter reason of "permanent"
}

var (
	applied      = consumerOutcome{kind: "applied"}
	duplicate    = consumerOutcome{kind: "duplicate"}
	retryOutcome = consumerOutcome{kind: "retry"}
	// held: an ordered consumer's event is early (dedup.ErrSequenceGap);
	// nothing written, redelivered (dead-lettered past GapMaxReceives).
	held = consumerOutcome{kind: "held"}
	// bufferedOutcome: an ordered consumer's early event is stored in the
	// resequencer's buffer and acknowledged.
	bufferedOutcome = consumerOutcome{kind: "buffered"}
)

func permanent(reason string) consumerOutcome {
	return consumerOutcome{kind: "permanent", reason: reason}
}

type consumerRule struct {
	name string
	when func(c map[string]string) bool
	want consumerOutcome
}

func has(codes ...string) func(map[string]string) bool {
	return func(c map[string]string) bool {
		for _, v := range c {
			for _, code := range codes {
				if v == code {
					return true
				}
			}
		}
		return false
	}
}

func is(role, code string) func(map[string]string) bool {
	return func(c map[string]string) bool { return c[role] == code }
}

func allNone(c map[string]string) bool { return !has(outbox.CancellationReasons[1:]...)(c) }

// notifierRules is the outcome precedence of a notifier delivery. When
// only the view's condition failed, the notifier re-runs the transaction
// without the view: the marker's and notification's codes decide then.
var notifierRules = []consumerRule{
	{"committed", allNone, applied},
	{"marker exists", is(roleMarker, outbox.ReasonConditionalCheckFailed), duplicate},
	{"notification exists (marker expired)", is(roleNotification, outbox.ReasonConditionalCheckFailed), duplicate},
	{"ValidationError", has(outbox.ReasonValidation), permanent(dedup.ReasonTransactionInvalid)},
	{"item collection full", has(outbox.ReasonItemCollectionSize), permanent(dedup.ReasonItemCollectionFull)},
	{"view is newer; re-run commits", func(c map[string]string) bool {
		return c[roleView] == outbox.ReasonConditionalCheckFailed && c[roleMarker] == outbox.ReasonNone && c[roleNotification] == outbox.ReasonNone
	}, applied},
	{"conflicts or throttling past the retries", has(outbox.ReasonTransactionConflict, outbox.ReasonThrottling, outbox.ReasonProvisionedThroughput), retryOutcome},
}

func combos(roles ...string) []map[string]string {
	out := []map[string]string{{}}
	for _, r := range roles {
		var next []map[string]string
		for _, c := range out {
			for _, code := range outbox.CancellationReasons {
				m := map[string]string{r: code}
				for k, v := range c {
					m[k] = v
				}
				next = append(next, m)
			}
		}
		out = next
	}
	return out
}

const consumerAttempts = 3

// TestNotifierCancellationOutcomes: every combination of the seven
// cancellation reason codes at every action of the notifier's transaction
// (marker, notification, view; and the re-run without the view) maps to
// the one outcome notifierRules names: applied, duplicate, retry (an error
// the queue redelivers) or permanent (sqsconsumer.Permanent, with its
// reason).
func TestNotifierCancellationOutcomes(t *testing.T) {
	t.Parallel()
	roles := []string{roleMarker, roleNotification, roleView}
	for _, c := range combos(roles...) {
		var parts []string
		for _, r := range roles {
			parts = append(parts, r+"="+c[r])
		}
		t.Run(strings.Join(parts, ","), func(t *testing.T) {
			t.Parallel()
			client := &cancelClient{codes: c}
			n, err := notifier.New(client, notifier.Config{Ordering: dedup.Unordered, Table: "notifications", Logger: quiet, Dedup: dedup.Config{Table: "dedup",
				MaxAttempts: consumerAttempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
			if err != nil {
				t.Fatal(err)
			}
			env := envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
			err = n.Handle(context.Background(), delivery(t, env))
			rule, want := "", consumerOutcome{}
			for _, r := range notifierRules {
				if r.when(c) {
					rule, want = r.name, r.want
					break
				}
			}
			got := observe(err, client)
			if got != want {
				t.Fatalf("rule %q: got %+v (err %v), want %+v", rule, got, err, want)
			}
		})
	}
}

// observe classifies Handle's result.
func observe(err error, c *cancelClient) consumerOutcome {
	if p, ok := sqsconsumer.AsPermanent(err); ok {
		return permanent(p.Reason)
	}
	switch {
	case errors.Is(err, dedup.ErrSequenceGap):
		return held
	case err != nil:
		return retryOutcome
	case c.commits > 0:
		return applied
	case c.buffered > 0:
		return bufferedOutcome
	}
	return duplicate
}

// Ordering item states GetItem reports when the gate's condition failed,
// for an event of sequence 2.
const (
	gateBehind = "behind" // last_sequence 2: the event was applied before
	gateEarly  = "early"  // no item: sequence 1 is missing
	gateMoved  = "moved"  // last_sequence 1: the item moved after the transaction; re-sent
)

var gateLast = map[string]int64{gateBehind: 2, gateEarly: 0, gateMoved: 1}

// orderedNotifierRules is the outcome precedence of an ordered notifier
// delivery: the marker, then the ordering gate (decided by reading the
// ordering item: an early event goes to the resequencer's buffer), then
// notifierRules — except that a notification found recorded (its marker
// expired) is recorded as seen, a second transaction of marker and gate,
// so the order's sequence advances: a duplicate only if that commits. A
// moved gate counts as a conflict: the re-run without the view fails on it
// too, so "view is newer" retries.
func orderedNotifierRules(state string) []consumerRule {
	gate := is(roleGate, outbox.ReasonConditionalCheckFailed)
	noteExists := is(roleNotification, outbox.ReasonConditionalCheckFailed)
	rules := []consumerRule{
		{"committed", allNone, applied},
		{"marker exists", is(roleMarker, outbox.ReasonConditionalCheckFailed), duplicate},
	}
	// The re-run without the view keeps the gate: it commits only if the
	// gate's code is None.
	viewNewer := consumerRule{"view is newer; re-run (with the gate) commits", func(c map[string]string) bool {
		return c[roleView] == outbox.ReasonConditionalCheckFailed && c[roleMarker] == outbox.ReasonNone &&
			c[roleNotification] == outbox.ReasonNone && c[roleGate] == outbox.ReasonNone
	}, applied}
	seen := []consumerRule{
		{"notification exists (marker expired); recorded as seen", func(c map[string]string) bool {
			return noteExists(c) && c[roleMarker] == outbox.ReasonNone && c[roleGate] == outbox.ReasonNone
		}, duplicate},
		{"notification exists; recording it as seen fails for now", noteExists, retryOutcome},
	}
	rest := append(append(seen, notifierRules[3], notifierRules[4]), viewNewer, notifierRules[6])
	switch state {
	case gateBehind:
		rules = append(rules, consumerRule{"gate: sequence <= last", gate, duplicate})
	case gateEarly:
		rules = append(rules, consumerRule{"gate: sequence > last+1: buffered", gate, bufferedOutcome})
	case gateMoved:
		return append(append(rules, rest[:4]...), consumerRule{"gate moved: a conflict", gate, retryOutcome})
	}
	return append(rules, rest...)
}

// TestNotifierOrderedCancellationOutcomes: the ordered notifier's
// transaction carries one more action, the ordering gate. Every
// combination of the seven cancellation reason codes at marker,
// notification, view and gate, and when the gate's condition failed each
// state of the ordering item, maps to the one outcome
// orderedNotifierRules names.
func TestNotifierOrderedCancellationOutcomes(t *testing.T) {
	t.Parallel()
	roles := []string{roleMarker, roleNotification, roleView, roleGate}
	for _, c := range combos(roles...) {
		states := []string{""}
		if c[roleGate] == outbox.ReasonConditionalCheckFailed {
			states = []string{gateBehind, gateEarly, gateMoved}
		}
		for _, state := range states {
			var parts []string
			for _, r := range roles {
				parts = append(parts, r+"="+c[r])
			}
			t.Run(strings.Join(parts, ",")+"/"+state, func(t *testing.T) {
				t.Parallel()
				client := &cancelClient{codes: c, last: gateLast[state]}
				n, err := notifier.New(client, notifier.Config{Table: "notifications", Logger: quiet, Dedup: dedup.Config{Table: "dedup",
					MaxAttempts: consumerAttempts, BaseBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}})
				if err != nil {
					t.Fatal(err)
				}
				env := envelope(t, "o-1", 2, order.EventOrderPaid, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
				err = n.Handle(context.Background(), delivery(t, env))
				rule, want := "", consumerOutcome{}
				for _, r := range orderedNotifierRules(state) {
					if r.when(c) {
						rule, want = r.name, r.want
						break
					}
				}
				got := observe(err, client)
				if got != want {
					t.Fatalf("rule %q: got %+v (err %v), want %+v", rule, got, err, want)
				}
			})
		}
	}
}
