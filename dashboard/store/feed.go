package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// FeedEntry is one entry of the store's change feed: what the dashboard's
// live stream carries (docs/stream.md). Cursor is global to the database,
// given out in commit order: once an entry with cursor c is visible, every
// entry below c is visible too (or was trimmed), on every dashboard sharing
// the database.
type FeedEntry struct {
	Cursor int64
	Type   string
	RunID  string
	Seq    int64
	// Time is when it happened (the time it was stored when unknown).
	Time time.Time
	// Data is the entry's JSON payload ("{}" when empty).
	Data json.RawMessage
}

// FeedFunc maps an event that Apply stored to its feed entry's type and
// data; ok false leaves the event out of the feed. Config.Feed sets it.
type FeedFunc func(ev *Event) (typ string, data json.RawMessage, ok bool)

// Feed is the part of Store that keeps the change feed: the stored events
// (through Config.Feed, in the transaction that stores them) and whatever
// AppendFeed adds, each with a cursor. The feed table is the source of
// truth of the live stream; WatchFeed says when to read it.
type Feed interface {
	// AppendFeed appends entries (their Cursor is given out) in one
	// transaction.
	AppendFeed(ctx context.Context, entries []FeedEntry) error
	// ReadFeed returns at most limit entries after cursor after, in cursor
	// order.
	ReadFeed(ctx context.Context, after int64, limit int) ([]FeedEntry, error)
	// FeedBounds returns the oldest cursor still kept (last+1 when none is)
	// and the last cursor given out (0 before the first).
	FeedBounds(ctx context.Context) (oldest, last int64, err error)
	// TrimFeed deletes the oldest entries so that at most keep remain.
	TrimFeed(ctx context.Context, keep int64) error
	// WatchFeed returns a channel that receives (coalesced: one pending
	// signal at most) after entries were committed: at once for this
	// store's own appends, and on PostgreSQL for every process appending to
	// the same database (LISTEN/NOTIFY on FeedChannel), within a network
	// round trip. A signal may also come without new entries (after the
	// listener reconnects, or from another schema of the same database).
	// stop releases the watch.
	WatchFeed() (c <-chan struct{}, stop func())
}

// FeedChannel is the PostgreSQL notification channel of the feed.
const FeedChannel = "fw_feed"

// MaxFeedRead bounds ReadFeed's limit.
const MaxFeedRead = 10000

// feedState is the feed's part of sqlStore.
type feedState struct {
	// pending is filled by write requests inside the writer's transaction
	// and written just before the commit (writer goroutine only).
	pending []FeedEntry

	mu       sync.Mutex
	watchers map[chan struct{}]struct{}
	// recent are this process's newest committed entries, consecutive
	// cursors as they are in the table (up to 2*maxRecentFeed): ReadFeed
	// answers from them instead of reading back what it just wrote (a
	// tenth of ingest's CPU was the tailer's read of the feed). TrimFeed
	// empties it; entries another process trims may still be read here.
	recent   []FeedEntry
	listener *pgListener // PostgreSQL only, started by the first watch
}

// queueFeed adds entries to the current write transaction (writer only).
func (s *sqlStore) queueFeed(entries ...FeedEntry) {
	s.feed.pending = append(s.feed.pending, entries...)
}

// flushFeed writes the entries queued in this transaction with the next
// cursors. Called last, just before the commit: the counter row it updates
// is locked until the commit, so cursors are given out in commit order
// across every process on the database, and a transaction that holds it
// waits for nothing else (no lock cycle with the run rows).
func (s *sqlStore) flushFeed(ctx context.Context, tx *sql.Tx) error {
	n := int64(len(s.feed.pending))
	if n == 0 {
		return nil
	}
	var last int64
	if err := tx.QueryRowContext(ctx, s.q(`UPDATE feed_cursor SET last = last + ? WHERE id = 1 RETURNING last`), n).Scan(&last); err != nil {
		return fmt.Errorf("taking %d feed cursors: %w", n, err)
	}
	first := last - n + 1
	for i := range s.feed.pending {
		s.feed.pending[i].Cursor = first + int64(i)
	}
	// Many rows per statement (an event's row each was a tenth of ingest's
	// CPU), in chunks of 128 and then powers of two, so that a few
	// statement texts serve every batch size.
	args := make([]any, 0, 6*128)
	for rest := s.feed.pending; len(rest) > 0; {
		k := 128
		for k > len(rest) {
			k /= 2
		}
		args = args[:0]
		for i := range rest[:k] {
			e := &rest[i]
			data := e.Data
			if len(data) == 0 {
				data = json.RawMessage("{}")
			}
			args = append(args, e.Cursor, e.Type, e.RunID, e.Seq, e.Time.UnixNano(), string(data))
		}
		if _, err := s.exec(ctx, tx, valuesSQL(`INSERT INTO feed (cursor, type, run_id, seq, time, data) VALUES `, 6, k), args...); err != nil {
			return fmt.Errorf("writing feed entries %d to %d: %w", rest[0].Cursor, rest[k-1].Cursor, err)
		}
		rest = rest[k:]
	}
	if s.d == query.Postgres {
		// Delivered at commit to every session listening, once per
		// transaction whatever the number of calls.
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify('`+FeedChannel+`', '')`); err != nil {
			return fmt.Errorf("notifying the feed: %w", err)
		}
	}
	return nil
}

// maxRecentFeed bounds feedState.recent: a whole batch of the SDK's.
const maxRecentFeed = MaxBatchEvents

// rememberFeed keeps entries, just committed, in feedState.recent, as
// ReadFeed would read them from the table.
func (s *sqlStore) rememberFeed(entries []FeedEntry) {
	if len(entries) == 0 {
		return
	}
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	r := s.feed.recent
	if n := len(r); n > 0 && r[n-1].Cursor+1 != entries[0].Cursor {
		r = r[:0] // another process wrote in between: start again
	}
	for _, e := range entries {
		if len(e.Data) == 0 {
			e.Data = json.RawMessage("{}")
		}
		e.Time = fromNanos(e.Time.UnixNano())
		r = append(r, e)
	}
	if len(r) > 2*maxRecentFeed { // the newest maxRecentFeed, copied now and then
		r = append(make([]FeedEntry, 0, 2*maxRecentFeed), r[len(r)-maxRecentFeed:]...)
	}
	s.feed.recent = r
}

// recentFeed is what ReadFeed(after, limit) reads, when it starts within
// feedState.recent.
func (s *sqlStore) recentFeed(after int64, limit int) ([]FeedEntry, bool) {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	r := s.feed.recent
	if len(r) == 0 || after+1 < r[0].Cursor || after+1 > r[len(r)-1].Cursor {
		return nil, false
	}
	r = r[after+1-r[0].Cursor:]
	return slices.Clone(r[:min(len(r), limit)]), true
}

// feedCommitted wakes this process's watchers after a commit that wrote
// feed entries.
func (s *sqlStore) feedCommitted() {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	for c := range s.feed.watchers {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// AppendFeed implements Feed.
func (s *sqlStore) AppendFeed(ctx context.Context, entries []FeedEntry) error {
	if len(entries) == 0 {
		return nil
	}
	if len(entries) > MaxBatchEvents {
		return errf(CodeBatchTooLarge, "%d feed entries in one call; the limit is %d", len(entries), MaxBatchEvents)
	}
	now := time.Now()
	cp := make([]FeedEntry, len(entries))
	for i, e := range entries {
		if e.Type == "" || len(e.Type) > 64 {
			return errf(CodeInvalidArgument, "feed entry %d: type must be 1 to 64 bytes", i)
		}
		if len(e.RunID) > 256 {
			return errf(CodeInvalidArgument, "feed entry %d: run_id is longer than 256 bytes", i)
		}
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			return errf(CodeInvalidArgument, "feed entry %d: data is not valid JSON", i)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		cp[i] = e
	}
	return s.write(ctx, func(context.Context, *sql.Tx) error {
		s.queueFeed(cp...)
		return nil
	}, nil)
}

// ReadFeed implements Feed.
func (s *sqlStore) ReadFeed(ctx context.Context, after int64, limit int) ([]FeedEntry, error) {
	if limit <= 0 || limit > MaxFeedRead {
		limit = MaxFeedRead
	}
	if out, ok := s.recentFeed(after, limit); ok {
		if len(out) == limit {
			return out, nil
		}
		more, err := s.readFeed(ctx, out[len(out)-1].Cursor, limit-len(out))
		return append(out, more...), err
	}
	return s.readFeed(ctx, after, limit)
}

// readFeed is ReadFeed from the table.
func (s *sqlStore) readFeed(ctx context.Context, after int64, limit int) ([]FeedEntry, error) {
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT cursor, type, run_id, seq, time, data FROM feed WHERE cursor > ? ORDER BY cursor LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading the feed after %d: %w", after, err)
	}
	defer rows.Close()
	var out []FeedEntry
	for rows.Next() {
		var e FeedEntry
		var t int64
		var data string
		if err := rows.Scan(&e.Cursor, &e.Type, &e.RunID, &e.Seq, &t, &data); err != nil {
			return nil, fmt.Errorf("reading the feed after %d: %w", after, err)
		}
		e.Time, e.Data = fromNanos(t), json.RawMessage(data)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the feed after %d: %w", after, err)
	}
	return out, nil
}

// FeedBounds implements Feed.
func (s *sqlStore) FeedBounds(ctx context.Context) (oldest, last int64, err error) {
	if err := s.rdb.QueryRowContext(ctx, `SELECT last FROM feed_cursor WHERE id = 1`).Scan(&last); err != nil {
		return 0, 0, fmt.Errorf("reading the feed cursor: %w", err)
	}
	var min sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT MIN(cursor) FROM feed`).Scan(&min); err != nil {
		return 0, 0, fmt.Errorf("reading the feed's oldest cursor: %w", err)
	}
	if !min.Valid {
		return last + 1, last, nil
	}
	return min.Int64, last, nil
}

// TrimFeed implements Feed.
func (s *sqlStore) TrimFeed(ctx context.Context, keep int64) error {
	if keep < 0 {
		keep = 0
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `DELETE FROM feed WHERE cursor <= (SELECT last FROM feed_cursor WHERE id = 1) - ?`, keep); err != nil {
			return fmt.Errorf("trimming the feed to %d entries: %w", keep, err)
		}
		return nil
	}, nil)
	if err == nil { // what was trimmed is not read from memory either
		s.feed.mu.Lock()
		s.feed.recent = nil
		s.feed.mu.Unlock()
	}
	return err
}

// WatchFeed implements Feed.
func (s *sqlStore) WatchFeed() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	s.feed.mu.Lock()
	if s.feed.watchers == nil {
		s.feed.watchers = map[chan struct{}]struct{}{}
	}
	s.feed.watchers[c] = struct{}{}
	if s.d == query.Postgres && s.feed.listener == nil {
		s.feed.listener = startListener(s.cfg.DatabaseURL, s.feedCommitted, s.cfg.Log)
	}
	s.feed.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			s.feed.mu.Lock()
			delete(s.feed.watchers, c)
			s.feed.mu.Unlock()
		})
	}
}

// closeFeed stops the listener (Close).
func (s *sqlStore) closeFeed() {
	s.feed.mu.Lock()
	l := s.feed.listener
	s.feed.listener = nil
	s.feed.mu.Unlock()
	if l != nil {
		l.stop()
	}
}
