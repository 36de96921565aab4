package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCloseRacingWriters: writers race Close. Close must not hang, no write
// may hang, every write either fails (closed) or was committed: each one
// acknowledged with nil is in the database after reopening.
func TestCloseRacingWriters(t *testing.T) {
	const rounds, writers = 10, 16
	for round := 0; round < rounds; round++ {
		dir := t.TempDir()
		s, err := Open(context.Background(), Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			acked []string
			wg    sync.WaitGroup
		)
		landed := make(chan struct{}, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					name := fmt.Sprintf("run-%d-%d", w, i)
					e := &ev{run: name, writer: "w"}
					res, err := s.Apply(context.Background(), []Event{e.start("exp", nil, nil)})
					if err == nil && len(res.Errors) > 0 {
						t.Errorf("write %s: %+v", name, res.Errors)
						return
					}
					if err != nil {
						if ErrorCode(err) != CodeClosed {
							t.Errorf("write %s: %v (want success or %q)", name, err, CodeClosed)
						}
						return
					}
					mu.Lock()
					acked = append(acked, name)
					mu.Unlock()
					if i == 0 {
						landed <- struct{}{}
					}
				}
			}()
		}
		for w := 0; w < writers; w++ { // every writer is past its first write
			<-landed
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		timeout := time.After(30 * time.Second)
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("close: %v", err)
			}
		case <-timeout:
			t.Fatalf("round %d: Close hung", round)
		}
		select {
		case <-done:
		case <-timeout:
			t.Fatalf("round %d: a write racing Close never returned", round)
		}

		s, err = Open(context.Background(), Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range acked {
			if _, err := s.GetRun(context.Background(), name); err != nil {
				t.Errorf("round %d: acknowledged write %s is missing after reopening: %v", round, name, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
}

// TestCloseIsIdempotent: a second Close, also concurrent with the first,
// returns once the store is closed; writes after Close fail with CodeClosed.
func TestCloseIsIdempotent(t *testing.T) {
	s, err := Open(context.Background(), Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- s.Close() }()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	if _, err := s.CreateExperiment(context.Background(), ExperimentInput{Name: "late"}); ErrorCode(err) != CodeClosed {
		t.Fatalf("write after Close: got %v, want %q", err, CodeClosed)
	}
}

// TestSQLitePragmas: both connection kinds get the busy timeout, WAL with a
// bounded journal, foreign keys and the configured synchronous level.
func TestSQLitePragmas(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(context.Background(), Config{Dir: dir, BusyTimeout: 1234 * time.Millisecond, Synchronous: "FULL"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*sqlStore)
	for name, db := range map[string]*sql.DB{"writer": s.wdb, "reader": s.rdb} {
		want := map[string]string{"busy_timeout": "1234", "journal_mode": "wal", "foreign_keys": "1", "synchronous": "2"}
		if name == "writer" {
			want["journal_size_limit"] = "67108864"
			want["auto_vacuum"] = "2"
		}
		for p, w := range want {
			var got string
			if err := db.QueryRow("PRAGMA " + p).Scan(&got); err != nil {
				t.Fatalf("%s: PRAGMA %s: %v", name, p, err)
			}
			if got != w {
				t.Errorf("%s: %s = %s, want %s", name, p, got, w)
			}
		}
	}
}

// TestWriteBetweenClosedCheckAndQueueing gates a write right after it found
// the store open, lets Close start, then releases the write. It must not
// hang (the writer goroutine may not stop before taking it), and if it
// returns nil its row is in the database.
func TestWriteBetweenClosedCheckAndQueueing(t *testing.T) {
	for round := 0; round < 20; round++ {
		dir := t.TempDir()
		st, err := Open(context.Background(), Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		s := st.(*sqlStore)
		atGate, release := make(chan struct{}), make(chan struct{})
		s.beforeQueue = func() { close(atGate); <-release }
		closing := make(chan struct{})
		s.beforeClose = func() { close(closing) }

		wrote := make(chan error, 1)
		go func() {
			e := &ev{run: "gated", writer: "w"}
			_, err := s.Apply(context.Background(), []Event{e.start("exp", nil, nil)})
			wrote <- err
		}()
		<-atGate
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		<-closing
		// Give Close the chance to finish first, without depending on it:
		// with the race it does, and the released write then hangs.
		select {
		case <-closed:
			closed <- nil
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		var werr error
		select {
		case werr = <-wrote:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the write released after Close started never returned", round)
		}
		if werr != nil && ErrorCode(werr) != CodeClosed {
			t.Fatalf("round %d: write: %v (want success or %q)", round, werr, CodeClosed)
		}
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Close hung", round)
		}
		st, err = Open(context.Background(), Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		_, gerr := st.GetRun(context.Background(), "gated")
		st.Close()
		if werr == nil && gerr != nil {
			t.Fatalf("round %d: the acknowledged write is missing: %v", round, gerr)
		}
	}
}
