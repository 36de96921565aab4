//go:build !unix

package jobs

import (
	"errors"
	"os/exec"
	"syscall"
)

func setProcAttrs(*exec.Cmd) {}

func signalGroup(int, syscall.Signal) error {
	return errors.New("training jobs need a Unix system (process groups)")
}
