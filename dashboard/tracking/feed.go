package tracking

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/stream"
)

// FeedOf is the store's Config.Feed of the dashboard: the stream event of
// every stored event the live stream carries (StreamEvent), so that Apply
// writes it into the change feed in the transaction that stores the event.
func FeedOf(ev *store.Event) (string, json.RawMessage, bool) {
	se, ok := StreamEvent(ev)
	if !ok {
		return "", nil, false
	}
	return se.Type, se.Data, true
}

// Feed timing.
const (
	// feedPoll is how often the tailer reads the feed without a wake-up:
	// what bounds the delay when a notification is lost (the PostgreSQL
	// listener reconnecting) or cannot come (another process writing the
	// same SQLite file).
	feedPoll = time.Second
	// feedTrimEvery is how often the feed table is trimmed to the hub's
	// retention.
	feedTrimEvery = time.Minute
	// feedPage is how many entries one read takes.
	feedPage = 1000
)

// FeedTailer follows the store's change feed into a hub: the store's feed
// table is the source of truth of the live stream, shared by every
// dashboard on one database, and the hub is this process's cache of its
// newest entries and its fan-out to WebSocket clients. It wakes on the
// store's WatchFeed (this process's commits at once; on PostgreSQL every
// process's, through LISTEN/NOTIFY) and polls every second besides.
type FeedTailer struct {
	st   store.Store
	hub  *stream.Hub
	keep int64 // entries the feed table keeps (the hub's retention)
	log  *slog.Logger
}

// NewFeedTailer makes a tailer of st's feed into hub that keeps the newest
// keep entries in the feed table (0: trim nothing).
func NewFeedTailer(st store.Store, hub *stream.Hub, keep int64, log *slog.Logger) *FeedTailer {
	return &FeedTailer{st: st, hub: hub, keep: keep, log: log}
}

// Start sets the hub's cursor to the feed's last (call it before the
// stream is served): clients resuming from an earlier cursor are replayed
// from the feed table (ReplayFeed), across restarts and replicas.
func (t *FeedTailer) Start(ctx context.Context) error {
	_, last, err := t.st.FeedBounds(ctx)
	if err != nil {
		return err
	}
	t.hub.SetCursor(uint64(last))
	return nil
}

// Run follows the feed until ctx ends.
func (t *FeedTailer) Run(ctx context.Context) {
	watch, stop := t.st.WatchFeed()
	defer stop()
	poll := time.NewTicker(feedPoll)
	defer poll.Stop()
	trim := time.NewTicker(feedTrimEvery)
	defer trim.Stop()
	failing := false
	for {
		if err := t.catchUp(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				t.log.Warn("stream: reading the store's feed failed; retrying every second", "err", err)
			}
			failing = true
		} else if failing {
			t.log.Info("stream: reading the store's feed again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-watch:
		case <-poll.C:
		case <-trim.C:
			if t.keep > 0 {
				if err := t.st.TrimFeed(ctx, t.keep); err != nil && ctx.Err() == nil {
					t.log.Warn("stream: trimming the store's feed", "err", err)
				}
			}
		}
	}
}

// catchUp publishes every entry after the hub's cursor.
func (t *FeedTailer) catchUp(ctx context.Context) error {
	for {
		entries, err := t.st.ReadFeed(ctx, int64(t.hub.Cursor()), feedPage)
		if err != nil {
			return err
		}
		if len(entries) > 0 {
			t.hub.PublishFeed(toStream(entries))
		}
		if len(entries) < feedPage {
			return nil
		}
	}
}

func toStream(entries []store.FeedEntry) []stream.Event {
	out := make([]stream.Event, len(entries))
	for i, e := range entries {
		out[i] = stream.Event{Cursor: uint64(e.Cursor), Type: e.Type, RunID: e.RunID, Seq: e.Seq, Time: e.Time, Data: e.Data}
	}
	return out
}

// ReplayFeed sends, through send, the feed's entries after cursor from and
// before cursor before that match, read from the store page by page: the
// part of a replay older than the hub's ring. When the feed no longer has
// all of them it first sends a gap (from, oldest kept). It returns false
// when send fails.
func ReplayFeed(ctx context.Context, st store.Feed, from, before uint64, match func(string) bool, send func(stream.Message) bool) (bool, error) {
	oldest, _, err := st.FeedBounds(ctx)
	if err != nil {
		return true, err
	}
	after := int64(from)
	if oldest > after+1 {
		if !send(stream.Message{Gap: true, GapFrom: from, Cursor: uint64(min(oldest, int64(before)))}) {
			return false, nil
		}
		after = oldest - 1
	}
	for after+1 < int64(before) {
		entries, err := st.ReadFeed(ctx, after, feedPage)
		if err != nil {
			return true, err
		}
		if len(entries) == 0 {
			return true, nil
		}
		for _, se := range toStream(entries) {
			if se.Cursor >= before {
				return true, nil
			}
			after = int64(se.Cursor)
			if !match(se.RunID) {
				continue
			}
			if !send(stream.Message{Cursor: se.Cursor, Msg: stream.Encode(se)}) {
				return false, nil
			}
		}
	}
	return true, nil
}
