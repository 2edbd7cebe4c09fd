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

// Allowed follows the character ranges of the SQS Developer Guide,
// quotas-messages: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD |
// #x10000 to #x10FFFF. Each range is checked at both edges.
func TestAllowedRangeEdges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		r    rune
		want bool
	}{
		{0x0, false}, {0x8, false}, {0x9, true}, {0xA, true}, {0xB, false}, {0xC, false}, {0xD, true}, {0xE, false},
		{0x1F, false}, {0x20, true}, {0x7F, true}, {0xD7FF, true}, {0xD800, false}, {0xDFFF, false},
		{0xE000, true}, {0xFFFD, true}, {0xFFFE, false}, {0xFFFF, false},
		{0x10000, true}, {0x10FFFF, true}, {0x110000, false}, {-1, false},
	}
	for _, c := range cases {
		if got := Allowed(c.r); got != c.want {
			t.Errorf("Allowed(%U) = %v, want %v", c.r, got, c.want)
		}
	}
}

// Check names the byte offset of the first refused character.
func TestCheckNamesOffset(t *testing.T) {
	t.Parallel()
	err := Check("ab\uFFFFc\x00", 0)
	if !errors.Is(err, ErrInvalidContents) || !strings.Contains(err.Error(), "U+FFFF at byte 2") {
		t.Fatalf("Check = %v, want U+FFFF at byte 2", err)
	}
	err = Check("é\xff", 0)
	if !errors.Is(err, ErrInvalidContents) || !strings.Contains(err.Error(), "byte 2") {
		t.Fatalf("Check = %v, want invalid UTF-8 at byte 2", err)
	}
}

// EscapeJSON returns an acceptable JSON text unchanged, and writes refused
// characters as JSON \u escapes.
func TestEscapeJSONForms(t *testing.T) {
	t.Parallel()
	clean := `{"a":"caf` + "\u00e9" + ` \U0001F600","b":[1,2]}`
	if got := EscapeJSON(clean); got != clean {
		t.Errorf("EscapeJSON changed a clean text: %q", got)
	}
	cases := map[string]string{
		"{\"a\":\"x\uFFFEy\"}": `{"a":"x\ufffey"}`,
		"{\"a\":\"x\uFFFFy\"}": `{"a":"x\uffffy"}`,
		"{\"a\":\"x\x1by\"}":   `{"a":"x\u001by"}`,
		"{\"a\":\"x\xffy\"}":   `{"a":"x\ufffdy"}`,
	}
	for in, want := range cases {
		if got := EscapeJSON(in); got != want {
			t.Errorf("EscapeJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

// Sanitize replaces refused characters with U+FFFD and cuts on a character
// boundary to at most maxBytes, for free text put in a message attribute.
func TestSanitize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 100, "plain"},
		{"a\x00b\uFFFFc\xffd", 100, "a\uFFFDb\uFFFDc\uFFFDd"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},    // é is 2 bytes: not cut in half
		{"a\x00", 3, "a"}, // U+FFFD is 3 bytes: 1+3 > 3
		{"\U0001F600x", 4, "\U0001F600"},
		{"", 10, ""},
		{"abc", 0, ""},
	}
	for _, c := range cases {
		got := Sanitize(c.in, c.max)
		if got != c.want {
			t.Errorf("Sanitize(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
		if len(got) > c.max {
			t.Errorf("Sanitize(%q, %d) is %d bytes", c.in, c.max, len(got))
		}
		if got != "" {
			if err := Check(got, 0); err != nil {
				t.Errorf("Sanitize(%q, %d) = %q, refused by Check: %v", c.in, c.max, got, err)
			}
		}
	}
}
