//go:build !linux

package dynoxide

import "os/exec"

// setChildAttrs does nothing where Pdeathsig does not exist; Stop (and the
// dev command's signal handling) stop the server.
func setChildAttrs(*exec.Cmd) {}
