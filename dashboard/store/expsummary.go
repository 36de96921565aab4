package store

// The experiment summary kept at write time (migration 6): per experiment
// and training metric key, how many runs report it and the runs holding its
// lowest and highest value (experiment_metrics); per experiment and status,
// how many runs (experiment_run_counts). Apply, DeleteRun, DeleteExperiment
// and Reconcile update them in the transaction of their write, so
// GetExperiment reads a few rows instead of every run's summaries, and two
// dashboards on one PostgreSQL see the same summary.
//
// A run's min and max only move outward (metric_summary keeps every value
// ever written), so a write can only lower an experiment's min or raise
// its max: Apply compares the batch's values with the kept ones. Only a
// deleted run can take an extreme away; DeleteRun then recomputes that
// key's extreme from the remaining runs. Ties go to the smaller run ID in
// byte order.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/fw-serve/fw/dashboard/query"
)

// touchExperiment queues the update time of an experiment that got a run,
// written by lockExperiments.
func (a *applier) touchExperiment(exp string, t int64) {
	if a.expTouched == nil {
		a.expTouched = map[string]int64{}
	}
	a.expTouched[exp] = max(a.expTouched[exp], t)
}

// lockExperiments writes the queued experiment update times and, on
// PostgreSQL, locks the row of every experiment of the batch's runs, in ID
// order, before their summary rows are written: writers of one experiment
// on two dashboards then take its summary rows one after the other.
func (a *applier) lockExperiments(ctx context.Context) error {
	set := map[string]bool{}
	for e := range a.expTouched {
		set[e] = true
	}
	if a.s.d == query.Postgres {
		for _, rs := range a.runs {
			if rs != nil {
				set[rs.experimentID] = true
			}
		}
	}
	ids := make([]string, 0, len(set))
	for e := range set {
		ids = append(ids, e)
	}
	slices.Sort(ids)
	for _, e := range ids {
		if t, ok := a.expTouched[e]; ok {
			if _, err := a.s.exec(ctx, a.tx, `UPDATE experiments SET updated = ? WHERE id = ?`, t, e); err != nil {
				return fmt.Errorf("touching experiment %s: %w", e, err)
			}
			continue
		}
		if err := lockExperiment(ctx, a.s, a.tx, e); err != nil {
			return err
		}
	}
	a.expTouched = nil
	return nil
}

// lockExperiment locks an experiment's row on PostgreSQL (see
// lockExperiments); SQLite has one writer.
func lockExperiment(ctx context.Context, s *sqlStore, tx *sql.Tx, exp string) error {
	if s.d != query.Postgres {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.q(`SELECT id FROM experiments WHERE id = ? FOR UPDATE`), exp); err != nil {
		return fmt.Errorf("locking experiment %s: %w", exp, err)
	}
	return nil
}

// countKey is one row of experiment_run_counts.
type countKey struct {
	exp    string
	status Status
}

// count queues a change of an experiment's run count by status, written by
// flushCounts at the end of the Apply.
func (a *applier) count(exp string, st Status, d int64) {
	if a.counts == nil {
		a.counts = map[countKey]int64{}
	}
	a.counts[countKey{exp, st}] += d
}

// flushCounts writes the queued run count changes, in key order (two
// dashboards on one PostgreSQL lock the rows in the same order).
func (a *applier) flushCounts(ctx context.Context) error {
	counts := a.counts
	a.counts = nil
	keys := make([]countKey, 0, len(counts))
	for k, d := range counts {
		if d != 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y countKey) int {
		if c := strings.Compare(x.exp, y.exp); c != 0 {
			return c
		}
		return strings.Compare(string(x.status), string(y.status))
	})
	for _, k := range keys {
		if err := addRunCount(ctx, a.s, a.tx, k.exp, k.status, counts[k]); err != nil {
			return err
		}
	}
	return nil
}

func addRunCount(ctx context.Context, s *sqlStore, tx *sql.Tx, exp string, st Status, d int64) error {
	_, err := s.exec(ctx, tx, `INSERT INTO experiment_run_counts (experiment_id, status, n) VALUES (?, ?, ?)
		ON CONFLICT (experiment_id, status) DO UPDATE SET n = experiment_run_counts.n + excluded.n`, exp, string(st), d)
	if err != nil {
		return fmt.Errorf("counting the %s runs of experiment %s: %w", st, exp, err)
	}
	return nil
}

// expMetric is a batch's change of one experiment_metrics row: runs that
// report the key for the first time, and the batch's lowest and highest
// value with their runs.
type expMetric struct {
	exp            string
	key            int64
	runs           int64
	min, max       float64
	minRun, maxRun string
	has            bool
}

func (m *expMetric) add(run string, g *agg, isNew bool) {
	if isNew {
		m.runs++
	}
	if !g.hasMin {
		return
	}
	if !m.has || g.min < m.min || (g.min == m.min && run < m.minRun) {
		m.min, m.minRun = g.min, run
	}
	if !m.has || g.max > m.max || (g.max == m.max && run < m.maxRun) {
		m.max, m.maxRun = g.max, run
	}
	m.has = true
}

// flushExperimentMetrics folds a batch's changes into experiment_metrics,
// in (experiment, key) order.
func (a *applier) flushExperimentMetrics(ctx context.Context, ms []*expMetric) error {
	slices.SortFunc(ms, func(x, y *expMetric) int {
		if c := strings.Compare(x.exp, y.exp); c != 0 {
			return c
		}
		return cmpInt(x.key, y.key)
	})
	col := a.s.collate()
	const per = 500
	for off := 0; off < len(ms); off += per {
		chunk := ms[off:min(off+per, len(ms))]
		args := make([]any, 0, 7*len(chunk))
		for _, m := range chunk {
			if m.has {
				args = append(args, m.exp, m.key, m.runs, m.min, m.minRun, m.max, m.maxRun)
			} else {
				args = append(args, m.exp, m.key, m.runs, nil, nil, nil, nil)
			}
		}
		text := valuesSQL(`INSERT INTO experiment_metrics (experiment_id, key_id, runs, min_value, min_run, max_value, max_run) VALUES `, 7, len(chunk)) + `
ON CONFLICT (experiment_id, key_id) DO UPDATE SET
	runs = experiment_metrics.runs + excluded.runs,
	min_run = CASE WHEN excluded.min_value IS NOT NULL AND (experiment_metrics.min_value IS NULL OR excluded.min_value < experiment_metrics.min_value
		OR (excluded.min_value = experiment_metrics.min_value AND excluded.min_run` + col + ` < experiment_metrics.min_run` + col + `)) THEN excluded.min_run ELSE experiment_metrics.min_run END,
	min_value = CASE WHEN excluded.min_value IS NOT NULL AND (experiment_metrics.min_value IS NULL OR excluded.min_value < experiment_metrics.min_value) THEN excluded.min_value ELSE experiment_metrics.min_value END,
	max_run = CASE WHEN excluded.max_value IS NOT NULL AND (experiment_metrics.max_value IS NULL OR excluded.max_value > experiment_metrics.max_value
		OR (excluded.max_value = experiment_metrics.max_value AND excluded.max_run` + col + ` < experiment_metrics.max_run` + col + `)) THEN excluded.max_run ELSE experiment_metrics.max_run END,
	max_value = CASE WHEN excluded.max_value IS NOT NULL AND (experiment_metrics.max_value IS NULL OR excluded.max_value > experiment_metrics.max_value) THEN excluded.max_value ELSE experiment_metrics.max_value END`
		if _, err := a.s.exec(ctx, a.tx, text, args...); err != nil {
			return fmt.Errorf("writing experiment metric summaries: %w", err)
		}
	}
	return nil
}

// queryTx runs a query in the writer's transaction (prepared and cached on
// SQLite, as exec).
func (s *sqlStore) queryTx(ctx context.Context, tx *sql.Tx, text string, args ...any) (*sql.Rows, error) {
	if s.d == query.Postgres {
		return tx.QueryContext(ctx, s.q(text), args...)
	}
	st, err := s.stmt(ctx, tx, text)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// lockRunStatus reads a run's status for a change of it; on PostgreSQL the
// row is locked, so two dashboards changing one run's status count it once.
func (s *sqlStore) lockRunStatus(ctx context.Context, tx *sql.Tx, rid int64) (Status, error) {
	lock := ""
	if s.d == query.Postgres {
		lock = " FOR UPDATE"
	}
	var st string
	if err := tx.QueryRowContext(ctx, s.q(`SELECT status FROM runs WHERE rid = ?`+lock), rid).Scan(&st); err != nil {
		return "", err
	}
	return Status(st), nil
}

// unsummariseRun takes a run that is about to be deleted out of its
// experiment's summary: its status count and its keys' run counts. It
// returns the keys whose lowest or highest value the run holds, for
// recomputeExtremes once its rows are gone.
func (s *sqlStore) unsummariseRun(ctx context.Context, tx *sql.Tx, rid int64, id, exp string, st Status) ([]int64, error) {
	// Rows are locked in the order Apply locks them (the experiment, its
	// metrics by key, then counts), so a delete and a write on two
	// dashboards do not deadlock.
	if err := lockExperiment(ctx, s, tx, exp); err != nil {
		return nil, err
	}
	if s.d == query.Postgres {
		if _, err := tx.ExecContext(ctx, s.q(`SELECT key_id FROM experiment_metrics WHERE experiment_id = ? AND key_id IN (SELECT key_id FROM metric_summary WHERE run_rid = ?) ORDER BY key_id FOR UPDATE`), exp, rid); err != nil {
			return nil, fmt.Errorf("locking the summary of experiment %s: %w", exp, err)
		}
	}
	if _, err := s.exec(ctx, tx, `UPDATE experiment_metrics SET runs = runs - 1 WHERE experiment_id = ? AND key_id IN (SELECT key_id FROM metric_summary WHERE run_rid = ?)`, exp, rid); err != nil {
		return nil, fmt.Errorf("uncounting run %s in the summary of experiment %s: %w", id, exp, err)
	}
	if err := addRunCount(ctx, s, tx, exp, st, -1); err != nil {
		return nil, err
	}
	rows, err := s.queryTx(ctx, tx, `SELECT key_id FROM experiment_metrics WHERE experiment_id = ? AND (min_run = ? OR max_run = ?) ORDER BY key_id`, exp, id, id)
	if err != nil {
		return nil, fmt.Errorf("reading the extremes run %s holds: %w", id, err)
	}
	defer rows.Close()
	var keys []int64
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("reading the extremes run %s holds: %w", id, err)
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// recomputeExtremes sets the lowest and highest value of the given keys of
// an experiment, and their runs, from the runs' summaries, and drops the
// keys no run reports any more.
func (s *sqlStore) recomputeExtremes(ctx context.Context, tx *sql.Tx, exp string, keys []int64) error {
	if _, err := s.exec(ctx, tx, `DELETE FROM experiment_metrics WHERE experiment_id = ? AND runs <= 0`, exp); err != nil {
		return fmt.Errorf("dropping unreported metrics of experiment %s: %w", exp, err)
	}
	col := s.collate()
	for _, k := range keys {
		var ext [2]struct {
			v   sql.NullFloat64
			run sql.NullString
		}
		for i, order := range []string{"s.min_value, r.id" + col, "s.max_value DESC, r.id" + col} {
			col := "s.min_value"
			if i == 1 {
				col = "s.max_value"
			}
			err := tx.QueryRowContext(ctx, s.q(`SELECT `+col+`, r.id FROM metric_summary s JOIN runs r ON r.rid = s.run_rid
				WHERE r.experiment_id = ? AND s.key_id = ? AND `+col+` IS NOT NULL ORDER BY `+order+` LIMIT 1`), exp, k).Scan(&ext[i].v, &ext[i].run)
			if err != nil && !isNoRows(err) {
				return fmt.Errorf("recomputing metric %d of experiment %s: %w", k, exp, err)
			}
		}
		if _, err := s.exec(ctx, tx, `UPDATE experiment_metrics SET min_value = ?, min_run = ?, max_value = ?, max_run = ? WHERE experiment_id = ? AND key_id = ?`,
			ext[0].v, ext[0].run, ext[1].v, ext[1].run, exp, k); err != nil {
			return fmt.Errorf("recomputing metric %d of experiment %s: %w", k, exp, err)
		}
	}
	return nil
}
