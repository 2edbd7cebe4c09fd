package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"
)

// readBody reads at most limit bytes of r's body. It returns 413
// payload_too_large past the limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("request body exceeds %d bytes", limit))
		}
		return nil, newError(http.StatusBadRequest, CodeMalformedJSON, "could not read the request body")
	}
	return b, nil
}

// requireJSON returns 415 unless the Content-Type is application/json
// (parameters such as charset=utf-8 are allowed).
func requireJSON(r *http.Request) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !bytes.EqualFold([]byte(cs), []byte("utf-8")) {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "charset must be utf-8")
	}
	return nil
}

// decodeStrict decodes body, which must be exactly one JSON object whose
// member names are all in allowed (exact, case-sensitive, no duplicates) and
// nothing after it, into dst. encoding/json alone matches names without
// regard to case and keeps the last of duplicate members, so the member names
// are checked with the token stream first. Errors are 400 malformed_json,
// unknown_field or invalid_type.
func decodeStrict(body []byte, dst any, allowed ...string) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return newError(http.StatusBadRequest, CodeMalformedJSON, "request body is empty; a JSON object is required")
	}
	// encoding/json would silently replace invalid UTF-8 with U+FFFD.
	if !utf8.Valid(body) {
		return newError(http.StatusBadRequest, CodeMalformedJSON, "request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return malformed(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return newError(http.StatusBadRequest, CodeMalformedJSON, "request body must be a JSON object")
	}
	seen := make(map[string]bool, len(allowed))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(err)
		}
		name, _ := tok.(string)
		if !contains(allowed, name) {
			return newError(http.StatusBadRequest, CodeUnknownField, fmt.Sprintf("unknown field %q", truncate(name, 64)))
		}
		if seen[name] {
			return newError(http.StatusBadRequest, CodeMalformedJSON, fmt.Sprintf("duplicate field %q", name))
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return malformed(err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return newError(http.StatusBadRequest, CodeMalformedJSON, "unexpected data after the JSON object")
	}

	strict := json.NewDecoder(bytes.NewReader(body))
	strict.DisallowUnknownFields()
	if err := strict.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return newError(http.StatusBadRequest, CodeInvalidType, fmt.Sprintf("field %q must be %s", te.Field, jsonKind(te.Type.Kind().String())))
		}
		return malformed(err)
	}
	return nil
}

func malformed(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return newError(http.StatusBadRequest, CodeMalformedJSON, fmt.Sprintf("malformed JSON at byte %d", se.Offset))
	}
	return newError(http.StatusBadRequest, CodeMalformedJSON, "malformed JSON")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int64", "int", "int32":
		return "an integer within the int64 range"
	case "string":
		return "a string"
	}
	return "of another type"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
