// Package sysinfo samples the machine's resources for the dashboard: CPU
// (total and per core), load averages, memory, free disk space of named
// directories and, where NVML can be loaded, GPUs. A Sampler samples in its
// own goroutine once per interval; readers get the latest snapshot without
// waiting.
package sysinfo

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/process"
)

// Dir is a directory whose file system's free space is reported.
type Dir struct {
	// Name labels it (e.g. "experiments", "checkpoints").
	Name string
	Path string
}

// Snapshot is one sample.
type Snapshot struct {
	Time   time.Time `json:"time"`
	CPU    CPU       `json:"cpu"`
	Load   *Load     `json:"load,omitempty"` // nil where the OS has no load averages
	Memory Memory    `json:"memory"`
	Disks  []Disk    `json:"disks"`
	// GPUs is empty where NVML is not installed (no error).
	GPUs []GPU `json:"gpus"`
	// RSS is this process's resident memory in bytes.
	RSS uint64 `json:"rss_bytes"`
	// Errors lists what could not be read this time (each part is optional).
	Errors []string `json:"errors,omitempty"`
}

// CPU is the busy percentage over the last sampling interval (0 until the
// second sample).
type CPU struct {
	Cores   int       `json:"cores"`
	Percent float64   `json:"percent"`
	PerCore []float64 `json:"per_core"`
}

// Load is the load averages.
type Load struct {
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
}

// Memory is physical memory in bytes.
type Memory struct {
	Total     uint64 `json:"total_bytes"`
	Used      uint64 `json:"used_bytes"`
	Available uint64 `json:"available_bytes"`
}

// Disk is the file system holding Dir.
type Disk struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Free  uint64 `json:"free_bytes"`
	Total uint64 `json:"total_bytes"`
	Error string `json:"error,omitempty"`
}

// GPU is one NVML device.
type GPU struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Utilization is the percent of time a kernel ran over NVML's last period.
	Utilization  float64 `json:"utilization_percent"`
	MemoryUsed   uint64  `json:"memory_used_bytes"`
	MemoryTotal  uint64  `json:"memory_total_bytes"`
	TemperatureC float64 `json:"temperature_celsius"`
}

// gpuReader reads GPUs; the NVML one is chosen at build time (gpu_nvml.go).
type gpuReader interface {
	Read() ([]GPU, error)
	Close()
}

// Sampler keeps the latest Snapshot and a ring of the recent ones, so a
// page opened now can draw the last minutes at once.
type Sampler struct {
	dirs     []Dir
	interval time.Duration
	log      *slog.Logger
	gpus     gpuReader // nil: no NVML

	mu       sync.Mutex
	latest   Snapshot
	ring     []Snapshot // the kept samples; ring[next] is the oldest once full
	next     int
	full     bool
	prevAll  *cpu.TimesStat
	prevCore []cpu.TimesStat
}

// NewSampler takes a first sample (CPU percentages need a second one) and
// loads NVML if it is installed. It keeps the samples of the last keep
// (at least one). Call Run to keep sampling and Close when done.
func NewSampler(dirs []Dir, interval, keep time.Duration, log *slog.Logger) *Sampler {
	if interval <= 0 {
		interval = time.Second
	}
	n := max(1, int(keep/interval))
	s := &Sampler{dirs: dirs, interval: interval, log: log, gpus: openGPUs(log), ring: make([]Snapshot, n)}
	s.Sample()
	return s
}

// Interval is the time between two samples.
func (s *Sampler) Interval() time.Duration { return s.interval }

// History returns the kept samples taken after since, oldest first (a copy).
func (s *Sampler) History(since time.Time) []Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Snapshot
	add := func(part []Snapshot) {
		for _, snap := range part {
			if snap.Time.After(since) {
				out = append(out, snap)
			}
		}
	}
	if s.full {
		add(s.ring[s.next:])
	}
	add(s.ring[:s.next])
	return out
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sample()
		}
	}
}

// Close releases NVML.
func (s *Sampler) Close() {
	if s.gpus != nil {
		s.gpus.Close()
	}
}

// Latest returns the latest snapshot (safe for concurrent use).
func (s *Sampler) Latest() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest
}

// Sample takes one sample now and makes it the latest.
func (s *Sampler) Sample() Snapshot {
	snap := Snapshot{Time: time.Now(), Disks: []Disk{}, GPUs: []GPU{}}
	var errs []string
	all, errAll := cpu.Times(false)
	cores, errCores := cpu.Times(true)
	if errAll != nil || errCores != nil || len(all) == 0 {
		errs = append(errs, "cpu: cannot read CPU times")
	}
	if l, err := load.Avg(); err == nil {
		snap.Load = &Load{Load1: l.Load1, Load5: l.Load5, Load15: l.Load15}
	}
	if m, err := mem.VirtualMemory(); err == nil {
		snap.Memory = Memory{Total: m.Total, Used: m.Used, Available: m.Available}
	} else {
		errs = append(errs, "memory: "+err.Error())
	}
	for _, d := range s.dirs {
		dk := Disk{Name: d.Name, Path: d.Path}
		if u, err := disk.Usage(d.Path); err == nil {
			dk.Free, dk.Total = u.Free, u.Total
		} else {
			dk.Error = err.Error()
		}
		snap.Disks = append(snap.Disks, dk)
	}
	if s.gpus != nil {
		if g, err := s.gpus.Read(); err == nil {
			snap.GPUs = g
		} else {
			errs = append(errs, "gpu: "+err.Error())
		}
	}
	if p, err := process.NewProcess(int32(os.Getpid())); err == nil {
		if mi, err := p.MemoryInfo(); err == nil {
			snap.RSS = mi.RSS
		}
	}
	snap.Errors = errs

	s.mu.Lock()
	defer s.mu.Unlock()
	snap.CPU = CPU{Cores: len(cores), PerCore: make([]float64, len(cores))}
	if errAll == nil && len(all) > 0 {
		if s.prevAll != nil {
			snap.CPU.Percent = busyPercent(*s.prevAll, all[0])
		}
		s.prevAll = &all[0]
	}
	if errCores == nil {
		if len(s.prevCore) == len(cores) {
			for i := range cores {
				snap.CPU.PerCore[i] = busyPercent(s.prevCore[i], cores[i])
			}
		}
		s.prevCore = cores
	}
	s.latest = snap
	s.ring[s.next] = snap
	s.next++
	if s.next == len(s.ring) {
		s.next, s.full = 0, true
	}
	return snap
}

// busyPercent is the share of non-idle time between two readings.
func busyPercent(a, b cpu.TimesStat) float64 {
	idle := func(t cpu.TimesStat) float64 { return t.Idle + t.Iowait }
	total := func(t cpu.TimesStat) float64 {
		return t.User + t.System + t.Idle + t.Nice + t.Iowait + t.Irq + t.Softirq + t.Steal
	}
	dt := total(b) - total(a)
	if dt <= 0 {
		return 0
	}
	p := 100 * (dt - (idle(b) - idle(a))) / dt
	return min(100, max(0, p))
}
