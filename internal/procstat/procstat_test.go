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
