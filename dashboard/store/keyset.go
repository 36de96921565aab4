package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/dashboard/query"
)

// indexedColumn says whether an index serves the sort of a run column
// within an experiment, and gives the column's SQL, which slot of the sort
// tuple it fills and whether it is never NULL. Migration 7 adds the indexes
// that runs_experiment and runs_experiment_updated did not give.
func indexedColumn(name string) (sql string, fills byte, notNull, ok bool) {
	switch name {
	case "created", "updated":
		return "r." + name, 'i', true, true
	case "started":
		return "r.started", 'i', false, true
	case "id", "name":
		return "r." + name, 's', true, true
	}
	return "", 0, false, false
}

// metricAggColumn is metric_summary's column of a metric aggregate.
func metricAggColumn(agg string) string {
	switch agg {
	case "min":
		return "min_value"
	case "max":
		return "max_value"
	}
	return "last_value"
}

// keysetRuns reads one page of an experiment's run IDs for the sorts an
// index serves, in the order pageQuery gives: the rows that have a value,
// read in (value, id) order from an index from the cursor on, then the rows
// lacking it in id order. No row outside the page is sorted; a filter is
// checked on the rows the index yields, in order, until the page is full.
// ok is false for a sort no index serves (a param, a tag, a metric's
// count, other columns): pageQuery answers those.
func (s *sqlStore) keysetRuns(ctx context.Context, expID string, p listParams) (rids []int64, next string, ok bool, err error) {
	dir, cmp, cmpEq := " ASC", " > ", " >= "
	if p.desc {
		dir, cmp, cmpEq = " DESC", " < ", " <= "
	}
	col := s.collate()
	var fills byte
	var from string // FROM and the rows having a value (aliases r and e)
	var has func(a *query.Args) string
	var val string
	var lacks func(a *query.Args) string // the condition on r of a run lacking the value
	var noneLack func() (bool, error)    // whether no run of the experiment can lack it
	f := p.field
	switch {
	case f.Kind == query.Column:
		sqlCol, colFills, notNull, found := indexedColumn(f.Name)
		if !found {
			return nil, "", false, nil
		}
		fills, val = colFills, sqlCol
		if fills == 's' {
			val += col
		}
		from = "runs r JOIN experiments e ON e.id = r.experiment_id"
		has = func(a *query.Args) string {
			return "r.experiment_id = " + a.Add(expID) + " AND " + sqlCol + " IS NOT NULL"
		}
		lacks = func(*query.Args) string { return sqlCol + " IS NULL" }
		noneLack = func() (bool, error) { return notNull, nil }
	case (f.Kind == query.Metric || f.Kind == query.System) && f.Agg != "count":
		kind := int64(kindMetric)
		if f.Kind == query.System {
			kind = kindSystem
		}
		agg := "ms." + metricAggColumn(f.Agg)
		var keyID int64
		err := s.rdb.QueryRowContext(ctx, s.q(`SELECT id FROM metric_keys WHERE kind = ? AND name = ?`), kind, f.Key).Scan(&keyID)
		switch {
		case isNoRows(err):
			keyID = -1 // no run has it: every run lacks it
		case err != nil:
			return nil, "", false, fmt.Errorf("looking up metric key %s: %w", f.Key, err)
		}
		aggCol := metricAggColumn(f.Agg)
		ready, err := s.sortIndex(ctx, keyID, aggCol)
		if err != nil {
			return nil, "", false, err
		}
		if !ready && keyID >= 0 {
			return nil, "", false, nil // sorted in full while the index is built
		}
		// The key as a literal: the sort index is partial (WHERE key_id =
		// K), which a planner uses only for a query naming that constant.
		// keyID is the store's own integer, never a client's text.
		key := strconv.FormatInt(keyID, 10)
		fills, val = 'n', agg
		// CROSS JOIN keeps SQLite reading the summary's index first, in
		// order (the runs' experiment index would mean sorting them all).
		from = "metric_summary ms CROSS JOIN runs r JOIN experiments e ON e.id = r.experiment_id"
		has = func(a *query.Args) string {
			return "ms.experiment_id = " + a.Add(expID) + " AND ms.key_id = " + key + " AND " + agg + " IS NOT NULL AND r.rid = ms.run_rid"
		}
		lacks = func(a *query.Args) string {
			return "NOT EXISTS (SELECT 1 FROM metric_summary ms WHERE ms.run_rid = r.rid AND ms.key_id = " + a.Add(keyID) + " AND " + agg + " IS NOT NULL)"
		}
		noneLack = func() (bool, error) {
			if kind != kindMetric || keyID < 0 {
				return false, nil
			}
			return s.noRunLacks(ctx, expID, keyID, "ms."+aggCol)
		}
	default:
		return nil, "", false, nil
	}
	want := p.limit + 1
	var last struct {
		n   sql.NullFloat64
		i   sql.NullInt64
		s   sql.NullString
		id  string
		set bool
	}
	add := func(rid int64, id string) bool {
		if len(rids) == p.limit {
			next = makeCursor(last.n, last.i, last.s, last.id, p.sortKey)
			return false
		}
		rids = append(rids, rid)
		return true
	}
	c := p.cur
	if c == nil || c.Missing == 0 {
		a := query.NewArgs(s.d)
		var b strings.Builder
		b.WriteString("SELECT r.rid, r.id, " + val + " FROM " + from + " WHERE " + has(a) + " AND " + query.Compile(p.expr, a))
		if c != nil {
			var v any
			switch fills {
			case 'n':
				v = c.Num
			case 'i':
				v = c.Int
			default:
				v = c.Str
			}
			b.WriteString(" AND " + val + cmpEq + a.Add(v) + " AND (" + val + cmp + a.Add(v) + " OR r.id" + col + cmp + a.Add(c.ID) + ")")
		}
		b.WriteString(" ORDER BY " + val + dir + ", r.id" + col + dir + " LIMIT " + a.Add(int64(want)))
		rows, err := s.rdb.QueryContext(ctx, b.String(), a.Values()...)
		if err != nil {
			return nil, "", false, fmt.Errorf("listing runs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var rid int64
			var id string
			var n sql.NullFloat64
			var i sql.NullInt64
			var st sql.NullString
			dst := []any{&rid, &id, &n}
			if fills == 'i' {
				dst[2] = &i
			} else if fills == 's' {
				dst[2] = &st
			}
			if err := rows.Scan(dst...); err != nil {
				return nil, "", false, fmt.Errorf("reading runs: %w", err)
			}
			if !add(rid, id) {
				break
			}
			last.n, last.i, last.s, last.id = n, i, st, id
		}
		if err := rows.Err(); err != nil {
			return nil, "", false, fmt.Errorf("reading runs: %w", err)
		}
		rows.Close()
		if next != "" {
			return rids, next, true, nil
		}
	}
	if none, err := noneLack(); err != nil || none {
		return rids, "", true, err
	}
	// The runs lacking the value, in id order.
	a := query.NewArgs(s.d)
	var b strings.Builder
	b.WriteString("SELECT r.rid, r.id FROM runs r JOIN experiments e ON e.id = r.experiment_id WHERE r.experiment_id = " + a.Add(expID) + " AND " + lacks(a) + " AND " + query.Compile(p.expr, a))
	if c != nil && c.Missing == 1 {
		b.WriteString(" AND r.id" + col + cmp + a.Add(c.ID))
	}
	b.WriteString(" ORDER BY r.id" + col + dir + " LIMIT " + a.Add(int64(want-len(rids))))
	rows, err := s.rdb.QueryContext(ctx, b.String(), a.Values()...)
	if err != nil {
		return nil, "", false, fmt.Errorf("listing runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid int64
		var id string
		if err := rows.Scan(&rid, &id); err != nil {
			return nil, "", false, fmt.Errorf("reading runs: %w", err)
		}
		if !add(rid, id) {
			break
		}
		last.n, last.i, last.s, last.id = sql.NullFloat64{}, sql.NullInt64{}, sql.NullString{}, id
	}
	if err := rows.Err(); err != nil {
		return nil, "", false, fmt.Errorf("reading runs: %w", err)
	}
	return rids, next, true, nil
}

// noRunLacks reports whether every run of the experiment has a value of
// the training metric keyID in column agg: the kept summary counts as many
// runs reporting the key as the experiment has, and none of them has a
// NULL value there (a key logged only as NaN). Then the page needs no scan
// for runs lacking it.
func (s *sqlStore) noRunLacks(ctx context.Context, expID string, keyID int64, agg string) (bool, error) {
	var reporting, total int64
	err := s.rdb.QueryRowContext(ctx, s.q(`SELECT COALESCE((SELECT runs FROM experiment_metrics WHERE experiment_id = ? AND key_id = ?), 0),
		COALESCE((SELECT SUM(n) FROM experiment_run_counts WHERE experiment_id = ?), 0)`), expID, keyID, expID).Scan(&reporting, &total)
	if err != nil {
		return false, fmt.Errorf("reading the experiment's counts: %w", err)
	}
	if reporting != total {
		return false, nil
	}
	var one int
	// The key as a literal, so that the key's partial sort index serves it.
	err = s.rdb.QueryRowContext(ctx, s.q(`SELECT 1 FROM metric_summary ms WHERE ms.experiment_id = ? AND ms.key_id = `+strconv.FormatInt(keyID, 10)+` AND `+agg+` IS NULL LIMIT 1`), expID).Scan(&one)
	if isNoRows(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking for NaN-only summaries: %w", err)
	}
	return false, nil
}
