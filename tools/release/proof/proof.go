// Package proof proves a release the way a user meets it: a module outside
// the repository requires github.com/ddb-outbox/ddb-outbox and
// github.com/ddb-outbox/ddb-outbox/infra at the release's version, with no
// replace directive, and resolves them from a module proxy built from the
// working tree (modproxy), the rest of its dependencies from the real proxy;
// then `go mod tidy`, `go build ./...` and `go test ./...` must pass.
//
// The version is the CHANGELOG's newest released section, never a git tag:
// the proof runs the same in a clone without tags.
package proof

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/ddb-outbox/ddb-outbox/tools/release/changelog"
	"github.com/ddb-outbox/ddb-outbox/tools/release/modproxy"
)

// The modules a release publishes, by path and directory in the repository.
const (
	RootModule  = "github.com/ddb-outbox/ddb-outbox"
	InfraModule = "github.com/ddb-outbox/ddb-outbox/infra"
	InfraDir    = "infra"
)

// Release reads the release the repository's working tree is at: the newest
// released section of CHANGELOG.md. It checks that the tree agrees with it:
// infra/go.mod requires the root module at that version with no replace, and
// go.work replaces exactly that version of each module by its directory
// (see go.work's comment). An error names the file to fix.
func Release(repo string) (changelog.Release, error) {
	b, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		return changelog.Release{}, err
	}
	rel, err := changelog.Latest(string(b))
	if err != nil {
		return changelog.Release{}, err
	}
	tag := rel.Tag()
	infra, err := parseMod(filepath.Join(repo, InfraDir, "go.mod"))
	if err != nil {
		return rel, err
	}
	if len(infra.Replace) > 0 {
		return rel, fmt.Errorf("infra/go.mod has a replace directive (%s): a user's build ignores it; go.work is for work inside the repository", infra.Replace[0].Old.Path)
	}
	if v := required(infra, RootModule); v != tag {
		return rel, fmt.Errorf("infra/go.mod requires %s %q, but CHANGELOG.md's newest release is %s: cut the release with tools/release/cut.sh, or set the requirement (go mod edit -require=%s@%s infra/go.mod)", RootModule, v, tag, RootModule, tag)
	}
	wb, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		return rel, err
	}
	work, err := modfile.ParseWork("go.work", wb, nil)
	if err != nil {
		return rel, err
	}
	want := map[string]string{RootModule: "./", InfraModule: "./infra"}
	for _, r := range work.Replace {
		if dir, ok := want[r.Old.Path]; ok && r.Old.Version == tag && filepath.Clean(r.New.Path) == filepath.Clean(dir) {
			delete(want, r.Old.Path)
		}
	}
	for _, p := range []string{RootModule, InfraModule} {
		if dir, ok := want[p]; ok {
			return rel, fmt.Errorf("go.work lacks \"replace %s %s => %s\" (the release's version of a workspace module, CHANGELOG.md's newest release)", p, tag, dir)
		}
	}
	return rel, nil
}

func parseMod(p string) (*modfile.File, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(p, b, nil)
}

func required(f *modfile.File, path string) string {
	for _, r := range f.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	return ""
}

// Config is one proof run.
type Config struct {
	// Repo is the repository's root (its working tree is published).
	Repo string
	// Module is the outside module's directory. It is copied into Work and
	// never modified; its go.mod must require the release's version of at
	// least one of the two modules and have no replace directive.
	Module string
	// Work is an empty scratch directory (the proxy and the module's copy).
	Work string
	// ModCache is the GOMODCACHE of the proof's go commands; this project's
	// modules are removed from it first (a cache would otherwise serve a
	// previous run's zips under the same version). Reusing one across runs
	// saves extracting the CDK modules (hundreds of MB) each time.
	ModCache string
	// Log receives each command and its output.
	Log io.Writer
}

// Prove runs the proof of cfg.Module against the release in cfg.Repo.
func Prove(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	rel, err := Release(cfg.Repo)
	if err != nil {
		return err
	}
	tag := rel.Tag()
	proxy := filepath.Join(cfg.Work, "proxy")
	written, err := modproxy.Write(proxy, cfg.Repo,
		modproxy.Module{Dir: ".", Version: tag, Time: rel.Date},
		modproxy.Module{Dir: InfraDir, Version: tag, Time: rel.Date})
	if err != nil {
		return err
	}
	for _, w := range written {
		fmt.Fprintf(cfg.Log, "proxy: %s@%s (%d files)\n", w.Path, w.Version.Version, w.Files)
	}
	mod := filepath.Join(cfg.Work, "module")
	if err := copyModule(cfg.Module, mod); err != nil {
		return err
	}
	gm, err := parseMod(filepath.Join(mod, "go.mod"))
	if err != nil {
		return err
	}
	if len(gm.Replace) > 0 {
		return fmt.Errorf("%s/go.mod replaces %s: the proof is of a module without replace", cfg.Module, gm.Replace[0].Old.Path)
	}
	if required(gm, RootModule) != tag && required(gm, InfraModule) != tag {
		return fmt.Errorf("%s/go.mod requires neither %s nor %s at %s (CHANGELOG.md's newest release)", cfg.Module, RootModule, InfraModule, tag)
	}
	if err := seedSums(cfg.Repo, mod); err != nil {
		return err
	}
	if err := forget(cfg.ModCache); err != nil {
		return err
	}
	env, err := environ(ctx, cfg.Repo, proxy, cfg.ModCache)
	if err != nil {
		return err
	}
	run := func(args ...string) ([]byte, error) {
		fmt.Fprintf(cfg.Log, "$ go %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = mod, env
		var out bytes.Buffer
		cmd.Stdout = io.MultiWriter(cfg.Log, &out)
		cmd.Stderr = io.MultiWriter(cfg.Log, &out)
		err := cmd.Run()
		if err != nil {
			return out.Bytes(), fmt.Errorf("go %s in a copy of %s: %w\n%s", strings.Join(args, " "), cfg.Module, err, out.Bytes())
		}
		return out.Bytes(), nil
	}
	if _, err := run("mod", "tidy"); err != nil {
		return err
	}
	if gm, err = parseMod(filepath.Join(mod, "go.mod")); err != nil {
		return err
	}
	if len(gm.Replace) > 0 {
		return fmt.Errorf("go mod tidy left a replace in %s/go.mod", cfg.Module)
	}
	out, err := run("list", "-m", "-json", RootModule, InfraModule)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var m struct {
			Path, Version, Dir string
			Replace            *struct{ Path string }
		}
		if err := dec.Decode(&m); err != nil {
			return err
		}
		if m.Version != tag || m.Replace != nil || !strings.HasPrefix(m.Dir, cfg.ModCache) {
			return fmt.Errorf("%s resolved to version %q (replace %v) in %s: want %s from the proxy, in the module cache", m.Path, m.Version, m.Replace, m.Dir, tag)
		}
	}
	if _, err := run("build", "./..."); err != nil {
		return err
	}
	_, err = run("test", "-count=1", "./...")
	return err
}

// environ is the go command's environment of the proof: out of any
// workspace, this project's modules from proxy first, then the cache's own
// downloads and the machine's proxy for everything else; no checksum
// database for this project's modules (their zips are the working tree's),
// which must not bypass the proxy either (GOPRIVATE and GONOPROXY cleared).
func environ(ctx context.Context, repo, proxy, modcache string) ([]string, error) {
	upstream, err := GoEnv(ctx, "GOPROXY")
	if err != nil {
		return nil, err
	}
	shared, err := GoEnv(ctx, "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	proxies := []string{fileURL(proxy)}
	if shared != "" && filepath.Clean(shared) != filepath.Clean(modcache) {
		if _, err := os.Stat(filepath.Join(shared, "cache", "download")); err == nil {
			proxies = append(proxies, fileURL(filepath.Join(shared, "cache", "download")))
		}
	}
	if upstream != "" && upstream != "off" {
		proxies = append(proxies, upstream)
	}
	env := os.Environ()
	// The module's tests run from a scratch copy, above which there is no
	// node_modules: point pkg/dynoxide at the repository's pinned server
	// (its search order starts with DYNOXIDE_BIN) unless one is set.
	if os.Getenv("DYNOXIDE_BIN") == "" {
		for _, pkg := range []string{"linux-x64", "linux-arm64", "darwin-arm64", "darwin-x64"} {
			bin := filepath.Join(repo, "node_modules", "@dynoxide", pkg, "dynoxide")
			if _, err := os.Stat(bin); err == nil {
				env = append(env, "DYNOXIDE_BIN="+bin)
				break
			}
		}
	}
	// GODEBUG=goindex=0: the go command keeps an index of each module
	// directory of the module cache in its build cache, keyed by the
	// directory, because a published version never changes. Here it does:
	// every run serves the working tree as the same version, and forget
	// re-extracts it at the same path, so a stale index would compile the
	// previous tree's imports against the new files ("could not import
	// math (open : no such file or directory)").
	return append(env,
		"GODEBUG=goindex=0",
		"GOWORK=off",
		"GOFLAGS=-modcacherw -trimpath", // -trimpath: the compile cache does not depend on the cache's directory
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB=github.com/ddb-outbox",
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOTOOLCHAIN=local",
		"GOMODCACHE="+modcache,
	), nil
}

func fileURL(p string) string { return "file://" + filepath.ToSlash(p) }

// GoEnv is the go command's value of the variable name (go env NAME),
// trimmed; the error names the variable.
func GoEnv(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// forget removes this project's modules from the module cache modcache.
func forget(modcache string) error {
	for _, d := range []string{
		filepath.Join(modcache, "github.com", "ddb-outbox"),
		filepath.Join(modcache, "cache", "download", "github.com", "ddb-outbox"),
	} {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				_ = os.Chmod(p, 0o755) //nolint:gosec // a cache directory made writable to remove it
			}
			return nil
		})
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}

// copyModule copies the regular files of src to dst, leaving out go.sum
// lines of this project's modules (their hashes are the proxy's, computed
// from the working tree).
func copyModule(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755) //nolint:gosec // a scratch copy of a module
		}
		if !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p) //nolint:gosec // walks the module directory the caller names
		if err != nil {
			return err
		}
		if rel == "go.sum" {
			b = dropOwnSums(b)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm()) //nolint:gosec // target is under dst, rel comes from the walk
	})
}

func dropOwnSums(b []byte) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "github.com/ddb-outbox/") {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	return out.Bytes()
}

// seedSums adds the repository's go.sum lines (root and infra) to the
// module's go.sum, so that the checksum database is asked only about what
// the repository has never recorded; go mod tidy drops the unused ones.
func seedSums(repo, mod string) error {
	have, err := os.ReadFile(filepath.Join(mod, "go.sum"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(string(have), "\n") {
		seen[l] = true
	}
	var add bytes.Buffer
	for _, f := range []string{"go.sum", filepath.Join(InfraDir, "go.sum")} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(dropOwnSums(b)), "\n") {
			if l != "" && !seen[l] {
				seen[l] = true
				add.WriteString(l + "\n")
			}
		}
	}
	return os.WriteFile(filepath.Join(mod, "go.sum"), append(have, add.Bytes()...), 0o644) //nolint:gosec // a scratch copy
}
