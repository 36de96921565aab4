// Package store is the dashboard's experiment-tracking store: experiments,
// runs, params, metrics, logs, checkpoints and artifacts, in embedded SQLite
// (default, FW_EXPERIMENT_DIR) or PostgreSQL (FW_DATABASE_URL). Training
// processes send typed events (Event) that Apply ingests exactly once; the
// dashboard reads through the Store interface. See docs/tracking.md.
package store

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Status is a run's lifecycle state.
//
//	queued ──> running ──> finished
//	   │          ├──────> failed
//	   │          └──────> stopped
//	   ├─────────────────> failed
//	   └─────────────────> stopped
//
// finished, failed and stopped are terminal. Setting the current status
// again is a no-op; every other change is refused (code invalid_transition).
// The one way back is explicit: a run_resume event (CanResume) moves a
// terminal run to queued or running again, so the same run continues.
type Status string

// Run statuses.
const (
	StatusQueued   Status = "queued"
	StatusRunning  Status = "running"
	StatusFinished Status = "finished"
	StatusFailed   Status = "failed"
	StatusStopped  Status = "stopped"
)

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusFinished, StatusFailed, StatusStopped:
		return true
	}
	return false
}

// Terminal reports whether s is final.
func (s Status) Terminal() bool {
	return s == StatusFinished || s == StatusFailed || s == StatusStopped
}

// CanTransition reports whether a run may go from one status to another.
func CanTransition(from, to Status) bool {
	if !from.Valid() || !to.Valid() {
		return false
	}
	if from == to {
		return true
	}
	switch from {
	case StatusQueued:
		return to != StatusQueued
	case StatusRunning:
		return to.Terminal()
	}
	return false
}

// CanResume reports whether a run_resume event may move a run from one
// status to another: only out of a terminal status, only to queued or
// running. Ordinary events (run_start, status, run_end) never leave a
// terminal status (CanTransition).
func CanResume(from, to Status) bool {
	return from.Terminal() && (to == StatusQueued || to == StatusRunning)
}

// Experiment groups runs.
type Experiment struct {
	// ID is a 16-character NewID.
	ID string `json:"id"`
	// Name is unique, see ValidateName.
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Tags        map[string]string `json:"tags"`
	Created     time.Time         `json:"created"`
	Updated     time.Time         `json:"updated"`
	Archived    bool              `json:"archived"`
	// ArtifactLocation is where the MLflow client writes the experiment's
	// run artifacts itself (a local directory, set with MLflow's
	// artifact_location or the dashboard's --default-artifact-root); empty:
	// the dashboard's own artifact storage, through its artifact proxy.
	ArtifactLocation string `json:"artifact_location,omitempty"`
}

// ExperimentDetail is an experiment with counts of its runs by status.
type ExperimentDetail struct {
	Experiment
	// RunCounts maps each status to its number of runs.
	RunCounts map[Status]int `json:"run_counts"`
	// Runs is the total number of runs.
	Runs int `json:"runs"`
	// LastActivity is when a run of it last changed (nil without runs).
	// Filled by GetExperiment only.
	LastActivity *time.Time `json:"last_activity,omitempty"`
	// Metrics summarises each training metric over the experiment's runs
	// (GetExperiment only).
	Metrics map[string]MetricOverview `json:"metrics,omitempty"`
	// ParamKeys are the param keys its runs have, sorted (GetExperiment
	// only; at most MaxParamKeys): what a runs table can show as columns.
	ParamKeys []string `json:"param_keys,omitempty"`
}

// MaxParamKeys bounds ExperimentDetail.ParamKeys.
const MaxParamKeys = 10_000

// MetricOverview is one metric across the runs of an experiment: how many
// runs report it and the runs with its lowest and highest value ever.
type MetricOverview struct {
	Runs int `json:"runs"`
	// Min and Max are NaN (written "NaN") when every value was NaN.
	Min    Float  `json:"min"`
	MinRun string `json:"min_run"`
	Max    Float  `json:"max"`
	MaxRun string `json:"max_run"`
}

// Source says what a run executed.
type Source struct {
	Recipe    string   `json:"recipe,omitempty"`
	Command   string   `json:"command,omitempty"`
	Args      []string `json:"args,omitempty"`
	GitCommit string   `json:"git_commit,omitempty"`
	// Host and PID identify the training process, for Reconcile.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
}

// Progress is how far a run has come; any field may be zero when unknown.
type Progress struct {
	Step        int64     `json:"step"`
	TotalSteps  int64     `json:"total_steps"`
	Epoch       float64   `json:"epoch"`
	TotalEpochs float64   `json:"total_epochs"`
	Time        time.Time `json:"time"`
}

// Summary is a metric's running summary, maintained on every write. Min and
// Max cover every value ever written for the key (NaN values are skipped;
// a value replaced at the same step still counts).
type Summary struct {
	Last     float64   `json:"last"`
	LastStep int64     `json:"last_step"`
	LastTime time.Time `json:"last_time"`
	Min      float64   `json:"min"`
	MinStep  int64     `json:"min_step"`
	Max      float64   `json:"max"`
	MaxStep  int64     `json:"max_step"`
	// Count is the number of values written (including replacements).
	Count int64 `json:"count"`
}

// Run is one training (or evaluation) process.
type Run struct {
	ID           string     `json:"id"`
	ExperimentID string     `json:"experiment_id"`
	Experiment   string     `json:"experiment"`
	Name         string     `json:"name"`
	Status       Status     `json:"status"`
	Created      time.Time  `json:"created"`
	Updated      time.Time  `json:"updated"`
	Started      *time.Time `json:"started,omitempty"`
	Ended        *time.Time `json:"ended,omitempty"`
	// Error is the failure reason (run_end error, or Reconcile's reason).
	Error     string   `json:"error,omitempty"`
	Traceback string   `json:"traceback,omitempty"`
	ExitCode  *int     `json:"exit_code,omitempty"`
	Progress  Progress `json:"progress"`
	Source    Source   `json:"source"`
	// ParentRunID and ParentCheckpoint name the fork origin ("" when none).
	ParentRunID      string             `json:"parent_run_id,omitempty"`
	ParentCheckpoint string             `json:"parent_checkpoint,omitempty"`
	Params           map[string]any     `json:"params"`
	Tags             map[string]string  `json:"tags"`
	Metrics          map[string]Summary `json:"metrics"`
	System           map[string]Summary `json:"system,omitempty"`
}

// ETA estimates the remaining time from the progress (steps, else epochs)
// and the time since start; ok is false when it cannot be estimated.
func (r *Run) ETA(now time.Time) (time.Duration, bool) {
	if r.Started == nil || r.Status != StatusRunning {
		return 0, false
	}
	var frac float64
	switch {
	case r.Progress.TotalSteps > 0 && r.Progress.Step > 0:
		frac = float64(r.Progress.Step) / float64(r.Progress.TotalSteps)
	case r.Progress.TotalEpochs > 0 && r.Progress.Epoch > 0:
		frac = r.Progress.Epoch / r.Progress.TotalEpochs
	default:
		return 0, false
	}
	if frac <= 0 || frac > 1 {
		return 0, false
	}
	at := r.Progress.Time
	if at.IsZero() {
		at = now
	}
	elapsed := at.Sub(*r.Started)
	return time.Duration(float64(elapsed)*(1-frac)/frac) - now.Sub(at), true
}

// Bucket is one downsampled bucket (or one raw point, when Count is 1).
type Bucket struct {
	// StepMin and StepMax are the steps of the first and last point in it.
	StepMin int64 `json:"step_min"`
	StepMax int64 `json:"step_max"`
	// Min and Max are the extreme non-NaN values (NaN if all were NaN).
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	// Last is the value at StepMax.
	Last  float64 `json:"last"`
	Count int64   `json:"count"`
}

// Series is one metric key of a run.
type Series struct {
	Key     string   `json:"key"`
	Buckets []Bucket `json:"buckets"`
	// Downsampled is false when Buckets are the raw points.
	Downsampled bool `json:"downsampled"`
}

// LogLine is one captured line of stdout or stderr.
type LogLine struct {
	// ID is the cursor: pass it as LogQuery.After to read what follows.
	ID     int64     `json:"id"`
	Stream string    `json:"stream"`
	Time   time.Time `json:"time"`
	Line   string    `json:"line"`
}

// Checkpoint is a saved model state of a run.
type Checkpoint struct {
	// Path is relative to the run's checkpoint directory.
	Path    string             `json:"path"`
	Step    int64              `json:"step"`
	Epoch   float64            `json:"epoch"`
	Metrics map[string]float64 `json:"metrics"`
	Time    time.Time          `json:"time"`
}

// Artifact is a file a run produced.
type Artifact struct {
	// Path is relative to the run's artifact directory.
	Path string    `json:"path"`
	Size int64     `json:"size"`
	Time time.Time `json:"time"`
}

// OverlayArtifacts is files with the artifacts of under that no file of
// the same path replaces: a run's files written outside fw's store (by
// MLflow's client, or through its artifact proxy into a destination) over
// what the store lists for the run.
func OverlayArtifacts(files, under []Artifact) []Artifact {
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		seen[f.Path] = true
	}
	for _, a := range under {
		if !seen[a.Path] {
			files = append(files, a)
		}
	}
	return files
}

// fromNanos converts the stored form back.
func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// nullFloat maps NaN to NULL (SQLite cannot store NaN).
func nullFloat(f float64) any {
	if math.IsNaN(f) {
		return nil
	}
	return f
}

// Ptr returns a pointer to v, for optional event fields.
func Ptr[T any](v T) *T { return &v }

func (s Status) String() string { return string(s) }

var _ fmt.Stringer = Status("")

// summaryJSON is Summary with its values as Float.
type summaryJSON struct {
	Last     Float     `json:"last"`
	LastStep int64     `json:"last_step"`
	LastTime time.Time `json:"last_time"`
	Min      Float     `json:"min"`
	MinStep  int64     `json:"min_step"`
	Max      Float     `json:"max"`
	MaxStep  int64     `json:"max_step"`
	Count    int64     `json:"count"`
}

// MarshalJSON writes the values as Float: NaN and the infinities (a key
// whose every value was NaN, an infinite loss) as the strings "NaN",
// "Infinity" and "-Infinity", which encoding/json cannot write as numbers.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(summaryJSON{Float(s.Last), s.LastStep, s.LastTime, Float(s.Min), s.MinStep, Float(s.Max), s.MaxStep, s.Count})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Summary) UnmarshalJSON(b []byte) error {
	var v summaryJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Summary{float64(v.Last), v.LastStep, v.LastTime, float64(v.Min), v.MinStep, float64(v.Max), v.MaxStep, v.Count}
	return nil
}

// bucketJSON is Bucket with its values as Float.
type bucketJSON struct {
	StepMin int64 `json:"step_min"`
	StepMax int64 `json:"step_max"`
	Min     Float `json:"min"`
	Max     Float `json:"max"`
	Last    Float `json:"last"`
	Count   int64 `json:"count"`
}

// MarshalJSON writes the values as Float (see Summary.MarshalJSON).
func (b Bucket) MarshalJSON() ([]byte, error) {
	return json.Marshal(bucketJSON{b.StepMin, b.StepMax, Float(b.Min), Float(b.Max), Float(b.Last), b.Count})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (b *Bucket) UnmarshalJSON(data []byte) error {
	var v bucketJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*b = Bucket{v.StepMin, v.StepMax, float64(v.Min), float64(v.Max), float64(v.Last), v.Count}
	return nil
}
