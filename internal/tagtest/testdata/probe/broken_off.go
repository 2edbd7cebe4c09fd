//go:build !tagtest_broken

package probe

// Broken is false in a normal build.
const Broken = false
