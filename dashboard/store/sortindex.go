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

// maxSortIndexes bounds the metric sort indexes the store builds: past it,
// a page sorted by another metric aggregate is sorted in full, as before
// the index, and the store logs it once.
const maxSortIndexes = 128

// maxPrebuiltSortIndexes bounds those built ahead of a sort, for large
// experiments (prebuildSortIndexes): the rest of maxSortIndexes stays for
// the keys someone sorts by.
const maxPrebuiltSortIndexes = 96

// DefaultSortIndexRuns is Config.SortIndexRuns's default: from about this
// many runs an experiment's full sort by a metric takes more than ~100 ms
// on SQLite (3.4 µs per run measured at 200,000 runs, docs/benchmarks.md).
const DefaultSortIndexRuns = 20_000

// DefaultSortIndexIdle is Config.SortIndexIdle's default.
const DefaultSortIndexIdle = 3 * time.Second

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
//
// Large finished experiments do not wait for a first sort: once writes
// have paused for Config.SortIndexIdle, the keys reported by at least
// Config.SortIndexRuns runs of one experiment with no run running or
// queued get their three indexes built one at a time
// (prebuildSortIndexes), so that a finished sweep's pages sort by any of
// its metrics from an index.
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
	wg     sync.WaitGroup // builds under way

	// The planner of builds ahead of a sort (prebuildSortIndexes).
	planner sync.WaitGroup
	// dirty: a client's write was committed (a key may have crossed the
	// threshold, a sweep finished) since the planner last looked;
	// planning: it is looking or building.
	dirty, planning atomic.Bool
	// lastWrite is when the writer last committed a client's write
	// (unix nanoseconds; 0: none since the store opened); writing counts
	// the groups of clients' writes under way (0 or 1).
	lastWrite, writing atomic.Int64
}

func newSortIndexes() *sortIndexes {
	ctx, cancel := context.WithCancel(context.Background())
	return &sortIndexes{ready: map[string]bool{}, building: map[string]bool{}, max: maxSortIndexes, ctx: ctx, cancel: cancel}
}

// stop cancels the planner and the builds under way and waits for them.
func (x *sortIndexes) stop() {
	x.cancel()
	x.planner.Wait()
	x.wg.Wait()
}

// noteWrite records that the writer committed a client's write now.
func (x *sortIndexes) noteWrite(now time.Time) {
	x.lastWrite.Store(now.UnixNano())
	x.dirty.Store(true)
}

// idle reports whether no client's write is under way and none has been
// committed for d.
func (x *sortIndexes) idle(now time.Time, d time.Duration) bool {
	if x.writing.Load() > 0 {
		return false
	}
	last := x.lastWrite.Load()
	return last == 0 || now.Sub(time.Unix(0, last)) >= d
}

// claim marks name as being built when nothing is being built and it is
// not known to exist; it reports whether it did.
func (x *sortIndexes) claim(name string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ready[name] || len(x.building) > 0 || x.ctx.Err() != nil {
		return false
	}
	x.building[name] = true
	return true
}

// finish ends the build of name that claim allowed.
func (x *sortIndexes) finish(name string, start time.Time, err error) {
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
		x.finish(name, start, s.buildSortIndex(x.ctx, name, keyID, col))
	}()
	return false, nil
}

// sortIndexExists reports whether the index name exists, and how many
// metric sort indexes do.
func (s *sqlStore) sortIndexExists(ctx context.Context, name string) (exists bool, n int, err error) {
	names, err := s.sortIndexNames(ctx)
	if err != nil {
		return false, 0, err
	}
	return names[name], len(names), nil
}

// sortIndexNames are the metric sort indexes that exist (at most
// maxSortIndexes), from the database's catalog.
func (s *sqlStore) sortIndexNames(ctx context.Context) (map[string]bool, error) {
	text := `SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'metric_summary_sort_%'`
	if s.d == query.Postgres {
		text = `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname LIKE 'metric_summary_sort_%'`
	}
	rows, err := s.rdb.QueryContext(ctx, text)
	if err != nil {
		return nil, fmt.Errorf("listing the metric sort indexes: %w", err)
	}
	defer rows.Close()
	names := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("listing the metric sort indexes: %w", err)
		}
		names[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the metric sort indexes: %w", err)
	}
	return names, nil
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
		return s.createIndexConcurrently(ctx, name, body)
	}
	return s.writeBackground(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+name+body)
		return err
	})
}

// createIndexConcurrently creates index name (PostgreSQL; body is what
// follows the name: ON table (...) ...) CONCURRENTLY, so that writers go on
// while it is built (it cannot run in a transaction, so not through the
// writer). A build that failed leaves an invalid index of that name: it is
// dropped first. name and body are the store's own text, never a client's.
func (s *sqlStore) createIndexConcurrently(ctx context.Context, name, body string) error {
	var valid sql.NullBool
	err := s.wdb.QueryRowContext(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE c.relname = $1 AND ns.nspname = current_schema()`, name).Scan(&valid)
	switch {
	case err == nil && valid.Bool:
		return nil
	case err == nil:
		if _, err := s.wdb.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
			return fmt.Errorf("dropping the invalid index %s: %w", name, err)
		}
	case !isNoRows(err):
		return fmt.Errorf("looking up index %s: %w", name, err)
	}
	if _, err := s.wdb.ExecContext(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+name+body); err != nil {
		return fmt.Errorf("creating index %s: %w", name, err)
	}
	return nil
}

// WaitBackground waits for the work s started in the background (metric
// sort indexes being built), for benchmarks and tests that time what
// follows it.
func WaitBackground(s Store) {
	if ss, ok := s.(*sqlStore); ok {
		ss.sortIdx.wg.Wait()
	}
}

// WaitSortIndexes waits until the sort indexes s builds ahead of a sort
// for its large experiments are built (writes must pause for
// Config.SortIndexIdle first) and no build is under way, or ctx ends: for
// benchmarks and tests that time what follows it.
func WaitSortIndexes(ctx context.Context, s Store) error {
	ss, ok := s.(*sqlStore)
	if !ok || ss.cfg.SortIndexRuns < 0 {
		return nil
	}
	x := ss.sortIdx
	for {
		if !x.dirty.Load() && !x.planning.Load() {
			x.mu.Lock()
			n := len(x.building)
			x.mu.Unlock()
			if n == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the metric sort indexes: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startSortIndexPlanner starts the planner of builds ahead of a sort
// (prebuildSortIndexes), unless Config.SortIndexRuns turns it off.
func (s *sqlStore) startSortIndexPlanner() {
	if s.cfg.SortIndexRuns < 0 {
		return
	}
	x := s.sortIdx
	x.dirty.Store(true) // a store opened on large experiments: look at once
	tick := min(max(s.cfg.SortIndexIdle/2, 5*time.Millisecond), time.Second)
	x.planner.Add(1)
	go func() {
		defer x.planner.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-x.ctx.Done():
				return
			case <-t.C:
			}
			if !x.dirty.Load() || !x.idle(time.Now(), s.cfg.SortIndexIdle) {
				continue
			}
			x.planning.Store(true)
			x.dirty.Store(false)
			s.prebuildSortIndexes(x.ctx)
			x.planning.Store(false)
		}
	}()
}

// wantedSortIndex is an index prebuildSortIndexes builds.
type wantedSortIndex struct {
	key int64
	col string
}

// sortIndexesWanted lists the indexes of the metric keys that at least
// Config.SortIndexRuns runs of one experiment with no run running or
// queued report, the keys most runs report first, that do not exist yet,
// at most maxPrebuiltSortIndexes in all with those that do.
func (s *sqlStore) sortIndexesWanted(ctx context.Context) ([]wantedSortIndex, error) {
	existing, err := s.sortIndexNames(ctx)
	if err != nil {
		return nil, err
	}
	room := maxPrebuiltSortIndexes - len(existing)
	if room <= 0 {
		return nil, nil
	}
	// Finished experiments only: an index makes each later point of its key
	// cost more (every key of a sweep indexed: 3.5x the CPU per point at
	// 200,000 runs, docs/benchmarks.md), which a sweep still writing should
	// not pay for a sort nobody asked for.
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT key_id FROM experiment_metrics WHERE runs >= ? AND experiment_id IN (
		SELECT experiment_id FROM experiment_run_counts GROUP BY experiment_id
		HAVING SUM(CASE WHEN status IN (?, ?) THEN n ELSE 0 END) = 0)
	GROUP BY key_id ORDER BY MAX(runs) DESC, key_id LIMIT ?`),
		int64(s.cfg.SortIndexRuns), string(StatusRunning), string(StatusQueued), int64(maxPrebuiltSortIndexes))
	if err != nil {
		return nil, fmt.Errorf("listing the large experiments' metric keys: %w", err)
	}
	defer rows.Close()
	var out []wantedSortIndex
	for rows.Next() {
		var key int64
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("listing the large experiments' metric keys: %w", err)
		}
		for _, col := range []string{"last_value", "min_value", "max_value"} {
			if !existing[sortIndexName(key, col)] && len(out) < room {
				out = append(out, wantedSortIndex{key, col})
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the large experiments' metric keys: %w", err)
	}
	return out, nil
}

// prebuildSortIndexes builds, one at a time, the sort indexes of the large
// experiments' metric keys (sortIndexesWanted), while writes stay paused:
// when a client's write comes in meanwhile it stops after the build under
// way and plans again once writes pause.
func (s *sqlStore) prebuildSortIndexes(ctx context.Context) {
	x := s.sortIdx
	todo, err := s.sortIndexesWanted(ctx)
	if err != nil {
		if ctx.Err() == nil {
			slog.Error("planning metric sort indexes", "err", err)
		}
		return
	}
	for _, w := range todo {
		if ctx.Err() != nil {
			return
		}
		if !x.idle(time.Now(), s.cfg.SortIndexIdle) {
			x.dirty.Store(true)
			return
		}
		name := sortIndexName(w.key, w.col)
		if !x.claim(name) {
			x.mu.Lock()
			busy := len(x.building) > 0
			x.mu.Unlock()
			if busy {
				x.dirty.Store(true) // a sort's own build: plan again after it
				return
			}
			continue
		}
		start := time.Now()
		x.finish(name, start, s.buildSortIndex(ctx, name, w.key, w.col))
	}
}
