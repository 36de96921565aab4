package jobs

import (
	"context"
	"errors"
	"io"

	"github.com/fw-serve/fw/dashboard/store"
)

// Executor runs the processes of training jobs: where they run, how they
// stop and where their output comes from. Everything else (the runs in the
// store, the queue, the job states, the logs and how a run ends) stays in
// the Manager, whatever the executor.
//
// Two implementations: Local (child processes of the dashboard, the
// default) and dashboard/jobs/ray (jobs on a Ray cluster through its Jobs
// REST API).
type Executor interface {
	// Name identifies the executor ("local", "ray"); it is recorded on the
	// runs of re-attachable jobs (tag fw.executor) and in Info.Executor.
	Name() string
	// Start starts the job described by spec and returns its process. It
	// must not block on the network: the Manager calls it with its lock
	// held. A job that cannot start is an error (nothing started) or a
	// Process that ends at once with the reason in its Result.
	Start(spec Spec) (Process, error)
	// Attach re-attaches to a job started earlier, by this or another
	// dashboard process, from its ID (Process.ID); like Start it must not
	// block. Executors whose jobs die with the dashboard return
	// ErrNotAttachable.
	Attach(spec Spec, id string) (Process, error)
	// Attachable reports whether Attach works: the executor's jobs outlive
	// the dashboard process that started them. The Manager then records
	// the job's ID on its run (tags fw.executor, fw.executor.job and
	// fw.executor.address), detaches instead of stopping at shutdown, and
	// numbers the job's log lines so that a re-attach adds none twice.
	Attachable() bool
	// Address is where the executor runs jobs ("" for Local; the Ray
	// head's URL): a dashboard re-attaches only to jobs of its own address.
	Address() string
	// Queues reports whether the executor queues jobs itself (Ray's
	// scheduler, by resources); when false the Manager starts at most
	// Config.MaxJobs at once and queues the rest.
	Queues() bool
	// Close releases what the executor holds (idle connections) once every
	// process has ended or been detached.
	Close()
}

// Validator is implemented by executors that refuse some specs (params an
// executor reads, such as Ray's resources): Manager.Start calls Validate
// before it creates the run and answers a refusal as invalid params.
type Validator interface {
	Validate(spec Spec) error
}

// ErrNotAttachable is Attach's error for an executor whose jobs cannot be
// re-attached (a local process dies with its dashboard).
var ErrNotAttachable = errors.New("this executor's jobs cannot be re-attached: a local process ends with the dashboard that started it")

// Spec is what an executor needs to run one job.
type Spec struct {
	RunID  string
	Recipe Recipe
	// ID names the job on its executor, chosen by the Manager, unique per
	// job ("fw-<run id>-<8 hex>": a resumed run's next job has another).
	// Ray uses it as the submission ID; Local ignores it (its ID is the pid).
	ID string
	// Args follow the interpreter: -m MODULE --run-id ID --experiment E
	// --params JSON [--name N] [--resume-from CKPT]. Only validated values
	// reach them (see Manager.Start).
	Args []string
	// Env is the job's own environment, "NAME=value": FW_TRACKING_URI,
	// FW_DASHBOARD_TOKEN, FW_JOB_RUN_ID, FW_EXPERIMENT_DIR,
	// FW_CHECKPOINT_DIR, PYTHONUNBUFFERED and, with object storage,
	// FW_UPLOAD_FILES=1.
	Env []string
	// Params are the validated params with defaults filled in; an executor
	// reads resources from them (see dashboard/jobs/ray).
	Params map[string]any
}

// Process is one job on an executor.
type Process interface {
	// ID names the job for Executor.Attach (the pid for Local, the
	// submission ID for Ray).
	ID() string
	// PID is the local process ID, 0 when the job runs elsewhere.
	PID() int
	// Started is closed once the job's process runs (at once for a local
	// process; for Ray when the job leaves PENDING). It may never close
	// when the job ends before it runs: watch Done too.
	Started() <-chan struct{}
	// Output lists the job's output streams; the Manager reads each once,
	// to its end, as soon as the process exists.
	Output() []Output
	// Done is closed when the job has ended, the executor lost it, or it
	// was detached; Result is valid after that.
	Done() <-chan struct{}
	// Result is how the job ended (valid once Done is closed).
	Result() Result
	// Stop asks the job to stop (Local: SIGTERM to its process group, then
	// SIGKILL after the grace period; Ray: its stop API). It may block on
	// the network, so the Manager never calls it with its lock held.
	Stop(ctx context.Context) error
	// Detach stops watching the job and leaves it running (attachable
	// executors only; the Manager calls it at shutdown): its outputs end
	// and Done closes with Result.Detached.
	Detach()
}

// Output is one stream of a job's output.
type Output struct {
	// Stream is the store's log stream: "stdout" or "stderr".
	Stream string
	// R is read to its end, one line at a time (see readLines). An error
	// other than EOF ends the stream too (logged).
	R io.Reader
	// Writer, when set, marks a replayable stream: R starts from the job's
	// first line every time the job is attached (a log file on the cluster),
	// so its lines are applied under this writer with seq = 1 + the line's
	// number, and a re-attach skips the lines an earlier owner applied.
	// Empty for a live pipe: its lines go under the job's own writer.
	Writer string
}

// Result is how a job ended, as its executor saw it. The Manager ends the
// run with it unless the SDK in the job already did; a stop requested from
// the dashboard always ends the run stopped.
type Result struct {
	// Status is finished, failed or stopped.
	Status store.Status
	// ExitCode is the process's exit status when known (128+signal when
	// killed by one).
	ExitCode *int
	// Error says why the job failed or stopped; for a failure the Manager
	// appends the job's last output lines.
	Error string
	// Note, when set, is added to the run's error however the run ends
	// (a stop from the dashboard included).
	Note string
	// Detached: the job was left running (Process.Detach); the run is not
	// ended.
	Detached bool
}
