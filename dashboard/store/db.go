package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// sqlStore implements Store over database/sql for both dialects.
type sqlStore struct {
	d   query.Dialect
	cfg Config
	wdb *sql.DB // the writer's database handle (one connection for SQLite)
	rdb *sql.DB // readers

	// groupRetries counts write groups run again after a deadlock with
	// another writer on the same PostgreSQL (runGroup).
	groupRetries atomic.Int64

	reqs     chan *writeReq
	quit     chan struct{}
	finished chan struct{}
	// closeMu makes queueing a write and closing mutually exclusive: write
	// holds it shared from its closed check until its request is in reqs,
	// Close holds it exclusively to set closed and close quit. So once quit
	// is closed nothing more enters reqs, and the writer, which serves
	// everything queued before it stops, never leaves a request unanswered.
	closeMu sync.RWMutex
	closed  bool
	// Test gates, nil otherwise: beforeQueue runs in write after the closed
	// check, beforeClose at the start of Close.
	beforeQueue, beforeClose func()

	// Owned by the writer goroutine only.
	keys  map[keyRef]int64
	stmts map[string]*sql.Stmt
	// prepared holds statements prepared on the writer's one SQLite
	// connection, kept across transactions (at most maxPrepared); a
	// transaction uses them through Tx.StmtContext without parsing them
	// again. toPrepare lists the texts a transaction first prepared on
	// itself, prepared here once it has ended (the connection is then free).
	// Parsing the multi-row inserts of a batch in every transaction was a
	// sixth of an MLflow log-batch's CPU.
	prepared  map[string]*sql.Stmt
	toPrepare []string

	feed feedState // the change feed (feed.go)

	sortIdx *sortIndexes // metric sort indexes built on demand (sortindex.go)
	// nameIndex: PostgreSQL's trigram index of run names is built
	// (namesearch.go).
	nameIndex atomic.Bool
}

type keyRef struct {
	kind int
	name string
}

// writeReq is one unit of work for the writer goroutine.
type writeReq struct {
	ctx context.Context
	fn  func(ctx context.Context, tx *sql.Tx) error
	// after runs in the writer after a successful commit (file removal,
	// vacuum); its error is returned to the caller.
	after func(ctx context.Context) error
	done  chan error
	// background: the store's own work (a sort index build), not a
	// client's write: it does not hold off the builds waiting for writes
	// to pause.
	background bool
}

func openSQLite(ctx context.Context, cfg Config) (Store, error) {
	if cfg.Dir == "" {
		return nil, errf(CodeInvalidArgument, "no experiment directory (FW_EXPERIMENT_DIR) and no FW_DATABASE_URL")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating experiment directory %s: %w", cfg.Dir, err)
	}
	path := filepath.Join(cfg.Dir, "experiments.db")
	sync := strings.ToUpper(cfg.Synchronous)
	if sync == "" {
		sync = "NORMAL"
	}
	if sync != "NORMAL" && sync != "FULL" {
		return nil, errf(CodeInvalidArgument, "synchronous must be NORMAL or FULL, not %q", cfg.Synchronous)
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath() + "?"
	pr := func(p string) string { return "_pragma=" + url.QueryEscape(p) }
	busy := pr("busy_timeout(" + strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10) + ")")
	common := []string{pr("foreign_keys(1)"), pr("synchronous(" + sync + ")")}
	// As PocketBase does: busy_timeout first, so that switching to WAL
	// waits for a lock another process holds instead of failing at once,
	// then WAL, then the rest; journal_size_limit keeps the WAL file from
	// staying at its high-water mark after a checkpoint. (The driver also
	// runs busy_timeout first whatever the order; this says it.)
	// The writer's page cache holds a large transaction's dirty pages
	// (64 MiB; SQLite's default 2 MiB spilled them into the WAL in the
	// middle of a sweep's batch of runs), and a statement's journal stays
	// in memory (temp_store) instead of a temporary file.
	wdsn := base + strings.Join(append([]string{busy, pr("journal_mode(WAL)"), pr("journal_size_limit(67108864)"), pr("auto_vacuum(2)"),
		pr("cache_size(-65536)"), pr("temp_store(MEMORY)")},
		append(common, "_txlock=immediate")...), "&")
	wdb, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := wdb.PingContext(ctx); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", base+strings.Join(append(append([]string{busy}, common...), pr("query_only(1)")), "&"))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("opening %s for reading: %w", path, err)
	}
	rdb.SetMaxOpenConns(cfg.Readers)
	rdb.SetMaxIdleConns(cfg.Readers)
	s := newSQLStore(query.SQLite, cfg, wdb, rdb)
	if err := s.migrate(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	s.start()
	return s, nil
}

func openPostgres(ctx context.Context, cfg Config) (Store, error) {
	db, err := sql.Open("pgx", cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("opening PostgreSQL: %w", err)
	}
	db.SetMaxOpenConns(cfg.Readers + 1)
	db.SetMaxIdleConns(cfg.Readers + 1)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	s := newSQLStore(query.Postgres, cfg, db, db)
	if err := s.migrate(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	s.start()
	return s, nil
}

func newSQLStore(d query.Dialect, cfg Config, wdb, rdb *sql.DB) *sqlStore {
	return &sqlStore{
		d: d, cfg: cfg, wdb: wdb, rdb: rdb,
		reqs:     make(chan *writeReq, 256),
		quit:     make(chan struct{}),
		finished: make(chan struct{}),
		keys:     map[keyRef]int64{},
		stmts:    map[string]*sql.Stmt{},
		prepared: map[string]*sql.Stmt{},
		sortIdx:  newSortIndexes(),
	}
}

func (s *sqlStore) start() {
	go s.writer()
	s.startSortIndexPlanner()
	s.buildNameIndex()
}

func (s *sqlStore) closeDBs() {
	s.wdb.Close()
	if s.rdb != s.wdb {
		s.rdb.Close()
	}
}

// Close implements Store.
// Writes queued before Close are committed (or fail) before it returns; later
// ones fail with CodeClosed. A second Close waits for the first to finish.
func (s *sqlStore) Close() error {
	if s.beforeClose != nil {
		s.beforeClose()
	}
	s.closeMu.Lock()
	first := !s.closed
	if first {
		s.closed = true
		close(s.quit)
	}
	s.closeMu.Unlock()
	s.sortIdx.stop() // a build through the writer is answered before it finishes
	<-s.finished
	if first {
		s.closeFeed()
		s.closeDBs()
	}
	return nil
}

// q rewrites ? placeholders to $n for PostgreSQL (the store's static SQL
// has no ? inside string literals).
func (s *sqlStore) q(sqlText string) string {
	if s.d != query.Postgres {
		return sqlText
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(sqlText); i++ {
		if sqlText[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(sqlText[i])
	}
	return b.String()
}

// collate is the byte-order collation clause of the dialect.
func (s *sqlStore) collate() string {
	if s.d == query.Postgres {
		return ` COLLATE "C"`
	}
	return ""
}

// write runs fn in the writer goroutine inside a transaction (shared with
// other queued requests, each under its own savepoint) and waits for the
// commit.
func (s *sqlStore) write(ctx context.Context, fn func(context.Context, *sql.Tx) error, after func(context.Context) error) error {
	return s.queueWrite(&writeReq{ctx: ctx, fn: fn, after: after, done: make(chan error, 1)})
}

// writeBackground is write for the store's own work (a sort index build),
// which does not count as a client's write (sortIndexes.noteWrite).
func (s *sqlStore) writeBackground(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return s.queueWrite(&writeReq{ctx: ctx, fn: fn, done: make(chan error, 1), background: true})
}

func (s *sqlStore) queueWrite(r *writeReq) error {
	ctx := r.ctx
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return errf(CodeClosed, "store is closed")
	}
	if s.beforeQueue != nil {
		s.beforeQueue()
	}
	// The writer runs until quit closes, which cannot happen while the
	// shared lock is held, so this send completes or ctx ends.
	select {
	case s.reqs <- r:
		s.closeMu.RUnlock()
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return fmt.Errorf("queueing a write: %w", ctx.Err())
	}
	// Once queued, wait for the outcome even if ctx ends: the caller must
	// not think a committed write failed.
	return <-r.done
}

// maxGroup is the most requests committed in one transaction.
const maxGroup = 64

func (s *sqlStore) writer() {
	defer close(s.finished)
	defer func() {
		for _, st := range s.prepared {
			st.Close()
		}
	}()
	for {
		var first *writeReq
		select {
		case first = <-s.reqs:
		case <-s.quit:
			// Serve what is queued, then stop.
			for {
				select {
				case r := <-s.reqs:
					s.runGroup([]*writeReq{r})
				default:
					return
				}
			}
		}
		group := []*writeReq{first}
	drain:
		for len(group) < maxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
			default:
				break drain
			}
		}
		s.runGroup(group)
	}
}

// maxGroupAttempts bounds how often a group is run again after PostgreSQL
// aborted one of its statements to break a deadlock with another writer
// (another dashboard on the same database).
const maxGroupAttempts = 5

// isRetryable reports PostgreSQL's deadlock_detected (40P01) and
// serialization_failure (40001): the statement was aborted to let another
// transaction through, and the same writes succeed when run again.
func isRetryable(err error) bool {
	if err == nil {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "SQLSTATE 40P01") || strings.Contains(m, "SQLSTATE 40001")
}

func (s *sqlStore) runGroup(group []*writeReq) {
	live := group[:0:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- fmt.Errorf("write cancelled before it started: %w", err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if slices.ContainsFunc(live, func(r *writeReq) bool { return !r.background }) {
		// A client's write: writes pause when the group has ended; until
		// then no sort index build starts, nor a plan that would miss what
		// it commits.
		s.sortIdx.writing.Add(1)
		s.sortIdx.noteWrite(time.Now())
		defer func() {
			s.sortIdx.noteWrite(time.Now())
			s.sortIdx.writing.Add(-1)
		}()
	}
	defer s.prepareWanted()
	for attempt := 1; ; attempt++ {
		if !s.runGroupOnce(live, attempt < maxGroupAttempts) {
			return
		}
		// Rolled back for a deadlock: a short, growing pause lets the other
		// writer commit, then the whole group runs again.
		s.groupRetries.Add(1)
		time.Sleep(time.Duration(attempt*attempt) * time.Millisecond)
	}
}

// runGroupOnce runs live (requests not cancelled before their group
// started) in one transaction and answers every request,
// except when canRetry and a request failed with a retryable error: then it
// rolls everything back, answers nothing and returns true (run it again).
// The locks a group's earlier requests took are held until the commit, so a
// deadlocked request cannot be retried alone inside the transaction.
func (s *sqlStore) runGroupOnce(live []*writeReq, canRetry bool) (again bool) {
	ctx := context.Background()
	// Statements are prepared on the transaction and die with it.
	defer clear(s.stmts)
	errs := make([]error, len(live))
	// Feed entries queued by the requests, written just before the commit.
	defer func() { s.feed.pending = s.feed.pending[:0] }()
	fail := func(err error) {
		s.keys = map[keyRef]int64{}
		for _, r := range live {
			r.done <- err
		}
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		fail(fmt.Errorf("beginning a write transaction: %w", err))
		return false
	}
	rolledBack := false
	for i, r := range live {
		// A request's statements run under its context without its
		// cancellation (a request cancelled before its group began is not
		// in live): on SQLite an interrupted write inside a transaction
		// rolls back the whole transaction, every other request of the
		// group with it, so a client that goes away mid-write would fail the
		// others. Its result is not acknowledged to it either way.
		rctx := context.WithoutCancel(r.ctx)
		mark := len(s.feed.pending)
		if len(live) == 1 {
			errs[i] = r.fn(rctx, tx)
			continue
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT w"); err != nil {
			tx.Rollback()
			fail(fmt.Errorf("creating a savepoint: %w", err))
			return false
		}
		errs[i] = r.fn(rctx, tx)
		if errs[i] != nil {
			s.feed.pending = s.feed.pending[:mark]
			rolledBack = true
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT w"); err != nil {
				tx.Rollback()
				fail(fmt.Errorf("rolling back a savepoint: %w", err))
				return false
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT w"); err != nil {
			tx.Rollback()
			fail(fmt.Errorf("releasing a savepoint: %w", err))
			return false
		}
	}
	if canRetry && slices.ContainsFunc(errs, isRetryable) {
		tx.Rollback()
		s.keys = map[keyRef]int64{}
		return true
	}
	if len(live) == 1 && errs[0] != nil {
		tx.Rollback()
		s.keys = map[keyRef]int64{}
		live[0].done <- errs[0]
		return false
	}
	fed := len(s.feed.pending) > 0
	if err := s.flushFeed(ctx, tx); err != nil {
		tx.Rollback()
		fail(err)
		return false
	}
	if err := tx.Commit(); err != nil {
		fail(fmt.Errorf("committing writes: %w", err))
		return false
	}
	if fed {
		s.rememberFeed(s.feed.pending)
		s.feedCommitted()
	}
	if rolledBack {
		// Key IDs cached by a rolled-back request may not exist.
		s.keys = map[keyRef]int64{}
	}
	for i, r := range live {
		if errs[i] == nil && r.after != nil {
			errs[i] = r.after(ctx)
		}
		r.done <- errs[i]
	}
	return false
}

// maxPrepared bounds the statements kept prepared across transactions
// (each multi-row insert size is a statement of its own).
const maxPrepared = 256

// stmt returns a statement for the writer's transaction, cached until the
// transaction ends: one kept prepared on the connection (prepared), or one
// prepared on the transaction now and kept for the next ones once it ends
// (prepareWanted).
func (s *sqlStore) stmt(ctx context.Context, tx *sql.Tx, text string) (*sql.Stmt, error) {
	if st, ok := s.stmts[text]; ok {
		return st, nil
	}
	if p, ok := s.prepared[text]; ok {
		st := tx.StmtContext(ctx, p)
		s.stmts[text] = st
		return st, nil
	}
	st, err := tx.PrepareContext(ctx, text)
	if err != nil {
		return nil, fmt.Errorf("preparing %.60q: %w", text, err)
	}
	s.stmts[text] = st
	if len(s.prepared)+len(s.toPrepare) < maxPrepared {
		s.toPrepare = append(s.toPrepare, text)
	}
	return st, nil
}

// prepareWanted prepares, on the writer's connection (free between
// transactions), the statements the last transaction prepared for itself.
// A failure only means the next transaction prepares it again.
func (s *sqlStore) prepareWanted() {
	for _, text := range s.toPrepare {
		if _, ok := s.prepared[text]; ok {
			continue
		}
		if st, err := s.wdb.PrepareContext(context.Background(), text); err == nil {
			s.prepared[text] = st
		}
	}
	s.toPrepare = s.toPrepare[:0]
}

// exec runs a statement in the writer's transaction.
func (s *sqlStore) exec(ctx context.Context, tx *sql.Tx, text string, args ...any) (sql.Result, error) {
	if s.d == query.Postgres {
		// pgx caches prepared statements per connection itself.
		return tx.ExecContext(ctx, s.q(text), args...)
	}
	st, err := s.stmt(ctx, tx, text)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// row is a query's one row, or the failure to prepare it.
type row struct {
	r   *sql.Row
	err error
}

// Scan is sql.Row's Scan (sql.ErrNoRows when there is none).
func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.r.Scan(dest...)
}

// queryRow runs a query for one row in the writer's transaction through
// the statement cache (on SQLite, parsing a statement per call was about a
// tenth of ingest's CPU: each run's lookups and param checks).
func (s *sqlStore) queryRow(ctx context.Context, tx *sql.Tx, text string, args ...any) row {
	if s.d == query.Postgres {
		return row{r: tx.QueryRowContext(ctx, s.q(text), args...)}
	}
	st, err := s.stmt(ctx, tx, text)
	if err != nil {
		return row{err: err}
	}
	return row{r: st.QueryRowContext(ctx, args...)}
}

// isUniqueViolation reports a unique-constraint failure in either dialect.
func isUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "UNIQUE constraint failed") || strings.Contains(m, "SQLSTATE 23505") || strings.Contains(m, "duplicate key value")
}

var errNoRows = sql.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
