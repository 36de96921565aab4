package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
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

// segment is one stretch of a keyset page's order, read in order from an
// index: the runs whose sort value is of one kind (a number, an integer,
// text) in (value, id) order, or the runs lacking it, in id order. A page
// reads its sort's segments in turn, from the cursor's on.
type segment struct {
	missing, noNum int                        // the cursor flags of its rows (makeCursor)
	from           string                     // FROM, with aliases r and e
	where          func(a *query.Args) string // its rows of the experiment
	val            string                     // the sorted value; "" for the runs lacking it
	fills          byte                       // the cursor slot val fills: 'n', 'i' or 's'
	empty          func() (bool, error)       // nil, or whether it is known to hold no run
	// idCol is the run's ID where the segment's index holds it (the tie
	// order, read from the index); "" for r.id.
	idCol string
}

// keysetRuns reads one page of an experiment's run IDs for the sorts an
// index serves, in the order pageQuery gives: the runs having a value, in
// (value, id) order (for a param the numbers, then the text), then the
// runs lacking it, in id order, each read from an index from the cursor on.
// No row outside the page is sorted; a filter is checked on the rows the
// index yields, in order, until the page is full. ok is false for a sort no
// index serves (a tag, a metric's count, other columns, a metric whose sort
// index is still being built): pageQuery answers those.
func (s *sqlStore) keysetRuns(ctx context.Context, expID string, p listParams) ([]int64, string, bool, error) {
	pg, ok, err := s.keysetPageOf(ctx, expID, p)
	if err != nil || !ok {
		return nil, "", false, err
	}
	return pg.rids(), pg.next, true, nil
}

// keysetPageOf is keysetRuns's page with each run's sort values.
func (s *sqlStore) keysetPageOf(ctx context.Context, expID string, p listParams) (*keysetPage, bool, error) {
	segs, ok, err := s.segments(ctx, expID, p.field)
	if err != nil || !ok {
		return nil, false, err
	}
	dir, after := " ASC", " > "
	if p.desc {
		dir, after = " DESC", " < "
	}
	// Ties by ID ascending though the values descend (MLflow's searches):
	// each run of equal values is sorted apart (SQLite: a sort of the
	// ORDER BY's right part), and the cursor is not one row value.
	idDir, idAfter := dir, after
	if p.idAsc {
		idDir, idAfter = " ASC", " > "
	}
	col := s.collate()
	c := p.cur
	var pg keysetPage
	for _, sg := range segs {
		at := 1 // the segment against the cursor: -1 before it, 0 its own, 1 after
		if c != nil {
			at = compareFlags(sg.missing, sg.noNum, c.Missing, c.NoNum)
		}
		if at < 0 {
			continue
		}
		if sg.empty != nil {
			if none, err := sg.empty(); err != nil {
				return nil, false, err
			} else if none {
				continue
			}
		}
		id := "r.id" + col
		if sg.idCol != "" {
			id = sg.idCol + col
		}
		a := query.NewArgs(s.d)
		var b strings.Builder
		b.WriteString("SELECT r.rid, r.id")
		if sg.val != "" {
			b.WriteString(", " + sg.val)
		}
		b.WriteString(" FROM " + sg.from + " WHERE " + sg.where(a) + " AND " + query.Compile(p.expr, a))
		if at == 0 {
			if sg.val != "" {
				var v any
				switch sg.fills {
				case 'n':
					v = c.Num
				case 'i':
					v = c.Int
				default:
					v = c.Str
				}
				// A row value: both SQLite and PostgreSQL seek the index to
				// the position, even in a long run of ties (an OR of the
				// two has them scan the ties before it).
				if p.idAsc {
					b.WriteString(" AND " + sg.val + strings.TrimSpace(after) + "= " + a.Add(v) + " AND (" + sg.val + after + a.Add(v) + " OR " + id + idAfter + a.Add(c.ID) + ")")
				} else if sg.idCol == "" || s.d == query.Postgres {
					// The bound on the value alone as well: PostgreSQL does
					// not start an index scan from a row value whose columns
					// come from two tables (a deep page sorted by a metric
					// took 75-82 ms at 100,000 runs without it), nor does
					// SQLite from one whose ID the index lacks (r.id).
					b.WriteString(" AND " + sg.val + strings.TrimSpace(after) + "= " + a.Add(v) + " AND (" + sg.val + ", " + id + ")" + after + "(" + a.Add(v) + ", " + a.Add(c.ID) + ")")
				} else {
					// The index holds the ID (a param's): the row value
					// alone. With the value's bound too, SQLite seeks to the
					// first of the value's ties and reads them all up to
					// the cursor (a deep page by a param of 3 values took
					// 90 ms at a million runs).
					b.WriteString(" AND (" + sg.val + ", " + id + ")" + after + "(" + a.Add(v) + ", " + a.Add(c.ID) + ")")
				}
			} else {
				b.WriteString(" AND " + id + idAfter + a.Add(c.ID))
			}
		}
		b.WriteString(" ORDER BY ")
		if sg.val != "" {
			b.WriteString(sg.val + dir + ", ")
		}
		b.WriteString(id + idDir + " LIMIT " + a.Add(int64(p.limit+1-len(pg.rows))))
		full, err := s.readSegment(ctx, b.String(), a.Values(), sg, p, &pg)
		if err != nil {
			return nil, false, err
		}
		if full {
			return &pg, true, nil
		}
	}
	return &pg, true, nil
}

// maxMergedExperiments is the most experiments whose runs ListRuns lists
// by merging a keyset page of each (mergedKeysetRuns); more are listed by
// the generic query.
const maxMergedExperiments = 32

// mergedKeysetRuns lists a page of the runs of experiments ids: a keyset
// page of each from the same cursor, merged in the page order (the
// generic query's: missing, non-numeric, number, integer, text, ID). A
// run of the merged page is among the first of its own experiment's, so
// each experiment's page holds all it contributes. ok is false for a sort
// no index serves.
func (s *sqlStore) mergedKeysetRuns(ctx context.Context, ids []string, p listParams) ([]int64, string, bool, error) {
	var all []pageRow
	more := false
	for _, id := range ids {
		pg, ok, err := s.keysetPageOf(ctx, id, p)
		if err != nil || !ok {
			return nil, "", false, err
		}
		all = append(all, pg.rows...)
		more = more || pg.next != ""
	}
	slices.SortFunc(all, func(a, b pageRow) int { return comparePageRows(a, b, p.desc, p.idAsc) })
	merged := keysetPage{rows: all}
	if len(all) > p.limit || more {
		// more: an experiment filled the page alone, so len(all) >= limit.
		merged.rows = all[:p.limit]
		merged.next = merged.rows[p.limit-1].cursor(p.sortKey)
	}
	return merged.rids(), merged.next, true, nil
}

// pageRow is a listed run with its sort values (makeCursor's).
type pageRow struct {
	rid int64
	n   sql.NullFloat64
	i   sql.NullInt64
	s   sql.NullString
	id  string
}

// cursor is the cursor of the page that follows r.
func (r pageRow) cursor(sortKey string) string { return makeCursor(r.n, r.i, r.s, r.id, sortKey) }

// comparePageRows orders two runs as the generic page query's ORDER BY
// does (buildPage): runs lacking the value last, then numbers before other
// values, then the number, integer and text (byte order, as the dialects'
// collations here), then the ID, each descending with desc except the ID
// with idAsc.
func comparePageRows(a, b pageRow, desc, idAsc bool) int {
	missing := func(r pageRow) int {
		if !r.n.Valid && !r.i.Valid && !r.s.Valid {
			return 1
		}
		return 0
	}
	noNum := func(r pageRow) int {
		if r.n.Valid {
			return 0
		}
		return 1
	}
	if c := cmp.Compare(missing(a), missing(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(noNum(a), noNum(b)); c != 0 {
		return c
	}
	dir := 1
	if desc {
		dir = -1
	}
	if c := cmp.Compare(a.n.Float64, b.n.Float64); c != 0 {
		return dir * c
	}
	if c := cmp.Compare(a.i.Int64, b.i.Int64); c != 0 {
		return dir * c
	}
	if c := strings.Compare(a.s.String, b.s.String); c != 0 {
		return dir * c
	}
	if idAsc {
		dir = 1
	}
	return dir * strings.Compare(a.id, b.id)
}

// keysetPage is a keyset page as its segments fill it.
type keysetPage struct {
	rows []pageRow // the page's runs with their sort values
	next string    // the cursor after the page, once it is full
}

// rids are the page's runs' row IDs, in order.
func (pg *keysetPage) rids() []int64 {
	out := make([]int64, len(pg.rows))
	for i, r := range pg.rows {
		out[i] = r.rid
	}
	return out
}

// readSegment appends the rids one segment query yields to pg until the
// page is full; then it sets pg.next to the cursor of the page's last run
// and reports full.
func (s *sqlStore) readSegment(ctx context.Context, text string, args []any, sg segment, p listParams, pg *keysetPage) (full bool, err error) {
	if s.cfg.segmentQuery != nil {
		s.cfg.segmentQuery(text, args)
	}
	rows, err := s.rdb.QueryContext(ctx, text, args...)
	if err != nil {
		return false, fmt.Errorf("listing runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid int64
		var id string
		var n sql.NullFloat64
		var i sql.NullInt64
		var st sql.NullString
		dst := []any{&rid, &id}
		switch {
		case sg.val == "":
		case sg.fills == 'i':
			dst = append(dst, &i)
		case sg.fills == 's':
			dst = append(dst, &st)
		default:
			dst = append(dst, &n)
		}
		if err := rows.Scan(dst...); err != nil {
			return false, fmt.Errorf("reading runs: %w", err)
		}
		if len(pg.rows) == p.limit {
			pg.next = pg.rows[len(pg.rows)-1].cursor(p.sortKey)
			return true, nil
		}
		pg.rows = append(pg.rows, pageRow{rid: rid, n: n, i: i, s: st, id: id})
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("reading runs: %w", err)
	}
	return false, nil
}

// compareFlags orders a segment's cursor flags (missing, noNum) against a
// cursor's: rows are sorted by missing, then noNum, both ascending.
func compareFlags(m1, n1, m2, n2 int) int {
	if m1 != m2 {
		return cmp.Compare(m1, m2)
	}
	return cmp.Compare(n1, n2)
}

// segments are the stretches a page of experiment expID sorted by f reads,
// in order; ok is false when no index serves the sort.
func (s *sqlStore) segments(ctx context.Context, expID string, f query.Field) ([]segment, bool, error) {
	const runsFrom = "runs r JOIN experiments e ON e.id = r.experiment_id"
	inExp := func(a *query.Args) string { return "r.experiment_id = " + a.Add(expID) }
	switch {
	case f.Kind == query.Column:
		sqlCol, fills, notNull, found := indexedColumn(f.Name)
		if !found {
			return nil, false, nil
		}
		val := sqlCol
		if fills == 's' {
			val += s.collate()
		}
		noNum := 1 // an integer or text column fills no number
		return []segment{
			{missing: 0, noNum: noNum, from: runsFrom, val: val, fills: fills,
				where: func(a *query.Args) string { return inExp(a) + " AND " + sqlCol + " IS NOT NULL" }},
			{missing: 1, noNum: 1, from: runsFrom,
				where: func(a *query.Args) string { return inExp(a) + " AND " + sqlCol + " IS NULL" },
				empty: func() (bool, error) { return notNull, nil }},
		}, true, nil
	case f.Kind == query.ParamKey:
		// params_sort_num and params_sort_str (migration 7): (experiment_id,
		// key, value, run_id, run_rid), the numbers (value_num) and the text
		// (value_str, value_num NULL) apart; numbers sort first. Ties are
		// common (an optimizer's name, a batch size): their order, by run
		// ID, is read from the index too (p.run_id).
		from := "params p CROSS JOIN runs r JOIN experiments e ON e.id = r.experiment_id"
		has := func(a *query.Args) string {
			return "p.experiment_id = " + a.Add(expID) + " AND p.key = " + a.Add(f.Key) + " AND r.rid = p.run_rid"
		}
		return []segment{
			{missing: 0, noNum: 0, from: from, val: "p.value_num", fills: 'n', idCol: "p.run_id",
				where: func(a *query.Args) string { return has(a) + " AND p.value_num IS NOT NULL" }},
			{missing: 0, noNum: 1, from: from, val: "p.value_str" + s.collate(), fills: 's', idCol: "p.run_id",
				where: func(a *query.Args) string {
					return has(a) + " AND p.value_num IS NULL AND p.value_str IS NOT NULL"
				}},
			{missing: 1, noNum: 1, from: runsFrom,
				where: func(a *query.Args) string {
					return inExp(a) + " AND NOT EXISTS (SELECT 1 FROM params p WHERE p.run_rid = r.rid AND p.key = " + a.Add(f.Key) +
						" AND (p.value_num IS NOT NULL OR p.value_str IS NOT NULL))"
				}},
		}, true, nil
	case (f.Kind == query.Metric || f.Kind == query.System) && f.Agg != "count":
		kind := int64(kindMetric)
		if f.Kind == query.System {
			kind = kindSystem
		}
		var keyID int64
		err := s.rdb.QueryRowContext(ctx, s.q(`SELECT id FROM metric_keys WHERE kind = ? AND name = ?`), kind, f.Key).Scan(&keyID)
		switch {
		case isNoRows(err):
			keyID = -1 // no run has it: every run lacks it
		case err != nil:
			return nil, false, fmt.Errorf("looking up metric key %s: %w", f.Key, err)
		}
		aggCol := metricAggColumn(f.Agg)
		ready, err := s.sortIndex(ctx, keyID, aggCol)
		if err != nil {
			return nil, false, err
		}
		// The key as a literal: the sort index is partial (WHERE key_id =
		// K), which a planner uses only for a query naming that constant.
		// keyID is the store's own integer, never a client's text.
		key := strconv.FormatInt(keyID, 10)
		agg := "ms." + aggCol
		// CROSS JOIN keeps SQLite reading the summary's index first, in
		// order (the runs' experiment index would mean sorting them all).
		from := "metric_summary ms CROSS JOIN runs r JOIN experiments e ON e.id = r.experiment_id"
		inSummary := func(a *query.Args) string { return "ms.experiment_id = " + a.Add(expID) }
		if !ready && keyID >= 0 {
			if s.d == query.Postgres {
				return nil, false, nil // sorted in full while the index is built
			}
			// SQLite while the index is built: the page sorted in full from
			// the experiment's runs, each run's summary read by its key
			// (without the index, the summary first would be a scan of
			// every key's): 141 ms against 312 ms for the generic page's
			// query at 200,000 runs in sqlite3.
			from = "runs r CROSS JOIN metric_summary ms JOIN experiments e ON e.id = r.experiment_id"
			inSummary = func(a *query.Args) string { return inExp(a) + " AND ms.experiment_id = r.experiment_id" }
		}
		return []segment{
			{missing: 0, noNum: 0, from: from, val: agg, fills: 'n',
				where: func(a *query.Args) string {
					return inSummary(a) + " AND ms.key_id = " + key + " AND " + agg + " IS NOT NULL AND r.rid = ms.run_rid"
				}},
			{missing: 1, noNum: 1, from: runsFrom,
				where: func(a *query.Args) string {
					return inExp(a) + " AND NOT EXISTS (SELECT 1 FROM metric_summary ms WHERE ms.run_rid = r.rid AND ms.key_id = " + key + " AND " + agg + " IS NOT NULL)"
				},
				empty: func() (bool, error) {
					if kind != kindMetric || keyID < 0 {
						return false, nil
					}
					return s.noRunLacks(ctx, expID, keyID, agg)
				}},
		}, true, nil
	}
	return nil, false, nil
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
