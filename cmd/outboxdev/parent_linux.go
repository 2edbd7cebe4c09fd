package main

import (
	"os"
	"syscall"
)

// dieWithParent asks the kernel to send SIGTERM to this process when its
// parent exits (prctl PR_SET_PDEATHSIG), so that `make dev` killed by any
// signal takes the stack down with it: SIGTERM runs the normal shutdown,
// which stops Dynoxide (itself killed on this process's death, too). If the
// parent is already gone it returns at once with the signal sent.
func dieWithParent() {
	const prSetPdeathsig = 1
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, uintptr(syscall.SIGTERM), 0)
	if os.Getppid() == 1 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
