package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"
)

// Store is the experiment-tracking store. Both backends (SQLite and
// PostgreSQL) implement it with the same behaviour; writes go through one
// writer goroutine per Store, batched into transactions.
type Store interface {
	// Apply ingests a batch of events exactly once (see Event, ApplyResult).
	// Invalid events are reported per index and the valid ones applied; only
	// an oversized batch or a database failure fails the whole call, and then
	// nothing of the batch is applied.
	Apply(ctx context.Context, events []Event) (ApplyResult, error)

	// CreateExperiment creates an experiment (code conflict if the name is taken).
	CreateExperiment(ctx context.Context, in ExperimentInput) (Experiment, error)
	// ListExperiments lists experiments matching q.
	ListExperiments(ctx context.Context, q ListQuery) (ExperimentPage, error)
	// GetExperiment returns an experiment by ID or name, with run counts.
	GetExperiment(ctx context.Context, idOrName string) (ExperimentDetail, error)
	// UpdateExperiment changes the fields set in p.
	UpdateExperiment(ctx context.Context, id string, p ExperimentPatch) (Experiment, error)
	// DeleteExperiment hard-deletes an experiment and all its runs (rows and files).
	DeleteExperiment(ctx context.Context, id string) error

	// ListRuns lists runs matching q (q.Experiment narrows to one experiment;
	// an unknown one is code not_found).
	ListRuns(ctx context.Context, q ListQuery) (RunPage, error)
	// GetRun returns a run with its params, tags and metric summaries.
	GetRun(ctx context.Context, id string) (Run, error)
	// RunTag reads one tag of run id: ok is false when the run or the
	// tag does not exist. It reads one row, where GetRun reads the run
	// whole: for a check made before every write (MLflow's refusal to
	// log to a deleted run).
	RunTag(ctx context.Context, id, key string) (value string, ok bool, err error)
	// UpdateRun changes a run's name or tags.
	UpdateRun(ctx context.Context, id string, p RunPatch) (Run, error)
	// DeleteRun hard-deletes a run: its rows, logs and its checkpoint and
	// artifact directories, then frees the space.
	DeleteRun(ctx context.Context, id string) error

	// Metrics reads metric (or system metric) series of a run, downsampled
	// on the server to at most q.MaxPoints buckets per key.
	Metrics(ctx context.Context, runID string, q MetricsQuery) ([]Series, error)
	// History reads one metric key's raw points with their times, by step
	// (see HistoryQuery).
	History(ctx context.Context, runID string, q HistoryQuery) ([]Point, error)
	// Logs reads captured log lines (see LogQuery).
	Logs(ctx context.Context, runID string, q LogQuery) ([]LogLine, error)
	// Checkpoints lists a run's checkpoints by step.
	Checkpoints(ctx context.Context, runID string) ([]Checkpoint, error)
	// Artifacts lists a run's artifacts by path.
	Artifacts(ctx context.Context, runID string) ([]Artifact, error)

	// Reconcile marks every running (or queued) run for which alive returns
	// false as failed with reason as its error, and returns their IDs.
	Reconcile(ctx context.Context, alive func(Run) bool, reason string) ([]string, error)

	// Records keeps the dashboard's own state (model registry, export
	// jobs, deployments, training jobs) in the same database.
	Records
	// Feed is the change feed behind the live stream.
	Feed
	// Leases say which dashboard owns what, for dashboards sharing a
	// database (dashboard/replica).
	Leases

	// Close stops the writer (waiting for queued writes) and closes the database.
	Close() error

	// PutSpans stores request spans received over OTLP; a span already
	// stored is kept as it was.
	PutSpans(ctx context.Context, spans []Span) error
	// PruneSpans removes spans received before cutoff, then the oldest
	// beyond keep.
	PruneSpans(ctx context.Context, cutoff time.Time, keep int) (int64, error)
	// ListRequests reads the requests (server spans) q selects.
	ListRequests(ctx context.Context, q RequestQuery) ([]Span, error)
	// GetTrace reads a trace's spans by start.
	GetTrace(ctx context.Context, traceID string) ([]Span, error)

	// MLflowTraces keeps the traces of MLflow's tracing API.
	MLflowTraces

	// PutPayloads stores request/response records deployments logged; a
	// record already stored is kept. It returns how many were new.
	PutPayloads(ctx context.Context, ps []Payload) (int, error)
	// ListPayloads reads the records q selects.
	ListPayloads(ctx context.Context, q PayloadQuery) ([]Payload, error)
	// PrunePayloads removes records received before cutoff, then the
	// oldest beyond keep.
	PrunePayloads(ctx context.Context, cutoff time.Time, keep int) (int64, error)
}

// Config selects and tunes the backend.
type Config struct {
	// DatabaseURL, when set (postgres://...), selects PostgreSQL (FW_DATABASE_URL).
	DatabaseURL string
	// Dir is the SQLite directory (FW_EXPERIMENT_DIR); the database is
	// Dir/experiments.db. Used when DatabaseURL is empty.
	Dir string
	// CheckpointDir and ArtifactDir are the roots of the runs' files: a run's
	// files live in <root>/<run id>/<path>. Defaults: Dir/checkpoints and
	// Dir/artifacts (required with PostgreSQL for deletes to remove files).
	CheckpointDir string
	ArtifactDir   string
	// Readers is the size of the read pool (default 4).
	Readers int
	// Synchronous is SQLite's synchronous pragma: NORMAL (default: no
	// committed write is lost when the process dies; the last ones may be
	// lost on power failure) or FULL (fsync on every commit).
	Synchronous string
	// BusyTimeout is SQLite's busy timeout (default 5s).
	BusyTimeout time.Duration
	// Feed, when set, puts every event Apply stores into the change feed
	// (see Feed), in the same transaction.
	Feed FeedFunc
	// Log receives what the store reports on its own (the PostgreSQL feed
	// listener's reconnects); nil: nothing.
	Log *slog.Logger
	// SortIndexRuns: the metric keys that at least this many runs of one
	// experiment with no run running or queued report get the indexes
	// that serve a page sorted by their last, min or max value built in
	// the background once writes pause (SortIndexIdle), before anyone sorts
	// by them; other keys get theirs on their first sort, which is then a
	// full sort. 0: DefaultSortIndexRuns; negative: only on a first sort.
	SortIndexRuns int
	// SortIndexIdle is how long no write may have been committed before
	// those builds start (0: DefaultSortIndexIdle). On SQLite a build holds
	// the writer: a write arriving meanwhile waits for it (seconds at a
	// million runs).
	SortIndexIdle time.Duration

	// migrateTo stops migrations at a version (tests build old schemas).
	migrateTo int
	// sortedPages answers every run page with the generic query that sorts
	// the filtered rows (tests compare it with the index-served pages).
	sortedPages bool
	// segmentQuery, when set, sees each keyset page query before it runs
	// (tests read its plan).
	segmentQuery func(text string, args []any)
	// maxNameCandidates replaces maxNameCandidates (tests; negative: no
	// search through the names' index).
	maxNameCandidates int
}

// Open opens (creating and migrating as needed) the store cfg selects.
func Open(ctx context.Context, cfg Config) (Store, error) {
	if cfg.Readers <= 0 {
		cfg.Readers = 4
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = 5 * time.Second
	}
	if cfg.SortIndexRuns == 0 {
		cfg.SortIndexRuns = DefaultSortIndexRuns
	}
	if cfg.SortIndexIdle <= 0 {
		cfg.SortIndexIdle = DefaultSortIndexIdle
	}
	if cfg.Dir != "" {
		if cfg.CheckpointDir == "" {
			cfg.CheckpointDir = filepath.Join(cfg.Dir, "checkpoints")
		}
		if cfg.ArtifactDir == "" {
			cfg.ArtifactDir = filepath.Join(cfg.Dir, "artifacts")
		}
	}
	if strings.HasPrefix(cfg.DatabaseURL, "postgres://") || strings.HasPrefix(cfg.DatabaseURL, "postgresql://") {
		return openPostgres(ctx, cfg)
	}
	if cfg.DatabaseURL != "" {
		return nil, errf(CodeInvalidArgument, "FW_DATABASE_URL must start with postgres:// or postgresql://")
	}
	return openSQLite(ctx, cfg)
}

// ExperimentInput creates an experiment.
type ExperimentInput struct {
	Name        string
	Description string
	Tags        map[string]string
	// ArtifactLocation is Experiment.ArtifactLocation; with ArtifactRoot
	// set and ArtifactLocation empty it is <ArtifactRoot>/<the new ID>.
	ArtifactLocation string
	ArtifactRoot     string
}

// ExperimentPatch changes an experiment; nil fields are left alone.
type ExperimentPatch struct {
	Name        *string
	Description *string
	Archived    *bool
	// Tags are set; DeleteTags are removed.
	Tags       map[string]string
	DeleteTags []string
}

// RunPatch changes a run; nil fields are left alone.
type RunPatch struct {
	Name       *string
	Tags       map[string]string
	DeleteTags []string
}

// ListQuery selects, orders and pages a listing.
type ListQuery struct {
	// Filter is a dashboard/query filter ("" = all).
	Filter string
	// Sort is a field: a column (created, name, ...), tags.KEY, and for runs
	// params.KEY or metrics.KEY[.last|min|max|count]. Default: created.
	// Rows lacking the field come last.
	Sort string
	// Desc sorts descending.
	Desc bool
	// IDAsc breaks ties by ID ascending even when Desc is set (MLflow's
	// searches: start_time DESC, then run ID ASC); by default ties follow
	// Desc.
	IDAsc bool
	// Limit is the page size (default 100, at most 10000).
	Limit int
	// Cursor is the Next of the previous page.
	Cursor string
	// Experiment (ListRuns only) is an experiment ID or name.
	Experiment string
	// Experiments (ListRuns only, not with Experiment) are experiment IDs:
	// the runs of any of them (MLflow's search_runs of several
	// experiments). Up to maxMergedExperiments, each experiment's page is
	// read from its indexes and the pages merged.
	Experiments []string
	// Columns (ListRuns only), when set, are the only params and metrics
	// the page's runs carry (column projection: a table showing 10 of
	// 1,500 metric keys reads 10); nil carries all of them. Tags and the
	// run's own fields are always there.
	Columns *Columns
}

// Columns name the params, training metrics and system metrics a page of
// runs carries (ListQuery.Columns).
type Columns struct {
	Params, Metrics, System []string
}

// ExperimentPage is one page of experiments.
type ExperimentPage struct {
	// Experiments carry their run counts, as GetExperiment gives them.
	Experiments []ExperimentDetail `json:"experiments"`
	// Next is the cursor of the following page ("" at the end).
	Next string `json:"next,omitempty"`
}

// RunPage is one page of runs.
type RunPage struct {
	Runs []Run  `json:"runs"`
	Next string `json:"next,omitempty"`
}

// MetricsQuery selects series of a run.
type MetricsQuery struct {
	// Keys to read (empty: all keys of the run).
	Keys []string
	// System reads system metrics instead of training metrics.
	System bool
	// MaxPoints is the most buckets per key (default 1000, at most 100000).
	MaxPoints int
	// MinStep and MaxStep bound the steps read (inclusive).
	MinStep, MaxStep *int64
}

// LogQuery selects log lines. With After > 0, the lines after that cursor
// (oldest first, at most Limit); else with Tail > 0, the last Tail lines;
// else the first Limit lines.
type LogQuery struct {
	Tail  int
	After int64
	// Limit defaults to 1000, at most 100000.
	Limit int
	// Stream keeps only "stdout" or "stderr" ("" = both).
	Stream string
}
