// Package testgpu tells tests how many NVIDIA GPUs the machine has, found
// independently of the code under test (which reads them through NVML), so
// a test can assert what the machine actually has: none on a machine without
// the NVIDIA driver, every GPU where nvidia-smi lists some.
package testgpu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Count returns the number of GPUs nvidia-smi lists (0 where it fails: then
// NVML, which it uses too, cannot reach the driver either), or 0 where the
// machine has no NVIDIA driver at all (no /dev/nvidiactl, no
// /proc/driver/nvidia). known is false only where the driver is there but
// nvidia-smi is not, so nothing independent says how many GPUs to expect.
func Count(t testing.TB) (n int, known bool) {
	t.Helper()
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		if present("/dev/nvidiactl") || present("/proc/driver/nvidia") {
			return 0, false
		}
		return 0, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "-L").Output()
	if err != nil {
		t.Logf("testgpu: %s -L failed (%v): expecting no GPUs", smi, err)
		return 0, true
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "GPU ") {
			n++
		}
	}
	return n, true
}

func present(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
