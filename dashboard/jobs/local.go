package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
)

// Local runs jobs as child processes of the dashboard: the interpreter with
// the spec's arguments, in its own process group, with the dashboard's
// environment plus the spec's, stdout and stderr as two pipes. Stop sends
// SIGTERM to the group, then SIGKILL after the grace period. On Linux the
// child gets SIGTERM when the dashboard dies (parent-death signal), so its
// jobs cannot be re-attached.
type Local struct {
	Python    string        // interpreter with the fw package
	WorkDir   string        // the jobs' working directory ("" = the dashboard's)
	StopGrace time.Duration // SIGTERM -> SIGKILL (default 10s)
	Log       *slog.Logger
}

// Name implements Executor.
func (l *Local) Name() string { return "local" }

// Attachable implements Executor: a local process cannot be re-attached.
func (l *Local) Attachable() bool { return false }

// Address implements Executor.
func (l *Local) Address() string { return "" }

// Queues implements Executor: the Manager limits local jobs (MaxJobs).
func (l *Local) Queues() bool { return false }

// Close implements Executor.
func (l *Local) Close() {}

// Attach implements Executor.
func (l *Local) Attach(Spec, string) (Process, error) { return nil, ErrNotAttachable }

// Start implements Executor: fork and exec, nothing on the network.
func (l *Local) Start(spec Spec) (Process, error) {
	grace := l.StopGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	cmd := exec.Command(l.Python, spec.Args...)
	cmd.Dir = l.WorkDir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdin = nil
	setProcAttrs(cmd)
	// Pipes of our own (not StdoutPipe): Wait does not close them, so the
	// process can be waited for while the Manager still reads its output.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating the stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("creating the stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close() // the child holds its copies; EOF once it and its children close them
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	stdout, stderr := newDrainReader(outR), newDrainReader(errR)
	p := &localProc{cmd: cmd, grace: grace, log: l.Log, runID: spec.RunID, started: make(chan struct{}), done: make(chan struct{}),
		out: []Output{{Stream: "stdout", R: stdout}, {Stream: "stderr", R: stderr}}}
	close(p.started)
	go p.wait(stdout, stderr)
	return p, nil
}

// drainReader is a pipe's read end that closes itself and signals drained
// at the end of the stream (EOF, or a read error).
type drainReader struct {
	f       *os.File
	once    sync.Once
	drained chan struct{}
}

func newDrainReader(f *os.File) *drainReader { return &drainReader{f: f, drained: make(chan struct{})} }

func (d *drainReader) Read(b []byte) (int, error) {
	n, err := d.f.Read(b)
	if err != nil {
		d.once.Do(func() { d.f.Close(); close(d.drained) })
	}
	return n, err
}

type localProc struct {
	cmd     *exec.Cmd
	grace   time.Duration
	log     *slog.Logger
	runID   string
	started chan struct{}
	done    chan struct{}
	out     []Output
	res     Result

	mu       sync.Mutex
	killTime *time.Timer
	exited   bool
}

func (p *localProc) ID() string               { return strconv.Itoa(p.cmd.Process.Pid) }
func (p *localProc) PID() int                 { return p.cmd.Process.Pid }
func (p *localProc) Started() <-chan struct{} { return p.started }
func (p *localProc) Output() []Output         { return p.out }
func (p *localProc) Done() <-chan struct{}    { return p.done }
func (p *localProc) Result() Result           { return p.res }
func (p *localProc) Detach()                  {}

// wait reaps the process once its output has been read to the end (as
// exec.Cmd wants; a child's children holding the pipes keep the job, and its
// SIGKILL timer, alive until they exit too).
func (p *localProc) wait(stdout, stderr *drainReader) {
	<-stdout.drained
	<-stderr.drained
	err := p.cmd.Wait()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		} else {
			code = -1
		}
	}
	p.mu.Lock()
	p.exited = true
	if p.killTime != nil {
		p.killTime.Stop()
	}
	p.mu.Unlock()
	p.res = Result{Status: store.StatusFailed, ExitCode: &code, Error: fmt.Sprintf("the training process exited with code %d", code)}
	close(p.done)
}

// Stop sends SIGTERM to the process group, then SIGKILL after the grace
// period unless the process has exited.
func (p *localProc) Stop(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.killTime != nil {
		return nil
	}
	pid := p.cmd.Process.Pid
	err := signalGroup(pid, syscall.SIGTERM)
	p.killTime = time.AfterFunc(p.grace, func() {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		if exited {
			return
		}
		if p.log != nil {
			p.log.Warn("training job still running after the grace period: SIGKILL", "run_id", p.runID, "grace", p.grace)
		}
		_ = signalGroup(pid, syscall.SIGKILL)
	})
	if err != nil {
		return fmt.Errorf("SIGTERM to the job's process group %d: %w", pid, err)
	}
	return nil
}
