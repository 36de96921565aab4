//go:build unix

package jobs

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts the child in its own process group, so a stop reaches
// every process it started.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
