// Package jobs starts registered training recipes as child processes of the
// dashboard: one process group per job, its run created in the store before
// the process starts (status queued), its stdout and stderr captured into
// the run's logs, a limit on concurrent jobs with a FIFO queue, and stop as
// SIGTERM to the group then SIGKILL after a grace period.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/store"
)

// Job states reported by List.
const (
	StateQueued   = "queued"
	StateRunning  = "running"
	StateStopping = "stopping"
	StateExited   = "exited"
)

// Error is a refused request: the dashboard's one error type. Bad params are
// fault.Unprocessable with code "invalid_params" and the problems as
// Details; a missing recipe, run, checkpoint or job is fault.NotFound; a
// clash with a running job or a shutdown is fault.Conflict.
type Error = fault.Error

func notFound(format string, a ...any) error {
	return fault.Newf(fault.NotFound, store.CodeNotFound, format, a...)
}

func conflict(format string, a ...any) error {
	return fault.Newf(fault.Conflict, store.CodeConflict, format, a...)
}

// Config configures a Manager.
type Config struct {
	Python        string // interpreter with the fw package
	TrackingURI   string // this dashboard's URL (FW_TRACKING_URI of the jobs)
	ExperimentDir string
	CheckpointDir string
	Token         string
	MaxJobs       int           // concurrent jobs (at least 1); the rest wait queued
	StopGrace     time.Duration // SIGTERM -> SIGKILL
	Host          string        // recorded as the runs' source.host
	WorkDir       string        // the jobs' working directory ("" = the dashboard's)
}

// StartRequest is the body of POST /api/training/start.
type StartRequest struct {
	Recipe     string         `json:"recipe"`
	Experiment string         `json:"experiment"`
	Params     map[string]any `json:"params"`
	Name       string         `json:"name,omitempty"`
	ResumeFrom *CheckpointRef `json:"resume_from,omitempty"`
	ForkFrom   *CheckpointRef `json:"fork_from,omitempty"`
}

// CheckpointRef names a checkpoint of a run (its path as the store lists it).
type CheckpointRef struct {
	RunID      string `json:"run_id"`
	Checkpoint string `json:"checkpoint"`
}

// Info is a job as GET /api/training reports it.
type Info struct {
	RunID      string         `json:"run_id"`
	Recipe     string         `json:"recipe"`
	Experiment string         `json:"experiment"`
	Params     map[string]any `json:"params"`
	State      string         `json:"state"`
	PID        int            `json:"pid,omitempty"`
	ExitCode   *int           `json:"exit_code,omitempty"`
	Queued     time.Time      `json:"queued"`
	Started    *time.Time     `json:"started,omitempty"`
	Ended      *time.Time     `json:"ended,omitempty"`
	ResumeFrom string         `json:"resume_from,omitempty"`
}

type job struct {
	Info
	module   string
	args     []string
	writer   string
	seq      int64
	cmd      *exec.Cmd
	stopReq  bool
	tail     []string // last log lines, for a failure message
	done     chan struct{}
	logMu    sync.Mutex // held while an event of the job is numbered and applied (apply)
	killTime *time.Timer
}

// Manager runs training jobs.
type Manager struct {
	st      store.Store
	cfg     Config
	log     *slog.Logger
	recipes map[string]Recipe
	order   []string

	mu      sync.Mutex
	jobs    map[string]*job
	list    []*job // in start order
	queue   []*job
	running int
	closed  bool
	wg      sync.WaitGroup
}

// New creates a manager over the given recipes.
func New(st store.Store, recipes []Recipe, cfg Config, log *slog.Logger) *Manager {
	if cfg.MaxJobs < 1 {
		cfg.MaxJobs = 1
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	m := &Manager{st: st, cfg: cfg, log: log, recipes: map[string]Recipe{}, jobs: map[string]*job{}}
	for _, r := range recipes {
		m.recipes[r.Name] = r
		m.order = append(m.order, r.Name)
	}
	return m
}

// Recipes lists the registered recipes.
func (m *Manager) Recipes() []Recipe {
	out := make([]Recipe, 0, len(m.order))
	for _, n := range m.order {
		out = append(out, m.recipes[n])
	}
	return out
}

// List reports every job this dashboard started, oldest first.
func (m *Manager) List() []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Info, 0, len(m.list))
	for _, j := range m.list {
		out = append(out, j.Info)
	}
	return out
}

// Get reports one job.
func (m *Manager) Get(runID string) (Info, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[runID]
	if !ok {
		return Info{}, false
	}
	return j.Info, true
}

func invalid(msg string, details ...string) error {
	e := fault.New(fault.Unprocessable, "invalid_params", msg)
	if len(details) > 0 {
		e.Details = details
	}
	return e
}

// Start validates req, creates the run (status queued) and starts or queues
// its process. Only registered recipes run; nothing of the request reaches a
// command line except validated params (as one JSON argument).
//
// With ResumeFrom, no run is created: the named run itself is reopened (a
// run_resume event, status queued) and its recipe continues from the
// checkpoint in the same run, with the run's params. A run that is queued
// or running, or whose job from this dashboard has not exited, is a
// conflict. With ForkFrom, a new run linked to the parent and checkpoint
// starts with the parent's params overridden by the request's.
func (m *Manager) Start(ctx context.Context, req StartRequest) (Info, error) {
	if req.ResumeFrom != nil && req.ForkFrom != nil {
		return Info{}, invalid("send resume_from or fork_from, not both")
	}
	ref := req.ResumeFrom
	if ref == nil {
		ref = req.ForkFrom
	}
	resume := req.ResumeFrom != nil
	var parent *store.Run
	var ckptPath string
	if ref != nil {
		if err := store.ValidateID(ref.RunID); err != nil {
			return Info{}, invalid("run_id: " + err.Error())
		}
		pr, err := m.st.GetRun(ctx, ref.RunID)
		if err != nil {
			return Info{}, err
		}
		parent = &pr
		if resume {
			if err := m.resumable(pr, req); err != nil {
				return Info{}, err
			}
		}
		cks, err := m.st.Checkpoints(ctx, ref.RunID)
		if err != nil {
			return Info{}, err
		}
		found := false
		for _, c := range cks {
			found = found || c.Path == ref.Checkpoint
		}
		if !found {
			return Info{}, notFound("run %s has no checkpoint %q; GET /api/runs/%s lists its checkpoints", ref.RunID, ref.Checkpoint, ref.RunID)
		}
		ckptPath = filepath.Join(m.cfg.CheckpointDir, ref.RunID, filepath.FromSlash(ref.Checkpoint))
		if req.Recipe == "" {
			req.Recipe = pr.Source.Recipe
		}
		if req.Experiment == "" {
			req.Experiment = pr.Experiment
		}
	}
	r, ok := m.recipes[req.Recipe]
	if !ok {
		return Info{}, notFound("no recipe %q; GET /api/training/recipes lists them (user recipes come from the FW_RECIPES file)", req.Recipe)
	}
	if req.Experiment == "" {
		return Info{}, invalid("experiment is required")
	}
	if err := store.ValidateName(req.Experiment); err != nil {
		return Info{}, invalid("experiment: " + err.Error())
	}
	if req.Name != "" {
		if err := store.ValidateName(req.Name); err != nil {
			return Info{}, invalid("name: " + err.Error())
		}
	}
	params := req.Params
	if parent != nil {
		merged := map[string]any{}
		for _, p := range r.Params {
			if v, ok := parent.Params[p.Name]; ok {
				merged[p.Name] = v
			}
		}
		if resume && len(req.Params) > 0 {
			return Info{}, invalid("resume_from continues with the run's own params; to change them use fork_from (a new run)")
		}
		for k, v := range req.Params {
			merged[k] = v
		}
		params = merged
	}
	params, problems := r.Validate(params)
	if len(problems) > 0 {
		return Info{}, invalid(fmt.Sprintf("invalid params for recipe %s: %s", r.Name, strings.Join(problems, "; ")), problems...)
	}
	pj, err := json.Marshal(params)
	if err != nil {
		return Info{}, invalid("params: " + err.Error())
	}
	id := store.NewID()
	if resume {
		id = ref.RunID
	}
	args := []string{"-m", r.Module, "--run-id", id, "--experiment", req.Experiment, "--params", string(pj)}
	if req.Name != "" {
		args = append(args, "--name", req.Name)
	}
	if ckptPath != "" {
		args = append(args, "--resume-from", ckptPath)
	}
	j := &job{
		Info: Info{RunID: id, Recipe: r.Name, Experiment: req.Experiment, Params: params, State: StateQueued,
			Queued: time.Now().UTC(), ResumeFrom: ckptPath},
		module: r.Module, args: args, writer: "job-" + store.NewID()[8:], done: make(chan struct{}),
	}
	src := &store.Source{Recipe: r.Name, Command: "python " + strings.Join(args[:2], " "), Args: args[2:],
		Host: m.cfg.Host, PID: os.Getpid()}
	ev := store.Event{Type: store.EventRunStart, Experiment: req.Experiment, Name: req.Name, Status: store.StatusQueued,
		Params: params, Source: src}
	switch {
	case resume:
		ev = store.Event{Type: store.EventRunResume, Status: store.StatusQueued, Path: ref.Checkpoint, Source: src,
			Tags: map[string]string{"fw.job": "resume", "fw.resumed_from": ref.Checkpoint}}
	case ref != nil:
		ev.ParentRunID, ev.ParentCheckpoint = ref.RunID, ref.Checkpoint
		ev.Tags = map[string]string{"fw.job": "fork"}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Info{}, conflict("the dashboard is shutting down")
	}
	if old := m.jobs[id]; old != nil && !old.exited() {
		m.mu.Unlock()
		return Info{}, conflict("run %s still has a training job (%s); stop it or wait for it to end before resuming", id, old.State)
	}
	m.mu.Unlock()
	if err := m.apply(ctx, j, ev); err != nil {
		var ee *store.EventError
		if se := fault.As(err); resume && se != nil && errors.As(err, &ee) && ee.Code == store.CodeInvalidTransition {
			se.Kind, se.Code = fault.Conflict, store.CodeConflict // resumed meanwhile, or still running
		}
		return Info{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.jobs[id]; old != nil {
		for i, x := range m.list {
			if x == old {
				m.list = append(m.list[:i:i], m.list[i+1:]...)
				break
			}
		}
	}
	m.jobs[id] = j
	m.list = append(m.list, j)
	m.queue = append(m.queue, j)
	m.schedule()
	return j.Info, nil
}

// resumable refuses a resume of a run that is still queued or running, or
// of another recipe, experiment or name than the run's.
func (m *Manager) resumable(r store.Run, req StartRequest) error {
	if !r.Status.Terminal() {
		return conflict("run %s is %s; only a finished, failed or stopped run can be resumed (POST /api/training/%s/stop first)", r.ID, r.Status, r.ID)
	}
	if req.Recipe != "" && req.Recipe != r.Source.Recipe {
		return invalid(fmt.Sprintf("run %s was trained by recipe %q, not %q; resume_from continues the same run (fork_from starts a new one)", r.ID, r.Source.Recipe, req.Recipe))
	}
	if req.Experiment != "" && req.Experiment != r.Experiment {
		return invalid(fmt.Sprintf("run %s belongs to experiment %q, not %q; resume_from continues the same run", r.ID, r.Experiment, req.Experiment))
	}
	if req.Name != "" && req.Name != r.Name {
		return invalid(fmt.Sprintf("resume_from continues run %s under its name %q; rename it with PATCH /api/runs/%s", r.ID, r.Name, r.ID))
	}
	return nil
}

// exited reports whether the job's process is gone and its run ended (its
// done channel closed).
func (j *job) exited() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// apply writes one event of the job's run through the store with the job's writer.
func (m *Manager) apply(ctx context.Context, j *job, ev store.Event) error {
	// Numbered and applied under one lock: stdout's and stderr's capture
	// apply concurrently, and an event applied after one with a higher seq
	// would be taken for a duplicate and dropped (a job's output after a
	// long line went missing that way when the machine was busy).
	j.logMu.Lock()
	defer j.logMu.Unlock()
	j.seq++
	ev.RunID, ev.Writer, ev.Seq = j.RunID, j.writer, j.seq
	res, err := m.st.Apply(ctx, []store.Event{ev})
	if err != nil {
		return err
	}
	if len(res.Errors) > 0 {
		e := res.Errors[0]
		kind, code := fault.Unprocessable, fault.Code("invalid_params")
		if e.Code == store.CodeNotFound || e.Code == store.CodeUnknownRun {
			kind, code = fault.NotFound, store.CodeNotFound
		}
		return &Error{Kind: kind, Code: code, Msg: fmt.Sprintf("the store refused the %s event: %s: %s", ev.Type, e.Code, e.Msg), Err: &e}
	}
	return nil
}

// schedule starts queued jobs while slots are free (m.mu held).
func (m *Manager) schedule() {
	for m.running < m.cfg.MaxJobs && len(m.queue) > 0 && !m.closed {
		j := m.queue[0]
		m.queue = m.queue[1:]
		m.running++
		if err := m.launch(j); err != nil {
			m.running--
			m.log.Error("training job did not start", "run_id", j.RunID, "err", err)
			now := time.Now().UTC()
			j.State, j.Ended = StateExited, &now
			code := -1
			j.ExitCode = &code
			close(j.done)
			go m.endRun(j, store.StatusFailed, "the training process did not start: "+err.Error(), nil)
		}
	}
}

// launch starts the process of j (m.mu held).
func (m *Manager) launch(j *job) error {
	cmd := exec.Command(m.cfg.Python, j.args...)
	cmd.Dir = m.cfg.WorkDir
	cmd.Env = append(os.Environ(),
		"FW_TRACKING_URI="+m.cfg.TrackingURI,
		"FW_EXPERIMENT_DIR="+m.cfg.ExperimentDir,
		"FW_CHECKPOINT_DIR="+m.cfg.CheckpointDir,
		"FW_DASHBOARD_TOKEN="+m.cfg.Token,
		"FW_JOB_RUN_ID="+j.RunID,
		"PYTHONUNBUFFERED=1",
	)
	cmd.Stdin = nil
	setProcAttrs(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	now := time.Now().UTC()
	j.cmd, j.PID, j.State, j.Started = cmd, cmd.Process.Pid, StateRunning, &now
	m.log.Info("training job started", "run_id", j.RunID, "recipe", j.Recipe, "pid", j.PID)
	m.wg.Add(1)
	go m.supervise(j, stdout, stderr)
	return nil
}

// supervise captures the output of j, waits for it and ends its run.
func (m *Manager) supervise(j *job, stdout, stderr io.Reader) {
	defer m.wg.Done()
	ctx := context.Background()
	if err := m.apply(ctx, j, store.Event{Type: store.EventStatus, Status: store.StatusRunning}); err != nil {
		m.log.Warn("marking the job's run running", "run_id", j.RunID, "err", err)
	}
	var cap sync.WaitGroup
	cap.Add(2)
	go func() { defer cap.Done(); m.capture(j, "stdout", stdout) }()
	go func() { defer cap.Done(); m.capture(j, "stderr", stderr) }()
	cap.Wait()
	err := j.cmd.Wait()
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
	m.mu.Lock()
	now := time.Now().UTC()
	if j.killTime != nil {
		j.killTime.Stop()
	}
	j.State, j.Ended, j.ExitCode = StateExited, &now, &code
	stopReq := j.stopReq
	tail := strings.Join(j.tail, "\n")
	m.running--
	m.schedule()
	m.mu.Unlock()
	m.log.Info("training job ended", "run_id", j.RunID, "exit_code", code)
	if stopReq {
		m.endRun(j, store.StatusStopped, "stopped from the dashboard", &code)
	} else {
		msg := fmt.Sprintf("the training process exited with code %d", code)
		if tail != "" {
			msg += "; last output:\n" + tail
		}
		m.endRun(j, store.StatusFailed, msg, &code)
	}
	close(j.done)
}

// endRun ends the run unless the SDK in the process already did.
func (m *Manager) endRun(j *job, status store.Status, msg string, code *int) {
	ctx := context.Background()
	if r, err := m.st.GetRun(ctx, j.RunID); err == nil && r.Status.Terminal() {
		return
	}
	if err := m.apply(ctx, j, store.Event{Type: store.EventRunEnd, Status: status, Error: msg, ExitCode: code}); err != nil {
		m.log.Warn("ending the job's run", "run_id", j.RunID, "err", err)
	}
}

const tailLines = 20

// capture applies the lines of one output stream as log events (see
// readLines for how long lines and carriage-return redraws are kept).
func (m *Manager) capture(j *job, stream string, r io.Reader) {
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		// Lines fit the store's bound with their marker, redraws keep their
		// last state, and the pipe is read to its end whatever it holds.
		if err := readLines(r, store.MaxLogLine, func(l string) { lines <- l }); err != nil {
			m.log.Warn("reading job output", "run_id", j.RunID, "stream", stream, "err", err)
			_, _ = io.Copy(io.Discard, r)
		}
	}()
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := m.apply(context.Background(), j, store.Event{Type: store.EventLog, Stream: stream, Lines: batch}); err != nil {
			m.log.Warn("capturing job output", "run_id", j.RunID, "err", err)
		}
		batch = nil
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				flush()
				return
			}
			batch = append(batch, l)
			m.mu.Lock()
			j.tail = append(j.tail, l)
			if len(j.tail) > tailLines {
				j.tail = j.tail[len(j.tail)-tailLines:]
			}
			m.mu.Unlock()
			if len(batch) >= 500 {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Stop stops a job: a queued one ends as stopped at once; a running one gets
// SIGTERM (its process group), then SIGKILL after the grace period.
func (m *Manager) Stop(ctx context.Context, runID string) (Info, error) {
	m.mu.Lock()
	j, ok := m.jobs[runID]
	if !ok {
		m.mu.Unlock()
		return Info{}, notFound("no training job %s started by this dashboard; GET /api/training lists them", runID)
	}
	switch j.State {
	case StateQueued:
		for i, q := range m.queue {
			if q == j {
				m.queue = append(m.queue[:i:i], m.queue[i+1:]...)
			}
		}
		now := time.Now().UTC()
		j.State, j.Ended, j.stopReq = StateExited, &now, true
		close(j.done)
		info := j.Info
		m.mu.Unlock()
		m.endRun(j, store.StatusStopped, "stopped from the dashboard before it started", nil)
		return info, nil
	case StateRunning:
		j.State, j.stopReq = StateStopping, true
		pid := j.PID
		if err := signalGroup(pid, syscall.SIGTERM); err != nil {
			m.log.Warn("SIGTERM to the job", "run_id", runID, "err", err)
		}
		j.killTime = time.AfterFunc(m.cfg.StopGrace, func() {
			m.log.Warn("training job still running after the grace period: SIGKILL", "run_id", runID, "grace", m.cfg.StopGrace)
			_ = signalGroup(pid, syscall.SIGKILL)
		})
	}
	info := j.Info
	m.mu.Unlock()
	return info, nil
}

// Wait blocks until the job has ended (or ctx is done).
func (m *Manager) Wait(ctx context.Context, runID string) error {
	m.mu.Lock()
	j, ok := m.jobs[runID]
	m.mu.Unlock()
	if !ok {
		return notFound("no such job")
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops every job (queued ones end as stopped, running ones get
// SIGTERM then SIGKILL after the grace period) and waits for them, at most
// until ctx is done. Call it before the HTTP server stops, so the jobs can
// still send their last events.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	var ids []string
	for _, j := range m.list {
		if j.State == StateQueued || j.State == StateRunning {
			ids = append(ids, j.RunID)
		}
	}
	m.mu.Unlock()
	for _, id := range ids {
		_, _ = m.Stop(ctx, id)
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
