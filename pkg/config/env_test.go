package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestRequiredRefusesSurroundingWhiteSpace: a value with a leading or
// trailing space or newline is refused, naming the variable; inner spaces
// are the value's.
func TestRequiredRefusesSurroundingWhiteSpace(t *testing.T) {
	const name = "OUTBOX_TEST_REQUIRED"
	for _, v := range []string{" wallets", "wallets ", "wallets\n", "\t"} {
		t.Setenv(name, v)
		if got, err := config.Required(name); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%q: %q, %v", v, got, err)
		}
	}
	t.Setenv(name, "a b")
	if got, err := config.Required(name); err != nil || got != "a b" {
		t.Errorf("inner space: %q, %v", got, err)
	}
}

// TestSecondsRefusesWhatADurationCannotHold: seconds beyond a
// time.Duration's range are refused, not wrapped around (18446751273
// seconds wrapped to 2 h).
func TestSecondsRefusesWhatADurationCannotHold(t *testing.T) {
	const name = "OUTBOX_TEST_SECONDS"
	for v, want := range map[string]time.Duration{"0": 0, "3600": time.Hour, "9223372036": 9223372036 * time.Second} {
		t.Setenv(name, v)
		if got, err := config.Seconds(name, time.Minute); err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"-1", "9223372037", "18446751273", "9223372036854775807", "1e3", " 60", "60s"} {
		t.Setenv(name, v)
		if got, err := config.Seconds(name, time.Minute); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, %v; want an error naming the variable", v, got, err)
		}
	}
}
