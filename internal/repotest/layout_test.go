package repotest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/ddb-outbox/ddb-outbox"

// root is the repository root (this package is internal/repotest).
const root = "../.."

// TestLibraryImportsNoApplicationOrTooling: pkg/ is the library a team
// imports; none of its packages (their code, with everything it pulls in)
// may import the example application or the tooling under internal/.
// pkg/internal/ is the library's own private code and allowed.
func TestLibraryImportsNoApplicationOrTooling(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-C", root, "-deps", "-f", "{{.ImportPath}}", "./pkg/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module+"/internal/") {
			t.Errorf("the library depends on %s", p)
		}
	}
	out, err = exec.Command("go", "list", "-C", root, "./pkg/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if !strings.Contains(string(out), module+"/pkg/outbox\n") {
		t.Fatalf("go list ./pkg/... does not list the library:\n%s", out)
	}
}

// MaxFileLines is the size past which a non-test Go file needs a reason
// on its first line ("// file-length: …"): split a file along the story it
// tells (docs/CONTRIBUTING: files tell one story), or say why not.
const MaxFileLines = 600

// TestFilesTellOneStory: no non-test Go file of the repository is longer
// than MaxFileLines lines unless its first line gives the reason.
func TestFilesTellOneStory(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "node_modules/") {
			continue
		}
		lines, first := count(t, filepath.Join(root, f))
		if lines > MaxFileLines && !strings.HasPrefix(first, "// file-length: ") {
			t.Errorf("%s: %d lines (over %d) and no \"// file-length: <reason>\" first line", f, lines, MaxFileLines)
		}
	}
}

func count(t *testing.T, path string) (int, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, "" // deleted in the working tree
		}
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	n, first := 0, ""
	for s.Scan() {
		if n == 0 {
			first = s.Text()
		}
		n++
	}
	return n, first
}
