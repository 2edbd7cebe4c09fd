//go:build tagtest_nobuild

package probe

// Under tagtest_nobuild the package does not compile.
var _ int = "not an int"
