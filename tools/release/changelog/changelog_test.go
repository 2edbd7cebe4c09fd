package changelog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const before = `# Changelog

Intro.

## [Unreleased]

### Changed (incompatible)

- A broke.

### Added

- B added.

## [0.1.0] - 2026-11-30

### Added

- First.
`

var day = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

func TestCutMovesUnreleasedIntoADatedSection(t *testing.T) {
	got, err := Cut(before, "0.2.0", day)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Changelog

Intro.

## [Unreleased]

## [0.2.0] - 2026-12-07

### Changed (incompatible)

- A broke.

### Added

- B added.

## [0.1.0] - 2026-11-30

### Added

- First.
`
	if got != want {
		t.Fatalf("cut:\n%s\nwant:\n%s", got, want)
	}
	r, err := Latest(got)
	if err != nil || r.Version != "0.2.0" || !r.Date.Equal(day) || r.Tag() != "v0.2.0" {
		t.Fatalf("Latest = %+v, %v", r, err)
	}
}

// A cut redone after other branches merged entries under Unreleased: they
// join the existing section, kind by kind, and the date is the new one.
func TestCutAgainMergesNewEntriesByKind(t *testing.T) {
	once, err := Cut(before, "0.2.0", day)
	if err != nil {
		t.Fatal(err)
	}
	more := strings.Replace(once, "## [Unreleased]\n", "## [Unreleased]\n\n### Added\n\n- C added.\n\n### Fixed\n\n- D fixed.\n", 1)
	got, err := Cut(more, "0.2.0", day.AddDate(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	want := `# Changelog

Intro.

## [Unreleased]

## [0.2.0] - 2026-12-08

### Changed (incompatible)

- A broke.

### Added

- B added.

- C added.

### Fixed

- D fixed.

## [0.1.0] - 2026-11-30

### Added

- First.
`
	if got != want {
		t.Fatalf("second cut:\n%s\nwant:\n%s", got, want)
	}
}

func TestCutRefuses(t *testing.T) {
	cut, err := Cut(before, "0.2.0", day)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, text, version, want string
	}{
		{"not semver", before, "0.2", "not a semantic version"},
		{"v prefix", before, "v0.2.0", "not a semantic version"},
		{"older than the newest", before, "0.0.9", "not newer"},
		{"equal to an older release", cut, "0.1.0", "not newer"},
		{"nothing unreleased", cut, "0.3.0", "empty"},
		{"no unreleased section", strings.Replace(before, "## [Unreleased]", "## Next", 1), "0.2.0", "no \"## [Unreleased]\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Cut(c.text, c.version, day)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Cut(%s) = %v, want an error containing %q", c.version, err, c.want)
			}
		})
	}
}

func TestLatest(t *testing.T) {
	if _, err := Latest("# Changelog\n\n## [Unreleased]\n"); !errors.Is(err, ErrNoRelease) {
		t.Fatalf("no release: %v", err)
	}
	if _, err := Latest("## [1.2] - 2026-01-01\n"); err == nil {
		t.Fatal("a non-semver release heading was accepted")
	}
	if _, err := Latest("## [1.2.0] - 2026-02-30\n"); err == nil {
		t.Fatal("an impossible date was accepted")
	}
	r, err := Latest(before)
	if err != nil || r.Version != "0.1.0" {
		t.Fatalf("Latest = %+v, %v", r, err)
	}
}

func TestValidVersion(t *testing.T) {
	for v, ok := range map[string]bool{"0.2.0": true, "1.0.0-rc.1": true, "0.2": false, "v0.2.0": false, "0.2.0+b": false, "x": false} {
		if ValidVersion(v) != ok {
			t.Errorf("ValidVersion(%q) = %v", v, !ok)
		}
	}
}
