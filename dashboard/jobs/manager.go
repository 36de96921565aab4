// Package jobs starts registered training recipes on an executor: child
// processes of the dashboard (Local, the default) or jobs on a Ray cluster
// (dashboard/jobs/ray). The Manager owns the lifecycle whatever the
// executor: the run is created in the store before the job starts (status
// queued), the job's output is captured into the run's logs, local jobs
// wait in a FIFO queue beyond a limit, a stop is passed to the executor,
// and the run ends with the job's result unless the SDK in it already ended
// it. Jobs of an executor that can re-attach (Ray) are adopted again by
// their ID after a dashboard restart (Adopt, AdoptAll).
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
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
	Python        string // interpreter with the fw package (the Local executor's, when Executor is nil)
	TrackingURI   string // this dashboard's URL as the jobs reach it (their FW_TRACKING_URI)
	ExperimentDir string
	CheckpointDir string
	Token         string
	MaxJobs       int           // concurrent local jobs (at least 1); the rest wait queued
	StopGrace     time.Duration // SIGTERM -> SIGKILL
	Host          string        // recorded as the runs' source.host (local jobs)
	WorkDir       string        // the local jobs' working directory ("" = the dashboard's)
	// Executor runs the jobs; nil is Local with Python, WorkDir and StopGrace.
	Executor Executor
	// Checkpoints, when set, is where a checkpoint to resume or fork from
	// that is not in CheckpointDir on this host is fetched from (key <run
	// id>/<path>; the bucket's checkpoints/ with FW_ARTIFACT_URI=s3://...),
	// into ExperimentDir/cache/checkpoints. With it, jobs (on any
	// executor) get FW_UPLOAD_FILES=1: fw.track uploads the checkpoints and
	// artifacts they write through PUT /api/runs/{id}/files, so a job on
	// another machine (a Ray node) leaves them where every replica reads.
	Checkpoints blob.Store
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
	Executor   string         `json:"executor"`              // "local" or "ray"
	ExecutorID string         `json:"executor_id,omitempty"` // the job on a re-attachable executor (Ray's submission ID)
	PID        int            `json:"pid,omitempty"`
	ExitCode   *int           `json:"exit_code,omitempty"`
	Queued     time.Time      `json:"queued"`
	Started    *time.Time     `json:"started,omitempty"`
	Ended      *time.Time     `json:"ended,omitempty"`
	ResumeFrom string         `json:"resume_from,omitempty"`
}

type job struct {
	Info
	spec       Spec
	writer     string
	seq        int64
	proc       Process // nil while the job waits in the Manager's queue
	stopReq    bool
	stopFailed bool     // the last Stop did not reach the executor: a new stop retries
	tail       []string // last log lines, for a failure message
	done       chan struct{}
	logMu      sync.Mutex // held while an event of the job is numbered and applied (apply)
}

// Manager runs training jobs.
type Manager struct {
	st      store.Store
	cfg     Config
	exec    Executor
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
	ex := cfg.Executor
	if ex == nil {
		ex = &Local{Python: cfg.Python, WorkDir: cfg.WorkDir, StopGrace: cfg.StopGrace, Log: log}
	}
	m := &Manager{st: st, cfg: cfg, exec: ex, log: log, recipes: map[string]Recipe{}, jobs: map[string]*job{}}
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
		if _, err := os.Stat(ckptPath); err != nil && m.cfg.Checkpoints != nil {
			// Written on another host: its copy in object storage.
			p, err := blob.Fetch(ctx, m.cfg.Checkpoints, ref.RunID+"/"+ref.Checkpoint, filepath.Join(m.cfg.ExperimentDir, "cache", "checkpoints"))
			if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrInvalidKey) {
				return Info{}, notFound("checkpoint %s of run %s is recorded but its file is neither under this replica's checkpoint directory nor in %s", ref.Checkpoint, ref.RunID, m.cfg.Checkpoints)
			}
			if err != nil {
				return Info{}, fmt.Errorf("fetching checkpoint %s of run %s: %w", ref.Checkpoint, ref.RunID, err)
			}
			ckptPath = p
		}
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
	suffix := store.NewID()[8:] // 8 random characters
	j := &job{
		Info: Info{RunID: id, Recipe: r.Name, Experiment: req.Experiment, Params: params, State: StateQueued,
			Executor: m.exec.Name(), Queued: time.Now().UTC(), ResumeFrom: ckptPath},
		writer: "job-" + suffix, done: make(chan struct{}),
	}
	j.spec = Spec{RunID: id, Recipe: r, ID: "fw-" + id + "-" + suffix, Args: args, Env: m.jobEnv(id), Params: params}
	if v, ok := m.exec.(Validator); ok {
		if err := v.Validate(j.spec); err != nil {
			return Info{}, invalid(fmt.Sprintf("recipe %s on the %s executor: %v", r.Name, m.exec.Name(), err), err.Error())
		}
	}
	src := &store.Source{Recipe: r.Name, Command: "python " + strings.Join(args[:2], " "), Args: args[2:],
		Host: m.cfg.Host, PID: os.Getpid()}
	var tags map[string]string
	if m.exec.Attachable() {
		// The process runs elsewhere: no host and pid for Reconcile's
		// process check; the tags let a dashboard re-attach to it (Adopt).
		src.Host, src.PID = "", 0
		tags = map[string]string{TagExecutor: m.exec.Name(), TagExecutorJob: j.spec.ID, TagExecutorAddress: m.exec.Address()}
		j.ExecutorID = j.spec.ID
	}
	ev := store.Event{Type: store.EventRunStart, Experiment: req.Experiment, Name: req.Name, Status: store.StatusQueued,
		Params: params, Source: src, Tags: tags}
	switch {
	case resume:
		ev = store.Event{Type: store.EventRunResume, Status: store.StatusQueued, Path: ref.Checkpoint, Source: src,
			Tags: merge(tags, map[string]string{"fw.job": "resume", "fw.resumed_from": ref.Checkpoint})}
	case ref != nil:
		ev.ParentRunID, ev.ParentCheckpoint = ref.RunID, ref.Checkpoint
		ev.Tags = merge(tags, map[string]string{"fw.job": "fork"})
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

// jobEnv is the environment a job gets from the dashboard, on any executor.
func (m *Manager) jobEnv(runID string) []string {
	env := []string{
		"FW_TRACKING_URI=" + m.cfg.TrackingURI,
		"FW_EXPERIMENT_DIR=" + m.cfg.ExperimentDir,
		"FW_CHECKPOINT_DIR=" + m.cfg.CheckpointDir,
		"FW_DASHBOARD_TOKEN=" + m.cfg.Token,
		"FW_JOB_RUN_ID=" + runID,
		"PYTHONUNBUFFERED=1",
	}
	if m.cfg.Checkpoints != nil {
		env = append(env, "FW_UPLOAD_FILES=1")
	}
	return env
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
	_, err := m.applyAs(ctx, ev)
	return err
}

// applyAs applies one event as it is (run, writer and seq set) and returns
// the writer's mark after it (its highest seq applied).
func (m *Manager) applyAs(ctx context.Context, ev store.Event) (int64, error) {
	res, err := m.st.Apply(ctx, []store.Event{ev})
	if err != nil {
		return 0, err
	}
	if len(res.Errors) > 0 {
		e := res.Errors[0]
		kind, code := fault.Unprocessable, fault.Code("invalid_params")
		if e.Code == store.CodeNotFound || e.Code == store.CodeUnknownRun {
			kind, code = fault.NotFound, store.CodeNotFound
		}
		return 0, &Error{Kind: kind, Code: code, Msg: fmt.Sprintf("the store refused the %s event: %s: %s", ev.Type, e.Code, e.Msg), Err: &e}
	}
	for _, a := range res.Acked {
		if a.RunID == ev.RunID && a.Writer == ev.Writer {
			return a.Seq, nil
		}
	}
	return 0, nil
}

// schedule starts queued jobs while slots are free (m.mu held): all of
// them when the executor queues jobs itself, else up to MaxJobs at once.
func (m *Manager) schedule() {
	for len(m.queue) > 0 && !m.closed && (m.exec.Queues() || m.running < m.cfg.MaxJobs) {
		j := m.queue[0]
		m.queue = m.queue[1:]
		m.running++
		p, err := m.exec.Start(j.spec)
		if err != nil {
			m.running--
			m.log.Error("training job did not start", "run_id", j.RunID, "executor", m.exec.Name(), "err", err)
			now := time.Now().UTC()
			j.State, j.Ended = StateExited, &now
			code := -1
			j.ExitCode = &code
			close(j.done)
			go m.endRun(j, store.StatusFailed, "the training process did not start: "+err.Error(), nil)
			continue
		}
		m.attach(j, p)
	}
}

// attach makes p the process of j and supervises it (m.mu held; m.running
// already counts it).
func (m *Manager) attach(j *job, p Process) {
	j.proc, j.PID = p, p.PID()
	select {
	case <-p.Started():
		m.setRunning(j)
	default:
	}
	m.log.Info("training job started", "run_id", j.RunID, "recipe", j.Recipe, "executor", m.exec.Name(), "id", p.ID())
	m.wg.Add(1)
	go m.supervise(j, p)
}

// setRunning moves a queued job to running (m.mu held).
func (m *Manager) setRunning(j *job) {
	if j.State == StateQueued {
		now := time.Now().UTC()
		j.State, j.Started = StateRunning, &now
	}
}

// supervise captures the output of j, marks its run running when the
// process runs, waits for it and ends its run.
func (m *Manager) supervise(j *job, p Process) {
	defer m.wg.Done()
	ctx := context.Background()
	markRunning := func() {
		if err := m.apply(ctx, j, store.Event{Type: store.EventStatus, Status: store.StatusRunning}); err != nil {
			m.log.Warn("marking the job's run running", "run_id", j.RunID, "err", err)
		}
	}
	var bg sync.WaitGroup
	select {
	case <-p.Started(): // a local process: running before any output
		markRunning()
	default:
		bg.Add(1)
		go func() {
			defer bg.Done()
			select {
			case <-p.Started():
				m.mu.Lock()
				m.setRunning(j)
				m.mu.Unlock()
				markRunning()
			case <-p.Done():
			}
		}()
	}
	for _, o := range p.Output() {
		bg.Add(1)
		go func() { defer bg.Done(); m.capture(j, o) }()
	}
	bg.Wait()
	<-p.Done()
	res := p.Result()
	m.mu.Lock()
	now := time.Now().UTC()
	j.State, j.Ended, j.ExitCode = StateExited, &now, res.ExitCode
	stopReq := j.stopReq
	tail := strings.Join(j.tail, "\n")
	m.running--
	m.schedule()
	m.mu.Unlock()
	code := res.ExitCode
	note := func(msg string) string {
		if res.Note == "" {
			return msg
		}
		if msg == "" {
			return res.Note
		}
		return msg + "; " + res.Note
	}
	switch {
	case res.Detached:
		m.log.Info("training job detached: it keeps running and is re-attached on the next start", "run_id", j.RunID, "executor", m.exec.Name(), "id", p.ID())
	case stopReq:
		m.log.Info("training job ended", "run_id", j.RunID, "stopped", true)
		m.endRun(j, store.StatusStopped, note("stopped from the dashboard"), code)
	case res.Status == store.StatusFinished || res.Status == store.StatusStopped:
		m.log.Info("training job ended", "run_id", j.RunID, "status", res.Status)
		m.endRun(j, res.Status, note(res.Error), code)
	default:
		m.log.Info("training job ended", "run_id", j.RunID, "status", store.StatusFailed, "err", res.Error)
		msg := note(res.Error)
		if tail != "" {
			msg += "; last output:\n" + tail
		}
		m.endRun(j, store.StatusFailed, msg, code)
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
// readLines for how long lines and carriage-return redraws are kept). A
// replayable stream (o.Writer set) is numbered: its line n goes with seq
// n+1 of o.Writer, after a tag event with seq 1 whose answer tells how far
// an earlier owner of the job got; those lines are skipped.
func (m *Manager) capture(j *job, o Output) {
	ctx := context.Background()
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		// Lines fit the store's bound with their marker, redraws keep their
		// last state, and the stream is read to its end whatever it holds.
		if err := readLines(o.R, store.MaxLogLine, func(l string) { lines <- l }); err != nil {
			m.log.Warn("reading job output", "run_id", j.RunID, "stream", o.Stream, "err", err)
			_, _ = io.Copy(io.Discard, o.R)
		}
		if c, ok := o.R.(io.Closer); ok {
			c.Close()
		}
	}()
	var n, skip int64 // lines read; lines an earlier owner applied
	if o.Writer != "" {
		mark, err := m.applyAs(ctx, store.Event{Type: store.EventTag, RunID: j.RunID, Writer: o.Writer, Seq: 1,
			Tags: map[string]string{"fw.logs": o.Writer}})
		if err != nil {
			m.log.Warn("reading how far the job's logs were captured: they may be captured twice", "run_id", j.RunID, "writer", o.Writer, "err", err)
		}
		skip = max(0, mark-1)
	}
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ev := store.Event{Type: store.EventLog, Stream: o.Stream, Lines: batch}
		var err error
		if o.Writer != "" {
			ev.RunID, ev.Writer, ev.Seq = j.RunID, o.Writer, n+1
			_, err = m.applyAs(ctx, ev)
		} else {
			err = m.apply(ctx, j, ev)
		}
		if err != nil {
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
			n++
			m.mu.Lock()
			j.tail = append(j.tail, l)
			if len(j.tail) > tailLines {
				j.tail = j.tail[len(j.tail)-tailLines:]
			}
			m.mu.Unlock()
			if n <= skip {
				continue
			}
			batch = append(batch, l)
			if len(batch) >= 500 {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Stop stops a job: one still waiting in the Manager's queue ends as
// stopped at once; one on its executor is asked to stop (locally SIGTERM
// to its process group, then SIGKILL after the grace period; on Ray its
// stop API) and its run ends stopped when it has. A stop that did not reach
// the executor is an Unavailable error; sending it again retries.
func (m *Manager) Stop(ctx context.Context, runID string) (Info, error) {
	m.mu.Lock()
	j, ok := m.jobs[runID]
	if !ok {
		m.mu.Unlock()
		return Info{}, notFound("no training job %s started by this dashboard; GET /api/training lists them", runID)
	}
	if j.proc == nil && j.State == StateQueued {
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
	}
	if j.State == StateExited || (j.State == StateStopping && !j.stopFailed) {
		info := j.Info
		m.mu.Unlock()
		return info, nil
	}
	j.State, j.stopReq = StateStopping, true
	p := j.proc
	m.mu.Unlock()
	err := p.Stop(ctx)
	m.mu.Lock()
	j.stopFailed = err != nil
	info := j.Info
	m.mu.Unlock()
	if err != nil {
		m.log.Warn("stopping a training job", "run_id", runID, "executor", m.exec.Name(), "err", err)
		return info, fault.Newf(fault.Unavailable, "unavailable", "the stop request did not reach the %s executor: %v; POST /api/training/%s/stop again", m.exec.Name(), err, runID)
	}
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

// Shutdown ends the Manager's part in every job: queued ones end as
// stopped; running ones are stopped (SIGTERM, then SIGKILL after the grace
// period) or, on an executor that can re-attach (Ray), left running and
// detached, for the next start to adopt. It waits for them, at most until
// ctx is done, then closes the executor. Call it before the HTTP server
// stops, so the jobs can still send their last events.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	var stop []string
	var detach []Process
	for _, j := range m.list {
		switch {
		case j.State == StateExited:
		case j.proc != nil && m.exec.Attachable():
			detach = append(detach, j.proc)
		default:
			stop = append(stop, j.RunID)
		}
	}
	m.mu.Unlock()
	for _, id := range stop {
		_, _ = m.Stop(ctx, id)
	}
	for _, p := range detach {
		p.Detach()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		m.exec.Close()
	case <-ctx.Done():
	}
}
