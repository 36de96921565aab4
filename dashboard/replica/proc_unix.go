//go:build unix

package replica

import "syscall"

// processAlive reports whether pid exists on this machine (EPERM: it
// exists but belongs to someone else).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
