//go:build tagtest_broken

package probe

// Broken is true under the tagtest_broken tag.
const Broken = true
