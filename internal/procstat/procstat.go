// Package procstat reads what Linux's /proc says of a running process, for
// the tools that measure fw serve from outside it (fw tune, bench/).
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is the user+system CPU time process pid has used (/proc/PID/stat, in
// clock ticks of 1/100 s, which Linux reports to user space on every
// architecture fw runs on).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	_, cpu, err := parseStat(b)
	return cpu, err
}

// Threads is the user+system CPU time of process pid's live threads, summed
// by thread name (/proc/PID/task/*/stat): a Go program's own threads are all
// named after it, a library's pools often after themselves (CUDA's, OpenMP's).
// A thread that ends between the listing and its read is left out.
func Threads(pid int) (map[string]time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	by := make(map[string]time.Duration)
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		name, cpu, err := parseStat(b)
		if err != nil {
			return nil, fmt.Errorf("thread %s: %w", t.Name(), err)
		}
		by[name] += cpu
	}
	return by, nil
}

// parseStat reads the command name and utime+stime of a /proc stat line.
func parseStat(b []byte) (string, time.Duration, error) {
	// The command name (field 2) is in parentheses and may hold spaces: fields count after it.
	open, i := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return "", 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return "", 0, errors.New("unexpected /proc stat format")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return "", 0, errors.New("unexpected /proc stat format")
	}
	return string(b[open+1 : i]), time.Duration(ut+st) * 10 * time.Millisecond, nil
}
