// Package release holds the tests of the release scripts (release.sh behind
// make release, cut.sh), each run in a throwaway git repository.
package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	root  = "github.com/ddb-outbox/ddb-outbox"
	infra = root + "/infra"
)

// fixture is a repository at release 0.2.0, as cut.sh leaves it.
var fixture = map[string]string{
	"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-07\n\n### Added\n\n- x\n\n## [0.1.0] - 2026-11-30\n\n- first\n",
	"go.mod":       "module " + root + "\n\ngo 1.26\n",
	"infra/go.mod": "module " + infra + "\n\ngo 1.26\n\nrequire (\n\tgithub.com/aws/jsii-runtime-go v1.142.0\n\t" + root + " v0.2.0\n)\n",
	"go.work":      "go 1.26\n\nuse (\n\t.\n\t./infra\n)\n\nreplace (\n\t" + root + " v0.2.0 => ./\n\t" + infra + " v0.2.0 => ./infra\n)\n",
	"api/baseline": "0000000000000000000000000000000000000000\n",
	"tools/release/proof/testdata/outside/go.mod": "module example.com/outside\n\ngo 1.26\n\nrequire (\n\t" + root + " v0.2.0\n\t" + infra + " v0.2.0\n)\n",
}

type repo struct {
	t   *testing.T
	dir string
}

func newRepo(t *testing.T, files map[string]string) *repo {
	t.Helper()
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q")
	r.write(files)
	r.git("add", "-A")
	r.git("commit", "-qm", "init")
	return r
}

func (r *repo) write(files map[string]string) {
	r.t.Helper()
	for name, body := range files {
		p := filepath.Join(r.dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *repo) read(name string) string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, filepath.FromSlash(name)))
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b)
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	out, err := r.run("git", args...)
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(out)
}

func (r *repo) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func script(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (r *repo) tags() string { return r.git("tag", "--list") }

func TestReleaseRefuses(t *testing.T) {
	release := script(t, "release.sh")
	cases := []struct {
		name    string
		version string
		prepare func(r *repo)
		want    string
	}{
		{"no version", "", nil, "usage"},
		{"v prefix", "v0.2.0", nil, "not a semantic version"},
		{"not semver", "0.2", nil, "not a semantic version"},
		{"leading zero", "0.02.0", nil, "not a semantic version"},
		{"dirty tree: modified", "0.2.0", func(r *repo) { r.write(map[string]string{"go.mod": "module " + root + "\n\ngo 1.26.1\n"}) }, "not clean"},
		{"dirty tree: untracked", "0.2.0", func(r *repo) { r.write(map[string]string{"new.go": "package x\n"}) }, "not clean"},
		{"not in the changelog", "0.3.0", nil, "no released section \"## [0.3.0]"},
		{"only under Unreleased", "0.2.0", func(r *repo) {
			r.write(map[string]string{"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n- 0.2.0 soon\n\n## [0.1.0] - 2026-11-30\n"})
			r.git("commit", "-qam", "unreleased")
		}, "no released section"},
		{"not the newest section", "0.1.0", nil, "not CHANGELOG.md's newest release"},
		{"root tag exists", "0.2.0", func(r *repo) { r.git("tag", "v0.2.0") }, "tag v0.2.0 exists"},
		{"infra tag exists", "0.2.0", func(r *repo) { r.git("tag", "-a", "infra/v0.2.0", "-m", "x") }, "tag infra/v0.2.0 exists"},
		{"infra requires another version", "0.2.0", func(r *repo) {
			r.write(map[string]string{"infra/go.mod": strings.Replace(fixture["infra/go.mod"], root+" v0.2.0", root+" v0.1.0", 1)})
			r.git("commit", "-qam", "older")
		}, "does not require " + root + " v0.2.0"},
		{"infra has a replace", "0.2.0", func(r *repo) {
			r.write(map[string]string{"infra/go.mod": fixture["infra/go.mod"] + "\nreplace " + root + " => ../\n"})
			r.git("commit", "-qam", "replace")
		}, "replace directive"},
		{"go.work points elsewhere", "0.2.0", func(r *repo) {
			r.write(map[string]string{"go.work": strings.Replace(fixture["go.work"], root+" v0.2.0 => ./\n", root+" v0.1.0 => ./\n", 1)})
			r.git("commit", "-qam", "work")
		}, "go.work does not replace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRepo(t, fixture)
			if c.prepare != nil {
				c.prepare(r)
			}
			before := r.tags()
			out, err := r.run(release, c.version)
			if err == nil {
				t.Fatalf("release %q succeeded:\n%s", c.version, out)
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("release %q: output lacks %q:\n%s", c.version, c.want, out)
			}
			if after := r.tags(); after != before {
				t.Fatalf("a refused release changed the tags: %q -> %q", before, after)
			}
		})
	}
}

func TestReleaseTagsBothModules(t *testing.T) {
	r := newRepo(t, fixture)
	out, err := r.run(script(t, "release.sh"), "0.2.0")
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	head := r.git("rev-parse", "HEAD")
	for _, tag := range []string{"v0.2.0", "infra/v0.2.0"} {
		if typ := r.git("cat-file", "-t", tag); typ != "tag" {
			t.Errorf("%s is a %s, want an annotated tag", tag, typ)
		}
		if at := r.git("rev-parse", tag+"^{commit}"); at != head {
			t.Errorf("%s at %s, want HEAD %s", tag, at, head)
		}
	}
	if !strings.Contains(out, "git push origin v0.2.0 infra/v0.2.0") {
		t.Errorf("no push command in:\n%s", out)
	}
	// The tags now exist: a second run refuses.
	if out, err := r.run(script(t, "release.sh"), "0.2.0"); err == nil || !strings.Contains(out, "exists") {
		t.Errorf("second release: %v\n%s", err, out)
	}
}

// cut.sh on a repository whose Unreleased section has entries: one commit
// with the dated section, the baseline at the cut's parent and the version
// in every go.mod and go.work; then again after more entries arrived.
func TestCut(t *testing.T) {
	if testing.Short() {
		t.Skip("go run")
	}
	files := map[string]string{}
	for k, v := range fixture {
		files[k] = strings.ReplaceAll(v, "v0.2.0", "v0.1.0")
	}
	files["CHANGELOG.md"] = "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- A.\n\n## [0.1.0] - 2026-11-30\n\n- first\n"
	files["examples/wallet/go.mod"] = "module example.com/wallet\n\ngo 1.26\n\nrequire " + infra + " v0.1.0\n"
	r := newRepo(t, files)
	cut := script(t, "cut.sh")

	r.write(map[string]string{"dirty.txt": "x"})
	if out, err := r.run(cut, "0.2.0", "2026-12-07"); err == nil || !strings.Contains(out, "not clean") {
		t.Fatalf("cut on a dirty tree: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(r.dir, "dirty.txt")); err != nil {
		t.Fatal(err)
	}
	parent := r.git("rev-parse", "HEAD")
	if out, err := r.run(cut, "0.2.0", "2026-12-07"); err != nil {
		t.Fatalf("cut: %v\n%s", err, out)
	}
	if msg := r.git("log", "-1", "--format=%s"); msg != "release 0.2.0: CHANGELOG section" {
		t.Errorf("commit subject %q", msg)
	}
	if st := r.git("status", "--porcelain"); st != "" {
		t.Errorf("cut left changes:\n%s", st)
	}
	if got := strings.TrimSpace(r.read("api/baseline")); got != parent {
		t.Errorf("api/baseline = %s, want the cut's parent %s", got, parent)
	}
	if got := r.read("CHANGELOG.md"); !strings.Contains(got, "## [Unreleased]\n\n## [0.2.0] - 2026-12-07\n\n### Added\n\n- A.\n") {
		t.Errorf("CHANGELOG.md:\n%s", got)
	}
	for _, f := range []string{"infra/go.mod", "tools/release/proof/testdata/outside/go.mod", "examples/wallet/go.mod", "go.work"} {
		if got := r.read(f); strings.Contains(got, "v0.1.0") || !strings.Contains(got, "v0.2.0") {
			t.Errorf("%s after the cut:\n%s", f, got)
		}
	}
	if got := r.read("infra/go.mod"); strings.Contains(got, "require "+infra) || strings.Count(got, infra) != 1 {
		t.Errorf("infra/go.mod requires itself:\n%s", got)
	}
	if got := r.read("examples/wallet/go.mod"); strings.Contains(got, root+" v") {
		t.Errorf("the cut added a requirement the example did not have:\n%s", got)
	}
	if out, err := r.run(script(t, "release.sh"), "0.2.0"); err != nil {
		t.Errorf("release after the cut: %v\n%s", err, out)
	}

	// Nothing new under Unreleased: refused.
	if out, err := r.run(cut, "0.2.0", "2026-12-08"); err == nil || !strings.Contains(out, "empty") {
		t.Fatalf("empty cut: %v\n%s", err, out)
	}
	// A merged branch's entry: the redo moves it into 0.2.0.
	r.write(map[string]string{"CHANGELOG.md": strings.Replace(r.read("CHANGELOG.md"), "## [Unreleased]\n", "## [Unreleased]\n\n### Added\n\n- B.\n", 1)})
	r.git("commit", "-qam", "merge B")
	merged := r.git("rev-parse", "HEAD")
	if out, err := r.run(cut, "0.2.0", "2026-12-08"); err != nil {
		t.Fatalf("redo: %v\n%s", err, out)
	}
	if got := r.read("CHANGELOG.md"); !strings.Contains(got, "## [Unreleased]\n\n## [0.2.0] - 2026-12-08\n\n### Added\n\n- A.\n\n- B.\n\n## [0.1.0]") {
		t.Errorf("CHANGELOG.md after the redo:\n%s", got)
	}
	if got := strings.TrimSpace(r.read("api/baseline")); got != merged {
		t.Errorf("api/baseline = %s, want %s", got, merged)
	}
}
