package config_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestREADMEConfigurationListsEveryVariable keeps docs/CONFIGURATION.md's
// table complete: every Env* constant of this package (the
// names the functions read and the construct sets) must appear in it as
// `NAME`.
func TestREADMEConfigurationListsEveryVariable(t *testing.T) {
	page, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	if !strings.Contains(section, "| variable |") && !strings.Contains(section, "|---|") {
		t.Fatal("docs/CONFIGURATION.md has no table")
	}
	n := 0
	// The library's variables, and the example application's own.
	for _, file := range []string{"config.go", "../../internal/orders/appenv/appenv.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Env") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					n++
					if !strings.Contains(section, "`"+v+"`") {
						t.Errorf("%s (%s) is missing from docs/CONFIGURATION.md's table", name.Name, v)
					}
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d Env constants in config.go and appenv.go: the parse is wrong", n)
	}
}
