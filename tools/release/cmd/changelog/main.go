// Command changelog reads and cuts the release sections of CHANGELOG.md.
//
//	changelog [-file CHANGELOG.md] latest           print the newest released version (X.Y.Z)
//	changelog [-file CHANGELOG.md] cut X.Y.Z DATE   move Unreleased into "## [X.Y.Z] - DATE"
//
// DATE is YYYY-MM-DD. Cutting a version that is already the newest release
// merges the Unreleased entries into it (see changelog.Cut). Exit status 1 is
// a refusal, 2 a usage error.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ddb-outbox/ddb-outbox/tools/release/changelog"
)

func main() {
	file := flag.String("file", "CHANGELOG.md", "the changelog")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: changelog [-file CHANGELOG.md] latest | cut X.Y.Z YYYY-MM-DD")
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	b, err := os.ReadFile(*file)
	if err != nil {
		fail(err)
	}
	switch {
	case args[0] == "latest" && len(args) == 1:
		r, err := changelog.Latest(string(b))
		if err != nil {
			fail(err)
		}
		fmt.Println(r.Version)
	case args[0] == "cut" && len(args) == 3:
		d, err := time.Parse(time.DateOnly, args[2])
		if err != nil {
			fail(fmt.Errorf("date %q: want YYYY-MM-DD", args[2]))
		}
		out, err := changelog.Cut(string(b), args[1], d)
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(*file, []byte(out), 0o644); err != nil { //nolint:gosec // a tracked text file
			fail(err)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "changelog:", err)
	os.Exit(1)
}
