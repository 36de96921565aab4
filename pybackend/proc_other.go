//go:build !linux

package pybackend

import "os/exec"

// setProcAttrs has nothing to set outside Linux.
func setProcAttrs(*exec.Cmd) {}

// killGroup kills the process.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
