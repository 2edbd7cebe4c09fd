package probe

import "testing"

// TestProbe guards Broken: it fails on the tagtest_broken build.
func TestProbe(t *testing.T) {
	if Broken {
		t.Fatal("broken build")
	}
}

// TestProbeSkips skips on every build: a skip is not a failure.
func TestProbeSkips(t *testing.T) {
	t.Skip("always")
}
