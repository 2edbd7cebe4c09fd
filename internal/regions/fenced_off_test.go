//go:build outbox_unfenced

package regions

// fencedBuild: under outbox_unfenced the outbox.Writer adds no home
// actions (pkg/outbox fence_off.go).
const fencedBuild = false
