package engine

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// AvailableCPUs is the number of CPUs this process may use: the scheduler
// affinity (runtime.NumCPU) capped by a cgroup v2 (cpu.max) or v1
// (cpu.cfs_quota_us / cpu.cfs_period_us) quota, rounded up, at least 1.
// It is the default thread count of the engines, so a container limited to
// 2 CPUs on a 64-core host does not start 64 threads.
func AvailableCPUs() int {
	return availableCPUs(runtime.NumCPU(), os.ReadFile)
}

func availableCPUs(affinity int, read func(string) ([]byte, error)) int {
	n := affinity
	if q, ok := cgroupQuota(read); ok && q < float64(n) {
		n = int(math.Ceil(q))
	}
	if n < 1 {
		n = 1
	}
	return n
}

// cgroupQuota returns the CPU quota in CPUs, if one is set.
func cgroupQuota(read func(string) ([]byte, error)) (float64, bool) {
	if b, err := read("/sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			q, err1 := strconv.ParseFloat(f[0], 64)
			p, err2 := strconv.ParseFloat(f[1], 64)
			if err1 == nil && err2 == nil && q > 0 && p > 0 {
				return q / p, true
			}
		}
		return 0, false
	}
	qb, err1 := read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	pb, err2 := read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if err1 != nil || err2 != nil {
		return 0, false
	}
	q, err1 := strconv.ParseFloat(strings.TrimSpace(string(qb)), 64)
	p, err2 := strconv.ParseFloat(strings.TrimSpace(string(pb)), 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return q / p, true
}
