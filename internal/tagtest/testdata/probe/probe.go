// Package probe is MustFail's test subject: TestProbe fails only when built
// with the tagtest_broken tag (broken_on.go).
package probe
