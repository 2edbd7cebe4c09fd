package order_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// envelopesOf turns the events of one change of o (version after the change
// o.Version, prev before) into envelopes as the repository does.
func envelopesOf(t *testing.T, o *order.Order, prev int64, evs []outbox.Event) []outbox.Envelope {
	t.Helper()
	var out []outbox.Envelope
	for i, ev := range evs {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: o.ID, Sequence: prev + int64(i) + 1}, ev,
			outbox.Metadata{Actor: "arn:aws:iam::123456789012:user/a"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

// TestEveryTransitionSatisfiesTheContract walks every path of the state
// machine (with a reason on cancellations and the largest amount) and checks
// that each event it emits passes CheckEvent and that no order emits more
// than MaxEventsPerOrder events: ExpectedSequences cannot drift from the
// state machine.
func TestEveryTransitionSatisfiesTheContract(t *testing.T) {
	t.Parallel()
	type step func(o *order.Order) ([]outbox.Event, error)
	pay := func(o *order.Order) ([]outbox.Event, error) { return o.Pay(t0) }
	ship := func(o *order.Order) ([]outbox.Event, error) { return o.Ship(t0) }
	cancel := func(o *order.Order) ([]outbox.Event, error) { return o.Cancel("changed my mind", t0) }
	all := []step{pay, ship, cancel}
	var walk func(o order.Order, depth int) int
	walk = func(o order.Order, depth int) int {
		checked := 0
		for _, s := range all {
			next := o
			evs, err := s(&next)
			if err != nil {
				continue // not allowed in this status
			}
			for _, env := range envelopesOf(t, &next, o.Version, evs) {
				if _, err := order.CheckEvent(env); err != nil {
					t.Errorf("%s at sequence %d after %d steps: %v", env.EventType, env.Sequence, depth, err)
				}
				if env.Sequence > order.MaxEventsPerOrder {
					t.Errorf("%s at sequence %d > MaxEventsPerOrder", env.EventType, env.Sequence)
				}
				checked++
			}
			checked += walk(next, depth+1)
		}
		return checked
	}
	o, evs, err := order.Place(order.PlaceInput{ID: "o-1", CustomerID: "c.1@x", AmountMinor: order.MaxAmountMinor, Currency: "KWD"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range envelopesOf(t, o, 0, evs) {
		if _, err := order.CheckEvent(env); err != nil {
			t.Fatalf("OrderPlaced: %v", err)
		}
	}
	// After OrderPlaced: paid, then shipped or cancelled; or cancelled: 4 events.
	if n := walk(*o, 1); n != 4 {
		t.Fatalf("walked %d events, want 4", n)
	}
}

func TestCheckEventRefuses(t *testing.T) {
	t.Parallel()
	base := func(t *testing.T, typ string, seq int64, p any) outbox.Envelope {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-1", Sequence: seq},
			outbox.Event{Type: typ, Version: order.EventVersion, Payload: p}, outbox.Metadata{})
		// The write side refuses numbers beyond 2^53-1; a forged event can
		// still carry them, and CheckEvent must refuse it too.
		if err != nil && !errors.Is(err, outbox.ErrUnsafeNumber) {
			t.Fatal(err)
		}
		return env
	}
	paid := func(t *testing.T) outbox.Envelope {
		return base(t, order.EventOrderPaid, 2, order.Paid{OrderID: "o-1", AmountMinor: 100, Currency: "EUR"})
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	tests := []struct {
		name   string
		env    func(t *testing.T) outbox.Envelope
		reason string // "" = accepted
	}{
		{"valid OrderPaid", paid, ""},
		{"unknown type", func(t *testing.T) outbox.Envelope { return base(t, "OrderLost", 2, map[string]any{}) }, order.ReasonUnknownEventType},
		{"version 2", func(t *testing.T) outbox.Envelope { e := paid(t); e.EventVersion = 2; return e }, order.ReasonUnsupportedVersion},
		// ambiguous JSON: encoding/json would book 300, other readers 100
		{"duplicate amount, other case", func(t *testing.T) outbox.Envelope {
			e := paid(t)
			e.Payload = raw(`{"order_id":"o-1","amount_minor":100,"AMOUNT_MINOR":300,"currency":"EUR"}`)
			return e
		}, order.ReasonInvalidPayload},
		{"duplicate amount", func(t *testing.T) outbox.Envelope {
			e := paid(t)
			e.Payload = raw(`{"order_id":"o-1","amount_minor":100,"amount_minor":200,"currency":"EUR"}`)
			return e
		}, order.ReasonInvalidPayload},
		{"amount under another case", func(t *testing.T) outbox.Envelope {
			e := paid(t)
			e.Payload = raw(`{"order_id":"o-1","Amount_Minor":200,"currency":"EUR"}`)
			return e
		}, order.ReasonInvalidPayload},
		{"aggregate Whatever", func(t *testing.T) outbox.Envelope { e := paid(t); e.AggregateType = "Whatever"; return e }, order.ReasonForeignAggregate},
		{"event id upper case", func(t *testing.T) outbox.Envelope {
			e := paid(t)
			e.EventID = "0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B"
			return e
		}, order.ReasonInvalidEventID},
		{"aggregate id with a slash", func(t *testing.T) outbox.Envelope { e := paid(t); e.AggregateID = "o/1"; return e }, order.ReasonInvalidOrderID},
		{"order_id differs", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderPaid, 2, order.Paid{OrderID: "no-such-order", AmountMinor: 100, Currency: "EUR"})
		}, order.ReasonOrderIDMismatch},
		{"payload not an object", func(t *testing.T) outbox.Envelope { e := paid(t); e.Payload = raw(`[1]`); return e }, order.ReasonInvalidPayload},
		{"amount as string", func(t *testing.T) outbox.Envelope {
			e := paid(t)
			e.Payload = raw(`{"order_id":"o-1","amount_minor":"5","currency":"EUR"}`)
			return e
		}, order.ReasonInvalidPayload},
		{"amount 0", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderPaid, 2, order.Paid{OrderID: "o-1", Currency: "EUR"})
		}, order.ReasonAmountOutOfRange},
		{"amount 9e18", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderPaid, 2, order.Paid{OrderID: "o-1", AmountMinor: 9_000_000_000_000_000_000, Currency: "EUR"})
		}, order.ReasonAmountOutOfRange},
		{"amount MaxAmountMinor", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderPaid, 2, order.Paid{OrderID: "o-1", AmountMinor: order.MaxAmountMinor, Currency: "EUR"})
		}, ""},
		{"refund 5 ZZZ", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderCancelled, 3, order.Cancelled{OrderID: "o-1", WasPaid: true, RefundMinor: 5, Currency: "ZZZ"})
		}, order.ReasonUnknownCurrency},
		{"paid refund 0", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderCancelled, 3, order.Cancelled{OrderID: "o-1", WasPaid: true, Currency: "EUR"})
		}, order.ReasonAmountOutOfRange},
		{"unpaid refund 5", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderCancelled, 2, order.Cancelled{OrderID: "o-1", RefundMinor: 5, Currency: "EUR"})
		}, order.ReasonAmountOutOfRange},
		{"unpaid cancellation at 3", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderCancelled, 3, order.Cancelled{OrderID: "o-1", Currency: "EUR"})
		}, order.ReasonImpossibleSequence},
		{"cancellation at MaxInt64", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderCancelled, math.MaxInt64, order.Cancelled{OrderID: "o-1", Currency: "EUR"})
		}, order.ReasonImpossibleSequence},
		{"placed at 2", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderPlaced, 2, order.Placed{OrderID: "o-1", CustomerID: "c", AmountMinor: 1, Currency: "EUR"})
		}, order.ReasonImpossibleSequence},
		{"shipped at 4", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderShipped, 4, order.Shipped{OrderID: "o-1"})
		}, order.ReasonImpossibleSequence},
		{"customer id with U+202E", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderPlaced, 1, order.Placed{OrderID: "o-1", CustomerID: "c\u202e1", AmountMinor: 1, Currency: "EUR"})
		}, order.ReasonInvalidText},
		{"reason with ESC", func(t *testing.T) outbox.Envelope {
			return base(t, order.EventOrderCancelled, 2, order.Cancelled{OrderID: "o-1", Reason: "\x1b[2J", Currency: "EUR"})
		}, order.ReasonInvalidText},
		{"actor with a space", func(t *testing.T) outbox.Envelope { e := paid(t); e.Actor = "a b"; return e }, order.ReasonInvalidActor},
		{"unknown payload member tolerated", func(t *testing.T) outbox.Envelope {
			e := paid(t)
			e.Payload = raw(`{"order_id":"o-1","amount_minor":100,"currency":"EUR","note":"later field"}`)
			return e
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := tt.env(t)
			p, err := order.CheckEvent(env)
			if tt.reason == "" {
				if err != nil || p == nil {
					t.Fatalf("CheckEvent = %v, %v; want accepted", p, err)
				}
				return
			}
			ce, ok := order.AsContractError(err)
			if !ok || ce.Reason != tt.reason || !errors.Is(err, order.ErrForeignEvent) || p != nil {
				t.Fatalf("CheckEvent = %v, %v; want reason %s", p, err, tt.reason)
			}
		})
	}
}

func TestTextRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"plain", "out of stock", true},
		{"accents and CJK", "zu spät — 注文取消", true},
		{"emoji", "sorry 🙏", true},
		{"empty", "", true},
		{"ESC", "\x1b[31m", false},
		{"CR", "a\rb", false},
		{"LF", "a\nb", false},
		{"TAB", "a\tb", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7fb", false},
		{"C1 NEL", "a\u0085b", false},
		{"RLO U+202E", "a\u202eb", false},
		{"LRI U+2066", "a\u2066b", false},
		{"ZWSP U+200B", "a\u200bb", false},
		{"BOM U+FEFF", "\ufeffa", false},
		{"soft hyphen U+00AD (Cf)", "a\u00adb", false},
		{"line separator U+2028", "a\u2028b", false},
		{"paragraph separator U+2029", "a\u2029b", false},
		{"U+FDD0", "a\ufdd0b", false},
		{"U+FDEF", "a\ufdefb", false},
		{"U+FFFE", "a\ufffeb", false},
		{"U+FFFF", "a\uffffb", false},
		{"U+10FFFF", "a\U0010FFFFb", false},
		{"U+FFFD", "a\ufffdb", false},
		{"invalid UTF-8", "a\xffb", false},
		{"U+FDCF is a character", "a\ufdcfb", true},
		{"U+FFFC is a character", "a\ufffcb", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := order.CheckText(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckText(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if err != nil && (!errors.Is(err, order.ErrInvalidText) || !errors.Is(err, order.ErrValidation)) {
				t.Fatalf("CheckText(%q) = %v does not wrap ErrInvalidText and ErrValidation", tt.in, err)
			}
			if err := order.ValidateReason(tt.in); (err == nil) != tt.ok {
				t.Fatalf("ValidateReason(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
		})
	}
}

func TestValidateCustomerID(t *testing.T) {
	t.Parallel()
	long := make([]byte, order.MaxCustomerIDLen)
	for i := range long {
		long[i] = 'c'
	}
	tests := []struct {
		in       string
		ok, text bool // text: refused for its characters (ErrInvalidText)
	}{
		{"c-1", true, false},
		{"crm:4711", true, false},
		{"a.b_c@example.com", true, false},
		{string(long), true, false},
		{string(long) + "c", false, false},
		{"", false, false},
		{"c 1", false, true},
		{" c", false, true},
		{"c\u202e1", false, true},
		{"c\n1", false, true},
		{"josé", false, true},
		{"<b>", false, true},
		{"c/1", false, true},
		{"c\uffff", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			err := order.ValidateCustomerID(tt.in)
			if (err == nil) != tt.ok || !tt.ok && !errors.Is(err, order.ErrValidation) || errors.Is(err, order.ErrInvalidText) != tt.text {
				t.Fatalf("ValidateCustomerID(%q) = %v, want ok=%v text=%v", tt.in, err, tt.ok, tt.text)
			}
		})
	}
}

func TestIdempotencyScope(t *testing.T) {
	t.Parallel()
	tests := []struct{ actor, want string }{
		{"arn:aws:sts::123456789012:assumed-role/checkout/i-0abc", "arn:aws:sts::123456789012:assumed-role/checkout"},
		{"arn:aws-us-gov:sts::123456789012:assumed-role/r/s@x", "arn:aws-us-gov:sts::123456789012:assumed-role/r"},
		{"arn:aws:sts::123456789012:assumed-role/checkout/", "arn:aws:sts::123456789012:assumed-role/checkout/"},
		{"arn:aws:iam::123456789012:user/ops", "arn:aws:iam::123456789012:user/ops"},
		{"arn:aws:iam::123456789012:role/assumed-role/x", "arn:aws:iam::123456789012:role/assumed-role/x"},
		{"arn:aws:sts::123456789012:federated-user/bob", "arn:aws:sts::123456789012:federated-user/bob"},
		{"local:alice", "local:alice"},
		// IAM Identity Center: each session is a person.
		{"arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Orders_0123456789abcdef/alice@example.com", "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Orders_0123456789abcdef/alice@example.com"},
		{"cognito-identity:eu-west-1:9f8e7d6c-0000-4000-8000-000000000001/eu-west-1:0a1b2c3d-0000-4000-8000-00000000000a", "cognito-identity:eu-west-1:9f8e7d6c-0000-4000-8000-000000000001/eu-west-1:0a1b2c3d-0000-4000-8000-00000000000a"},
	}
	for _, tt := range tests {
		t.Run(tt.actor, func(t *testing.T) {
			t.Parallel()
			if got := order.IdempotencyScope(tt.actor); got != tt.want {
				t.Fatalf("IdempotencyScope(%q) = %q, want %q", tt.actor, got, tt.want)
			}
		})
	}
	a := order.IdempotencyKey("arn:aws:sts::1:assumed-role/r/s1", "k")
	b := order.IdempotencyKey("arn:aws:sts::1:assumed-role/r/s2", "k")
	c := order.IdempotencyKey("arn:aws:sts::1:assumed-role/other/s1", "k")
	if a[order.AttrPK] == nil || keyOf(a) != keyOf(b) || keyOf(a) == keyOf(c) {
		t.Fatalf("keys %v %v %v: sessions of one role must share, roles must not", keyOf(a), keyOf(b), keyOf(c))
	}
}

func keyOf(k map[string]types.AttributeValue) string {
	s, _ := k[order.AttrPK].(*types.AttributeValueMemberS)
	if s == nil {
		return ""
	}
	return s.Value
}
