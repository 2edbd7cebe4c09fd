// Command apicheck guards the library's public surface: it compares the
// exported API of every package under pkg/ (pkg/internal excluded) with the
// same packages at a baseline commit, using golang.org/x/exp/apidiff, and
// fails when a change is not recorded in CHANGELOG.md's "## [Unreleased]"
// section. A change is recorded when the section names its identifier (the
// last element: "ApplyEvent" for (*Applier).ApplyEvent) or, for a package
// added or removed, the package's path under the module ("pkg/localrt").
//
//	apicheck -repo DIR -baseline api/baseline
//
// The baseline is a commit of the repository (the file holds its hash): the
// last release, or while no release exists the state the guard started from.
// At a release, record the release's commit there. Exit status 1 lists the
// unrecorded changes, incompatible ones first; 2 is a usage or load error.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

const module = "github.com/ddb-outbox/ddb-outbox"

func main() {
	repo := flag.String("repo", ".", "the repository (the library module's root)")
	baselineFile := flag.String("baseline", "api/baseline", "file holding the baseline commit, relative to -repo")
	changelog := flag.String("changelog", "CHANGELOG.md", "the changelog, relative to -repo")
	flag.Parse()
	unrecorded, report, err := check(*repo, *baselineFile, *changelog)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	fmt.Print(report)
	if len(unrecorded) > 0 {
		fmt.Fprintf(os.Stderr, "apicheck: %d change(s) of the library's API are not in CHANGELOG.md's Unreleased section:\n", len(unrecorded))
		for _, u := range unrecorded {
			fmt.Fprintln(os.Stderr, "  "+u)
		}
		fmt.Fprintln(os.Stderr, "apicheck: describe each under \"## [Unreleased]\" (naming the identifier), then run make lint again")
		os.Exit(1)
	}
}

func check(repo, baselineFile, changelog string) ([]string, string, error) {
	b, err := os.ReadFile(filepath.Join(repo, baselineFile))
	if err != nil {
		return nil, "", err
	}
	baseline := strings.TrimSpace(string(b))
	old, err := os.MkdirTemp("", "apicheck-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(old)
	if err := extract(repo, baseline, old); err != nil {
		return nil, "", err
	}
	oldPkgs, err := load(old)
	if err != nil {
		return nil, "", fmt.Errorf("load the baseline %s: %w", baseline, err)
	}
	newPkgs, err := load(repo)
	if err != nil {
		return nil, "", err
	}
	unreleased, err := unreleasedSection(filepath.Join(repo, changelog))
	if err != nil {
		return nil, "", err
	}
	var report strings.Builder
	var unrecorded []string
	paths := map[string]bool{}
	for p := range oldPkgs {
		paths[p] = true
	}
	for p := range newPkgs {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		rel := strings.TrimPrefix(p, module+"/")
		o, n := oldPkgs[p], newPkgs[p]
		switch {
		case o == nil:
			fmt.Fprintf(&report, "%s: package added\n", rel)
			if !mentions(unreleased, rel) {
				unrecorded = append(unrecorded, rel+": package added")
			}
			continue
		case n == nil:
			fmt.Fprintf(&report, "%s: package removed (incompatible)\n", rel)
			if !mentions(unreleased, rel) {
				unrecorded = append(unrecorded, rel+": package removed (incompatible)")
			}
			continue
		}
		r := apidiff.Changes(o, n)
		for _, c := range r.Changes {
			kind := "compatible"
			if !c.Compatible {
				kind = "incompatible"
			}
			line := fmt.Sprintf("%s: %s (%s)", rel, c.Message, kind)
			fmt.Fprintln(&report, line)
			if !mentions(unreleased, identifier(c.Message)) {
				unrecorded = append(unrecorded, line)
			}
		}
	}
	sort.SliceStable(unrecorded, func(i, j int) bool {
		return strings.HasSuffix(unrecorded[i], "(incompatible)") && !strings.HasSuffix(unrecorded[j], "(incompatible)")
	})
	return unrecorded, report.String(), nil
}

// extract writes the repository's tree at commit into dir (git archive).
func extract(repo, commit, dir string) error {
	archive := exec.CommandContext(context.Background(), "git", "-C", repo, "archive", "--format=tar", commit)
	var out, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &out, &stderr
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s (is the baseline commit in this clone? a shallow clone lacks it): %v: %s", commit, err, stderr.String())
	}
	untar := exec.CommandContext(context.Background(), "tar", "-x", "-C", dir)
	untar.Stdin, untar.Stderr = &out, &stderr
	if err := untar.Run(); err != nil {
		return fmt.Errorf("untar the baseline: %v: %s", err, stderr.String())
	}
	return nil
}

// load type-checks the library's packages (pkg/..., not pkg/internal/...)
// of the module in dir.
func load(dir string) (map[string]*types.Package, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedDeps | packages.NeedImports, Dir: dir,
		Env: append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")}
	pkgs, err := packages.Load(cfg, "./pkg/...")
	if err != nil {
		return nil, err
	}
	out := map[string]*types.Package{}
	var errs []error
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %v", p.PkgPath, e))
		}
		if strings.Contains(p.PkgPath, "/internal/") || p.Types == nil {
			continue
		}
		out[p.PkgPath] = p.Types
	}
	return out, errors.Join(errs...)
}

// unreleasedSection returns the text under "## Unreleased" up to the next
// "## " heading.
func unreleasedSection(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.Index(s, "\n## [Unreleased]")
	if i < 0 {
		i = strings.Index(s, "\n## Unreleased")
	}
	if i < 0 {
		return "", fmt.Errorf("%s has no \"## [Unreleased]\" section", path)
	}
	rest := s[i+1:]
	if j := strings.Index(rest[3:], "\n## "); j >= 0 {
		rest = rest[:j+3]
	}
	return rest, nil
}

// identifier returns the name an apidiff message is about: "ApplyEvent"
// for "(*Applier).ApplyEvent: added", "Config.Resequencer" → "Resequencer".
func identifier(msg string) string {
	name, _, _ := strings.Cut(msg, ":")
	name = strings.TrimSpace(name)
	if i := strings.LastIndex(name, "."); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// mentions reports whether text names word as a whole word.
func mentions(text, word string) bool {
	if word == "" {
		return false
	}
	return regexp.MustCompile(`(^|[^\w/])` + regexp.QuoteMeta(word) + `($|[^\w])`).MatchString(text)
}
