// Package jsonstrict refuses JSON texts that different decoders read
// differently. Go's encoding/json matches an object key to a struct field
// case-insensitively and keeps the last of duplicate keys, while JSON Schema
// validators, EventBridge patterns and most other readers see the first key,
// or the exact-case one: {"amount_minor":100,"AMOUNT_MINOR":300} is 300 to
// one reader and 100 to another. A consumer that decodes events someone else
// produced refuses such texts (they are not what the producer emits) before
// decoding them.
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"unicode"
)

// ErrAmbiguous is wrapped by every error of this package.
var ErrAmbiguous = errors.New("jsonstrict: ambiguous JSON")

// Check returns an error wrapping ErrAmbiguous when an object anywhere in js
// has two keys that encoding/json would match to the same struct field —
// keys equal under Unicode simple case folding, bytes.EqualFold's rule, so
// "ſ" (U+017F) equals "s" and "K" (U+212A, Kelvin) equals "k"; duplicates
// included — or js is not valid JSON; nil otherwise.
func Check(js []byte) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := walk(dec, "$"); err != nil {
		return err
	}
	if _, err := dec.Token(); err == nil {
		return fmt.Errorf("%w: trailing data", ErrAmbiguous)
	}
	return nil
}

func walk(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrAmbiguous, err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%w: %v", ErrAmbiguous, err)
			}
			k, _ := kt.(string)
			folded := fold(k)
			if prev, dup := seen[folded]; dup {
				return fmt.Errorf("%w: %s has keys %q and %q", ErrAmbiguous, path, prev, k)
			}
			seen[folded] = k
			if err := walk(dec, path+"."+k); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walk(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrAmbiguous, err)
	}
	return nil
}

// CheckFields returns an error wrapping ErrAmbiguous when a key of the JSON
// object js matches a field of the struct v points to (or is) only
// case-insensitively, by encoding/json's rule (see fold) — a key
// "Amount_Minor" or "amount_minor" with a Kelvin sign for a "k" that
// encoding/json would put into the field tagged "amount_minor" — and nil
// otherwise. Fields promoted from embedded structs count, as they do for
// encoding/json. Other keys are left alone (a tolerant reader). Only the
// top level is checked.
func CheckFields(js []byte, v any) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil // not an object: the decoder reports it
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	exact := map[string]bool{}
	folded := map[string]string{}
	for _, name := range fieldNames(t, nil) {
		exact[name] = true
		if _, ok := folded[fold(name)]; !ok {
			folded[fold(name)] = name
		}
	}
	for k := range obj {
		if want, ok := folded[fold(k)]; ok && !exact[k] {
			return fmt.Errorf("%w: key %q stands for field %q", ErrAmbiguous, k, want)
		}
	}
	return nil
}

// fieldNames returns the JSON names of struct type t's fields as
// encoding/json sees them: the tag's name or the Go name, exported fields
// only, "-" skipped, and the fields of an embedded struct (or pointer to
// struct) without a tag name promoted. It may name more fields than
// encoding/json keeps when embedded names conflict (encoding/json then drops
// them): the guard is stricter, never kinder. visited stops embedding
// cycles.
func fieldNames(t reflect.Type, visited map[reflect.Type]bool) []string {
	if visited[t] {
		return nil
	}
	visited = maps.Clone(visited)
	if visited == nil {
		visited = map[reflect.Type]bool{}
	}
	visited[t] = true
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if name == "" && ft.Kind() == reflect.Struct {
				names = append(names, fieldNames(ft, visited)...)
				continue
			}
			if !f.IsExported() && ft.Kind() != reflect.Struct {
				continue
			}
		} else if !f.IsExported() {
			continue
		}
		if !hasTag || name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// fold returns k in a form such that fold(x) == fold(y) exactly when
// bytes.EqualFold(x, y): every rune replaced by the smallest rune of its
// Unicode simple-folding orbit (unicode.SimpleFold), invalid UTF-8 read as
// U+FFFD. It is the rule encoding/json (Go 1.26, src/encoding/json/fold.go,
// foldName) uses to match an object key to a struct field when no field
// has the exact name. strings.ToLower is not that rule: "ſ" (long s), "ς"
// (final sigma), "µ" (micro sign) and "ϑ" lower to themselves but fold with
// "s", "σ", "μ" and "θ" — keys the decoder matches and ToLower lets
// through — while "İ" lowers to "i" yet folds with nothing.
func fold(k string) string {
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k { // invalid UTF-8 reads as U+FFFD, as utf8.DecodeRune does
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// foldRune returns the smallest rune of r's simple-folding orbit (the
// orbit is a cycle that unicode.SimpleFold walks in increasing order,
// wrapping once to its smallest member).
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
