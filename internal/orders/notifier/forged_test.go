package notifier_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// TestNotifierSequenceBombDoesNotFreezeTheView: an OrderCancelled for a real
// order with sequence MaxInt64 used to move the view to MaxInt64, after which
// no real event could ever advance it. It is refused (impossible_sequence),
// writes nothing, and the order's real cancellation still lands.
func TestNotifierSequenceBombDoesNotFreezeTheView(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.handle(t, envelope(t, "o-7", 1, order.EventOrderPlaced, order.Placed{OrderID: "o-7", CustomerID: "c-7", AmountMinor: 100, Currency: "EUR"}))
	bomb := envelope(t, "o-7", math.MaxInt64, order.EventOrderCancelled, order.Cancelled{OrderID: "o-7", Reason: "x", Currency: "EUR"})
	err := f.n.Handle(context.Background(), delivery(t, bomb))
	if p, ok := sqsconsumer.AsPermanent(err); !ok || p.Reason != order.ReasonImpossibleSequence || !errors.Is(err, notifier.ErrInvalidPayload) {
		t.Fatalf("err = %v, want permanent %s", err, order.ReasonImpossibleSequence)
	}
	if f.markerExists(t, bomb.EventID) {
		t.Fatal("refused event wrote a marker")
	}
	f.wantView(t, "o-7", notifier.StatusPlaced, 1)
	f.wantCount(t, 1)
	f.handle(t, envelope(t, "o-7", 2, order.EventOrderCancelled, order.Cancelled{OrderID: "o-7", Reason: "changed my mind", Currency: "EUR"}))
	f.wantView(t, "o-7", notifier.StatusCancelled, 2)
}

// TestNotifierRefusesForgedEvents: each input is refused as a permanent
// failure with its reason and writes nothing.
func TestNotifierRefusesForgedEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	placed := order.Placed{OrderID: "o-8", CustomerID: "c-8", AmountMinor: 100, Currency: "EUR"}
	tests := []struct {
		name   string
		ev     events.EventBridgeEvent
		reason string
		want   error
	}{
		{"source evil.example", func() events.EventBridgeEvent {
			ev := delivery(t, envelope(t, "o-8", 1, order.EventOrderPlaced, placed))
			ev.Source = "evil.example"
			return ev
		}(), dedup.ReasonForeignSource, dedup.ErrForeignSource},
		{"reason with ESC and CR/LF", delivery(t, envelope(t, "o-8", 2, order.EventOrderCancelled,
			order.Cancelled{OrderID: "o-8", Reason: "\x1b[31mrefund approved\r\nCall +1 555", Currency: "EUR"})), order.ReasonInvalidText, notifier.ErrInvalidPayload},
		{"reason with U+202E", delivery(t, envelope(t, "o-8", 2, order.EventOrderCancelled,
			order.Cancelled{OrderID: "o-8", Reason: "\u202Egnp.exe", Currency: "EUR"})), order.ReasonInvalidText, notifier.ErrInvalidPayload},
		{"customer_id with U+202E", delivery(t, envelope(t, "o-8", 1, order.EventOrderPlaced,
			order.Placed{OrderID: "o-8", CustomerID: "c\u202E8", AmountMinor: 100, Currency: "EUR"})), order.ReasonInvalidText, notifier.ErrInvalidPayload},
		{"shipped at sequence 9", delivery(t, envelope(t, "o-8", 9, order.EventOrderShipped, order.Shipped{OrderID: "o-8"})), order.ReasonImpossibleSequence, notifier.ErrInvalidPayload},
		{"aggregate type Whatever", func() events.EventBridgeEvent {
			e := envelope(t, "o-8", 1, order.EventOrderPlaced, placed)
			e.AggregateType = "Whatever"
			return delivery(t, e)
		}(), order.ReasonForeignAggregate, notifier.ErrInvalidPayload},
		{"unpaid cancellation with a refund", delivery(t, envelope(t, "o-8", 2, order.EventOrderCancelled,
			order.Cancelled{OrderID: "o-8", RefundMinor: 5, Currency: "EUR"})), order.ReasonAmountOutOfRange, notifier.ErrInvalidPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.n.Handle(context.Background(), tt.ev)
			p, ok := sqsconsumer.AsPermanent(err)
			if !ok || p.Reason != tt.reason || !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want permanent %s wrapping %v", err, tt.reason, tt.want)
			}
		})
	}
	f.wantCount(t, 0)
	if _, ok, _ := f.n.View(context.Background(), "o-8"); ok {
		t.Fatal("a refused event wrote the view")
	}
}

func TestRenderText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"plain", "out of stock", 64, "out of stock"},
		{"unicode letters kept", "zu spät — 注文", 64, "zu spät — 注文"},
		{"ESC", "a\x1b[2Jb", 64, `a\u{001B}[2Jb`},
		{"CR LF", "a\r\nb", 64, `a\u{000D}\u{000A}b`},
		{"RLO", "\u202Egnp.exe", 64, `\u{202E}gnp.exe`},
		{"line separator", "a\u2028b", 64, `a\u{2028}b`},
		{"noncharacters", "a\ufffe\uffffb\ufdd0", 64, `a\u{FFFE}\u{FFFF}b\u{FDD0}`},
		{"invalid UTF-8", "a\xffb", 64, `a\u{FFFD}b`},
		{"cut on a code point", "ééé", 5, "éé…"},
		{"cut before an escape", "ab\x1b", 4, "ab…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := notifier.RenderText(tt.in, tt.max)
			if got != tt.want {
				t.Fatalf("RenderText(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if !utf8.ValidString(got) || sqsconsumer.CheckMessageBody(got, 1<<20) != nil {
				t.Fatalf("RenderText(%q) = %q is not legal in an SQS body", tt.in, got)
			}
			if strings.ContainsAny(got, "\r\n\x1b\u202e") {
				t.Fatalf("RenderText(%q) = %q keeps a control or format character", tt.in, got)
			}
		})
	}
}
