//go:build !outbox_unfenced

package regions

// fencedBuild: this build's outbox.Writer fences by home Region (pkg/outbox
// fence_on.go).
const fencedBuild = true
