package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// CreateExperiment implements Store.
func (s *sqlStore) CreateExperiment(ctx context.Context, in ExperimentInput) (Experiment, error) {
	if err := ValidateExperimentName(in.Name); err != nil {
		return Experiment{}, storeErr(CodeInvalidName, "experiment name", err)
	}
	if err := validateText(in.Description, 65536, true); err != nil {
		return Experiment{}, storeErr(CodeInvalidArgument, "description", err)
	}
	if err := validateTags(in.Tags, nil, MaxExperimentTagValueLen); err != nil {
		return Experiment{}, storeErr(err.Code, err.Msg, nil)
	}
	id := NewID()
	loc := in.ArtifactLocation
	if loc == "" && in.ArtifactRoot != "" {
		loc = strings.TrimRight(in.ArtifactRoot, "/") + "/" + id
	}
	if err := validateText(loc, MaxArtifactLocationLen, false); err != nil {
		return Experiment{}, storeErr(CodeInvalidArgument, "artifact location", err)
	}
	now := time.Now().UnixNano()
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `INSERT INTO experiments (id, name, description, created, updated, archived, artifact_location) VALUES (?, ?, ?, ?, ?, 0, ?)`, id, in.Name, in.Description, now, now, loc); err != nil {
			if isUniqueViolation(err) {
				return errf(CodeConflict, "an experiment named %q exists", in.Name)
			}
			return fmt.Errorf("creating experiment %q: %w", in.Name, err)
		}
		return writeExperimentTags(ctx, s, tx, id, in.Tags, nil)
	}, nil)
	if err != nil {
		return Experiment{}, err
	}
	d, err := s.GetExperiment(ctx, id)
	return d.Experiment, err
}

func writeExperimentTags(ctx context.Context, s *sqlStore, tx *sql.Tx, id string, set map[string]string, del []string) error {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, err := s.exec(ctx, tx, `INSERT INTO experiment_tags (experiment_id, key, value) VALUES (?, ?, ?) ON CONFLICT (experiment_id, key) DO UPDATE SET value = excluded.value`, id, k, set[k]); err != nil {
			return fmt.Errorf("setting tag %q of experiment %s: %w", k, id, err)
		}
	}
	for _, k := range del {
		if _, err := s.exec(ctx, tx, `DELETE FROM experiment_tags WHERE experiment_id = ? AND key = ?`, id, k); err != nil {
			return fmt.Errorf("deleting tag %q of experiment %s: %w", k, id, err)
		}
	}
	return nil
}

// UpdateExperiment implements Store.
func (s *sqlStore) UpdateExperiment(ctx context.Context, id string, p ExperimentPatch) (Experiment, error) {
	if p.Name != nil {
		if err := ValidateExperimentName(*p.Name); err != nil {
			return Experiment{}, storeErr(CodeInvalidName, "experiment name", err)
		}
	}
	if p.Description != nil {
		if err := validateText(*p.Description, 65536, true); err != nil {
			return Experiment{}, storeErr(CodeInvalidArgument, "description", err)
		}
	}
	if err := validateTags(p.Tags, p.DeleteTags, MaxExperimentTagValueLen); err != nil {
		return Experiment{}, storeErr(err.Code, err.Msg, nil)
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var archived any
		if p.Archived != nil {
			archived = int64(0)
			if *p.Archived {
				archived = int64(1)
			}
		}
		res, err := s.exec(ctx, tx, `UPDATE experiments SET name = COALESCE(?, name), description = COALESCE(?, description), archived = COALESCE(?, archived), updated = ? WHERE id = ?`,
			ptrArg(p.Name), ptrArg(p.Description), archived, time.Now().UnixNano(), id)
		if err != nil {
			if isUniqueViolation(err) {
				return errf(CodeConflict, "an experiment named %q exists", *p.Name)
			}
			return fmt.Errorf("updating experiment %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errf(CodeNotFound, "no experiment %q", id)
		}
		return writeExperimentTags(ctx, s, tx, id, p.Tags, p.DeleteTags)
	}, nil)
	if err != nil {
		return Experiment{}, err
	}
	d, err := s.GetExperiment(ctx, id)
	return d.Experiment, err
}

// UpdateRun implements Store.
func (s *sqlStore) UpdateRun(ctx context.Context, id string, p RunPatch) (Run, error) {
	if p.Name != nil {
		if err := ValidateName(*p.Name); err != nil {
			return Run{}, storeErr(CodeInvalidName, "run name", err)
		}
	}
	if err := validateTags(p.Tags, p.DeleteTags, MaxTagValueLen); err != nil {
		return Run{}, storeErr(err.Code, err.Msg, nil)
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var rid int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT rid FROM runs WHERE id = ?`), id).Scan(&rid)
		if isNoRows(err) {
			return errf(CodeNotFound, "no run %q", id)
		}
		if err != nil {
			return fmt.Errorf("looking up run %s: %w", id, err)
		}
		if _, err := s.exec(ctx, tx, `UPDATE runs SET name = COALESCE(?, name), updated = ? WHERE rid = ?`, ptrArg(p.Name), time.Now().UnixNano(), rid); err != nil {
			return fmt.Errorf("updating run %s: %w", id, err)
		}
		return writeRunTags(ctx, s, tx, rid, p.Tags, p.DeleteTags)
	}, nil)
	if err != nil {
		return Run{}, err
	}
	return s.GetRun(ctx, id)
}

// runFiles lists a run's recorded checkpoint and artifact paths.
type runFiles struct {
	id          string
	checkpoints []string
	artifacts   []string
}

// deleteRunRows removes every row of a run inside tx and returns its files.
// With summarised, the run also leaves its experiment's summary (a whole
// experiment's deletion drops the summary instead).
func (s *sqlStore) deleteRunRows(ctx context.Context, tx *sql.Tx, rid int64, id string, summarised bool) (runFiles, error) {
	f := runFiles{id: id}
	var exp string
	var held []int64
	if summarised {
		lock := ""
		if s.d == query.Postgres {
			lock = " FOR UPDATE"
		}
		var st string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT experiment_id, status FROM runs WHERE rid = ?`+lock), rid).Scan(&exp, &st); err != nil {
			return f, fmt.Errorf("reading run %s: %w", id, err)
		}
		var err error
		if held, err = s.unsummariseRun(ctx, tx, rid, id, exp, Status(st)); err != nil {
			return f, err
		}
	}
	for _, q := range []struct {
		text string
		dst  *[]string
	}{{`SELECT path FROM checkpoints WHERE run_rid = ?`, &f.checkpoints}, {`SELECT path FROM artifacts WHERE run_rid = ?`, &f.artifacts}} {
		rows, err := tx.QueryContext(ctx, s.q(q.text), rid)
		if err != nil {
			return f, fmt.Errorf("listing files of run %s: %w", id, err)
		}
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				return f, fmt.Errorf("listing files of run %s: %w", id, err)
			}
			*q.dst = append(*q.dst, p)
		}
		rows.Close()
	}
	for _, t := range []string{"metrics", "metric_replaced", "metric_rollup", "metric_summary", "logs", "params", "run_tags", "run_writers", "checkpoints", "artifacts"} {
		if _, err := s.exec(ctx, tx, `DELETE FROM `+t+` WHERE run_rid = ?`, rid); err != nil {
			return f, fmt.Errorf("deleting %s of run %s: %w", t, id, err)
		}
	}
	if _, err := s.exec(ctx, tx, `DELETE FROM runs WHERE rid = ?`, rid); err != nil {
		return f, fmt.Errorf("deleting run %s: %w", id, err)
	}
	if summarised {
		if err := s.recomputeExtremes(ctx, tx, exp, held); err != nil {
			return f, err
		}
	}
	return f, nil
}

// removeFiles deletes the runs' checkpoint and artifact files: each
// recorded path (checked with SafeJoin), then the run's directory.
func (s *sqlStore) removeFiles(files []runFiles) error {
	var errs []error
	for _, f := range files {
		if ValidateID(f.id) != nil {
			continue
		}
		for _, root := range []struct {
			dir   string
			paths []string
		}{{s.cfg.CheckpointDir, f.checkpoints}, {s.cfg.ArtifactDir, f.artifacts}} {
			if root.dir == "" {
				continue
			}
			runDir, err := SafeJoin(root.dir, f.id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, p := range root.paths {
				full, err := SafeJoin(runDir, p)
				if err != nil {
					errs = append(errs, fmt.Errorf("not removing %q of run %s: %w", p, f.id, err))
					continue
				}
				if err := os.RemoveAll(full); err != nil {
					errs = append(errs, fmt.Errorf("removing %s: %w", full, err))
				}
			}
			if fi, err := os.Lstat(runDir); err == nil {
				if fi.Mode()&os.ModeSymlink != 0 {
					err = os.Remove(runDir) // the link, never its target
				} else {
					err = os.RemoveAll(runDir)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("removing %s: %w", runDir, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// reclaim frees the space of deleted rows: SQLite returns free pages to the
// file system (incremental vacuum; the database is created with
// auto_vacuum=INCREMENTAL) and truncates the WAL. PostgreSQL's autovacuum
// makes the space reusable on its own.
func (s *sqlStore) reclaim(ctx context.Context) error {
	if s.d != query.SQLite {
		return nil
	}
	if _, err := s.wdb.ExecContext(ctx, `PRAGMA incremental_vacuum`); err != nil {
		return fmt.Errorf("vacuuming: %w", err)
	}
	if _, err := s.wdb.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("checkpointing the WAL: %w", err)
	}
	return nil
}

// DeleteRun implements Store.
func (s *sqlStore) DeleteRun(ctx context.Context, id string) error {
	var files []runFiles
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		files = nil
		var rid int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT rid FROM runs WHERE id = ?`), id).Scan(&rid)
		if isNoRows(err) {
			return errf(CodeNotFound, "no run %q", id)
		}
		if err != nil {
			return fmt.Errorf("looking up run %s: %w", id, err)
		}
		f, err := s.deleteRunRows(ctx, tx, rid, id, true)
		files = append(files, f)
		return err
	}, func(ctx context.Context) error {
		return errors.Join(s.removeFiles(files), s.reclaim(ctx))
	})
}

// DeleteExperiment implements Store.
func (s *sqlStore) DeleteExperiment(ctx context.Context, id string) error {
	var files []runFiles
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		files = nil
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM experiments WHERE id = ?`), id).Scan(&n); err != nil {
			return fmt.Errorf("looking up experiment %s: %w", id, err)
		}
		if n == 0 {
			return errf(CodeNotFound, "no experiment %q", id)
		}
		rows, err := tx.QueryContext(ctx, s.q(`SELECT rid, id FROM runs WHERE experiment_id = ?`), id)
		if err != nil {
			return fmt.Errorf("listing runs of experiment %s: %w", id, err)
		}
		type ref struct {
			rid int64
			id  string
		}
		var runs []ref
		for rows.Next() {
			var r ref
			if err := rows.Scan(&r.rid, &r.id); err != nil {
				rows.Close()
				return fmt.Errorf("listing runs of experiment %s: %w", id, err)
			}
			runs = append(runs, r)
		}
		rows.Close()
		for _, r := range runs {
			f, err := s.deleteRunRows(ctx, tx, r.rid, r.id, false)
			if err != nil {
				return err
			}
			files = append(files, f)
		}
		for _, t := range []string{"experiment_tags", "experiment_metrics", "experiment_run_counts"} {
			if _, err := s.exec(ctx, tx, `DELETE FROM `+t+` WHERE experiment_id = ?`, id); err != nil {
				return fmt.Errorf("deleting %s of experiment %s: %w", t, id, err)
			}
		}
		// Its MLflow traces (kept under MLflow's ID: "0" for Default).
		var name string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT name FROM experiments WHERE id = ?`), id).Scan(&name); err != nil {
			return fmt.Errorf("looking up experiment %s: %w", id, err)
		}
		mlID := id
		if name == "Default" {
			mlID = "0"
		}
		if _, err := s.exec(ctx, tx, `DELETE FROM mlflow_trace_spans WHERE trace_id IN (SELECT trace_id FROM mlflow_traces WHERE experiment_id = ?)`, mlID); err != nil {
			return fmt.Errorf("deleting the MLflow traces' spans of experiment %s: %w", id, err)
		}
		if _, err := s.exec(ctx, tx, `DELETE FROM mlflow_traces WHERE experiment_id = ?`, mlID); err != nil {
			return fmt.Errorf("deleting the MLflow traces of experiment %s: %w", id, err)
		}
		if _, err := s.exec(ctx, tx, `DELETE FROM experiments WHERE id = ?`, id); err != nil {
			return fmt.Errorf("deleting experiment %s: %w", id, err)
		}
		return nil
	}, func(ctx context.Context) error {
		return errors.Join(s.removeFiles(files), s.reclaim(ctx))
	})
}

// Reconcile implements Store.
func (s *sqlStore) Reconcile(ctx context.Context, alive func(Run) bool, reason string) ([]string, error) {
	if reason == "" {
		reason = "the training process is gone"
	}
	var dead []string
	cur := ""
	for {
		page, err := s.ListRuns(ctx, ListQuery{Filter: `status IN ("running", "queued")`, Sort: "id", Limit: 1000, Cursor: cur})
		if err != nil {
			return nil, fmt.Errorf("listing live runs: %w", err)
		}
		for _, r := range page.Runs {
			if !alive(r) {
				dead = append(dead, r.ID)
			}
		}
		if page.Next == "" {
			break
		}
		cur = page.Next
	}
	if len(dead) == 0 {
		return nil, nil
	}
	var failed []string
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		failed = failed[:0]
		now := time.Now().UnixNano()
		lock := ""
		if s.d == query.Postgres {
			lock = " FOR UPDATE"
		}
		for _, id := range dead {
			// Only a run still live is changed (it may have ended meanwhile).
			var rid int64
			var exp, st string
			err := tx.QueryRowContext(ctx, s.q(`SELECT rid, experiment_id, status FROM runs WHERE id = ?`+lock), id).Scan(&rid, &exp, &st)
			if isNoRows(err) || (err == nil && st != string(StatusRunning) && st != string(StatusQueued)) {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading run %s: %w", id, err)
			}
			if _, err := s.exec(ctx, tx, `UPDATE runs SET status = ?, ended = ?, updated = ?, error = ? WHERE rid = ?`,
				string(StatusFailed), now, now, reason, rid); err != nil {
				return fmt.Errorf("failing run %s: %w", id, err)
			}
			if err := lockExperiment(ctx, s, tx, exp); err != nil {
				return err
			}
			if err := addRunCount(ctx, s, tx, exp, Status(st), -1); err != nil {
				return err
			}
			if err := addRunCount(ctx, s, tx, exp, StatusFailed, 1); err != nil {
				return err
			}
			failed = append(failed, id)
		}
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return failed, nil
}
