package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fw-serve/fw/dashboard/query"
)

// Listing limits.
const (
	defaultLimit = 100
	maxLimit     = 10000
)

const runCols = `r.rid, r.id, r.experiment_id, e.name AS exp_name, r.name, r.status, r.created, r.updated, r.started, r.ended,
	r.error, r.traceback, r.exit_code, r.step, r.total_steps, r.epoch, r.total_epochs, r.progress_time,
	r.source_recipe, r.source_command, r.source_args, r.git_commit, r.host, r.pid, r.parent_run_id, r.parent_checkpoint`

// runRow receives a scanned run row.
type runRow struct {
	rid                                                             int64
	run                                                             Run
	created, updated                                                int64
	started, ended, exitCode, step, totalSteps, progressTime, pid   sql.NullInt64
	errMsg, traceback, recipe, command, args, git, host, pRun, pCkp sql.NullString
	epoch, totalEpochs                                              sql.NullFloat64
	status                                                          string
}

func (rr *runRow) dest() []any {
	r := &rr.run
	return []any{&rr.rid, &r.ID, &r.ExperimentID, &r.Experiment, &r.Name, &rr.status, &rr.created, &rr.updated, &rr.started, &rr.ended,
		&rr.errMsg, &rr.traceback, &rr.exitCode, &rr.step, &rr.totalSteps, &rr.epoch, &rr.totalEpochs, &rr.progressTime,
		&rr.recipe, &rr.command, &rr.args, &rr.git, &rr.host, &rr.pid, &rr.pRun, &rr.pCkp}
}

func (rr *runRow) finish() Run {
	r := rr.run
	r.Status = Status(rr.status)
	r.Created, r.Updated = fromNanos(rr.created), fromNanos(rr.updated)
	if rr.started.Valid {
		t := fromNanos(rr.started.Int64)
		r.Started = &t
	}
	if rr.ended.Valid {
		t := fromNanos(rr.ended.Int64)
		r.Ended = &t
	}
	if rr.exitCode.Valid {
		v := int(rr.exitCode.Int64)
		r.ExitCode = &v
	}
	r.Error, r.Traceback = rr.errMsg.String, rr.traceback.String
	r.Progress = Progress{Step: rr.step.Int64, TotalSteps: rr.totalSteps.Int64, Epoch: rr.epoch.Float64, TotalEpochs: rr.totalEpochs.Float64}
	if rr.progressTime.Valid {
		r.Progress.Time = fromNanos(rr.progressTime.Int64)
	}
	r.Source = Source{Recipe: rr.recipe.String, Command: rr.command.String, GitCommit: rr.git.String, Host: rr.host.String, PID: int(rr.pid.Int64)}
	if rr.args.Valid {
		_ = json.Unmarshal([]byte(rr.args.String), &r.Source.Args)
	}
	r.ParentRunID, r.ParentCheckpoint = rr.pRun.String, rr.pCkp.String
	r.Params, r.Tags, r.Metrics = map[string]any{}, map[string]string{}, map[string]Summary{}
	return r
}

// cursor is the position after the last row of a page: the sort tuple.
type cursor struct {
	Missing int     `json:"m"`
	NoNum   int     `json:"k"`
	Num     float64 `json:"n"`
	Int     int64   `json:"i"`
	Str     string  `json:"s"`
	ID      string  `json:"id"`
	Sort    string  `json:"o"`
}

func makeCursor(n sql.NullFloat64, i sql.NullInt64, s sql.NullString, id, sortKey string) string {
	c := cursor{ID: id, Sort: sortKey, Num: n.Float64, Int: i.Int64, Str: s.String}
	if !n.Valid && !i.Valid && !s.Valid {
		c.Missing = 1
	}
	if !n.Valid {
		c.NoNum = 1
	}
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// pageSpec describes a listing for pageQuery.
type pageSpec struct {
	target query.Target
	cols   string
	from   string
	idCol  string
	narrow func(a *query.Args) string // extra condition, "" for none
}

// listParams is a listing request, parsed and checked.
type listParams struct {
	expr    query.Expr
	field   query.Field
	sortKey string
	limit   int
	desc    bool
	// idAsc breaks ties by ID ascending though desc (ListQuery.IDAsc).
	idAsc bool
	cur   *cursor // nil: the first page
}

// parseList reads q's limit, filter, sort and cursor for target t. A cursor
// must have been made for the same sort and have the shape that sort's
// rows give (see cursor.fits), so a tampered one is refused rather than
// read as some other position.
func parseList(q ListQuery, t query.Target) (listParams, error) {
	p := listParams{limit: q.Limit, desc: q.Desc}
	if p.limit <= 0 {
		p.limit = defaultLimit
	}
	if p.limit > maxLimit {
		return p, errf(CodeInvalidArgument, "limit %d is over %d", p.limit, maxLimit)
	}
	var err error
	if p.expr, err = query.Parse(q.Filter, t); err != nil {
		return p, storeErr(CodeInvalidArgument, "filter", err)
	}
	sortName := q.Sort
	if sortName == "" {
		sortName = "created"
	}
	if p.field, err = query.ParseField(sortName, t); err != nil {
		return p, storeErr(CodeInvalidArgument, "sort", err)
	}
	p.sortKey = p.field.String()
	if q.Desc {
		p.sortKey += " desc"
		if q.IDAsc {
			p.sortKey += ", id asc"
			p.idAsc = true
		}
	}
	if q.Cursor != "" {
		const made = "cursor is not one this store made: pass the previous page's next unchanged"
		raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		var c cursor
		if err == nil {
			err = json.Unmarshal(raw, &c)
		}
		if err != nil {
			return p, errf(CodeInvalidArgument, made)
		}
		if c.Sort != p.sortKey {
			return p, errf(CodeInvalidArgument, "cursor was made for sort %q, not %q: start again without a cursor", c.Sort, p.sortKey)
		}
		if !c.fits(p.field) {
			return p, errf(CodeInvalidArgument, made)
		}
		p.cur = &c
	}
	return p, nil
}

// sortFills says which of the sort tuple's values a field fills: "n" (a
// number), "i" (an integer), "s" (text), or "ns" for a param (a number,
// else text).
func sortFills(f query.Field) string {
	switch f.Kind {
	case query.Column:
		switch f.Type {
		case query.String:
			return "s"
		case query.Number:
			return "n"
		}
		return "i"
	case query.Tag:
		return "s"
	case query.ParamKey:
		return "ns"
	}
	return "n"
}

// fits reports whether c is a position a row sorted by f can have: flags
// of 0 or 1, no values where the value is missing, and values only in the
// slots f fills.
func (c cursor) fits(f query.Field) bool {
	if c.Missing < 0 || c.Missing > 1 || c.NoNum < 0 || c.NoNum > 1 || c.ID == "" {
		return false
	}
	hasN := c.NoNum == 0
	if c.Missing == 1 {
		return !hasN && c.Num == 0 && c.Int == 0 && c.Str == ""
	}
	switch sortFills(f) {
	case "n":
		return hasN && c.Int == 0 && c.Str == ""
	case "i":
		return !hasN && c.Num == 0 && c.Str == ""
	case "s":
		return !hasN && c.Num == 0 && c.Int == 0
	}
	return c.Int == 0 && (hasN && c.Str == "" || !hasN && c.Num == 0)
}

// pageQuery builds the keyset-paged listing: the filter and sort come from
// the query language, values are bound, and the page is ordered by
// (missing, non-numeric, number, integer, text, id). It serves every sort
// and filter by sorting the rows the filter passes; keysetRuns reads the
// sorts an index serves in order instead.
func (s *sqlStore) pageQuery(spec pageSpec, q ListQuery) (text string, args []any, limit int, sortKey string, err error) {
	p, err := parseList(q, spec.target)
	if err != nil {
		return "", nil, 0, "", err
	}
	text, args = s.buildPage(spec, p)
	return text, args, p.limit, p.sortKey, nil
}

func (s *sqlStore) buildPage(spec pageSpec, p listParams) (string, []any) {
	expr, field, limit := p.expr, p.field, p.limit
	q := struct{ Desc bool }{p.desc}
	a := query.NewArgs(s.d)
	se := query.Sort(field, a)
	var b strings.Builder
	b.WriteString("SELECT * FROM (SELECT " + spec.cols + ", " + se.Num + " AS sk_n, " + se.Int + " AS sk_i, " + se.Str + " AS sk_s " + spec.from + " WHERE ")
	b.WriteString(query.Compile(expr, a))
	if spec.narrow != nil {
		if c := spec.narrow(a); c != "" {
			b.WriteString(" AND " + c)
		}
	}
	b.WriteString(") t")
	col := s.collate()
	comps := []string{
		"(CASE WHEN t.sk_n IS NULL AND t.sk_i IS NULL AND t.sk_s IS NULL THEN 1 ELSE 0 END)",
		"(CASE WHEN t.sk_n IS NULL THEN 1 ELSE 0 END)",
		"COALESCE(t.sk_n, 0)",
		"COALESCE(t.sk_i, 0)",
		"COALESCE(t.sk_s, '')" + col,
		"t.id" + col,
	}
	dirs := []bool{false, false, q.Desc, q.Desc, q.Desc, q.Desc && !p.idAsc}
	if p.cur != nil {
		c := *p.cur
		vals := []any{int64(c.Missing), int64(c.NoNum), c.Num, c.Int, c.Str, c.ID}
		b.WriteString(" WHERE (")
		for k := range comps {
			if k > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString("(")
			for j := 0; j < k; j++ {
				b.WriteString(comps[j] + " = " + a.Add(vals[j]) + " AND ")
			}
			op := " > "
			if dirs[k] {
				op = " < "
			}
			b.WriteString(comps[k] + op + a.Add(vals[k]) + ")")
		}
		b.WriteString(")")
	}
	b.WriteString(" ORDER BY ")
	for k, c := range comps {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c)
		if dirs[k] {
			b.WriteString(" DESC")
		}
	}
	b.WriteString(" LIMIT " + a.Add(int64(limit+1)))
	return b.String(), a.Values()
}

// ListRuns implements Store.
func (s *sqlStore) ListRuns(ctx context.Context, q ListQuery) (RunPage, error) {
	spec := pageSpec{target: query.Runs, cols: runCols, from: "FROM runs r JOIN experiments e ON e.id = r.experiment_id", idCol: "r.id"}
	var expID string
	if q.Experiment != "" {
		// Resolved to its ID first: an OR of ID and name in the page query
		// keeps SQLite from using the runs' experiment index (0.8 s instead
		// of 0.06 s for a page of an experiment with 10,000 runs).
		err := s.rdb.QueryRowContext(ctx, s.q(`SELECT id FROM experiments WHERE id = ? OR name = ? ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1`),
			q.Experiment, q.Experiment, q.Experiment).Scan(&expID)
		if isNoRows(err) {
			return RunPage{}, errf(CodeNotFound, "no experiment %q", q.Experiment)
		}
		if err != nil {
			return RunPage{}, fmt.Errorf("looking up experiment %s: %w", q.Experiment, err)
		}
		spec.narrow = func(a *query.Args) string {
			return "r.experiment_id = " + a.Add(expID)
		}
	}
	var experiments []string
	if len(q.Experiments) > 0 {
		if q.Experiment != "" {
			return RunPage{}, errf(CodeInvalidArgument, "list the runs of one experiment or of several, not both")
		}
		experiments = slices.Compact(slices.Sorted(slices.Values(q.Experiments)))
		spec.narrow = func(a *query.Args) string {
			return "r.experiment_id IN " + inList(a, experiments)
		}
	}
	p, err := parseList(q, query.Runs)
	if err != nil {
		return RunPage{}, err
	}
	var page RunPage
	var rids []int64
	byRID := map[int64]int{}
	served, searched := false, false
	if len(experiments) > 0 && len(experiments) <= maxMergedExperiments && !s.cfg.sortedPages {
		if rids, page.Next, served, err = s.mergedKeysetRuns(ctx, experiments, p); err != nil {
			return RunPage{}, err
		}
		for i, rid := range rids {
			byRID[rid] = i
		}
	}
	if expID != "" {
		// A name search of a large experiment: the runs whose names may
		// match, from the names' index, when they are few; the page is then
		// the generic query over them (the filter still checked on each).
		if text, ok := query.NameSearch(p.expr); ok {
			cands, few, err := s.nameCandidates(ctx, expID, text)
			if err != nil {
				return RunPage{}, err
			}
			if few {
				searched = true // the narrowed page query below, not keysetRuns
				narrow := spec.narrow
				spec.narrow = func(a *query.Args) string {
					return narrow(a) + " AND r.rid IN " + ridList(cands)
				}
			}
		}
	}
	if expID != "" && !s.cfg.sortedPages && !searched {
		rids, page.Next, served, err = s.keysetRuns(ctx, expID, p)
		if err != nil {
			return RunPage{}, err
		}
		for i, rid := range rids {
			byRID[rid] = i
		}
	}
	if !served {
		// Two steps: the page query sorts only IDs and sort keys (sorting
		// 10,000 whole rows to keep 100 is what made a page slow), then
		// the page's rows are read by rid.
		spec.cols = "r.rid, r.id"
		text, args := s.buildPage(spec, p)
		if page.Next, err = s.pageIDs(ctx, text, args, p, &rids, byRID); err != nil {
			return RunPage{}, err
		}
	}
	page.Runs = make([]Run, len(rids))
	for off := 0; off < len(rids); off += 500 {
		chunk := rids[off:min(off+500, len(rids))]
		a := query.NewArgs(s.d)
		rows, err := s.rdb.QueryContext(ctx, "SELECT "+runCols+" FROM runs r JOIN experiments e ON e.id = r.experiment_id WHERE r.rid IN "+inList(a, chunk), a.Values()...)
		if err != nil {
			return RunPage{}, fmt.Errorf("reading runs: %w", err)
		}
		for rows.Next() {
			var rr runRow
			if err := rows.Scan(rr.dest()...); err != nil {
				rows.Close()
				return RunPage{}, fmt.Errorf("reading runs: %w", err)
			}
			page.Runs[byRID[rr.rid]] = rr.finish()
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return RunPage{}, fmt.Errorf("reading runs: %w", err)
		}
	}
	if err := s.fillRuns(ctx, page.Runs, rids, byRID, q.Columns); err != nil {
		return RunPage{}, err
	}
	if page.Runs == nil {
		page.Runs = []Run{}
	}
	return page, nil
}

// pageIDs runs the generic page query, appending the page's rids (and
// their index in the page to byRID), and returns the next page's cursor.
func (s *sqlStore) pageIDs(ctx context.Context, text string, args []any, p listParams, rids *[]int64, byRID map[int64]int) (string, error) {
	rows, err := s.rdb.QueryContext(ctx, text, args...)
	if err != nil {
		return "", fmt.Errorf("listing runs: %w", err)
	}
	defer rows.Close()
	var lastN sql.NullFloat64
	var lastI sql.NullInt64
	var lastS sql.NullString
	var lastID string
	for rows.Next() {
		var rid int64
		var id string
		var n sql.NullFloat64
		var i sql.NullInt64
		var st sql.NullString
		if err := rows.Scan(&rid, &id, &n, &i, &st); err != nil {
			return "", fmt.Errorf("reading runs: %w", err)
		}
		if len(*rids) == p.limit {
			return makeCursor(lastN, lastI, lastS, lastID, p.sortKey), nil
		}
		lastN, lastI, lastS, lastID = n, i, st, id
		byRID[rid] = len(*rids)
		*rids = append(*rids, rid)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("reading runs: %w", err)
	}
	return "", nil
}

// inList returns "(?, ?, ...)" binding vals (run IDs, keys, names).
func inList[T any](a *query.Args, vals []T) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = a.Add(v)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// fillRuns loads params, tags and summaries of the listed runs.
func (s *sqlStore) fillRuns(ctx context.Context, runs []Run, rids []int64, byRID map[int64]int, cols *Columns) error {
	// With a projection: only its params, and its metrics' key IDs.
	var paramsIn func(a *query.Args) string
	var keyIDs []int64
	if cols != nil {
		paramsIn = func(a *query.Args) string {
			if len(cols.Params) == 0 {
				return " AND 1 = 0"
			}
			return " AND key IN " + inList(a, cols.Params)
		}
		var err error
		if keyIDs, err = s.metricKeyIDs(ctx, cols); err != nil {
			return err
		}
	}
	for off := 0; off < len(rids); off += 500 {
		chunk := rids[off:min(off+500, len(rids))]
		a := query.NewArgs(s.d)
		text := "SELECT run_rid, key, value_json FROM params WHERE run_rid IN " + inList(a, chunk)
		if paramsIn != nil {
			text += paramsIn(a)
		}
		rows, err := s.rdb.QueryContext(ctx, text, a.Values()...)
		if err != nil {
			return fmt.Errorf("reading params: %w", err)
		}
		for rows.Next() {
			var rid int64
			var k, v string
			if err := rows.Scan(&rid, &k, &v); err != nil {
				rows.Close()
				return fmt.Errorf("reading params: %w", err)
			}
			var val any
			_ = json.Unmarshal([]byte(v), &val)
			runs[byRID[rid]].Params[k] = val
		}
		rows.Close()
		a = query.NewArgs(s.d)
		rows, err = s.rdb.QueryContext(ctx, "SELECT run_rid, key, value FROM run_tags WHERE run_rid IN "+inList(a, chunk), a.Values()...)
		if err != nil {
			return fmt.Errorf("reading tags: %w", err)
		}
		for rows.Next() {
			var rid int64
			var k, v string
			if err := rows.Scan(&rid, &k, &v); err != nil {
				rows.Close()
				return fmt.Errorf("reading tags: %w", err)
			}
			runs[byRID[rid]].Tags[k] = v
		}
		rows.Close()
		if cols != nil && len(keyIDs) == 0 {
			continue // no metric column
		}
		a = query.NewArgs(s.d)
		text = `SELECT s.run_rid, k.kind, k.name, s.last_value, s.last_step, s.last_time, s.min_value, s.min_step, s.max_value, s.max_step, s.n
			FROM metric_summary s JOIN metric_keys k ON k.id = s.key_id WHERE s.run_rid IN ` + inList(a, chunk)
		if cols != nil {
			text += " AND s.key_id IN " + inList(a, keyIDs)
		}
		rows, err = s.rdb.QueryContext(ctx, text, a.Values()...)
		if err != nil {
			return fmt.Errorf("reading metric summaries: %w", err)
		}
		for rows.Next() {
			var rid, lastTime int64
			var kind int
			var name string
			var last, mn, mx sql.NullFloat64
			var sum Summary
			if err := rows.Scan(&rid, &kind, &name, &last, &sum.LastStep, &lastTime, &mn, &sum.MinStep, &mx, &sum.MaxStep, &sum.Count); err != nil {
				rows.Close()
				return fmt.Errorf("reading metric summaries: %w", err)
			}
			sum.Last, sum.Min, sum.Max = nanIfNull(last), nanIfNull(mn), nanIfNull(mx)
			sum.LastTime = fromNanos(lastTime)
			r := &runs[byRID[rid]]
			if kind == kindSystem {
				if r.System == nil {
					r.System = map[string]Summary{}
				}
				r.System[name] = sum
			} else {
				r.Metrics[name] = sum
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return fmt.Errorf("reading metric summaries: %w", err)
		}
		rows.Close()
	}
	return nil
}

func nanIfNull(v sql.NullFloat64) float64 {
	if !v.Valid {
		return math.NaN()
	}
	return v.Float64
}

// GetRun implements Store.
func (s *sqlStore) GetRun(ctx context.Context, id string) (Run, error) {
	var rr runRow
	err := s.rdb.QueryRowContext(ctx, s.q("SELECT "+runCols+" FROM runs r JOIN experiments e ON e.id = r.experiment_id WHERE r.id = ?"), id).Scan(rr.dest()...)
	if isNoRows(err) {
		return Run{}, errf(CodeNotFound, "no run %q", id)
	}
	if err != nil {
		return Run{}, fmt.Errorf("reading run %s: %w", id, err)
	}
	runs := []Run{rr.finish()}
	if err := s.fillRuns(ctx, runs, []int64{rr.rid}, map[int64]int{rr.rid: 0}, nil); err != nil {
		return Run{}, err
	}
	return runs[0], nil
}

// RunTag implements Store.
func (s *sqlStore) RunTag(ctx context.Context, id, key string) (string, bool, error) {
	var v string
	err := s.rdb.QueryRowContext(ctx, s.q("SELECT t.value FROM runs r JOIN run_tags t ON t.run_rid = r.rid AND t.key = ? WHERE r.id = ?"), key, id).Scan(&v)
	if isNoRows(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading tag %q of run %s: %w", key, id, err)
	}
	return v, true, nil
}

const expCols = `x.id, x.name, x.description, x.created, x.updated, x.archived, x.artifact_location`

func scanExperiment(sc func(...any) error, extra ...any) (Experiment, error) {
	var e Experiment
	var created, updated, archived int64
	if err := sc(append([]any{&e.ID, &e.Name, &e.Description, &created, &updated, &archived, &e.ArtifactLocation}, extra...)...); err != nil {
		return Experiment{}, err
	}
	e.Created, e.Updated, e.Archived = fromNanos(created), fromNanos(updated), archived != 0
	e.Tags = map[string]string{}
	return e, nil
}

// ListExperiments implements Store.
func (s *sqlStore) ListExperiments(ctx context.Context, q ListQuery) (ExperimentPage, error) {
	spec := pageSpec{target: query.Experiments, cols: expCols, from: "FROM experiments x", idCol: "x.id"}
	text, args, limit, sortKey, err := s.pageQuery(spec, q)
	if err != nil {
		return ExperimentPage{}, err
	}
	rows, err := s.rdb.QueryContext(ctx, text, args...)
	if err != nil {
		return ExperimentPage{}, fmt.Errorf("listing experiments: %w", err)
	}
	defer rows.Close()
	page := ExperimentPage{Experiments: []ExperimentDetail{}}
	var lastN sql.NullFloat64
	var lastI sql.NullInt64
	var lastS sql.NullString
	for rows.Next() {
		var n sql.NullFloat64
		var i sql.NullInt64
		var st sql.NullString
		e, err := scanExperiment(rows.Scan, &n, &i, &st)
		if err != nil {
			return ExperimentPage{}, fmt.Errorf("reading experiments: %w", err)
		}
		if len(page.Experiments) == limit {
			page.Next = makeCursor(lastN, lastI, lastS, page.Experiments[limit-1].ID, sortKey)
			break
		}
		lastN, lastI, lastS = n, i, st
		page.Experiments = append(page.Experiments, ExperimentDetail{Experiment: e, RunCounts: map[Status]int{}})
	}
	if err := rows.Err(); err != nil {
		return ExperimentPage{}, fmt.Errorf("reading experiments: %w", err)
	}
	rows.Close()
	for i := range page.Experiments {
		if err := s.loadExperimentTags(ctx, &page.Experiments[i].Experiment); err != nil {
			return ExperimentPage{}, err
		}
	}
	if err := s.countRuns(ctx, page.Experiments); err != nil {
		return ExperimentPage{}, err
	}
	return page, nil
}

// countRuns fills the run counts of a page of experiments in one query,
// from the counts kept at write time (expsummary.go).
func (s *sqlStore) countRuns(ctx context.Context, exps []ExperimentDetail) error {
	if len(exps) == 0 {
		return nil
	}
	byID := make(map[string]*ExperimentDetail, len(exps))
	a := query.NewArgs(s.d)
	parts := make([]string, len(exps))
	for i := range exps {
		byID[exps[i].ID] = &exps[i]
		parts[i] = a.Add(exps[i].ID)
	}
	rows, err := s.rdb.QueryContext(ctx, "SELECT experiment_id, status, n FROM experiment_run_counts WHERE experiment_id IN ("+strings.Join(parts, ", ")+") AND n > 0", a.Values()...)
	if err != nil {
		return fmt.Errorf("counting runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, st string
		var n int
		if err := rows.Scan(&id, &st, &n); err != nil {
			return fmt.Errorf("counting runs: %w", err)
		}
		if d := byID[id]; d != nil {
			d.RunCounts[Status(st)] = n
			d.Runs += n
		}
	}
	return rows.Err()
}

func (s *sqlStore) loadExperimentTags(ctx context.Context, e *Experiment) error {
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT key, value FROM experiment_tags WHERE experiment_id = ?`), e.ID)
	if err != nil {
		return fmt.Errorf("reading tags of experiment %s: %w", e.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return fmt.Errorf("reading tags of experiment %s: %w", e.ID, err)
		}
		e.Tags[k] = v
	}
	return rows.Err()
}

// GetExperiment implements Store.
func (s *sqlStore) GetExperiment(ctx context.Context, idOrName string) (ExperimentDetail, error) {
	e, err := scanExperiment(s.rdb.QueryRowContext(ctx, s.q("SELECT "+expCols+" FROM experiments x WHERE x.id = ? OR x.name = ? ORDER BY CASE WHEN x.id = ? THEN 0 ELSE 1 END LIMIT 1"), idOrName, idOrName, idOrName).Scan)
	if isNoRows(err) {
		return ExperimentDetail{}, errf(CodeNotFound, "no experiment %q", idOrName)
	}
	if err != nil {
		return ExperimentDetail{}, fmt.Errorf("reading experiment %s: %w", idOrName, err)
	}
	if err := s.loadExperimentTags(ctx, &e); err != nil {
		return ExperimentDetail{}, err
	}
	d := ExperimentDetail{Experiment: e, RunCounts: map[Status]int{}}
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT status, n FROM experiment_run_counts WHERE experiment_id = ? AND n > 0`), e.ID)
	if err != nil {
		return ExperimentDetail{}, fmt.Errorf("counting runs of experiment %s: %w", e.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return ExperimentDetail{}, fmt.Errorf("counting runs of experiment %s: %w", e.ID, err)
		}
		d.RunCounts[Status(st)] = n
		d.Runs += n
	}
	if err := rows.Err(); err != nil {
		return ExperimentDetail{}, fmt.Errorf("counting runs of experiment %s: %w", e.ID, err)
	}
	rows.Close()
	if d.Runs == 0 {
		return d, nil
	}
	if err := s.experimentOverview(ctx, &d); err != nil {
		return ExperimentDetail{}, err
	}
	if d.ParamKeys, err = s.paramKeys(ctx, d.ID); err != nil {
		return ExperimentDetail{}, err
	}
	return d, nil
}

// paramKeys lists the param keys of an experiment's runs, sorted, at most
// MaxParamKeys: a loose scan of the params' sort indexes (one seek per key
// per index), not a read of every param.
func (s *sqlStore) paramKeys(ctx context.Context, expID string) ([]string, error) {
	seen := map[string]bool{}
	// Each index is partial (numbers, text): the condition names it.
	for _, cond := range []string{"value_num IS NOT NULL", "value_num IS NULL"} {
		rows, err := s.rdb.QueryContext(ctx, s.q(`WITH RECURSIVE k(key) AS (
  SELECT MIN(key) FROM params WHERE experiment_id = ? AND `+cond+`
  UNION ALL
  SELECT (SELECT MIN(p.key) FROM params p WHERE p.experiment_id = ? AND p.`+cond+` AND p.key > k.key) FROM k WHERE k.key IS NOT NULL)
SELECT key FROM k WHERE key IS NOT NULL LIMIT ?`), expID, expID, MaxParamKeys)
		if err != nil {
			return nil, fmt.Errorf("listing the param keys of experiment %s: %w", expID, err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, fmt.Errorf("listing the param keys of experiment %s: %w", expID, err)
			}
			seen[k] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("listing the param keys of experiment %s: %w", expID, err)
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > MaxParamKeys {
		keys = keys[:MaxParamKeys]
	}
	return keys, nil
}

// experimentOverview fills the last activity and the metric overview of an
// experiment: a few rows whatever its number of runs.
func (s *sqlStore) experimentOverview(ctx context.Context, d *ExperimentDetail) error {
	var last sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, s.q(`SELECT MAX(updated) FROM runs WHERE experiment_id = ?`), d.ID).Scan(&last); err != nil {
		return fmt.Errorf("reading the last activity of experiment %s: %w", d.ID, err)
	}
	if last.Valid {
		t := fromNanos(last.Int64)
		d.LastActivity = &t
	}
	// Per training metric: how many runs report it, and the run holding its
	// lowest and its highest value (ties to the smaller run ID), kept at
	// write time (expsummary.go).
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT k.name, m.runs, m.min_value, m.min_run, m.max_value, m.max_run
  FROM experiment_metrics m JOIN metric_keys k ON k.id = m.key_id WHERE m.experiment_id = ? AND m.runs > 0`), d.ID)
	if err != nil {
		return fmt.Errorf("summarising the metrics of experiment %s: %w", d.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var o MetricOverview
		var mn, mx sql.NullFloat64
		var minRun, maxRun sql.NullString
		if err := rows.Scan(&name, &o.Runs, &mn, &minRun, &mx, &maxRun); err != nil {
			return fmt.Errorf("summarising the metrics of experiment %s: %w", d.ID, err)
		}
		o.Min, o.MinRun = Float(nanIfNull(mn)), minRun.String
		o.Max, o.MaxRun = Float(nanIfNull(mx)), maxRun.String
		if d.Metrics == nil {
			d.Metrics = map[string]MetricOverview{}
		}
		d.Metrics[name] = o
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("summarising the metrics of experiment %s: %w", d.ID, err)
	}
	return nil
}

// runRID resolves a run ID for readers.
func (s *sqlStore) runRID(ctx context.Context, id string) (int64, error) {
	var rid int64
	err := s.rdb.QueryRowContext(ctx, s.q(`SELECT rid FROM runs WHERE id = ?`), id).Scan(&rid)
	if isNoRows(err) {
		return 0, errf(CodeNotFound, "no run %q", id)
	}
	if err != nil {
		return 0, fmt.Errorf("looking up run %s: %w", id, err)
	}
	return rid, nil
}

// Logs implements Store.
func (s *sqlStore) Logs(ctx context.Context, runID string, q LogQuery) ([]LogLine, error) {
	rid, err := s.runRID(ctx, runID)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 1000
	}
	if limit > 100000 || q.Tail > 100000 || q.Tail < 0 || q.After < 0 {
		return nil, errf(CodeInvalidArgument, "limit and tail must be 0 to 100000, after >= 0")
	}
	if q.Stream != "" && q.Stream != "stdout" && q.Stream != "stderr" {
		return nil, errf(CodeInvalidArgument, "stream must be stdout, stderr or empty")
	}
	a := query.NewArgs(s.d)
	where := "run_rid = " + a.Add(rid)
	if q.Stream != "" {
		where += " AND stream = " + a.Add(q.Stream)
	}
	var text string
	reverse := false
	switch {
	case q.After > 0:
		text = "SELECT id, stream, time, line FROM logs WHERE " + where + " AND id > " + a.Add(q.After) + " ORDER BY id LIMIT " + a.Add(int64(limit))
	case q.Tail > 0:
		text = "SELECT id, stream, time, line FROM logs WHERE " + where + " ORDER BY id DESC LIMIT " + a.Add(int64(q.Tail))
		reverse = true
	default:
		text = "SELECT id, stream, time, line FROM logs WHERE " + where + " ORDER BY id LIMIT " + a.Add(int64(limit))
	}
	rows, err := s.rdb.QueryContext(ctx, text, a.Values()...)
	if err != nil {
		return nil, fmt.Errorf("reading logs of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := []LogLine{}
	for rows.Next() {
		var l LogLine
		var t int64
		if err := rows.Scan(&l.ID, &l.Stream, &t, &l.Line); err != nil {
			return nil, fmt.Errorf("reading logs of run %s: %w", runID, err)
		}
		l.Time = fromNanos(t)
		out = append(out, l)
	}
	if reverse {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, rows.Err()
}

// Checkpoints implements Store.
func (s *sqlStore) Checkpoints(ctx context.Context, runID string) ([]Checkpoint, error) {
	rid, err := s.runRID(ctx, runID)
	if err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT path, step, epoch, metrics, time FROM checkpoints WHERE run_rid = ? ORDER BY step, path`), rid)
	if err != nil {
		return nil, fmt.Errorf("reading checkpoints of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := []Checkpoint{}
	for rows.Next() {
		var c Checkpoint
		var epoch sql.NullFloat64
		var m string
		var t int64
		if err := rows.Scan(&c.Path, &c.Step, &epoch, &m, &t); err != nil {
			return nil, fmt.Errorf("reading checkpoints of run %s: %w", runID, err)
		}
		c.Epoch, c.Time = epoch.Float64, fromNanos(t)
		var vals map[string]Float
		_ = json.Unmarshal([]byte(m), &vals)
		c.Metrics = make(map[string]float64, len(vals))
		for k, v := range vals {
			c.Metrics[k] = float64(v)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Artifacts implements Store.
func (s *sqlStore) Artifacts(ctx context.Context, runID string) ([]Artifact, error) {
	rid, err := s.runRID(ctx, runID)
	if err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT path, size, time FROM artifacts WHERE run_rid = ? ORDER BY path`), rid)
	if err != nil {
		return nil, fmt.Errorf("reading artifacts of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := []Artifact{}
	for rows.Next() {
		var ar Artifact
		var t int64
		if err := rows.Scan(&ar.Path, &ar.Size, &t); err != nil {
			return nil, fmt.Errorf("reading artifacts of run %s: %w", runID, err)
		}
		ar.Time = fromNanos(t)
		out = append(out, ar)
	}
	return out, rows.Err()
}

// metricKeyIDs are the IDs of the training and system metric keys cols
// names (those no run has are left out).
func (s *sqlStore) metricKeyIDs(ctx context.Context, cols *Columns) ([]int64, error) {
	var ids []int64
	for _, g := range []struct {
		kind  int
		names []string
	}{{kindMetric, cols.Metrics}, {kindSystem, cols.System}} {
		if len(g.names) == 0 {
			continue
		}
		a := query.NewArgs(s.d)
		kind := a.Add(int64(g.kind)) // bound in the order the text names them
		rows, err := s.rdb.QueryContext(ctx, "SELECT id FROM metric_keys WHERE kind = "+kind+" AND name IN "+inList(a, g.names), a.Values()...)
		if err != nil {
			return nil, fmt.Errorf("looking up metric keys: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("looking up metric keys: %w", err)
			}
			ids = append(ids, id)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("looking up metric keys: %w", err)
		}
	}
	return ids, nil
}
