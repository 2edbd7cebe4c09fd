//go:build !outbox_unfenced

package outbox

// fenced is true in every normal build: in multi-Region mode the Writer adds
// the home actions (fence.go) to every transaction. The outbox_unfenced
// build tag (fence_off.go) exists only to prove that the fencing tests fail
// without them (TestUnfencedBuildFailsFencingTest); never ship it.
const fenced = true
