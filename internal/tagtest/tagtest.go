// Package tagtest proves that a test can fail: it runs one test of a
// package again under build tags that remove the behaviour the test guards
// (such as pkg/outbox's outbox_unfenced), and fails the calling test unless
// that run fails. A test that passes on a build without the fence proves
// nothing about the fence. Imported by tests only.
package tagtest

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// DefaultTimeout bounds the inner go test when the calling test has no
// deadline (go test -timeout 0).
const DefaultTimeout = 10 * time.Minute

// MustFail runs
//
//	go test -count=1 -tags <tags> -run ^<run>$ <pkg>
//
// in the calling test's working directory (its package directory, so pkg
// may be "."), and fails t unless that run fails and its output shows the
// test itself failed ("--- FAIL: <run> ("): a build error, a missing test or a
// skip is not the failure wanted, and is reported with the output. run is a
// test name (a subtest "TestA/case" is anchored part by part), not a
// pattern. The inner run is bounded by t's deadline (less a minute to
// report) or DefaultTimeout. It builds pkg's test binary again, so callers
// skip it under -short.
func MustFail(t testing.TB, pkg, tags, run string) {
	t.Helper()
	timeout := DefaultTimeout
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			timeout = time.Until(dl) - time.Minute
		}
	}
	if timeout <= 0 {
		t.Fatalf("tagtest: no time left to run %s under -tags %s", run, tags)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-tags", tags, "-run", Anchor(run), pkg}
	cmd := exec.CommandContext(ctx, "go", args...)
	out, err := cmd.CombinedOutput()
	line := "go " + strings.Join(args, " ")
	if err == nil {
		t.Fatalf("tagtest: %s passed; it must fail on this build:\n%s", line, out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || ctx.Err() != nil {
		t.Fatalf("tagtest: %s did not run to the end: %v\n%s", line, err, out)
	}
	if !strings.Contains(string(out), "--- FAIL: "+run+" (") {
		t.Fatalf("tagtest: %s failed, but not in %s (a build error, or the test did not run):\n%s", line, run, out)
	}
	t.Logf("tagtest: %s failed as it must", line)
}

// Anchor returns the -run pattern that selects exactly the test named name:
// each slash-separated part quoted and anchored ("TestA/b" →
// "^TestA$/^b$").
func Anchor(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
