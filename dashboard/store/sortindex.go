package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// maxSortIndexes bounds the metric sort indexes the store builds on
// demand: past it, a page sorted by another metric aggregate is sorted in
// full, as before the index, and the store logs it once.
const maxSortIndexes = 64

// sortIndexes are the indexes that serve a run page sorted by one metric
// key's aggregate (last, min or max) within an experiment: a partial index
// of metric_summary on (experiment_id, value, run_rid) for that key only.
//
// They are built on demand, not kept for every key: maintaining one per
// key and aggregate made every metric point written cost about three times
// the CPU (ingest fell from ~167,000 to ~49,000 points per CPU-second on
// SQLite, docs/benchmarks.md), to serve the few keys anyone sorts by. The
// first page sorted by a key that has none is answered by the full sort
// while the index is built in the background (on SQLite through the writer,
// which it holds for the build: seconds at a million runs; on PostgreSQL
// CONCURRENTLY, blocking no writer); later pages read it in order.
type sortIndexes struct {
	mu       sync.Mutex
	ready    map[string]bool // names known to exist
	building map[string]bool
	max      int  // at most this many (maxSortIndexes)
	full     bool // max reached (logged once)
	// served counts the pages read through a sort index (tests).
	served atomic.Int64
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newSortIndexes() *sortIndexes {
	ctx, cancel := context.WithCancel(context.Background())
	return &sortIndexes{ready: map[string]bool{}, building: map[string]bool{}, max: maxSortIndexes, ctx: ctx, cancel: cancel}
}

// stop cancels the builds under way and waits for them.
func (x *sortIndexes) stop() {
	x.cancel()
	x.wg.Wait()
}

// sortIndexName is the name of the index serving sorts by key keyID's
// aggregate column col (a metric_summary column: last_value, min_value,
// max_value).
func sortIndexName(keyID int64, col string) string {
	return "metric_summary_sort_" + strconv.FormatInt(keyID, 10) + "_" + col
}

// sortIndex reports whether the index serving sorts by key keyID's column
// col exists; when it does not, it starts building it (unless one is being
// built or maxSortIndexes exist) and reports false: the caller sorts in
// full this time.
func (s *sqlStore) sortIndex(ctx context.Context, keyID int64, col string) (bool, error) {
	if keyID < 0 {
		return false, nil
	}
	name := sortIndexName(keyID, col)
	x := s.sortIdx
	x.mu.Lock()
	if x.ready[name] {
		x.mu.Unlock()
		x.served.Add(1)
		return true, nil
	}
	x.mu.Unlock()
	exists, n, err := s.sortIndexExists(ctx, name)
	if err != nil {
		return false, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if exists {
		x.ready[name] = true
		x.served.Add(1)
		return true, nil
	}
	if x.building[name] || len(x.building) > 0 {
		return false, nil // one build at a time
	}
	if n >= x.max {
		if !x.full {
			x.full = true
			slog.Warn("runs sorted by further metrics are sorted in full: the store keeps at most this many metric sort indexes", "max", x.max)
		}
		return false, nil
	}
	if x.ctx.Err() != nil {
		return false, nil
	}
	x.building[name] = true
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		start := time.Now()
		err := s.buildSortIndex(x.ctx, name, keyID, col)
		x.mu.Lock()
		delete(x.building, name)
		if err == nil {
			x.ready[name] = true
		}
		x.mu.Unlock()
		if err != nil {
			if x.ctx.Err() == nil {
				slog.Error("building a metric sort index", "index", name, "err", err)
			}
			return
		}
		slog.Info("metric sort index built", "index", name, "took", time.Since(start).Round(time.Millisecond))
	}()
	return false, nil
}

// sortIndexExists reports whether the index name exists, and how many
// metric sort indexes do.
func (s *sqlStore) sortIndexExists(ctx context.Context, name string) (exists bool, n int, err error) {
	text := `SELECT COALESCE(SUM(CASE WHEN name = ? THEN 1 ELSE 0 END), 0), COUNT(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'metric_summary_sort_%'`
	if s.d == query.Postgres {
		text = `SELECT COALESCE(SUM(CASE WHEN indexname = ? THEN 1 ELSE 0 END), 0), COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname LIKE 'metric_summary_sort_%'`
	}
	var one int
	if err := s.rdb.QueryRowContext(ctx, s.q(text), name).Scan(&one, &n); err != nil {
		return false, 0, fmt.Errorf("looking up index %s: %w", name, err)
	}
	return one > 0, n, nil
}

// buildSortIndex creates the index name (sortIndexName(keyID, col)). The
// key and column are the store's own (an integer ID, a fixed column name),
// never a client's text.
func (s *sqlStore) buildSortIndex(ctx context.Context, name string, keyID int64, col string) error {
	switch col {
	case "last_value", "min_value", "max_value":
	default:
		return fmt.Errorf("no metric summary column %q", col)
	}
	body := ` ON metric_summary (experiment_id, ` + col + `, run_rid) WHERE key_id = ` + strconv.FormatInt(keyID, 10)
	if s.d == query.Postgres {
		// CONCURRENTLY: writers go on while it is built (it cannot run in
		// a transaction, so not through the writer). A build that failed
		// leaves an invalid index of that name: drop it first.
		var valid sql.NullBool
		err := s.wdb.QueryRowContext(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE c.relname = $1 AND ns.nspname = current_schema()`, name).Scan(&valid)
		if err == nil && !valid.Bool {
			if _, err := s.wdb.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
				return fmt.Errorf("dropping the invalid index %s: %w", name, err)
			}
		} else if err != nil && !isNoRows(err) {
			return fmt.Errorf("looking up index %s: %w", name, err)
		}
		_, err = s.wdb.ExecContext(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+name+body)
		return err
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+name+body)
		return err
	}, nil)
}

// WaitBackground waits for the work s started in the background (metric
// sort indexes being built), for benchmarks and tests that time what
// follows it.
func WaitBackground(s Store) {
	if ss, ok := s.(*sqlStore); ok {
		ss.sortIdx.wg.Wait()
	}
}
