package order_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func validInput() order.PlaceInput {
	return order.PlaceInput{ID: "o-1", CustomerID: "c-1", AmountMinor: 1999, Currency: "EUR"}
}

func TestPlaceValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*order.PlaceInput)
		ok     bool
	}{
		{"valid", func(*order.PlaceInput) {}, true},
		{"amount 1", func(in *order.PlaceInput) { in.AmountMinor = 1 }, true},
		{"amount max", func(in *order.PlaceInput) { in.AmountMinor = order.MaxAmountMinor }, true},
		{"amount zero", func(in *order.PlaceInput) { in.AmountMinor = 0 }, false},
		{"amount negative", func(in *order.PlaceInput) { in.AmountMinor = -5 }, false},
		{"amount over max", func(in *order.PlaceInput) { in.AmountMinor = order.MaxAmountMinor + 1 }, false},
		{"JPY zero-decimal", func(in *order.PlaceInput) { in.Currency = "JPY" }, true},
		{"KWD three-decimal", func(in *order.PlaceInput) { in.Currency = "KWD" }, true},
		{"currency lower case", func(in *order.PlaceInput) { in.Currency = "eur" }, false},
		{"currency unknown", func(in *order.PlaceInput) { in.Currency = "ABC" }, false},
		{"currency withdrawn HRK", func(in *order.PlaceInput) { in.Currency = "HRK" }, false},
		{"currency gold XAU", func(in *order.PlaceInput) { in.Currency = "XAU" }, false},
		{"currency test XTS", func(in *order.PlaceInput) { in.Currency = "XTS" }, false},
		{"currency empty", func(in *order.PlaceInput) { in.Currency = "" }, false},
		{"customer empty", func(in *order.PlaceInput) { in.CustomerID = "" }, false},
		{"customer 128", func(in *order.PlaceInput) { in.CustomerID = strings.Repeat("c", 128) }, true},
		{"customer 129", func(in *order.PlaceInput) { in.CustomerID = strings.Repeat("c", 129) }, false},
		{"customer padded", func(in *order.PlaceInput) { in.CustomerID = " c-1" }, false},
		{"customer control", func(in *order.PlaceInput) { in.CustomerID = "c\n1" }, false},
		{"customer invalid utf8", func(in *order.PlaceInput) { in.CustomerID = "c\xff" }, false},
		{"id empty", func(in *order.PlaceInput) { in.ID = "" }, false},
		{"id slash", func(in *order.PlaceInput) { in.ID = "a/b" }, false},
		{"id too long", func(in *order.PlaceInput) { in.ID = strings.Repeat("a", 129) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := validInput()
			tt.modify(&in)
			o, evs, err := order.Place(in, t0)
			if tt.ok {
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				if o.Version != 1 || o.Status != order.StatusPlaced || len(evs) != 1 || evs[0].Type != order.EventOrderPlaced {
					t.Fatalf("got %+v %+v", o, evs)
				}
				return
			}
			if !errors.Is(err, order.ErrValidation) {
				t.Fatalf("err = %v, want ErrValidation", err)
			}
		})
	}
}

func TestCurrencyExponent(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{"USD": 2, "JPY": 0, "KWD": 3, "CLF": 4, "EUR": 2} {
		if got, ok := order.CurrencyExponent(code); !ok || got != want {
			t.Errorf("CurrencyExponent(%s) = %d, %v; want %d", code, got, ok, want)
		}
	}
}

type command func(o *order.Order) ([]outbox.Event, error)

var (
	pay    command = func(o *order.Order) ([]outbox.Event, error) { return o.Pay(t0) }
	ship   command = func(o *order.Order) ([]outbox.Event, error) { return o.Ship(t0) }
	cancel command = func(o *order.Order) ([]outbox.Event, error) { return o.Cancel("changed mind", t0) }
)

func TestStateMachine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		steps     []command
		want      order.Status
		wantType  string
		failsLast bool
	}{
		{"pay", []command{pay}, order.StatusPaid, order.EventOrderPaid, false},
		{"pay ship", []command{pay, ship}, order.StatusShipped, order.EventOrderShipped, false},
		{"cancel placed", []command{cancel}, order.StatusCancelled, order.EventOrderCancelled, false},
		{"cancel paid", []command{pay, cancel}, order.StatusCancelled, order.EventOrderCancelled, false},
		{"ship placed", []command{ship}, order.StatusPlaced, "", true},
		{"pay twice", []command{pay, pay}, order.StatusPaid, "", true},
		{"cancel shipped", []command{pay, ship, cancel}, order.StatusShipped, "", true},
		{"cancel twice", []command{cancel, cancel}, order.StatusCancelled, "", true},
		{"pay cancelled", []command{cancel, pay}, order.StatusCancelled, "", true},
		{"ship cancelled", []command{pay, cancel, ship}, order.StatusCancelled, "", true},
		{"ship twice", []command{pay, ship, ship}, order.StatusShipped, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, _, err := order.Place(validInput(), t0)
			if err != nil {
				t.Fatal(err)
			}
			for i, step := range tt.steps {
				before := *o
				evs, err := step(o)
				last := i == len(tt.steps)-1
				if last && tt.failsLast {
					if !errors.Is(err, order.ErrInvalidTransition) {
						t.Fatalf("err = %v, want ErrInvalidTransition", err)
					}
					if *o != before {
						t.Fatalf("failed command changed the order: %+v -> %+v", before, *o)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if len(evs) != 1 || o.Version != before.Version+1 {
					t.Fatalf("step %d: %d events, version %d -> %d", i, len(evs), before.Version, o.Version)
				}
				if last && evs[0].Type != tt.wantType {
					t.Fatalf("event %s, want %s", evs[0].Type, tt.wantType)
				}
			}
			if o.Status != tt.want {
				t.Fatalf("status %s, want %s", o.Status, tt.want)
			}
		})
	}
}

func TestCancelPayload(t *testing.T) {
	t.Parallel()
	for _, paid := range []bool{false, true} {
		o, _, _ := order.Place(validInput(), t0)
		if paid {
			if _, err := o.Pay(t0); err != nil {
				t.Fatal(err)
			}
		}
		evs, err := o.Cancel("why", t0)
		if err != nil {
			t.Fatal(err)
		}
		c := evs[0].Payload.(order.Cancelled)
		wantRefund := int64(0)
		if paid {
			wantRefund = 1999
		}
		if c.WasPaid != paid || c.RefundMinor != wantRefund || c.Currency != "EUR" || c.Reason != "why" || c.OrderID != "o-1" {
			t.Fatalf("paid=%v: payload %+v", paid, c)
		}
	}
	o, _, _ := order.Place(validInput(), t0)
	if _, err := o.Cancel(strings.Repeat("r", order.MaxReasonLen+1), t0); !errors.Is(err, order.ErrValidation) {
		t.Fatalf("long reason: %v", err)
	}
}

func TestValidateIdempotencyKey(t *testing.T) {
	t.Parallel()
	for key, ok := range map[string]bool{
		"abc-123": true, strings.Repeat("k", 255): true, "": false, strings.Repeat("k", 256): false,
		"has space": false, "a,b": false, "tab\t": false, "é": false,
	} {
		if err := order.ValidateIdempotencyKey(key); (err == nil) != ok {
			t.Errorf("ValidateIdempotencyKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
}
