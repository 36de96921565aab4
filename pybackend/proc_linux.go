package pybackend

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts the process in a group of its own (so that killGroup
// ends what it started too) and has the kernel kill it if fw dies first.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the process's group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
