package sysinfo

import (
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testgpu"
	"github.com/shirou/gopsutil/v4/cpu"
)

func TestSample(t *testing.T) {
	s := NewSampler([]Dir{{Name: "tmp", Path: t.TempDir()}, {Name: "missing", Path: "/nonexistent/fw"}}, 0, 0, nil)
	defer s.Close()
	snap := s.Sample()
	if snap.CPU.Cores < 1 || len(snap.CPU.PerCore) != snap.CPU.Cores {
		t.Errorf("cpu: %+v", snap.CPU)
	}
	if snap.Memory.Total == 0 || snap.Memory.Available == 0 {
		t.Errorf("memory: %+v", snap.Memory)
	}
	if len(snap.Disks) != 2 || snap.Disks[0].Free == 0 || snap.Disks[0].Error != "" || snap.Disks[1].Error == "" {
		t.Errorf("disks: %+v", snap.Disks)
	}
	checkGPUs(t, snap)
	if got := s.Latest(); !got.Time.Equal(snap.Time) {
		t.Errorf("Latest is not the last sample")
	}
}

// checkGPUs: the sample lists the GPUs the machine has (nvidia-smi's count;
// none without the NVIDIA driver or in a build without NVML), each with a
// name and its memory, and no GPU read error.
func checkGPUs(t *testing.T, snap Snapshot) {
	t.Helper()
	want, known := testgpu.Count(t)
	if !nvmlBuilt {
		want, known = 0, true
	}
	if known && len(snap.GPUs) != want {
		t.Errorf("%d GPUs, want %d (nvidia-smi -L; nvmlBuilt=%v): %+v", len(snap.GPUs), want, nvmlBuilt, snap.GPUs)
	}
	for i, g := range snap.GPUs {
		if g.Index != i || g.Name == "" || g.MemoryTotal == 0 || g.MemoryUsed > g.MemoryTotal || g.Utilization < 0 || g.Utilization > 100 {
			t.Errorf("GPU %d: %+v", i, g)
		}
	}
	for _, e := range snap.Errors {
		if strings.HasPrefix(e, "gpu:") {
			t.Errorf("GPU read error: %s", e)
		}
	}
}

func TestBusyPercent(t *testing.T) {
	f := func(a, b cpu.TimesStat, want float64) {
		t.Helper()
		if got := busyPercent(a, b); got != want {
			t.Errorf("busyPercent = %v, want %v", got, want)
		}
	}
	f(cpu.TimesStat{User: 1, Idle: 1}, cpu.TimesStat{User: 2, Idle: 4}, 25)
	f(cpu.TimesStat{User: 1}, cpu.TimesStat{User: 1}, 0)
	f(cpu.TimesStat{Idle: 1}, cpu.TimesStat{User: 3, Idle: 1}, 100)
}

// The sampler keeps the samples of the last keep, oldest first, and drops
// older ones as the ring wraps.
func TestHistoryRing(t *testing.T) {
	s := NewSampler(nil, time.Second, 3*time.Second, nil) // keeps 3; the first sample is taken
	defer s.Close()
	if h := s.History(time.Time{}); len(h) != 1 {
		t.Fatalf("after the first sample: %d kept", len(h))
	}
	var taken []time.Time
	for range 4 {
		taken = append(taken, s.Sample().Time)
	}
	h := s.History(time.Time{})
	if len(h) != 3 {
		t.Fatalf("%d kept, want 3", len(h))
	}
	for i, snap := range h {
		if !snap.Time.Equal(taken[i+1]) {
			t.Fatalf("sample %d at %v, want %v (oldest first, oldest dropped)", i, snap.Time, taken[i+1])
		}
	}
	if h := s.History(taken[2]); len(h) != 1 || !h[0].Time.Equal(taken[3]) {
		t.Fatalf("after the third: %d samples, want the fourth only", len(h))
	}
}
