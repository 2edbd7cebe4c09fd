package modproxy

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func zipNames(t *testing.T, p string) []string {
	t.Helper()
	r, err := zip.OpenReader(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, f := range r.File {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return names
}

// The zips hold what a tag's tree would give the proxy, from the working
// tree: tracked and untracked-not-ignored files, not ignored ones, not a
// nested module's, not a deleted tracked file; the nested module has its own.
func TestWriteServesTheWorkingTree(t *testing.T) {
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	writeFiles(t, repo, map[string]string{
		".gitignore":      "ignored.txt\n",
		"go.mod":          "module example.com/lib\n\ngo 1.26\n",
		"lib.go":          "package lib\n",
		"gone.go":         "package lib\n",
		"sub/go.mod":      "module example.com/lib/sub\n\ngo 1.26\n\nrequire example.com/lib v1.2.3\n",
		"sub/sub.go":      "package sub\n",
		"tools/x/go.mod":  "module example.com/lib/tools/x\n",
		"tools/x/x.go":    "package x\n",
		"internal/a/a.go": "package a\n",
		"docs/readme.md":  "hi\n",
		"ignored.txt":     "no\n",
	})
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "init")
	writeFiles(t, repo, map[string]string{"new.go": "package lib\n\nconst New = 1\n", "lib.go": "package lib\n\nconst Edited = 1\n"})
	if err := os.Remove(filepath.Join(repo, "gone.go")); err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	day := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	w, err := Write(proxy, repo, Module{Dir: ".", Version: "v1.2.3", Time: day}, Module{Dir: "sub", Version: "v1.2.3", Time: day})
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 2 || w[0].Path != "example.com/lib" || w[1].Path != "example.com/lib/sub" {
		t.Fatalf("written = %+v", w)
	}
	got := strings.Join(zipNames(t, filepath.Join(proxy, "example.com/lib/@v/v1.2.3.zip")), " ")
	want := "example.com/lib@v1.2.3/.gitignore example.com/lib@v1.2.3/docs/readme.md example.com/lib@v1.2.3/go.mod example.com/lib@v1.2.3/internal/a/a.go example.com/lib@v1.2.3/lib.go example.com/lib@v1.2.3/new.go"
	if got != want {
		t.Errorf("root zip:\n got %s\nwant %s", got, want)
	}
	got = strings.Join(zipNames(t, filepath.Join(proxy, "example.com/lib/sub/@v/v1.2.3.zip")), " ")
	if want := "example.com/lib/sub@v1.2.3/go.mod example.com/lib/sub@v1.2.3/sub.go"; got != want {
		t.Errorf("sub zip:\n got %s\nwant %s", got, want)
	}
	mod, err := os.ReadFile(filepath.Join(proxy, "example.com/lib/sub/@v/v1.2.3.mod"))
	if err != nil || !strings.Contains(string(mod), "require example.com/lib v1.2.3") {
		t.Errorf("sub .mod = %q, %v", mod, err)
	}
	var info struct {
		Version string
		Time    time.Time
	}
	b, err := os.ReadFile(filepath.Join(proxy, "example.com/lib/@v/v1.2.3.info"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &info); err != nil || info.Version != "v1.2.3" || !info.Time.Equal(day) {
		t.Errorf(".info = %s (%v)", b, err)
	}
	// Writing again lists the version once.
	if _, err := Write(proxy, repo, Module{Dir: ".", Version: "v1.2.3", Time: day}); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.ReadFile(filepath.Join(proxy, "example.com/lib/@v/list")); string(l) != "v1.2.3\n" {
		t.Errorf("list = %q", l)
	}
}

func TestWriteRefusesABadVersion(t *testing.T) {
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	writeFiles(t, repo, map[string]string{"go.mod": "module example.com/lib\n"})
	if _, err := Write(t.TempDir(), repo, Module{Dir: ".", Version: "1.2.3"}); err == nil {
		t.Fatal("a version without v was accepted")
	}
}
