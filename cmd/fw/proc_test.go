package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// procMarks numbers startProc's marks within this test binary.
var procMarks atomic.Int64

// killMarked SIGKILLs every process whose environment holds mark (KEY=VALUE),
// reading /proc; it logs what it had to kill.
func killMarked(t *testing.T, mark string) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return // not Linux: the process group kill is all there is
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue // ended meanwhile, or not ours
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == mark {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				t.Logf("killing %d, started by this test and still running: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// TestKillMarked: a process that left startProc's process group (its own
// session, like a deployment) but carries the mark is killed; one without it
// is left alone.
func TestKillMarked(t *testing.T) {
	start := func(env ...string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}
	mark := "FW_TEST_PROC=killmarked." + strconv.Itoa(os.Getpid())
	marked, other := start(mark), start("FW_TEST_PROC=other")
	exited := make(chan error, 1)
	go func() { exited <- marked.Wait() }()
	killMarked(t, mark)
	select {
	case err := <-exited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the marked process ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the marked process is still running")
	}
	if st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(other.Process.Pid), "status")); err != nil || bytes.Contains(st, []byte("State:\tZ")) {
		t.Errorf("the unmarked process was killed: %v %s", err, st)
	}
}
