package ray

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/fw-serve/fw/dashboard/store"
)

// Recipe params an executor reads as the job's resources on Ray. A recipe
// that declares them (type int or float, min 0) lets the user choose;
// without num_cpus a job reserves DefaultCPUs, without num_gpus none.
const (
	ParamCPUs = "num_cpus" // entrypoint_num_cpus
	ParamGPUs = "num_gpus" // entrypoint_num_gpus
	// DefaultCPUs is the CPUs a job of a recipe without num_cpus reserves
	// (Ray's own default, 0, would let any number of jobs share one CPU).
	DefaultCPUs = 1
)

// Config configures an Executor.
type Config struct {
	// Address is the Ray head's dashboard, http(s)://HOST:8265.
	Address string
	// Python is the interpreter with the fw package on the Ray nodes; the
	// entrypoint is `PYTHON -m MODULE --run-id ...`.
	Python string
	// StopGrace is how long a stopped job has between SIGTERM and SIGKILL
	// (sent to Ray as RAY_JOB_STOP_WAIT_TIME_S, whole seconds, at least 1).
	StopGrace time.Duration
	// PollInterval is how often a job's state is read (default 1s).
	PollInterval time.Duration
	// LostAfter is how long the head may be unreachable before a job is
	// given up as lost and its run failed (default 60s).
	LostAfter time.Duration
	// RequestTimeout bounds each call to the head (default 30s: a
	// submission waits for the head's job agent).
	RequestTimeout time.Duration
	// DrainTimeout bounds the wait for the rest of the logs once a job has
	// ended (default 10s).
	DrainTimeout time.Duration
	Log          *slog.Logger
}

// Executor runs jobs on a Ray cluster (see the package comment): a job is
// submitted with the recipe's command line as its entrypoint and the job's
// environment as runtime_env.env_vars; its state is polled, its log
// followed; its run is queued while Ray keeps it PENDING. Jobs outlive the
// dashboard: Attach re-attaches to one by its submission ID.
type Executor struct {
	cfg    Config
	client *Client
	log    *slog.Logger
}

// New checks cfg and returns the executor; it does not call the head.
func New(cfg Config) (*Executor, error) {
	if cfg.Python == "" {
		return nil, errors.New("the Ray executor needs the Python interpreter of the Ray nodes (--ray-python)")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = 60 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := NewClient(cfg.Address, cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	return &Executor{cfg: cfg, client: c, log: cfg.Log}, nil
}

// Name implements jobs.Executor.
func (e *Executor) Name() string { return "ray" }

// Address implements jobs.Executor: the head's address.
func (e *Executor) Address() string { return e.client.Address() }

// Attachable implements jobs.Executor: Ray jobs outlive the dashboard.
func (e *Executor) Attachable() bool { return true }

// Queues implements jobs.Executor: Ray schedules jobs by their resources.
func (e *Executor) Queues() bool { return true }

// Close implements jobs.Executor.
func (e *Executor) Close() { e.client.Close() }

// Client is the executor's client of the head.
func (e *Executor) Client() *Client { return e.client }

// submissionID is what fw accepts as a job's submission ID: it names a URL
// path segment and a log writer.
var submissionID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Validate implements jobs.Validator: the spec makes a submission (its
// resources are numbers, its arguments hold no NUL byte).
func (e *Executor) Validate(spec jobs.Spec) error {
	_, err := e.Request(spec)
	return err
}

// Start implements jobs.Executor: the submission happens in the job's own
// goroutine (a failure ends the job, with Ray's reason).
func (e *Executor) Start(spec jobs.Spec) (jobs.Process, error) {
	req, err := e.Request(spec)
	if err != nil {
		return nil, err
	}
	return e.run(spec.ID, &req), nil
}

// Attach implements jobs.Executor: the job with submission ID id, started
// earlier.
func (e *Executor) Attach(spec jobs.Spec, id string) (jobs.Process, error) {
	if !submissionID.MatchString(id) {
		return nil, fmt.Errorf("%q is not a submission ID fw gives (letters, digits, '_', '.', '-'; at most 128)", id)
	}
	return e.run(id, nil), nil
}

// Request is the submission of spec: the entrypoint (each argument quoted
// for the shell Ray runs it with), runtime_env.env_vars (the job's
// environment and RAY_JOB_STOP_WAIT_TIME_S), metadata, and the resources
// from the recipe's params (ParamCPUs, ParamGPUs).
func (e *Executor) Request(spec jobs.Spec) (SubmitRequest, error) {
	if !submissionID.MatchString(spec.ID) {
		return SubmitRequest{}, fmt.Errorf("submission ID %q: letters, digits, '_', '.', '-', at most 128", spec.ID)
	}
	words := append([]string{e.cfg.Python}, spec.Args...)
	quoted := make([]string, len(words))
	for i, w := range words {
		q, err := shellQuote(w)
		if err != nil {
			return SubmitRequest{}, fmt.Errorf("the job's command line: %w", err)
		}
		quoted[i] = q
	}
	env := map[string]string{"RAY_JOB_STOP_WAIT_TIME_S": strconv.Itoa(max(1, int(math.Ceil(e.cfg.StopGrace.Seconds()))))}
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return SubmitRequest{}, fmt.Errorf("the job's environment: %q is not NAME=value", kv)
		}
		env[k] = v
	}
	req := SubmitRequest{
		Entrypoint:   strings.Join(quoted, " "),
		SubmissionID: spec.ID,
		RuntimeEnv:   RuntimeEnv{EnvVars: env},
		Metadata:     map[string]string{"fw.run_id": spec.RunID, "fw.recipe": spec.Recipe.Name},
	}
	cpus, err := resource(spec.Params, ParamCPUs)
	if err != nil {
		return SubmitRequest{}, err
	}
	if cpus == nil {
		d := float64(DefaultCPUs)
		cpus = &d
	}
	req.EntrypointNumCPUs = cpus
	if req.EntrypointNumGPUs, err = resource(spec.Params, ParamGPUs); err != nil {
		return SubmitRequest{}, err
	}
	return req, nil
}

// resource is the param name as a number of CPUs or GPUs (nil when the
// recipe has no such param).
func resource(params map[string]any, name string) (*float64, error) {
	v, ok := params[name]
	if !ok {
		return nil, nil
	}
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case float64:
		f = x
	case int:
		f = float64(x)
	default:
		return nil, fmt.Errorf("param %s must be a number (the job's resources on Ray), got %v", name, v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<20 {
		return nil, fmt.Errorf("param %s must be between 0 and 1048576 (the job's resources on Ray), got %v", name, v)
	}
	return &f, nil
}

// shellQuote quotes s as one word for POSIX sh (Ray runs the entrypoint
// with shell=True): in single quotes, where a quote inside is written as
// quote, backslash, quote, quote. Words of only safe characters stay as
// they are.
func shellQuote(s string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", errors.New("an argument contains a NUL byte")
	}
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:@%+,-") == "" {
		return s, nil
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'", nil
}

// rayJob is one job on Ray, watched by its own goroutines.
type rayJob struct {
	e       *Executor
	id      string
	submit  *SubmitRequest // nil when attached
	ctx     context.Context
	cancel  context.CancelFunc
	started chan struct{}
	ended   chan struct{} // the watcher saw a terminal state (the log follower's last connection may end)
	done    chan struct{}
	pr      *io.PipeReader
	pw      *io.PipeWriter

	startOnce sync.Once
	res       jobs.Result
	stopMu    sync.Mutex
	stopAt    time.Time // when Stop reached Ray
}

func (e *Executor) run(id string, submit *SubmitRequest) *rayJob {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	p := &rayJob{e: e, id: id, submit: submit, ctx: ctx, cancel: cancel, started: make(chan struct{}),
		ended: make(chan struct{}), done: make(chan struct{}), pr: pr, pw: pw}
	go p.watch()
	return p
}

func (p *rayJob) ID() string               { return p.id }
func (p *rayJob) PID() int                 { return 0 }
func (p *rayJob) Started() <-chan struct{} { return p.started }
func (p *rayJob) Done() <-chan struct{}    { return p.done }
func (p *rayJob) Result() jobs.Result      { return p.res }

// Output implements jobs.Process: the job's log as Ray keeps it (stdout
// and stderr in one file, so one stream), replayable: its lines are
// numbered under the writer "ray-<submission id>".
func (p *rayJob) Output() []jobs.Output {
	return []jobs.Output{{Stream: "stdout", R: p.pr, Writer: "ray-" + p.id}}
}

// Stop implements jobs.Process: Ray's stop. Ray cannot stop a job it
// keeps PENDING (its supervisor waits for resources and takes the stop
// when it gets them, ending the job at once): such a job is given up as
// stopped once it is still PENDING StopGrace after the stop (see watch).
func (p *rayJob) Stop(ctx context.Context) error {
	if err := p.e.client.Stop(ctx, p.id); err != nil {
		return err
	}
	p.stopMu.Lock()
	if p.stopAt.IsZero() {
		p.stopAt = time.Now()
	}
	p.stopMu.Unlock()
	return nil
}

// stoppedPending reports whether the job was stopped more than StopGrace
// ago (and, the caller knows, is still PENDING).
func (p *rayJob) stoppedPending() bool {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	return !p.stopAt.IsZero() && time.Since(p.stopAt) > p.e.cfg.StopGrace
}

// Detach implements jobs.Process: the goroutines end, the job runs on.
func (p *rayJob) Detach() { p.cancel() }

func (p *rayJob) markStarted() { p.startOnce.Do(func() { close(p.started) }) }

// watch submits the job (when new), follows its log and polls its state
// until it ends, is lost or is detached.
func (p *rayJob) watch() {
	defer close(p.done)
	cfg := p.e.cfg
	if p.submit != nil {
		if err := p.submitJob(); err != nil {
			p.res = jobs.Result{Status: store.StatusFailed, Error: err.Error()}
			if p.ctx.Err() != nil { // detached meanwhile: the next start looks the job up
				p.res = jobs.Result{Detached: true}
			}
			p.pw.Close()
			p.cancel()
			return
		}
	}
	followCtx, stopFollow := context.WithCancel(p.ctx)
	defer stopFollow()
	followed := make(chan struct{})
	go func() { defer close(followed); p.follow(followCtx) }()
	// end records how the job ended; drain: Ray has ended the job, and
	// closes the last log connection once it has sent the rest.
	end := func(res jobs.Result, drain bool) {
		p.res = res
		if drain {
			select {
			case <-followed:
			case <-time.After(cfg.DrainTimeout):
				p.e.log.Warn("the Ray job's log did not end after the job: giving up on the rest", "id", p.id, "waited", cfg.DrainTimeout)
			}
		}
		stopFollow()
		<-followed
		p.cancel()
	}
	lastOK := time.Now()
	var lastErr error
	tick := time.NewTicker(cfg.PollInterval)
	defer tick.Stop()
	for {
		info, err := p.e.client.Job(p.ctx, p.id)
		switch {
		case p.ctx.Err() != nil:
			end(jobs.Result{Detached: true}, false)
			return
		case errors.Is(err, ErrNotFound):
			close(p.ended)
			end(jobs.Result{Status: store.StatusFailed, Error: fmt.Sprintf("Ray at %s no longer knows job %s (the cluster was restarted or the job deleted); its state is unknown", p.e.Address(), p.id)}, false)
			return
		case err != nil:
			lastErr = err
			if time.Since(lastOK) > cfg.LostAfter {
				end(jobs.Result{Status: store.StatusFailed, Error: fmt.Sprintf("lost contact with the Ray head at %s for more than %s (%v); the job's state is unknown: it may still run on the cluster (ray job status %s)", p.e.Address(), cfg.LostAfter, lastErr, p.id)}, false)
				return
			}
			p.e.log.Debug("reading a Ray job's state", "id", p.id, "err", err)
		default:
			lastOK = time.Now()
			if info.Status == StatusRunning || info.Status == StatusSucceeded || info.DriverExitCode != nil {
				p.markStarted()
			}
			if Terminal(info.Status) {
				close(p.ended)
				end(result(p.id, info), true)
				return
			}
			if info.Status == StatusPending && p.stoppedPending() {
				end(jobs.Result{Status: store.StatusStopped, Note: fmt.Sprintf("Ray kept job %s PENDING (waiting for resources) and cannot stop it before it gets them; it then ends at once (ray job status %s)", p.id, p.id)}, false)
				return
			}
		}
		select {
		case <-p.ctx.Done():
			end(jobs.Result{Detached: true}, false)
			return
		case <-tick.C:
		}
	}
}

// submitJob submits the job, again after a failure that may pass (no
// answer, a 5xx: a head that has just started answers "No available agent
// to submit job" for a while) until LostAfter has gone by. When an answer
// was lost the job may exist all the same, and Ray refuses a second
// submission with its ID: before each new try the job is looked up.
func (p *rayJob) submitJob() error {
	cfg := p.e.cfg
	deadline := time.Now().Add(cfg.LostAfter)
	wait := 500 * time.Millisecond
	for {
		err := p.e.client.Submit(p.ctx, *p.submit)
		if err == nil {
			return nil
		}
		var api *APIError
		if errors.As(err, &api) && api.Status >= 400 && api.Status < 500 {
			return err // Ray refused the request itself
		}
		if _, gerr := p.e.client.Job(p.ctx, p.id); gerr == nil {
			p.e.log.Info("a Ray job submission got no clear answer, but the job exists: following it", "id", p.id, "err", err)
			return nil
		}
		if p.ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		p.e.log.Warn("submitting a Ray job: trying again", "id", p.id, "err", err, "in", wait)
		select {
		case <-p.ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// result maps Ray's terminal state onto the run's end.
func result(id string, info JobInfo) jobs.Result {
	msg := strings.TrimSpace(info.Message)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSuffix(strings.TrimSpace(strings.SplitN(msg, ", last available logs", 2)[0]), ":")
	msg = clean(msg, 500)
	r := jobs.Result{ExitCode: info.DriverExitCode}
	switch info.Status {
	case StatusSucceeded:
		r.Status = store.StatusFinished
	case StatusStopped:
		r.Status, r.Error = store.StatusStopped, fmt.Sprintf("the Ray job %s was stopped on the cluster: %s", id, msg)
	default:
		r.Status, r.Error = store.StatusFailed, fmt.Sprintf("the Ray job %s failed: %s", id, msg)
	}
	return r
}

// maxPending bounds the end of the log kept back until its newline.
const maxPending = 64 << 10

// follow copies the job's log into the pipe the Manager reads, through as
// many WebSocket connections as it takes: each replays the log from its
// start, and what was already received is skipped. Only whole lines reach
// the pipe until the job has ended (at most maxPending bytes of a line are
// kept back), so a detach or a lost head never leaves half a line in the
// run's logs; the rest of the last line is written when the log ends.
func (p *rayJob) follow(ctx context.Context) {
	var (
		received int64
		pending  []byte
	)
	out := writerFunc(func(b []byte) (int, error) {
		pending = append(pending, b...)
		cut := bytes.LastIndexByte(pending, '\n') + 1
		if len(pending)-cut > maxPending {
			cut = len(pending)
		}
		if cut > 0 {
			if _, err := p.pw.Write(pending[:cut]); err != nil {
				return 0, err
			}
			pending = append(pending[:0], pending[cut:]...)
		}
		return len(b), nil
	})
	wait := 200 * time.Millisecond
	for {
		n, err := p.e.client.TailLogs(ctx, p.id, received, out)
		received = max(received, n)
		if ctx.Err() != nil {
			p.pw.Close() // what is pending (part of a line) is dropped
			return
		}
		if err == nil {
			select {
			case <-p.ended: // Ray closes the connection once everything was sent
				if len(pending) > 0 {
					_, _ = p.pw.Write(pending)
				}
				p.pw.Close()
				return
			case <-ctx.Done():
				p.pw.Close() // what is pending (part of a line) is dropped
				return
			case <-time.After(p.e.cfg.PollInterval): // closed before the watcher saw the end: look again
			}
			continue
		}
		p.e.log.Debug("following a Ray job's log: reconnecting", "id", p.id, "err", err)
		select {
		case <-ctx.Done():
			p.pw.Close() // what is pending (part of a line) is dropped
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
