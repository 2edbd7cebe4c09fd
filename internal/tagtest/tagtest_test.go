package tagtest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing.T's does, without failing the real test.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// mustFail runs MustFail against a recorder and returns what it reported
// fatally ("" when it accepted the run).
func mustFail(t *testing.T, tags, run string) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		MustFail(r, "./testdata/probe", tags, run)
	}()
	<-done
	return r.fatal
}

// TestMustFail: MustFail accepts only a run in which the named test itself
// failed; a pass, a skip, a missing test or a build error is reported.
func TestMustFail(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the probe package once per case")
	}
	t.Parallel()
	cases := []struct {
		name, tags, run string
		want            string // substring of the fatal message; "" accepts
	}{
		{"the test fails on the tagged build", "tagtest_broken", "TestProbe", ""},
		{"the test passes", "tagtest_other", "TestProbe", "passed; it must fail"},
		{"the test skips", "tagtest_broken", "TestProbeSkips", "passed; it must fail"},
		{"no such test", "tagtest_broken", "TestAbsent", "passed; it must fail"},
		{"the build fails", "tagtest_nobuild", "TestProbe", "failed, but not in TestProbe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := mustFail(t, c.tags, c.run)
			switch {
			case c.want == "" && got != "":
				t.Fatalf("MustFail refused a failing run: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("MustFail reported %q, want it to say %q", got, c.want)
			}
		})
	}
}

func TestAnchor(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"TestA":        "^TestA$",
		"TestA/case_1": "^TestA$/^case_1$",
		"TestA.b":      `^TestA\.b$`,
	} {
		if got := Anchor(in); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", in, got, want)
		}
	}
}
