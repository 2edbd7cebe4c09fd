// Package changelog reads and cuts the release sections of CHANGELOG.md
// (Keep a Changelog 1.1.0: "## [Unreleased]", then "## [X.Y.Z] - YYYY-MM-DD"
// sections, newest first).
package changelog

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// Unreleased is the heading of the section that collects the changes not yet
// released (tools/apidiff's API guard reads it).
const Unreleased = "## [Unreleased]"

// released matches a released section's heading: "## [0.2.0] - 2026-12-07".
var released = regexp.MustCompile(`^## \[([^\]]+)\] - (\d{4}-\d{2}-\d{2})\s*$`)

// ErrNoRelease is returned by Latest when the changelog has no released
// section.
var ErrNoRelease = errors.New("changelog: no released section \"## [X.Y.Z] - YYYY-MM-DD\"")

// Release is one released section's heading.
type Release struct {
	// Version is the semantic version without the "v" prefix ("0.2.0").
	Version string
	// Date is the release date, UTC midnight.
	Date time.Time
}

// Tag is the Go module version of the release ("v0.2.0").
func (r Release) Tag() string { return "v" + r.Version }

// Releases returns every released section of text, in file order (newest
// first). A heading whose version is not semantic (X.Y.Z, no "v") or whose
// date is not a calendar date is an error.
func Releases(text string) ([]Release, error) {
	var out []Release
	for i, line := range strings.Split(text, "\n") {
		m := released.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !ValidVersion(m[1]) {
			return nil, fmt.Errorf("changelog line %d: %q is not a semantic version X.Y.Z", i+1, m[1])
		}
		d, err := time.Parse(time.DateOnly, m[2])
		if err != nil {
			return nil, fmt.Errorf("changelog line %d: %w", i+1, err)
		}
		out = append(out, Release{Version: m[1], Date: d})
	}
	return out, nil
}

// Latest returns the first (newest) released section of text: the version the
// release proof builds, independent of the tags present in a clone.
func Latest(text string) (Release, error) {
	rs, err := Releases(text)
	if err != nil {
		return Release{}, err
	}
	if len(rs) == 0 {
		return Release{}, ErrNoRelease
	}
	return rs[0], nil
}

// ValidVersion reports whether v is a release version X.Y.Z (semantic
// version 2.0.0 with an optional pre-release, no build metadata, no "v").
func ValidVersion(v string) bool {
	return !strings.HasPrefix(v, "v") && semver.IsValid("v"+v) && semver.Build("v"+v) == "" &&
		strings.Count(strings.SplitN(v, "-", 2)[0], ".") == 2
}

// Cut moves the entries of the Unreleased section into the released section
// "## [version] - date" and leaves an empty Unreleased section above it. When
// that section already exists (a cut redone after more entries were merged
// under Unreleased), the entries join it: each "### Kind" block is appended to
// the block of the same heading (a new kind is appended at the end of the
// section) and the date becomes date. Cut refuses a changelog without an
// Unreleased section, an Unreleased section without entries (nothing to
// release), and a version that is older than or equal to the newest other
// released section.
func Cut(text, version string, date time.Time) (string, error) {
	if !ValidVersion(version) {
		return "", fmt.Errorf("changelog: %q is not a semantic version X.Y.Z", version)
	}
	rs, err := Releases(text)
	if err != nil {
		return "", err
	}
	redo := len(rs) > 0 && rs[0].Version == version
	if len(rs) > 0 && !redo && semver.Compare("v"+version, rs[0].Tag()) <= 0 {
		return "", fmt.Errorf("changelog: %s is not newer than the newest release, %s", version, rs[0].Version)
	}
	sections := split(strings.Split(text, "\n"))
	ui, ri := -1, -1
	for i, s := range sections {
		if s.heading == Unreleased && ui < 0 {
			ui = i
		}
		if m := released.FindStringSubmatch(s.heading); redo && ri < 0 && m != nil && m[1] == version {
			ri = i
		}
	}
	if ui < 0 {
		return "", fmt.Errorf("changelog: no %q section", Unreleased)
	}
	entries := trimBlank(sections[ui].body)
	if len(entries) == 0 {
		return "", fmt.Errorf("changelog: the %s section is empty: nothing to release", Unreleased)
	}
	heading := fmt.Sprintf("## [%s] - %s", version, date.Format(time.DateOnly))
	if ri >= 0 {
		sections[ri].heading = heading
		sections[ri].body = mergeKinds(trimBlank(sections[ri].body), entries)
	} else {
		rel := section{heading: heading, body: entries}
		sections = append(sections[:ui+1], append([]section{rel}, sections[ui+1:]...)...)
	}
	sections[ui].body = nil
	return join(sections), nil
}

// section is a "## " heading and the lines up to the next one; the preamble
// before the first heading has an empty heading.
type section struct {
	heading string
	body    []string
}

func split(lines []string) []section {
	ss := []section{{}}
	for _, l := range lines {
		if strings.HasPrefix(l, "## ") {
			ss = append(ss, section{heading: strings.TrimRight(l, " \t")})
			continue
		}
		ss[len(ss)-1].body = append(ss[len(ss)-1].body, l)
	}
	return ss
}

func join(ss []section) string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteString(s.heading)
			b.WriteString("\n")
			if len(trimBlank(s.body)) > 0 {
				b.WriteString("\n")
			}
		}
		body := trimBlank(s.body)
		if i == 0 {
			body = s.body
			for len(body) > 0 && body[len(body)-1] == "" {
				body = body[:len(body)-1]
			}
		}
		for _, l := range body {
			b.WriteString(l)
			b.WriteString("\n")
		}
		if i < len(ss)-1 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func trimBlank(ls []string) []string {
	for len(ls) > 0 && strings.TrimSpace(ls[0]) == "" {
		ls = ls[1:]
	}
	for len(ls) > 0 && strings.TrimSpace(ls[len(ls)-1]) == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// kind is a "### " block of a section; lines before the first one have an
// empty heading.
type kind struct {
	heading string
	body    []string
}

func kinds(ls []string) []kind {
	ks := []kind{{}}
	for _, l := range ls {
		if strings.HasPrefix(l, "### ") {
			ks = append(ks, kind{heading: strings.TrimRight(l, " \t")})
			continue
		}
		ks[len(ks)-1].body = append(ks[len(ks)-1].body, l)
	}
	return ks
}

// mergeKinds appends the blocks of add to the blocks of the same heading in
// into, keeping into's order and appending the kinds it lacks.
func mergeKinds(into, add []string) []string {
	base := kinds(into)
	for _, k := range kinds(add) {
		body := trimBlank(k.body)
		if len(body) == 0 {
			continue
		}
		found := false
		for i := range base {
			if base[i].heading == k.heading {
				b := trimBlank(base[i].body)
				if len(b) > 0 {
					b = append(b, "")
				}
				base[i].body = append(b, body...)
				found = true
				break
			}
		}
		if !found {
			base = append(base, kind{heading: k.heading, body: body})
		}
	}
	var out []string
	for i, k := range base {
		if k.heading != "" {
			if len(out) > 0 {
				out = append(out, "")
			}
			out = append(out, k.heading, "")
		} else if i > 0 {
			continue
		}
		out = append(out, trimBlank(k.body)...)
	}
	return trimBlank(out)
}
