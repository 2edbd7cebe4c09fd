// Package sqsmsg holds the rules Amazon SQS applies to a message body, so that
// everything that writes a message (the relay parking a record, a consumer
// dead-lettering an event, the local queues standing in for SQS) checks them
// the same way before AWS refuses the message.
//
// Source: Amazon SQS Developer Guide, "Amazon SQS message quotas"
// (quotas-messages): a body may contain only #x9 | #xA | #xD | #x20 to #xD7FF |
// #xE000 to #xFFFD | #x10000 to #x10FFFF, and is at most the queue's
// MaximumMessageSize, 1,024 to 1,048,576 bytes, default 262,144 (256 KiB).
// Any other character is refused with InvalidMessageContents.
package sqsmsg

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Size limits of a message body, in bytes (MaximumMessageSize).
const (
	// DefaultMaxBytes is a queue's default MaximumMessageSize, 262,144 bytes.
	DefaultMaxBytes = 256 * 1024
	// MinMaxBytes and MaxMaxBytes bound MaximumMessageSize.
	MinMaxBytes = 1024
	MaxMaxBytes = 1024 * 1024
)

// Errors returned by Check, matching SQS's error codes.
var (
	// ErrInvalidContents: the body holds a character SQS refuses, or is not
	// valid UTF-8 (SQS error InvalidMessageContents).
	ErrInvalidContents = errors.New("sqsmsg: InvalidMessageContents")
	// ErrTooLarge: the body is longer than the queue's MaximumMessageSize
	// (SQS answers InvalidParameterValue).
	ErrTooLarge = errors.New("sqsmsg: message body too large")
	// ErrEmpty: SQS requires a non-empty body (MissingParameter).
	ErrEmpty = errors.New("sqsmsg: empty message body")
)

// Allowed reports whether SQS accepts rune r in a message body.
func Allowed(r rune) bool {
	switch {
	case r == 0x9 || r == 0xA || r == 0xD:
		return true
	case r >= 0x20 && r <= 0xD7FF:
		return true
	case r >= 0xE000 && r <= 0xFFFD:
		return true
	case r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}

// Check returns nil when SQS accepts body on a queue whose
// MaximumMessageSize is maxBytes (0 means DefaultMaxBytes). Otherwise it
// returns an error wrapping ErrEmpty, ErrTooLarge or ErrInvalidContents
// (naming the byte offset of the first refused character).
func Check(body string, maxBytes int) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if body == "" {
		return ErrEmpty
	}
	if len(body) > maxBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), maxBytes)
	}
	for i, r := range body {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(body[i:]); n == 1 {
				return fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrInvalidContents, i)
			}
		}
		if !Allowed(r) {
			return fmt.Errorf("%w: character %U at byte %d is not allowed", ErrInvalidContents, r, i)
		}
	}
	return nil
}

// EscapeJSON returns a JSON text equal in value to js whose bytes SQS
// accepts: inside JSON strings every character SQS refuses (or invalid
// UTF-8 byte) is written as a \uXXXX escape (a UTF-16 surrogate pair above
// U+FFFF is never needed: those are allowed); outside strings JSON has only
// ASCII. Decoding the result with any JSON parser gives the same value as
// decoding js, except that invalid UTF-8 bytes become U+FFFD. It does not
// validate js; pass well-formed JSON.
func EscapeJSON(js string) string {
	clean := true
	for _, r := range js {
		if r == utf8.RuneError || !Allowed(r) {
			clean = false
			break
		}
	}
	if clean {
		return js
	}
	var b strings.Builder
	b.Grow(len(js) + 16)
	for i := 0; i < len(js); {
		r, n := utf8.DecodeRuneInString(js[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\ufffd`)
		case !Allowed(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(js[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Sanitize returns s with every character SQS refuses replaced by U+FFFD and
// cut (on a character boundary) to at most maxBytes bytes: for free text such
// as an error message put in a message attribute.
func Sanitize(s string, maxBytes int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !Allowed(r) {
			r = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(r) > maxBytes {
			break
		}
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

// CheckJSON is Check for a JSON text that will be decoded and re-encoded on
// its way into a message body (an EventBridge event's detail, delivered to an
// SQS target): besides the characters Check refuses, it refuses a \uXXXX
// escape of a lone UTF-16 surrogate (a high surrogate not followed by a low
// one, or a low one alone), which is valid JSON syntax but no character, so a
// re-encoder either fails or writes bytes SQS refuses. Errors wrap
// ErrInvalidContents (or ErrEmpty, ErrTooLarge as Check).
func CheckJSON(js string, maxBytes int) error {
	if err := Check(js, maxBytes); err != nil {
		return err
	}
	for i := 0; i < len(js); i++ {
		if js[i] != '\\' || i+1 >= len(js) {
			continue
		}
		if js[i+1] != 'u' {
			i++ // an escaped character, e.g. \\ or \"
			continue
		}
		r, ok := hex4(js, i+2)
		if !ok {
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if i+11 < len(js)+0 && js[i+6] == '\\' && js[i+7] == 'u' {
				if lo, ok := hex4(js, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return fmt.Errorf("%w: lone surrogate escape \\u%04x at byte %d", ErrInvalidContents, r, i)
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("%w: lone surrogate escape \\u%04x at byte %d", ErrInvalidContents, r, i)
		}
		i += 5
	}
	return nil
}

// hex4 parses the 4 hex digits at s[i:i+4].
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | (c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
