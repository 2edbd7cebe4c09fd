package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixture is a throwaway repository of the library's module: one library
// package, one private one, a changelog, and the baseline commit recorded.
type fixture struct {
	t   *testing.T
	dir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	f := &fixture{t: t, dir: t.TempDir()}
	f.write("go.mod", "module "+module+"\n\ngo 1.26\n")
	f.write("pkg/lib/lib.go", "package lib\n\n// Foo is part of the API.\nfunc Foo() {}\n")
	f.write("pkg/internal/priv/priv.go", "package priv\n\n// Helper is private to the library.\nfunc Helper() {}\n")
	f.write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-11-30\n\n- Initial.\n")
	f.git("init", "-q")
	f.git("add", ".")
	f.git("commit", "-q", "-m", "release")
	f.write("api/baseline", strings.TrimSpace(f.git("rev-parse", "HEAD"))+"\n")
	return f
}

func (f *fixture) write(name, content string) {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) git(args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = f.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return string(out)
}

func (f *fixture) unreleased(entries string) {
	f.write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n"+entries+"\n\n## [0.1.0] - 2026-11-30\n\n- Initial.\n")
}

func (f *fixture) check() []string {
	f.t.Helper()
	unrecorded, _, err := check(f.dir, "api/baseline", "CHANGELOG.md")
	if err != nil {
		f.t.Fatal(err)
	}
	return unrecorded
}

func TestUnchangedAPIPasses(t *testing.T) {
	f := newFixture(t)
	if got := f.check(); len(got) != 0 {
		t.Fatalf("unrecorded = %q, want none", got)
	}
}

func TestAddedIdentifierNeedsAnEntry(t *testing.T) {
	f := newFixture(t)
	f.write("pkg/lib/bar.go", "package lib\n\n// Bar is new.\nfunc Bar() {}\n")
	want := []string{"pkg/lib: Bar: added (compatible)"}
	if got := f.check(); !slices.Equal(got, want) {
		t.Fatalf("unrecorded = %q, want %q", got, want)
	}
	// A longer name that contains it is not a mention.
	f.unreleased("### Added\n\n- `lib.BarBaz`.")
	if got := f.check(); !slices.Equal(got, want) {
		t.Fatalf("with BarBaz mentioned: unrecorded = %q, want %q", got, want)
	}
	// A mention under an earlier release is not a record of this change.
	f.write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-11-30\n\n- `lib.Bar`.\n")
	if got := f.check(); !slices.Equal(got, want) {
		t.Fatalf("with Bar under 0.1.0: unrecorded = %q, want %q", got, want)
	}
	f.unreleased("### Added\n\n- `lib.Bar` does the bar.")
	if got := f.check(); len(got) != 0 {
		t.Fatalf("with the entry: unrecorded = %q, want none", got)
	}
}

func TestIncompatibleChangeIsListedFirst(t *testing.T) {
	f := newFixture(t)
	f.write("pkg/lib/lib.go", "package lib\n\n// Foo is part of the API.\nfunc Foo(n int) {}\n\n// Qux is new.\nfunc Qux() {}\n")
	want := []string{
		"pkg/lib: Foo: changed from func() to func(int) (incompatible)",
		"pkg/lib: Qux: added (compatible)",
	}
	if got := f.check(); !slices.Equal(got, want) {
		t.Fatalf("unrecorded = %q, want %q", got, want)
	}
}

func TestPrivatePackagesAreNotTheAPI(t *testing.T) {
	f := newFixture(t)
	f.write("pkg/internal/priv/priv.go", "package priv\n\n// Other replaced Helper.\nfunc Other() {}\n")
	if got := f.check(); len(got) != 0 {
		t.Fatalf("unrecorded = %q, want none (pkg/internal is not the API)", got)
	}
}

func TestPackagesAddedAndRemovedNeedTheirPath(t *testing.T) {
	f := newFixture(t)
	if err := os.RemoveAll(filepath.Join(f.dir, "pkg/lib")); err != nil {
		t.Fatal(err)
	}
	f.write("pkg/newlib/newlib.go", "package newlib\n\n// Foo moved here.\nfunc Foo() {}\n")
	want := []string{"pkg/lib: package removed (incompatible)", "pkg/newlib: package added"}
	if got := f.check(); !slices.Equal(got, want) {
		t.Fatalf("unrecorded = %q, want %q", got, want)
	}
	f.unreleased("### Changed\n\n- **Breaking:** `pkg/lib` is now `pkg/newlib`.")
	if got := f.check(); len(got) != 0 {
		t.Fatalf("with the entry: unrecorded = %q, want none", got)
	}
}

func TestMissingBaselineCommitIsAnError(t *testing.T) {
	f := newFixture(t)
	f.write("api/baseline", strings.Repeat("ab", 20)+"\n")
	_, _, err := check(f.dir, "api/baseline", "CHANGELOG.md")
	if err == nil || !strings.Contains(err.Error(), "shallow clone") {
		t.Fatalf("err = %v, want an error naming the missing baseline", err)
	}
}
