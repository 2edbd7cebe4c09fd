package jsonstrict

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for js, ambiguous := range map[string]bool{
		`{"amount_minor":100,"currency":"EUR"}`:              false,
		`{"a":{"b":1},"c":[{"b":2},{"b":3}]}`:                false,
		`{"amount_minor":100,"amount_minor":200}`:            true,
		`{"amount_minor":100,"AMOUNT_MINOR":300}`:            true,
		`{"source":"evil","Source":"com.ddb-outbox.orders"}`: true,
		`{"detail":{"event_type":"A","event_type":"B"}}`:     true,
		`{"a":[{"x":1,"X":2}]}`:                              true,
		`{"a":1}{"b":2}`:                                     true,
		`{"a":`:                                              true,
	} {
		err := Check([]byte(js))
		if ambiguous != errors.Is(err, ErrAmbiguous) || !ambiguous && err != nil {
			t.Errorf("Check(%s) = %v, want ambiguous=%v", js, err, ambiguous)
		}
	}
}

func TestCheckFields(t *testing.T) {
	t.Parallel()
	type paid struct {
		OrderID     string `json:"order_id"`
		AmountMinor int64  `json:"amount_minor"`
		Other       string
	}
	for js, ambiguous := range map[string]bool{
		`{"order_id":"o","amount_minor":1}`: false,
		`{"order_id":"o","extra":1}`:        false,
		`{"Other":"x"}`:                     false,
		`{"Amount_Minor":200}`:              true,
		`{"ORDER_ID":"o"}`:                  true,
		`{"other":"x"}`:                     true,
	} {
		err := CheckFields([]byte(js), &paid{})
		if ambiguous != errors.Is(err, ErrAmbiguous) {
			t.Errorf("CheckFields(%s) = %v, want ambiguous=%v", js, err, ambiguous)
		}
	}
}
