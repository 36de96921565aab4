package store

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fw-serve/fw/dashboard/query"
)

// The runs table's name search (name ~ 'text') at scale: a trigram index of
// the runs' names yields the runs whose names may contain the text, and a
// page is sorted from those when they are few (ListRuns). SQLite: FTS5's
// trigram table run_names (migration 13). PostgreSQL: pg_trgm's GIN index
// runs_name_trgm on LOWER(name), built in the background when the store
// opens (buildNameIndex), if the extension is there or may be created;
// without it a search reads the experiment's runs in order, as before.

// maxNameCandidates is the most runs a name search reads from the names'
// index to list a page from: past it the matches are many, and the page is
// read in order from the sort's index, checking each run's name, which
// fills it soon.
const maxNameCandidates = 2000

// nameCandidates lists experiment expID's runs whose names may contain
// text (the query language's name ~ 'text', its letters in any ASCII
// case), from a trigram index of the names (SQLite: run_names; PostgreSQL:
// runs_name_trgm, when it could be built): a superset of the runs whose
// names match, as the page query still checks each. few is false when no
// index can narrow the search (none, text shorter than three characters or
// holding wildcards) or more than maxNameCandidates runs may match.
func (s *sqlStore) nameCandidates(ctx context.Context, expID, text string) (rids []int64, few bool, err error) {
	if s.cfg.maxNameCandidates < 0 || utf8.RuneCountInString(text) < 3 || strings.ContainsAny(text, `*?%_\`) {
		return nil, false, nil
	}
	// SQLite: CROSS JOIN reads the names' index first, then each
	// candidate's run.
	text = query.GlobToLike(text)
	limit := int64(s.maxNameCandidates()) + 1
	q := `SELECT r.rid FROM run_names n CROSS JOIN runs r ON r.rid = n.rowid WHERE n.name LIKE ? AND r.experiment_id = ? LIMIT ?`
	args := []any{text, expID, limit}
	if s.d == query.Postgres {
		if !s.nameIndex.Load() {
			return nil, false, nil
		}
		// The candidates of every experiment, at most 20 times the limit
		// (MATERIALIZED: the trigram index, not the experiment's runs),
		// then the experiment's; -1 when the first were cut short.
		q = `WITH c AS MATERIALIZED (SELECT rid, experiment_id FROM runs WHERE LOWER(name) LIKE $1 LIMIT $2)
			(SELECT rid FROM c WHERE experiment_id = $3 LIMIT $4) UNION ALL (SELECT -1 FROM c HAVING COUNT(*) >= $2)`
		args = []any{text, 20 * limit, expID, limit}
	}
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, false, fmt.Errorf("searching run names: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid int64
		if err := rows.Scan(&rid); err != nil {
			return nil, false, fmt.Errorf("searching run names: %w", err)
		}
		if rid < 0 {
			return nil, false, nil // cut short: not all the candidates
		}
		rids = append(rids, rid)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("searching run names: %w", err)
	}
	if int64(len(rids)) >= limit {
		return nil, false, nil
	}
	return rids, true, nil
}

func (s *sqlStore) maxNameCandidates() int {
	if s.cfg.maxNameCandidates > 0 {
		return s.cfg.maxNameCandidates
	}
	return maxNameCandidates
}

// ridList is "(1, 2, ...)" of the store's own row IDs, written into the
// query (not bound: a page's list may exceed a dialect's parameter limit);
// "(NULL)", which matches no run, for none.
func ridList(rids []int64) string {
	if len(rids) == 0 {
		return "(NULL)"
	}
	var b strings.Builder
	b.WriteByte('(')
	for i, r := range rids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(r, 10))
	}
	b.WriteByte(')')
	return b.String()
}

// buildNameIndex (PostgreSQL) creates pg_trgm's index of the runs' names in
// the background, CONCURRENTLY (no writer waits), unless it exists, and
// marks it ready. pg_trgm is a trusted extension: a user who may create
// objects in the database may create it; it goes into schema public when
// that is allowed, else into the store's schema. When neither works the
// search goes on without the index (logged).
func (s *sqlStore) buildNameIndex() {
	if s.d != query.Postgres {
		return
	}
	x := s.sortIdx
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		if err := s.ensureNameIndex(x.ctx); err != nil {
			if x.ctx.Err() == nil {
				slog.Warn("the runs' name search reads each run's name: no trigram index of the names (pg_trgm)", "err", err)
			}
			return
		}
		s.nameIndex.Store(true)
	}()
}

func (s *sqlStore) ensureNameIndex(ctx context.Context) error {
	var schema string
	extSchema := func() error {
		return s.wdb.QueryRowContext(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'`).Scan(&schema)
	}
	err := extSchema()
	if isNoRows(err) {
		if _, err = s.wdb.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public`); err != nil {
			if _, err2 := s.wdb.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_trgm`); err2 != nil {
				return fmt.Errorf("creating extension pg_trgm: %w (in schema public: %v)", err2, err)
			}
		}
		err = extSchema()
	}
	if err != nil {
		return fmt.Errorf("looking up extension pg_trgm: %w", err)
	}
	// The schema's name comes from the catalog, quoted as an identifier.
	ops := `"` + strings.ReplaceAll(schema, `"`, `""`) + `".gin_trgm_ops`
	return s.createIndexConcurrently(ctx, "runs_name_trgm", ` ON runs USING gin (LOWER(name) `+ops+`)`)
}
