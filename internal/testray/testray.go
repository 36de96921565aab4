// Package testray starts a real Ray head node for a test (`ray start
// --head --block` from the venv scripts/setup-ray-venv.sh builds, named by
// FW_RAY_HEAD_PYTHON) on loopback with a temporary directory, and removes
// every process of it afterwards.
//
// `ray stop` is not used: it kills every Ray process of the machine by
// name, another suite's or user's head included. Instead the head runs in a
// session of its own (setsid) and with a marker in its environment, which
// every Ray process inherits, the job entrypoints too (Ray starts those in
// sessions of their own); Kill sends SIGKILL to every process of the
// session or with the marker, by pid, until none is left.
package testray

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testlog"
)

// Head is a running Ray head.
type Head struct {
	// URL is the head's dashboard, where the Jobs REST API answers:
	// http://127.0.0.1:PORT.
	URL string

	t      testing.TB
	cmd    *exec.Cmd
	mark   string
	dir    string
	out    *testlog.Buffer
	exited chan struct{}
	once   sync.Once
	killed atomic.Bool // Kill was called
}

// Options tune the head.
type Options struct {
	CPUs int      // logical CPUs it offers (default 2)
	Env  []string // added to the test's environment
}

// Python is the Python of the Ray venv (FW_RAY_HEAD_PYTHON). Without it
// the test is skipped, or fails with FW_REQUIRE_RAY=1.
func Python(t testing.TB) string {
	t.Helper()
	py := os.Getenv("FW_RAY_HEAD_PYTHON")
	if py == "" {
		msg := "a Ray head needs FW_RAY_HEAD_PYTHON, the python of the venv scripts/setup-ray-venv.sh builds (make test-ray sets it)"
		if os.Getenv("FW_REQUIRE_RAY") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start starts a head and waits (up to 3 minutes) for its Jobs API; it is
// killed when the test ends, if Kill was not called before.
func Start(t testing.TB, o Options) *Head {
	t.Helper()
	py := Python(t)
	if o.CPUs <= 0 {
		o.CPUs = 2
	}
	// Short: Ray's Unix socket paths live under it (at most 107 bytes).
	dir, err := os.MkdirTemp("/tmp", "fwray")
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	h := &Head{t: t, mark: hex.EncodeToString(b[:]), dir: dir, out: &testlog.Buffer{}, exited: make(chan struct{})}
	dash := freePort(t)
	h.URL = "http://127.0.0.1:" + strconv.Itoa(dash)
	args := []string{
		"start", "--head", "--block", "--disable-usage-stats",
		"--node-ip-address=127.0.0.1", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
		"--dashboard-port=" + strconv.Itoa(dash), "--port=" + strconv.Itoa(freePort(t)),
		"--ray-client-server-port=" + strconv.Itoa(freePort(t)), "--dashboard-agent-listen-port=" + strconv.Itoa(freePort(t)),
		"--min-worker-port=0", "--max-worker-port=0", // random ports
		"--num-cpus=" + strconv.Itoa(o.CPUs), "--num-gpus=0", "--object-store-memory=100000000",
		"--temp-dir=" + dir,
	}
	h.cmd = exec.Command(filepath.Join(filepath.Dir(py), "ray"), args...)
	h.cmd.Env = append(append(os.Environ(), "RAY_USAGE_STATS_ENABLED=0", "FW_TESTRAY_MARK="+h.mark), o.Env...)
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	if err := h.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("starting the Ray head: %v", err)
	}
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s; its logs:\n%s", h, h.Diagnose())
		}
		h.Kill()
	})
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-h.exited:
			t.Fatalf("the Ray head exited while starting:\n%s", h.out.String())
		default:
		}
		resp, err := client.Get(h.URL + "/api/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Ray head's dashboard did not answer within 3 minutes:\n%s", h.out.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("Ray head ready on %s after %.1fs", h.URL, time.Since(start).Seconds())
	return h
}

// ExitedByItself reports whether the head's `ray start --block` ended
// before Kill was called: with --block, Ray ends every process of the node
// when one of them dies, and Diagnose says which.
func (h *Head) ExitedByItself() bool {
	select {
	case <-h.exited:
		return !h.killed.Load()
	default:
		return false
	}
}

// Exited is closed when the head's `ray start` has ended.
func (h *Head) Exited() <-chan struct{} { return h.exited }

// Diagnose returns what `ray start` printed and the last lines of the
// node's own logs (GCS, raylet, dashboard, monitor): why a head ended.
func (h *Head) Diagnose() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ray start printed:\n%s\n", tail(h.out.String(), 40))
	logs, _ := filepath.Glob(filepath.Join(h.dir, "session_latest", "logs", "*"))
	for _, f := range logs {
		base := filepath.Base(f)
		if !strings.HasPrefix(base, "gcs_server") && !strings.HasPrefix(base, "raylet") &&
			!strings.HasPrefix(base, "dashboard") && !strings.HasPrefix(base, "monitor") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s (last lines):\n%s\n", base, tail(string(data), 15))
	}
	return b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Log is what `ray start` printed.
func (h *Head) Log() string { return h.out.String() }

// Kill removes the head: SIGKILL to every process of its session or with
// its marker, until none is left (at most 30 s), then its directory.
func (h *Head) Kill() {
	h.once.Do(func() {
		h.killed.Store(true)
		deadline := time.Now().Add(30 * time.Second)
		for {
			pids := h.processes()
			if len(pids) == 0 {
				break
			}
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			if time.Now().After(deadline) {
				h.t.Errorf("Ray processes still alive after SIGKILL: %v", pids)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case <-h.exited:
		case <-time.After(10 * time.Second):
			h.t.Errorf("ray start (pid %d) was not reaped", h.cmd.Process.Pid)
		}
		os.RemoveAll(h.dir)
	})
}

// processes lists the live processes of the head: its session, or the
// marker in their environment (zombies, already dead, are left out).
func (h *Head) processes() []int {
	ents, _ := os.ReadDir("/proc")
	sid := h.cmd.Process.Pid
	me := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...; comm may hold anything.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if s, _ := strconv.Atoi(f[3]); s == sid {
			out = append(out, pid)
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		mark := []byte("FW_TESTRAY_MARK=" + h.mark + "\x00")
		if err == nil && (bytes.HasPrefix(env, mark) || bytes.Contains(env, append([]byte{0}, mark...))) {
			out = append(out, pid)
		}
	}
	return out
}

// String describes the head.
func (h *Head) String() string { return fmt.Sprintf("Ray head %s (pid %d)", h.URL, h.cmd.Process.Pid) }
