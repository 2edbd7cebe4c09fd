package main

import (
	"os/exec"
	"syscall"
)

// dieWithUs makes the kernel stop cmd when outboxdev dies (PR_SET_PDEATHSIG).
func dieWithUs(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} }
