package order

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Text rules for the free text the order domain accepts and later shows to
// customers (notifications) and writes to logs and SQS messages. The API
// refuses invalid UTF-8 before decoding; these rules refuse what valid UTF-8
// can still hide:
//
//   - Unicode control characters (general category Cc: C0 and C1 controls,
//     ESC, CR, LF, TAB, DEL): they rewrite terminals and split log lines and
//     message lines.
//   - Unicode format characters (Cf): bidirectional overrides and isolates
//     (U+202A..U+202E, U+2066..U+2069) that display "txt.exe" as "exe.txt",
//     zero-width characters, the BOM.
//   - Line and paragraph separators (Zl U+2028, Zp U+2029): they act as line
//     breaks in many renderers, so they are refused with CR and LF.
//   - Noncharacters (U+FDD0..U+FDEF and U+xFFFE/U+xFFFF in every plane):
//     besides being meaningless, U+FFFE and U+FFFF are illegal in SQS message
//     bodies, so a record holding them could never be parked or dead-lettered.
//   - U+FFFD: what a JSON escape of a lone surrogate ("\ud800") decodes to;
//     accepting it would silently change what the client sent.
//
// Newlines are refused in a cancellation reason too: a reason is a short
// phrase placed inside a one-line customer message ("Order X was cancelled
// (reason)."), and a newline there lets a caller forge extra lines in a
// notification, an e-mail or SMS body, or a log record.
var (
	// ErrInvalidText: a free-text field holds a character the rules above
	// refuse. It wraps ErrValidation, so errors.Is(err, ErrValidation) holds;
	// the API answers 422 with the code invalid_text.
	ErrInvalidText = fmt.Errorf("%w: text holds a forbidden character", ErrValidation)
)

// customerIDChars is the customer id alphabet: ASCII letters, digits and
// '.', '_', ':', '@', '-' (enough for UUIDs, e-mail-like ids and URN-style
// ids such as "crm:4711").
func customerIDChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '@' || c == '-'
}

// ValidateCustomerID returns nil when id matches ^[A-Za-z0-9._:@-]{1,128}$
// (MaxCustomerIDLen bytes). Otherwise it returns an error wrapping
// ErrValidation; when the id holds a character outside that set the error
// also wraps ErrInvalidText. A customer id is shown verbatim in
// notifications, so it is kept to a plain ASCII alphabet.
func ValidateCustomerID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: customer_id is required", ErrValidation)
	case len(id) > MaxCustomerIDLen:
		return fmt.Errorf("%w: customer_id is longer than %d bytes", ErrValidation, MaxCustomerIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !customerIDChar(id[i]) {
			return fmt.Errorf("%w: customer_id may contain only ASCII letters, digits and . _ : @ - (byte %d)", ErrInvalidText, i)
		}
	}
	return nil
}

// ValidateReason returns nil when reason is at most MaxReasonLen bytes of
// valid UTF-8 that passes CheckText (no control, format, line-separator or
// noncharacter code points, no U+FFFD). The empty reason is valid (it is
// optional). Errors wrap ErrValidation, and ErrInvalidText for a forbidden
// character.
func ValidateReason(reason string) error {
	if len(reason) > MaxReasonLen {
		return fmt.Errorf("%w: reason must be at most %d bytes", ErrValidation, MaxReasonLen)
	}
	if err := CheckText(reason); err != nil {
		return fmt.Errorf("reason: %w", err)
	}
	return nil
}

// CheckText returns an error wrapping ErrInvalidText (and so ErrValidation)
// naming the first forbidden code point of s and its byte offset, or nil.
// Text that reaches customers must be plain, displayable, one-line text.
// Forbidden: invalid UTF-8, U+FFFD, every code point that is not graphic
// (general categories Cc, Cf, Co private use, Cs, Cn unassigned, Zl, Zp),
// noncharacters (see IsNoncharacter), blank "filler" letters that render
// as nothing (U+115F, U+1160, U+3164, U+FFA0, U+2800), more than
// MaxCombiningMarks combining marks on one character, and a non-empty text
// with no visible character at all.
func CheckText(s string) error {
	marks, visible := 0, false
	for i, r := range s {
		if forbiddenRune(r) {
			if r == utf8.RuneError {
				return fmt.Errorf("%w: invalid UTF-8 or U+FFFD at byte %d", ErrInvalidText, i)
			}
			return fmt.Errorf("%w: U+%04X at byte %d", ErrInvalidText, r, i)
		}
		if unicode.Is(unicode.M, r) {
			if marks++; marks > MaxCombiningMarks {
				return fmt.Errorf("%w: more than %d combining marks on one character at byte %d", ErrInvalidText, MaxCombiningMarks, i)
			}
			continue
		}
		marks = 0
		if !unicode.IsSpace(r) {
			visible = true
		}
	}
	if s != "" && !visible {
		return fmt.Errorf("%w: no visible character", ErrInvalidText)
	}
	return nil
}

// MaxCombiningMarks bounds the combining marks (general category M) on one
// character: enough for any real script's accents, not for "Zalgo" text
// that overflows the lines around it.
const MaxCombiningMarks = 4

// IsForbiddenRune reports whether CheckText refuses r.
func IsForbiddenRune(r rune) bool { return forbiddenRune(r) }

func forbiddenRune(r rune) bool {
	switch r {
	case utf8.RuneError, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800:
		return true
	}
	return !unicode.IsGraphic(r) || IsNoncharacter(r)
}

// IsNoncharacter reports whether r is one of the 66 Unicode noncharacters:
// U+FDD0..U+FDEF and the last two code points of every plane (U+FFFE,
// U+FFFF, U+1FFFE, U+1FFFF, ..., U+10FFFF). Source: Unicode Standard §23.7.
func IsNoncharacter(r rune) bool {
	return r >= 0xFDD0 && r <= 0xFDEF || r&0xFFFE == 0xFFFE && r <= unicode.MaxRune
}
