package engine

import (
	"errors"
	"testing"
)

func TestAvailableCPUs(t *testing.T) {
	f := func(affinity int, files map[string]string, want int) {
		t.Helper()
		read := func(p string) ([]byte, error) {
			if s, ok := files[p]; ok {
				return []byte(s), nil
			}
			return nil, errors.New("no such file")
		}
		if got := availableCPUs(affinity, read); got != want {
			t.Errorf("availableCPUs(%d, %v) = %d, want %d", affinity, files, got, want)
		}
	}
	f(64, nil, 64)
	f(64, map[string]string{"/sys/fs/cgroup/cpu.max": "max 100000\n"}, 64)
	f(64, map[string]string{"/sys/fs/cgroup/cpu.max": "200000 100000\n"}, 2)
	f(64, map[string]string{"/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 2) // 1.5 CPUs rounds up
	f(64, map[string]string{"/sys/fs/cgroup/cpu.max": "50000 100000\n"}, 1)
	f(2, map[string]string{"/sys/fs/cgroup/cpu.max": "800000 100000\n"}, 2) // affinity is the tighter bound
	f(64, map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "300000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 3)
	f(64, map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 64)
	f(0, nil, 1)
	if n := AvailableCPUs(); n < 1 {
		t.Fatalf("AvailableCPUs() = %d", n)
	}
}
