package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// foldCases are key pairs whose sameness strings.ToLower and encoding/json
// (bytes.EqualFold, Unicode simple folding) judge alike or differently; same
// is encoding/json's verdict, checked against the decoder by
// TestFoldCasesAgreeWithDecoder.
var foldCases = []struct {
	a, b string
	same bool
}{
	{"kind", "\u212Aind", true},            // Kelvin sign K: ToLower gets it, too
	{"\u212A", "k", true},                  // Kelvin sign alone
	{"status", "\u017Ftatus", true},        // long s ſ: ToLower leaves it
	{"source", "\u017Fource", true},        // long s in an EventBridge field name
	{"\u03C3", "\u03C2", true},             // σ and final sigma ς
	{"\u00B5", "\u03BC", true},             // micro sign µ and mu μ
	{"\u03B8", "\u03D1", true},             // θ and ϑ
	{"\u1E61", "\u1E9B", true},             // ṡ and long s with dot above ẛ
	{"\u00C5", "\u212B", true},             // Å and the Angstrom sign
	{"\u03C9", "\u2126", true},             // ω and the Ohm sign
	{"\u01C4", "\u01C5", true},             // Ǆ and titlecase ǅ
	{"\u00DF", "\u1E9E", true},             // ß and capital ẞ
	{"i", "\u0130", false},                 // İ lowers to i but folds with nothing
	{"i", "\u0131", false},                 // dotless ı
	{"ss", "\u00DF", false},                // full folding (ß = ss) is not simple folding
	{"a\xffb", "a\xfeb", true},             // invalid UTF-8: both read as U+FFFD
	{"a\uFFFDb", "a\xffb", true},           // and equal to a real U+FFFD
	{"amount_minor", "AMOUNT_MINOR", true}, // plain ASCII
	{"amount_minor", "amount-minor", false},
}

// decoderMatches reports whether encoding/json decodes the key b into the
// field whose JSON name is a, and ok=false when encoding/json would not
// take a as a field name at all (an invalid tag: it falls back to the Go
// name). It is the oracle every fold test asks.
func decoderMatches(t testing.TB, a, b string) (match, ok bool) {
	t.Helper()
	typ := reflect.StructOf([]reflect.StructField{{
		Name: "F",
		Type: reflect.TypeFor[*int](),
		Tag:  reflect.StructTag(`json:` + strconv.Quote(a)),
	}})
	one := 1
	probe := reflect.New(typ)
	probe.Elem().Field(0).Set(reflect.ValueOf(&one))
	enc, err := json.Marshal(probe.Interface())
	if err != nil {
		t.Fatal(err)
	}
	wantEnc, _ := json.Marshal(map[string]int{a: 1})
	if !bytes.Equal(enc, wantEnc) {
		return false, false // the tag is not a name encoding/json accepts
	}
	kb, _ := json.Marshal(b)
	v := reflect.New(typ)
	if err := json.Unmarshal([]byte(`{`+string(kb)+`:1}`), v.Interface()); err != nil {
		t.Fatal(err)
	}
	return !v.Elem().Field(0).IsNil(), true
}

func TestFoldCasesAgreeWithDecoder(t *testing.T) {
	t.Parallel()
	for _, c := range foldCases {
		match, ok := decoderMatches(t, c.a, c.b)
		if ok && match != c.same {
			t.Errorf("encoding/json matches %+q to %+q: %v; the table says %v", c.b, c.a, match, c.same)
		}
		if got := bytes.EqualFold([]byte(c.a), []byte(c.b)); got != c.same {
			t.Errorf("bytes.EqualFold(%+q, %+q) = %v; the table says %v", c.a, c.b, got, c.same)
		}
	}
}

func TestCheckFolds(t *testing.T) {
	t.Parallel()
	for _, c := range foldCases {
		for _, js := range []string{
			`{` + quote(c.a) + `:1,` + quote(c.b) + `:2}`,
			`{"x":[{` + quote(c.b) + `:1,` + quote(c.a) + `:2}]}`,
		} {
			err := Check([]byte(js))
			if got := errors.Is(err, ErrAmbiguous); got != c.same || !c.same && err != nil {
				t.Errorf("Check(%+q) = %v, want ambiguous=%v", js, err, c.same)
			}
		}
	}
}

func TestCheckFieldsFolds(t *testing.T) {
	t.Parallel()
	for _, c := range foldCases {
		typ := reflect.StructOf([]reflect.StructField{{
			Name: "F", Type: reflect.TypeFor[int](), Tag: reflect.StructTag(`json:` + strconv.Quote(c.a)),
		}})
		js := `{` + quote(c.b) + `:1}`
		err := CheckFields([]byte(js), reflect.New(typ).Interface())
		want := c.same && decodedKey(t, c.b) != c.a // an exact name is no ambiguity
		if got := errors.Is(err, ErrAmbiguous); got != want {
			t.Errorf("CheckFields(%+q) for field %+q = %v, want ambiguous=%v", js, c.a, err, want)
		}
	}
}

// TestCheckFieldsEmbedded: encoding/json promotes the fields of an embedded
// struct, so a case variant of one is as ambiguous as of a direct field.
func TestCheckFieldsEmbedded(t *testing.T) {
	t.Parallel()
	type base struct {
		Status string `json:"status"`
	}
	type Named struct {
		Kind string `json:"kind"`
	}
	type order struct {
		base
		*Named
		Tagged Named  `json:"tagged"`
		ID     string `json:"id"`
	}
	for js, ambiguous := range map[string]bool{
		`{"status":"x","kind":"y","tagged":{},"id":"1"}`: false,
		`{"STATUS":"x"}`:          true,
		"{\"\u017Ftatus\":\"x\"}": true,
		"{\"\u212Aind\":\"y\"}":   true,
		`{"Tagged":{}}`:           true,
		`{"base":{}}`:             false, // not a field name: left alone
	} {
		err := CheckFields([]byte(js), &order{})
		if got := errors.Is(err, ErrAmbiguous); got != ambiguous {
			t.Errorf("CheckFields(%s) = %v, want ambiguous=%v", js, err, ambiguous)
		}
	}
}

// TestCheckAgreesWithDecoderOnRandomKeys is the property: for random keys a
// and b drawn from runes with rich folding orbits, Check refuses
// {a:1,b:2} exactly when encoding/json would decode b into the field named
// a, and CheckFields refuses {b:1} for that field exactly when the decoder
// matches b only by folding.
func TestCheckAgreesWithDecoderOnRandomKeys(t *testing.T) {
	t.Parallel()
	runes := []rune("sSkKiI_1\u017F\u212A\u212B\u00C5\u00E5\u0130\u0131\u00B5\u03BC\u039C\u03C3\u03C2\u03A3\u03B8\u03D1\u03F4\u00DF\u1E9E\u1E61\u1E9B\u01C4\u01C5\u01C6\u2126\u03C9\uFFFD")
	r := rand.New(rand.NewPCG(32, 6))
	key := func() string {
		b := make([]rune, 1+r.IntN(3))
		for i := range b {
			b[i] = runes[r.IntN(len(runes))]
		}
		return string(b)
	}
	for range 3000 {
		a, b := key(), key()
		if r.IntN(4) == 0 {
			b = a
		}
		agree(t, a, b)
	}
}

// FuzzCheckAgreesWithDecoder is the same property for any two keys (run it
// with go test -fuzz=FuzzCheckAgreesWithDecoder ./pkg/internal/jsonstrict/).
func FuzzCheckAgreesWithDecoder(f *testing.F) {
	for _, c := range foldCases {
		f.Add(c.a, c.b)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		agree(t, a, b)
	})
}

func agree(t testing.TB, a, b string) {
	t.Helper()
	match, ok := decoderMatches(t, a, b)
	if !ok {
		return
	}
	js := `{` + quote(a) + `:1,` + quote(b) + `:2}`
	if got := errors.Is(Check([]byte(js)), ErrAmbiguous); got != match {
		t.Fatalf("Check(%+q) ambiguous=%v, but encoding/json matches %+q to %+q: %v", js, got, b, a, match)
	}
	typ := reflect.StructOf([]reflect.StructField{{
		Name: "F", Type: reflect.TypeFor[int](), Tag: reflect.StructTag(`json:` + strconv.Quote(a)),
	}})
	one := `{` + quote(b) + `:1}`
	want := match && decodedKey(t, b) != a
	if got := errors.Is(CheckFields([]byte(one), reflect.New(typ).Interface()), ErrAmbiguous); got != want {
		t.Fatalf("CheckFields(%+q) for field %+q ambiguous=%v, want %v", one, a, got, want)
	}
}

// decodedKey is the key encoding/json sees for quote(k): invalid UTF-8
// replaced by U+FFFD.
func decodedKey(t testing.TB, k string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal([]byte(quote(k)), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// quote is k as a JSON string (invalid UTF-8 kept as raw bytes, the way a
// hostile producer could send it).
func quote(k string) string {
	var b []byte
	b = append(b, '"')
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, []byte(`\u00`+strconv.FormatUint(uint64(c)>>4, 16)+strconv.FormatUint(uint64(c)&15, 16))...)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
