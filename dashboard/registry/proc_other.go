//go:build !unix

package registry

import (
	"errors"
	"os/exec"
	"syscall"
)

var (
	sigTerm = syscall.Signal(15)
	sigKill = syscall.Signal(9)
)

func setGroup(*exec.Cmd, bool) {}

func signalGroup(int, syscall.Signal) error {
	return errors.New("deployments need a Unix system (process groups)")
}

func alive(int) bool { return false }
