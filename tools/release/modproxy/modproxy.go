// Package modproxy writes modules of a git working tree into a directory laid
// out as a Go module proxy (the GOPROXY protocol, https://go.dev/ref/mod#goproxy-protocol),
// so that GOPROXY=file://DIR serves them exactly as a published tag would be
// served, before any tag exists.
//
// For each module it writes, under DIR/<escaped module path>/@v/:
//
//   - VERSION.zip: the module zip made by golang.org/x/mod/zip.Create from the
//     files `git ls-files` lists under the module's directory (tracked, plus
//     untracked files git does not ignore), read from the working tree; the
//     go command's own rules apply, so nested modules (a directory with a
//     go.mod), vendor directories and files a module zip may not hold are
//     left out, as the proxy does with a tag's tree;
//   - VERSION.mod: the module's go.mod;
//   - VERSION.info: {"Version": ..., "Time": ...};
//   - list: the versions, one a line.
package modproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Module is one module of the repository to publish.
type Module struct {
	// Dir is the module's root relative to the repository root, slash
	// separated ("." for the root module, "infra").
	Dir string
	// Version is the module version to serve ("v0.2.0").
	Version string
	// Time is the version's time in its .info file (the release date).
	Time time.Time
}

// Written is one module version Write produced.
type Written struct {
	module.Version
	// Files is the number of files in its zip.
	Files int
}

// Write writes each module of the git working tree repo into dir in the
// module proxy layout and returns what it wrote. The module path is read from
// the module's go.mod. dir may already hold other modules.
func Write(dir, repo string, mods ...Module) ([]Written, error) {
	var out []Written
	for _, m := range mods {
		w, err := write(dir, repo, m)
		if err != nil {
			return out, fmt.Errorf("modproxy: module in %s: %w", m.Dir, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func write(dir, repo string, m Module) (Written, error) {
	root := filepath.Join(repo, filepath.FromSlash(m.Dir))
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return Written{}, err
	}
	modPath := modfile.ModulePath(gomod)
	if modPath == "" {
		return Written{}, errors.New("go.mod has no module line")
	}
	mv := module.Version{Path: modPath, Version: m.Version}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return Written{}, err
	}
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		return Written{}, err
	}
	ev, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return Written{}, err
	}
	files, err := trackedFiles(repo, m.Dir)
	if err != nil {
		return Written{}, err
	}
	at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil { //nolint:gosec // a proxy directory is world-readable by design
		return Written{}, err
	}
	var zbuf bytes.Buffer
	if err := zip.Create(&zbuf, mv, files); err != nil {
		return Written{}, err
	}
	checked, err := zip.CheckFiles(files)
	if err != nil {
		return Written{}, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, m.Time.UTC()})
	if err != nil {
		return Written{}, err
	}
	for name, data := range map[string][]byte{ev + ".zip": zbuf.Bytes(), ev + ".mod": gomod, ev + ".info": info} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil { //nolint:gosec // a proxy directory is world-readable by design
			return Written{}, err
		}
	}
	if err := addToList(filepath.Join(at, "list"), mv.Version); err != nil {
		return Written{}, err
	}
	return Written{Version: mv, Files: len(checked.Valid)}, nil
}

func addToList(p, v string) error {
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, l := range strings.Fields(string(b)) {
		if l == v {
			return nil
		}
	}
	return os.WriteFile(p, append(b, []byte(v+"\n")...), 0o644) //nolint:gosec // see above
}

// trackedFiles lists the files git tracks under sub (and the untracked ones
// it does not ignore), as paths relative to sub, read from the working tree.
// A tracked file deleted in the working tree is left out.
func trackedFiles(repo, sub string) ([]zip.File, error) {
	cmd := exec.CommandContext(context.Background(), "git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", sub)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v: %s", err, stderr.String())
	}
	prefix := strings.TrimPrefix(path.Clean(sub)+"/", "./")
	seen := map[string]bool{}
	var files []zip.File
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		rel := strings.TrimPrefix(p, prefix)
		if prefix != "" && rel == p {
			continue
		}
		abs := filepath.Join(repo, filepath.FromSlash(p))
		fi, err := os.Lstat(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files = append(files, file{path: rel, abs: abs, info: fi})
	}
	return files, nil
}

type file struct {
	path, abs string
	info      os.FileInfo
}

func (f file) Path() string                 { return f.path }
func (f file) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.abs) }
