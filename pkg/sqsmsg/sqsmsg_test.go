package sqsmsg

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		max  int
		want error
	}{
		{"plain", `{"a":"b"}`, 0, nil},
		{"tab newline cr", "a\tb\nc\rd", 0, nil},
		{"astral", "a\U0001F600b", 0, nil},
		{"U+FFFD allowed", "a\uFFFDb", 0, nil},
		{"U+FFFE refused", "a\uFFFEb", 0, ErrInvalidContents},
		{"U+FFFF refused", "a\uFFFFb", 0, ErrInvalidContents},
		{"NUL refused", "a\x00b", 0, ErrInvalidContents},
		{"ESC refused", "a\x1bb", 0, ErrInvalidContents},
		{"invalid UTF-8 refused", "a\xffb", 0, ErrInvalidContents},
		{"encoded surrogate refused", "a\xed\xa0\x80b", 0, ErrInvalidContents},
		{"empty", "", 0, ErrEmpty},
		{"at default limit", strings.Repeat("x", DefaultMaxBytes), 0, nil},
		{"over default limit", strings.Repeat("x", DefaultMaxBytes+1), 0, ErrTooLarge},
		{"over small limit", strings.Repeat("x", 1025), 1024, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := Check(c.body, c.max)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Check = %v, want %v", err, c.want)
			}
		})
	}
}

func TestEscapeJSON(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"x\uFFFEy", "x\uFFFFy", "x\x1by", "plain", "lone \xed\xa0\x80 surrogate", "bad \xff byte", "emoji \U0001F600",
	} {
		raw, _ := json.Marshal(map[string]string{"reason": in})
		out := EscapeJSON(string(raw))
		if err := Check(out, 0); err != nil {
			t.Fatalf("EscapeJSON(%q) = %q, refused: %v", raw, out, err)
		}
		var a, b map[string]string
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("EscapeJSON output %q is not JSON: %v", out, err)
		}
		if a["reason"] != b["reason"] {
			t.Fatalf("value changed: %q -> %q", a["reason"], b["reason"])
		}
	}
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		js   string
		want error
	}{
		{`{"a":"plain"}`, nil},
		{`{"a":"\ud83d\ude00"}`, nil},                // a surrogate pair: U+1F600
		{`{"a":"\\ud800"}`, nil},                     // an escaped backslash, then text
		{`{"a":"\u00e9\n\"q\""}`, nil},               // ordinary escapes
		{`{"a":"\ud800"}`, ErrInvalidContents},       // lone high surrogate
		{`{"a":"\udc00"}`, ErrInvalidContents},       // lone low surrogate
		{`{"a":"\ud800x"}`, ErrInvalidContents},      // high surrogate followed by text
		{`{"a":"\ud800\u0041"}`, ErrInvalidContents}, // high surrogate followed by a non-surrogate escape
		{"{\"a\":\"\uffff\"}", ErrInvalidContents},   // raw U+FFFF
	}
	for _, c := range cases {
		err := CheckJSON(c.js, 0)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("CheckJSON(%s) = %v, want %v", c.js, err, c.want)
		}
	}
}
