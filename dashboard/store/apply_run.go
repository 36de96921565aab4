package store

// Run lifecycle events of Apply: experiments and runs created, status
// changes and resumes, and log lines.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fw-serve/fw/dashboard/query"
)

// experimentID returns the ID of the named experiment, creating it.
func (a *applier) experimentID(ctx context.Context, name, description string, t int64) (string, error) {
	var id string
	err := a.s.queryRow(ctx, a.tx, `SELECT id FROM experiments WHERE name = ?`, name).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !isNoRows(err) {
		return "", fmt.Errorf("looking up experiment %q: %w", name, err)
	}
	id = NewID()
	// Another dashboard on the same database may create it at the same
	// moment: then this insert waits for its commit, does nothing, and the
	// experiment is read again.
	res, err := a.s.exec(ctx, a.tx, `INSERT INTO experiments (id, name, description, created, updated, archived) VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (name) DO NOTHING`, id, name, description, t, t)
	if err != nil {
		return "", fmt.Errorf("creating experiment %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		if err := a.s.queryRow(ctx, a.tx, `SELECT id FROM experiments WHERE name = ?`, name).Scan(&id); err != nil {
			return "", fmt.Errorf("looking up experiment %q created meanwhile: %w", name, err)
		}
	}
	return id, nil
}

func (a *applier) createRun(ctx context.Context, ev *Event, t int64) (*runState, error) {
	if ev.ExperimentID == "" {
		if err := ValidateExperimentName(ev.Experiment); err != nil {
			return nil, evErr(CodeInvalidName, "experiment: %v", err)
		}
	}
	name := ev.Name
	if name == "" {
		name = RunName(ev.RunID) // readable, like W&B's; the ID stays the key
	}
	if err := ValidateName(name); err != nil {
		return nil, evErr(CodeInvalidName, "name: %v", err)
	}
	if err := validateText(ev.Description, 65536, true); err != nil {
		return nil, evErr(CodeInvalidKey, "description: %v", err)
	}
	status := ev.Status
	if status == "" {
		status = StatusRunning
	}
	if status != StatusRunning && status != StatusQueued {
		return nil, evErr(CodeInvalidTransition, "a run starts queued or running, not %q", status)
	}
	if ev.ParentRunID != "" {
		if err := ValidateID(ev.ParentRunID); err != nil {
			return nil, evErr(CodeInvalidID, "parent_run_id: %v", err)
		}
	}
	if ev.ParentCheckpoint != "" {
		if err := ValidateRelPath(ev.ParentCheckpoint); err != nil {
			return nil, evErr(CodeInvalidPath, "parent_checkpoint: %v", err)
		}
	}
	// Params and tags are checked before anything is written; handle records
	// them (and the seq), as for a resumed start.
	if _, perr := prepareParams(ev.Params); perr != nil {
		return nil, perr
	}
	if err := validateTags(ev.Tags, nil, MaxTagValueLen); err != nil {
		return nil, err
	}
	src := Source{}
	if ev.Source != nil {
		src = *ev.Source
	}
	if err := validateSource(src); err != nil {
		return nil, err
	}
	expID := ev.ExperimentID
	var err error
	if expID != "" {
		var n int
		if err := a.s.queryRow(ctx, a.tx, `SELECT COUNT(*) FROM experiments WHERE id = ?`, expID).Scan(&n); err != nil {
			return nil, fmt.Errorf("looking up experiment %s: %w", expID, err)
		}
		if n == 0 {
			return nil, evErr(CodeNotFound, "no experiment with ID %s", expID)
		}
	} else if expID, err = a.experimentID(ctx, ev.Experiment, "", t); err != nil {
		return nil, err
	}
	var args any
	if len(src.Args) > 0 {
		b, _ := json.Marshal(src.Args)
		args = string(b)
	}
	var started any
	if status == StatusRunning {
		started = t
	}
	rs := &runState{id: ev.RunID, status: status, experimentID: expID, started: started != nil, writers: map[string]*writerState{}}
	err = a.s.queryRow(ctx, a.tx, `INSERT INTO runs (id, experiment_id, name, status, created, updated, started, source_recipe, source_command, source_args, git_commit, host, pid, parent_run_id, parent_checkpoint)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING rid`,
		ev.RunID, expID, name, string(status), t, t, started, nullStr(src.Recipe), nullStr(src.Command), args, nullStr(src.GitCommit), nullStr(src.Host), nullInt(src.PID), nullStr(ev.ParentRunID), nullStr(ev.ParentCheckpoint)).Scan(&rs.rid)
	if isNoRows(err) {
		// Created meanwhile by another dashboard on the same database (the
		// same run_start sent to two of them): continue with that run, as
		// for a run_start of an existing run.
		return a.run(ctx, ev.RunID)
	}
	if err != nil {
		return nil, fmt.Errorf("creating run %s: %w", ev.RunID, err)
	}
	a.touchExperiment(expID, t)
	a.runs[ev.RunID] = rs
	a.count(expID, status, 1)
	return rs, nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullInt(v int) any {
	if v == 0 {
		return nil
	}
	return int64(v)
}

func validateSource(src Source) *EventError {
	for _, f := range []struct{ name, v string }{{"recipe", src.Recipe}, {"command", src.Command}, {"git_commit", src.GitCommit}, {"host", src.Host}} {
		if err := validateText(f.v, 4096, false); err != nil {
			return evErr(CodeInvalidKey, "source.%s: %v", f.name, err)
		}
	}
	if len(src.Args) > 1000 {
		return evErr(CodeInvalidEvent, "source.args: more than 1000 arguments")
	}
	for _, s := range src.Args {
		if err := validateText(s, 65536, true); err != nil {
			return evErr(CodeInvalidKey, "source.args: %v", err)
		}
	}
	return nil
}

func ptrArg[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func (a *applier) setStatus(ctx context.Context, rs *runState, ev *Event, t int64) error {
	old, err := a.lockStatus(ctx, rs)
	if err != nil {
		return err
	}
	if !CanTransition(rs.status, ev.Status) {
		return evErr(CodeInvalidTransition, "run %s cannot go from %s to %s", rs.id, rs.status, ev.Status)
	}
	if err := validateText(ev.Error, 65536, true); err != nil {
		return evErr(CodeInvalidKey, "error: %v", err)
	}
	if len(ev.Traceback) > 1<<20 {
		return evErr(CodeInvalidEvent, "traceback longer than 1 MiB")
	}
	if rs.status == ev.Status && !ev.Status.Terminal() {
		return nil
	}
	var started, ended any
	if ev.Status == StatusRunning && !rs.started {
		started = t
		rs.started = true
	}
	if ev.Status.Terminal() {
		ended = t
	}
	_, err = a.s.exec(ctx, a.tx, `UPDATE runs SET status = ?, started = COALESCE(started, ?), ended = COALESCE(?, ended),
		error = COALESCE(?, error), traceback = COALESCE(?, traceback), exit_code = COALESCE(?, exit_code) WHERE rid = ?`,
		string(ev.Status), started, ended, nullStr(ev.Error), nullStr(strings.ToValidUTF8(ev.Traceback, "\uFFFD")), ptrArg(ev.ExitCode), rs.rid)
	if err != nil {
		return fmt.Errorf("setting status of run %s: %w", rs.id, err)
	}
	a.count(rs.experimentID, old, -1)
	a.count(rs.experimentID, ev.Status, 1)
	rs.status = ev.Status
	return nil
}

// lockStatus returns the run's status before a change of it, so the
// transition is checked and counted from the status the run has: on
// PostgreSQL read again and the row locked (another dashboard may have
// changed it since the batch loaded it).
func (a *applier) lockStatus(ctx context.Context, rs *runState) (Status, error) {
	if a.s.d != query.Postgres {
		// One writer: the status the batch loaded is the run's.
		return rs.status, nil
	}
	st, err := a.s.lockRunStatus(ctx, a.tx, rs.rid)
	if err != nil {
		return "", fmt.Errorf("reading the status of run %s: %w", rs.id, err)
	}
	rs.status = st
	return st, nil
}

// resume reopens a terminal run (run_resume): status queued or running
// again, ended, error, traceback and exit code cleared; params, tags,
// metrics, logs and checkpoints kept. With a checkpoint path (one of the
// run's), progress goes back to its step and epoch; with a source, the
// process fields (command, args, host, pid) are replaced, so Reconcile
// watches the new process.
func (a *applier) resume(ctx context.Context, rs *runState, ev *Event, t int64) error {
	old, err := a.lockStatus(ctx, rs)
	if err != nil {
		return err
	}
	to := ev.Status
	if to == "" {
		to = StatusRunning
	}
	if !to.Valid() {
		return evErr(CodeInvalidEvent, "unknown status %q", to)
	}
	if !CanResume(rs.status, to) {
		if !rs.status.Terminal() {
			return evErr(CodeInvalidTransition, "run %s is %s; only a finished, failed or stopped run can be resumed", rs.id, rs.status)
		}
		return evErr(CodeInvalidTransition, "run_resume moves run %s to queued or running, not %q", rs.id, to)
	}
	if err := validateTags(ev.Tags, nil, MaxTagValueLen); err != nil {
		return err
	}
	var src *Source
	if ev.Source != nil {
		if err := validateSource(*ev.Source); err != nil {
			return err
		}
		src = ev.Source
	}
	var step, epoch, ptime any
	if ev.Path != "" {
		if err := ValidateRelPath(ev.Path); err != nil {
			return evErr(CodeInvalidPath, "checkpoint: %v", err)
		}
		var st int64
		var ep sql.NullFloat64
		err := a.s.queryRow(ctx, a.tx, `SELECT step, epoch FROM checkpoints WHERE run_rid = ? AND path = ?`, rs.rid, ev.Path).Scan(&st, &ep)
		if isNoRows(err) {
			return evErr(CodeNotFound, "run %s has no checkpoint %q", rs.id, ev.Path)
		}
		if err != nil {
			return fmt.Errorf("reading checkpoint %q of run %s: %w", ev.Path, rs.id, err)
		}
		step, ptime = st, t
		if ep.Valid {
			epoch = ep.Float64
		}
	}
	var started any
	if to == StatusRunning && !rs.started {
		started = t
		rs.started = true
	}
	var args any
	if src != nil && len(src.Args) > 0 {
		b, _ := json.Marshal(src.Args)
		args = string(b)
	}
	var command, host, pid any
	if src != nil {
		command, host, pid = nullStr(src.Command), nullStr(src.Host), nullInt(src.PID)
	}
	_, err = a.s.exec(ctx, a.tx, `UPDATE runs SET status = ?, started = COALESCE(started, ?), ended = NULL, error = NULL, traceback = NULL, exit_code = NULL,
		step = COALESCE(?, step), epoch = COALESCE(?, epoch), progress_time = COALESCE(?, progress_time),
		source_command = COALESCE(?, source_command), source_args = COALESCE(?, source_args), host = COALESCE(?, host), pid = COALESCE(?, pid)
		WHERE rid = ?`,
		string(to), started, step, epoch, ptime, command, args, host, pid, rs.rid)
	if err != nil {
		return fmt.Errorf("resuming run %s: %w", rs.id, err)
	}
	a.count(rs.experimentID, old, -1)
	a.count(rs.experimentID, to, 1)
	rs.status = to
	return a.writeTags(ctx, rs.rid, ev.Tags, nil)
}

func (a *applier) writeLogs(ctx context.Context, rs *runState, stream string, lines []string, t int64) error {
	const per = 200
	for len(lines) > 0 {
		n := min(per, len(lines))
		var b strings.Builder
		b.WriteString(`INSERT INTO logs (run_rid, stream, time, line) VALUES `)
		args := make([]any, 0, 4*n)
		for i, l := range lines[:n] {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("(?, ?, ?, ?)")
			if len(l) > MaxLogLine {
				l = l[:MaxLogLine]
			}
			l = strings.ToValidUTF8(strings.ReplaceAll(l, "\x00", ""), "\uFFFD")
			args = append(args, rs.rid, stream, t, l)
		}
		if _, err := a.s.exec(ctx, a.tx, b.String(), args...); err != nil {
			return fmt.Errorf("writing logs of run %s: %w", rs.id, err)
		}
		lines = lines[n:]
	}
	return nil
}
