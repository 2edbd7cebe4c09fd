package devstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// npm installs packages whose files the go command would read as Go (the
// aws-cdk package ships "%name%.template.go" templates). The module's go.mod
// `ignore ./node_modules` directive (Go 1.25+) keeps every go command out of
// node_modules whatever installed it (`npm ci` alone included). This test
// copies the module's ignore directives into a scratch module holding such a
// file and checks that `go vet ./...` passes there.
func TestGoModIgnoresNodeModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var ignores []string
	for _, line := range strings.Split(string(gomod), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "ignore ") {
			ignores = append(ignores, strings.TrimSpace(line))
		}
	}
	if len(ignores) == 0 {
		t.Fatal("go.mod has no ignore directive for node_modules")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":  "module example.invalid/scratch\n\ngo 1.26\n\n" + strings.Join(ignores, "\n") + "\n",
		"main.go": "package main\n\nfunc main() {}\n",
		"node_modules/aws-cdk/lib/init-templates/app/go/%name%.template.go": "package main\n\nimport \"%name%\"\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet ./... with node_modules present: %v\n%s", err, out)
	}
}
