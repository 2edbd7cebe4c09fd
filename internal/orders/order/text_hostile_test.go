package order_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
)

// Inputs a hostile review found accepted as a cancel reason and shown
// verbatim in notifications: private use, unassigned, blank fillers, text
// with no visible character, stacked combining marks. Each is refused now;
// ordinary text in any script still passes.
func TestCheckTextRefusesInvisibleAndUndisplayableText(t *testing.T) {
	t.Parallel()
	refused := map[string]string{
		"private use U+E000":      "\ue000",
		"private use U+10FFFD":    "x\U0010FFFDy",
		"unassigned U+0378":       "a\u0378",
		"Hangul filler only":      "\u3164\u3164",
		"Braille blank only":      "\u2800",
		"no-break space only":     "\u00a0",
		"ideographic spaces only": "\u3000\u2003",
		"200 combining marks":     "a" + strings.Repeat("\u0301", 200),
	}
	for name, s := range refused {
		if err := order.CheckText(s); !errors.Is(err, order.ErrInvalidText) {
			t.Errorf("%s: CheckText(%q) = %v, want ErrInvalidText", name, s, err)
		}
	}
	for _, s := range []string{"changed my mind", "délai trop long", "納期が遅い", "a\ufe0f", "e\u0301t\u0301e\u0301", "Ελληνικά και 😀", ""} {
		if err := order.CheckText(s); err != nil {
			t.Errorf("CheckText(%q) = %v, want nil", s, err)
		}
	}
}
