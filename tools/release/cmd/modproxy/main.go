// Command modproxy serves this repository's two modules at the release
// CHANGELOG.md names, from the working tree, as a Go module proxy directory:
// what a team uses to depend on a release before its tags are published
// (or to try a change of the library in its own module without a replace).
//
//	modproxy [-repo DIR] -out DIR
//
// It prints the environment that resolves the modules from DIR:
//
//	GOPROXY=file://DIR,<your go env GOPROXY> GONOSUMDB=github.com/ddb-outbox
//
// (GONOSUMDB: the checksum database has never seen a version served from a
// working tree). Run it from the repository with GOWORK=off (the Makefile's
// `make proxy OUT=DIR` does). Exit status 1 is a refusal (the tree does not
// agree with the CHANGELOG's release: see proof.Release), 2 a usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ddb-outbox/ddb-outbox/tools/release/modproxy"
	"github.com/ddb-outbox/ddb-outbox/tools/release/proof"
)

func main() {
	repo := flag.String("repo", ".", "the repository's root")
	out := flag.String("out", "", "the proxy directory to write (created if missing)")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy [-repo DIR] -out DIR")
		os.Exit(2)
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		fail(err)
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		fail(err)
	}
	rel, err := proof.Release(root)
	if err != nil {
		fail(err)
	}
	written, err := modproxy.Write(dir, root,
		modproxy.Module{Dir: ".", Version: rel.Tag(), Time: rel.Date},
		modproxy.Module{Dir: "infra", Version: rel.Tag(), Time: rel.Date})
	if err != nil {
		fail(err)
	}
	for _, w := range written {
		fmt.Printf("%s (%d files)\n", w.Version.String(), w.Files)
	}
	upstream := "https://proxy.golang.org,direct"
	if v, err := proof.GoEnv(context.Background(), "GOPROXY"); err == nil && v != "" {
		upstream = v
	}
	fmt.Printf("GOPROXY=file://%s,%s GONOSUMDB=github.com/ddb-outbox\n", filepath.ToSlash(dir), upstream)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "modproxy:", err)
	os.Exit(1)
}
