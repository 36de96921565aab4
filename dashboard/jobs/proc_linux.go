//go:build linux

package jobs

import "syscall"

// setDeathSignal asks Linux to send SIGTERM to the job when the dashboard
// dies, so it saves a final checkpoint and ends as stopped (spooled).
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
