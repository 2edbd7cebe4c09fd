//go:build outbox_unfenced

package outbox

// fenced is false under the outbox_unfenced build tag: the Writer adds no
// home actions, so a Region writes aggregates homed elsewhere. It exists so
// that TestUnfencedBuildFailsFencingTest can show the fencing test fails
// without the fence (an audit that cannot fail proves nothing). Test-only:
// never build a function with this tag.
const fenced = false
