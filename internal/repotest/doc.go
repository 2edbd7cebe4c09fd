// Package repotest holds repository-wide checks, as tests: the three rings
// of the layout (docs/VERSIONING.md) and the size of the files a newcomer
// reads. It has no code of its own.
package repotest
