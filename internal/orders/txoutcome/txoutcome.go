// Package txoutcome is the transaction-outcome test harness the ledger's
// and the notifier's tests share: a DynamoDB client that cancels every
// TransactWriteItems whose actions carry a chosen cancellation reason code
// (by the role of each action: marker, effects, ordering gate), and the
// rules that say what a consumer must do with every combination of the
// seven codes DynamoDB documents (outbox.CancellationReasons). For tests
// only.
package txoutcome

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// Roles every ordered consumer's transactions share; a consumer adds its
// effects' roles (Client.Effect).
const (
	RoleMarker = "marker" // action 0: the dedup marker Put
	RoleGate   = "gate"   // last action when ordered: the ordering gate Update
	RoleBuffer = "buffer" // the resequencer's buffer item Put (its transaction always commits here)
)

// Attempts is the Dedup.MaxAttempts the tables run with.
const Attempts = 3

// Client cancels every TransactWriteItems whose actions have a code other
// than None in Codes[role] (the same codes on every attempt) and counts
// commits otherwise. Safe for concurrent use.
type Client struct {
	// Codes are the cancellation codes by role ("" or None: fine).
	Codes map[string]string
	// Effect returns the role of an action that is not the marker, the
	// gate or a buffer Put (the consumer's effects).
	Effect func(types.TransactWriteItem) string
	// Last is the ordering item's last_sequence GetItem returns (0: no item).
	Last int64
	// NoEffects: the event's Apply transaction has no effect actions, so any
	// commit is the apply (else only commits with an effect are).
	NoEffects bool

	mu sync.Mutex
	// Calls counts TransactWriteItems calls; Commits the committed ones
	// with an effect (or, with NoEffects, with a marker); Buffered the
	// committed buffer writes; Seen the committed ones without the
	// consumer's effect (marker and gate only: an event recorded as seen;
	// or the gate alone: an applied event adopted).
	Calls, Commits, Buffered, Seen int
}

// Role classifies an action: the gate (an Update of an ordering item), a
// buffer item Put, the marker (any other Put the consumer does not claim),
// or the consumer's own role.
func (c *Client) Role(it types.TransactWriteItem) string {
	if it.Update != nil {
		if pk, _ := it.Update.Key["pk"].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, dedup.SequenceInfix) {
			return RoleGate
		}
	}
	if it.Put != nil {
		if pk, _ := it.Put.Item["pk"].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, dedup.BufferInfix) {
			return RoleBuffer
		}
	}
	if r := c.Effect(it); r != "" {
		return r
	}
	return RoleMarker
}

// GetItem answers an ordered consumer's read of its ordering item.
func (c *Client) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if c.Last == 0 {
		return &dynamodb.GetItemOutput{}, nil
	}
	return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{"pk": in.Key["pk"],
		dedup.AttrLastSequence: &types.AttributeValueMemberN{Value: strconv.FormatInt(c.Last, 10)}}}, nil
}

// TransactWriteItems cancels or commits in by the codes of its actions' roles.
func (c *Client) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Calls++
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	cancel, effect, marker := false, false, false
	for _, it := range in.TransactItems {
		switch r := c.Role(it); {
		case r == RoleBuffer:
			c.Buffered++
			return &dynamodb.TransactWriteItemsOutput{}, nil
		case r == RoleMarker:
			marker = it.Put != nil
		case r != RoleGate:
			effect = true
		}
	}
	for i, it := range in.TransactItems {
		code := c.Codes[c.Role(it)]
		if code == "" {
			code = outbox.ReasonNone
		}
		reasons[i].Code = aws.String(code)
		cancel = cancel || code != outbox.ReasonNone
	}
	if cancel {
		return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
	}
	if effect || (c.NoEffects && marker) {
		c.Commits++
	} else {
		c.Seen++
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// Outcome is what a consumer's Handle did with one delivery.
type Outcome struct {
	Kind   string // "applied", "duplicate", "retry", "held", "buffered", "permanent"
	Reason string // the dead-letter reason of "permanent"
}

// The outcomes.
var (
	Applied   = Outcome{Kind: "applied"}
	Duplicate = Outcome{Kind: "duplicate"}
	Retry     = Outcome{Kind: "retry"}
	// Held: an ordered consumer's event is early (dedup.ErrSequenceGap);
	// nothing written, redelivered (dead-lettered past GapMaxReceives).
	Held = Outcome{Kind: "held"}
	// Buffered: an ordered consumer's early event is stored in the
	// resequencer's buffer and acknowledged.
	Buffered = Outcome{Kind: "buffered"}
)

// Permanent is a dead-lettered outcome with its reason.
func Permanent(reason string) Outcome { return Outcome{Kind: "permanent", Reason: reason} }

// Rule is one line of an outcome precedence: the first rule whose When
// holds for a combination of codes names the outcome it must have.
type Rule struct {
	Name string
	When func(codes map[string]string) bool
	Want Outcome
}

// Has holds when any role has one of codes.
func Has(codes ...string) func(map[string]string) bool {
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

// Is holds when role has code.
func Is(role, code string) func(map[string]string) bool {
	return func(c map[string]string) bool { return c[role] == code }
}

// AllNone holds when no role has a code.
func AllNone(c map[string]string) bool { return !Has(outbox.CancellationReasons[1:]...)(c) }

// Combos returns every combination of the seven cancellation codes at the
// given roles.
func Combos(roles ...string) []map[string]string {
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

// First returns the first rule of rules that holds for codes.
func First(rules []Rule, codes map[string]string) Rule {
	for _, r := range rules {
		if r.When(codes) {
			return r
		}
	}
	return Rule{}
}

// Observe classifies Handle's result err with what c saw.
func Observe(err error, c *Client) Outcome {
	if p, ok := sqsconsumer.AsPermanent(err); ok {
		return Permanent(p.Reason)
	}
	switch {
	case errors.Is(err, dedup.ErrSequenceGap):
		return Held
	case err != nil:
		return Retry
	case c.Commits > 0:
		return Applied
	case c.Buffered > 0:
		return Buffered
	}
	return Duplicate
}

// Ordering item states GetItem reports when the gate's condition failed,
// for an event of sequence 2.
const (
	GateBehind = "behind" // last_sequence 2: the event was applied before
	GateEarly  = "early"  // no item: sequence 1 is missing
	GateMoved  = "moved"  // last_sequence 1: the item moved after the transaction; re-sent
)

// GateLast is the last_sequence of each state.
var GateLast = map[string]int64{GateBehind: 2, GateEarly: 0, GateMoved: 1}

// R returns the Rule name → want, when when holds.
func R(name string, when func(map[string]string) bool, want Outcome) Rule {
	return Rule{Name: name, When: when, Want: want}
}

// States returns the ordering item states a combination of codes is judged
// in: when the marker's or the gate's condition failed, an ordered Apply
// reads the ordering item and decides by it (GateBehind, GateEarly,
// GateMoved); otherwise it reads nothing ("").
func States(codes map[string]string) []string {
	if codes[RoleMarker] == outbox.ReasonConditionalCheckFailed || codes[RoleGate] == outbox.ReasonConditionalCheckFailed {
		return []string{GateBehind, GateEarly, GateMoved}
	}
	return []string{""}
}

// Ordered returns the outcome precedence of an ordered consumer's delivery
// when the ordering item is in state: the marker's and the gate's
// conditions decide first, by the item (pkg/dedup's decision table,
// docs/ORDERING.md), then the consumer's own rules (rest). The gate's
// failure decides whatever the effects' conditions said: an effect's
// condition is the consumer's answer only while the gate held.
func Ordered(state string, rest []Rule) []Rule {
	marker := Is(RoleMarker, outbox.ReasonConditionalCheckFailed)
	gate := Is(RoleGate, outbox.ReasonConditionalCheckFailed)
	and := func(a, b func(map[string]string) bool) func(map[string]string) bool {
		return func(c map[string]string) bool { return a(c) && b(c) }
	}
	rules := []Rule{R("committed", AllNone, Applied)}
	switch state {
	case GateBehind:
		rules = append(rules,
			R("applied (marker), the gate past it", marker, Duplicate),
			R("gate: sequence <= last", gate, Duplicate))
	case GateEarly:
		rules = append(rules,
			R("applied (marker), ahead of the gate: kept as applied, adopted in turn", marker, Buffered),
			R("gate: sequence > last+1: buffered", gate, Buffered))
	case GateMoved:
		// Applied and next: the gate adopts it, a transaction of the gate
		// alone (it carries the gate's code).
		rules = append(rules,
			R("applied (marker), next: the gate adopts it", and(marker, Is(RoleGate, outbox.ReasonNone)), Duplicate),
			R("applied (marker), next: the adoption is invalid", and(marker, Is(RoleGate, outbox.ReasonValidation)), Permanent(dedup.ReasonTransactionInvalid)),
			R("applied (marker), next: the adoption's item collection is full", and(marker, Is(RoleGate, outbox.ReasonItemCollectionSize)), Permanent(dedup.ReasonItemCollectionFull)),
			R("applied (marker), next: the adoption fails for now", marker, Retry),
			R("gate moved, ValidationError: sent again cannot help", and(gate, Has(outbox.ReasonValidation)), Permanent(dedup.ReasonTransactionInvalid)),
			R("gate moved, item collection full", and(gate, Has(outbox.ReasonItemCollectionSize)), Permanent(dedup.ReasonItemCollectionFull)),
			R("gate moved (the predecessor committed meanwhile): sent again, whatever the effects said", gate, Retry))
	}
	return append(rules, rest...)
}
