package proof

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository this test module lives in.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// modCache is the proof's module cache: RELEASE_PROOF_MODCACHE, or one per
// repository directory under the user's cache directory, kept between runs
// so the CDK modules are extracted once. Never inside the repository (the
// go command's ./... would walk it), never shared by two working trees (a
// run removes this project's modules from it first).
func modCache(t *testing.T, repo string) string {
	t.Helper()
	if d := os.Getenv("RELEASE_PROOF_MODCACHE"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(repo))
	return filepath.Join(base, "ddb-outbox-release-proof", hex.EncodeToString(sum[:8]), "modcache")
}

// TestOutsideModulesResolveTheRelease proves testdata/outside (the library's
// outbox and relay packages, the infra module's construct in a CDK stack
// test) and every example module of the repository (examples/*/go.mod)
// against the release CHANGELOG.md names, served from the working tree.
func TestOutsideModulesResolveTheRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy, build and test in scratch modules")
	}
	repo := repoRoot(t)
	mods := []string{filepath.Join("testdata", "outside")}
	examples, err := filepath.Glob(filepath.Join(repo, "examples", "*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range examples {
		mods = append(mods, filepath.Dir(e))
	}
	cache := modCache(t, repo)
	for _, m := range mods {
		abs, err := filepath.Abs(m)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(m), func(t *testing.T) {
			var log strings.Builder
			err := Prove(context.Background(), Config{Repo: repo, Module: abs, Work: t.TempDir(), ModCache: cache, Log: &log})
			if err != nil {
				t.Fatalf("%v\n--- log\n%s", err, log.String())
			}
			t.Log(log.String())
		})
	}
}

// The proof refuses a module that would not show a user's build: one with
// a replace, one that does not require the release's version.
func TestProveRefuses(t *testing.T) {
	repo := repoRoot(t)
	rel, err := Release(repo)
	if err != nil {
		t.Skipf("the working tree is not at a release (%v): TestRelease reports it", err)
	}
	cases := map[string]string{
		"replace": "module example.com/x\n\ngo 1.26\n\nrequire github.com/ddb-outbox/ddb-outbox " + rel.Tag() + "\n\nreplace github.com/ddb-outbox/ddb-outbox => ../\n",
		"older":   "module example.com/x\n\ngo 1.26\n\nrequire github.com/ddb-outbox/ddb-outbox v0.0.1\n",
	}
	for name, gomod := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
				t.Fatal(err)
			}
			err := Prove(context.Background(), Config{Repo: repo, Module: dir, Work: t.TempDir(), ModCache: t.TempDir()})
			if err == nil {
				t.Fatal("proved")
			}
			t.Log(err)
		})
	}
}

// The repository is at the release its CHANGELOG names: infra/go.mod and
// go.work agree with it.
func TestRelease(t *testing.T) {
	rel, err := Release(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("release %s of %s", rel.Version, rel.Date.Format("2006-01-02"))
}

func TestReleaseRefusesADisagreeingTree(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-07\n\n- x\n",
		"infra/go.mod": "module " + InfraModule + "\n\ngo 1.26\n\nrequire " + RootModule + " v0.2.0\n",
		"go.work":      "go 1.26\n\nuse (\n\t.\n\t./infra\n)\n\nreplace " + RootModule + " v0.2.0 => ./\n\nreplace " + InfraModule + " v0.2.0 => ./infra\n",
	}
	write := func(over map[string]string) {
		for name, body := range files {
			if b, ok := over[name]; ok {
				body = b
			}
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(nil)
	if _, err := Release(dir); err != nil {
		t.Fatalf("agreeing tree: %v", err)
	}
	bad := map[string]map[string]string{
		"infra requires another version": {"infra/go.mod": strings.Replace(files["infra/go.mod"], "v0.2.0", "v0.1.0", 1)},
		"infra replaces":                 {"infra/go.mod": files["infra/go.mod"] + "\nreplace " + RootModule + " => ../\n"},
		"go.work replaces another":       {"go.work": strings.Replace(files["go.work"], RootModule+" v0.2.0", RootModule+" v0.1.0", 1)},
		"no released section":            {"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n"},
	}
	for name, over := range bad {
		t.Run(name, func(t *testing.T) {
			write(over)
			defer write(nil)
			if _, err := Release(dir); err == nil {
				t.Fatal("accepted")
			} else {
				t.Log(err)
			}
		})
	}
}
