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
	"reflect"
	"strings"
)

// ErrAmbiguous is wrapped by every error of this package.
var ErrAmbiguous = errors.New("jsonstrict: ambiguous JSON")

// Check returns an error wrapping ErrAmbiguous when an object anywhere in js
// has two keys that are equal under Unicode case folding (duplicates
// included), or js is not valid JSON; nil otherwise.
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
			folded := strings.ToLower(k)
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
// case-insensitively — a key "Amount_Minor" that encoding/json would put
// into the field tagged "amount_minor" — and nil otherwise. Other keys are
// left alone (a tolerant reader). Only the top level is checked.
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
	names := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			if tag == "-" {
				continue
			}
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
		}
		names[strings.ToLower(name)] = name
	}
	for k := range obj {
		if want, ok := names[strings.ToLower(k)]; ok && want != k {
			return fmt.Errorf("%w: key %q stands for field %q", ErrAmbiguous, k, want)
		}
	}
	return nil
}
