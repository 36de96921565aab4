package procstat

import (
	"os"
	"testing"
	"time"
)

// This process's CPU time is read and grows with work it does.
func TestCPU(t *testing.T) {
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(60 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := CPU(os.Getpid())
	if err != nil || after <= before {
		t.Fatalf("CPU went from %v to %v (%v)", before, after, err)
	}
	if _, err := CPU(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

// A busy thread's CPU shows under its process's name, and a name with
// spaces and parentheses is read whole.
func TestThreads(t *testing.T) {
	for end := time.Now().Add(60 * time.Millisecond); time.Now().Before(end); {
	}
	by, err := Threads(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	for _, d := range by {
		total += d
	}
	if total <= 0 || len(by) == 0 {
		t.Fatalf("threads: %v", by)
	}
	name, cpu, err := parseStat([]byte("12 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0"))
	if err != nil || name != "a (b) c" || cpu != 3*time.Second {
		t.Fatalf("parseStat: %q %v %v", name, cpu, err)
	}
	if _, err := Threads(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
