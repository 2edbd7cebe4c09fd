package dynoxide

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes the server die with this process (SIGKILL on parent
// death), so no server outlives the stack whatever signal ends it.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
