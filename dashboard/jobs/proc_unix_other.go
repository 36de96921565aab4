//go:build unix && !linux

package jobs

import "syscall"

func setDeathSignal(*syscall.SysProcAttr) {}
