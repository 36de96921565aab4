package store

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// testFeed puts metrics and logs into the feed, as the dashboard's stream
// mapping does, and leaves params out.
func testFeed(ev *Event) (string, json.RawMessage, bool) {
	switch ev.Type {
	case EventMetrics, EventLog, EventRunStart:
		b, _ := json.Marshal(map[string]any{"step": ev.Step, "lines": ev.Lines})
		return ev.Type, b, true
	}
	return "", nil, false
}

func TestFeed(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		st := open(Config{Feed: testFeed})
		if oldest, last, err := st.FeedBounds(ctx); err != nil || oldest != 1 || last != 0 {
			t.Fatalf("empty bounds: %d %d %v", oldest, last, err)
		}
		watch, stop := st.WatchFeed()
		defer stop()
		e := &ev{run: "r1", writer: "w"}
		at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		start := e.start("x", nil, nil)
		m1 := e.metrics(1, map[string]float64{"loss": 1})
		m1.Time = Timestamp{at}
		param := e.next(Event{Type: EventParam, Params: map[string]any{"lr": 0.1}})
		bad := e.next(Event{Type: EventLog, Stream: "nope", Lines: []string{"x"}})
		m2 := e.metrics(2, map[string]float64{"loss": 0.5})
		res, err := st.Apply(ctx, []Event{start, m1, param, bad, m2, m1}) // m1 again: a duplicate
		if err != nil || len(res.Errors) != 1 || res.Duplicates != 1 {
			t.Fatalf("apply: %+v %v", res, err)
		}
		select {
		case <-watch:
		case <-time.After(5 * time.Second):
			t.Fatal("no signal after a commit that fed entries")
		}
		got, err := st.ReadFeed(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Stored events only (not the param: not fed; not the refused log;
		// not the duplicate), in order, cursors from 1.
		want := []struct {
			typ string
			seq int64
		}{{EventRunStart, start.Seq}, {EventMetrics, m1.Seq}, {EventMetrics, m2.Seq}}
		if len(got) != len(want) {
			t.Fatalf("feed: %+v", got)
		}
		for i, w := range want {
			g := got[i]
			if g.Cursor != int64(i+1) || g.Type != w.typ || g.Seq != w.seq || g.RunID != "r1" || g.Time.IsZero() || !json.Valid(g.Data) {
				t.Fatalf("entry %d: %+v, want %+v", i, g, w)
			}
		}
		if !got[1].Time.Equal(at) {
			t.Fatalf("the event's own time: %v", got[1].Time)
		}
		// A batch refused whole feeds nothing.
		huge := make([]Event, MaxBatchEvents+1)
		if _, err := st.Apply(ctx, huge); err == nil {
			t.Fatal("oversized batch accepted")
		}
		// AppendFeed: entries of the dashboard itself (exports, deployments).
		if err := st.AppendFeed(ctx, []FeedEntry{{Type: "deploy", RunID: "dep-1", Data: json.RawMessage(`{"state":"running"}`)}, {Type: "export", RunID: "exp-1"}}); err != nil {
			t.Fatal(err)
		}
		if err := st.AppendFeed(ctx, []FeedEntry{{Type: "", RunID: "x"}}); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("an entry without a type: %v", err)
		}
		if err := st.AppendFeed(ctx, []FeedEntry{{Type: "x", Data: json.RawMessage(`{`)}}); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("bad data: %v", err)
		}
		got, _ = st.ReadFeed(ctx, 3, 1)
		if len(got) != 1 || got[0].Cursor != 4 || got[0].Type != "deploy" || string(got[0].Data) != `{"state":"running"}` {
			t.Fatalf("read after 3, limit 1: %+v", got)
		}
		got, _ = st.ReadFeed(ctx, 4, 10)
		if len(got) != 1 || got[0].Cursor != 5 || string(got[0].Data) != `{}` {
			t.Fatalf("read after 4: %+v", got)
		}
		// Trimming keeps the newest; cursors go on from the last.
		if err := st.TrimFeed(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if oldest, last, err := st.FeedBounds(ctx); err != nil || oldest != 4 || last != 5 {
			t.Fatalf("bounds after trim: %d %d %v", oldest, last, err)
		}
		if err := st.TrimFeed(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if oldest, last, _ := st.FeedBounds(ctx); oldest != 6 || last != 5 {
			t.Fatalf("bounds after trimming all: %d %d", oldest, last)
		}
		mustApply(t, st, e.metrics(3, map[string]float64{"loss": 0.1}))
		if got, _ := st.ReadFeed(ctx, 0, 0); len(got) != 1 || got[0].Cursor != 6 {
			t.Fatalf("after trimming: %+v", got)
		}
	})
}

// TestFeedTwoStores: two stores on one database (two dashboards) apply at
// once while a reader follows the feed: every cursor is given out once,
// and the reader sees them in order without ever skipping one (cursors are
// given out in commit order). On PostgreSQL the other store's watch is
// woken by the notification.
func TestFeedTwoStores(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		a := open(Config{Feed: testFeed})
		cfg := a.(*sqlStore).cfg
		b := open(cfg)
		watch, stop := b.WatchFeed()
		defer stop()
		const writers, batches, per = 4, 30, 5
		total := int64(writers * batches * per)
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			st := []Store{a, b}[w%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := &ev{run: fmt.Sprintf("run-%d", w), writer: "w"}
				if _, err := st.Apply(ctx, []Event{e.start("x", nil, nil)}); err != nil {
					errs <- err
					return
				}
				for i := range batches {
					var evs []Event
					for j := range per {
						evs = append(evs, e.metrics(int64(i*per+j), map[string]float64{"loss": 1}))
					}
					if _, err := st.Apply(ctx, evs); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		// Each writer's run_start is fed too.
		total += writers
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		var seen int64
		deadline := time.Now().Add(60 * time.Second)
		for seen < total {
			got, err := b.ReadFeed(ctx, seen, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range got {
				if e.Cursor != seen+1 {
					t.Fatalf("after cursor %d the reader saw %d", seen, e.Cursor)
				}
				seen = e.Cursor
			}
			if time.Now().After(deadline) {
				t.Fatalf("saw %d of %d entries", seen, total)
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
		}
		<-done
		if _, last, err := a.FeedBounds(ctx); err != nil || last != total {
			t.Fatalf("last cursor %d, want %d (%v)", last, total, err)
		}
		// Each store answers from the entries it committed itself where it
		// can (feedState.recent): exactly what the table holds.
		for _, st := range []Store{a, b} {
			s := st.(*sqlStore)
			if len(s.feed.recent) == 0 {
				t.Fatal("a store that wrote feed entries remembers none")
			}
			for after := int64(0); after <= total; after++ {
				for _, limit := range []int{1, 3, 1000} {
					got, err := s.ReadFeed(ctx, after, limit)
					want, err2 := s.readFeed(ctx, after, limit)
					if err != nil || err2 != nil || !reflect.DeepEqual(got, want) {
						t.Fatalf("ReadFeed(%d, %d) = %+v, %v; the table: %+v, %v", after, limit, got, err, want, err2)
					}
				}
			}
		}
		if cfg.DatabaseURL == "" {
			return // SQLite: one process per database; no cross-process wake
		}
		// Let the notifications of the writes above arrive and drain them,
		// then a write through the other store wakes b's watch.
		for quiet := false; !quiet; {
			select {
			case <-watch:
			case <-time.After(300 * time.Millisecond):
				quiet = true
			}
		}
		deadline = time.Now().Add(10 * time.Second)
		for {
			if err := a.AppendFeed(ctx, []FeedEntry{{Type: "x"}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-watch:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("b's watch never woke for a's append")
			}
		}
	})
}
