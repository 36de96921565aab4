// Package benchserve starts a real `fw serve` for the load tools under
// bench/ (soak, overload, repository, instances, gpucheck), reads its memory
// from /proc, and drives closed loops against it (ClosedLoop, PercentileMs):
// the shared side of a measurement, so each tool only describes its traffic.
package benchserve

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a running fw serve.
type Server struct {
	URL  string // http://127.0.0.1:PORT
	PID  int
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs `bin serve --port 0 --log-level warn args...` in its own
// process group, on a free loopback port, and waits (up to a minute) for its
// "ready on URL" line. ctx ending stops it with SIGTERM.
func Start(ctx context.Context, bin string, args ...string) (*Server, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--port", "0", "--log-level", "warn"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "ready on "); ok {
				select {
				case urlc <- strings.Fields(u)[0]:
				default:
				}
			}
		}
		close(urlc)
	}()
	select {
	case u, ok := <-urlc:
		if ok {
			s.URL = u
			return s, nil
		}
	case <-time.After(60 * time.Second):
	}
	s.Stop()
	return nil, fmt.Errorf("%s serve %s did not report ready", bin, strings.Join(args, " "))
}

// Stop ends the server (SIGTERM, then what Wait's delay allows) and waits.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// Mem reads the server's resident memory now (VmRSS) and at its peak
// (VmHWM), in bytes; an error means the process is gone.
func (s *Server) Mem() (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}
