package stream

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

type got struct {
	Cursor uint64          `json:"cursor"`
	Type   string          `json:"type"`
	RunID  string          `json:"run_id"`
	Seq    int64           `json:"seq"`
	Time   time.Time       `json:"time"`
	Data   json.RawMessage `json:"data"`
}

func decode(t *testing.T, m Message) got {
	t.Helper()
	var g got
	if err := json.Unmarshal(m.Msg, &g); err != nil {
		t.Fatalf("message %q: %v", m.Msg, err)
	}
	if g.Cursor != m.Cursor {
		t.Fatalf("message cursor %d, Message.Cursor %d", g.Cursor, m.Cursor)
	}
	return g
}

func ev(run string, seq int64) Event {
	return Event{Type: TypeMetric, RunID: run, Seq: seq, Data: json.RawMessage(fmt.Sprintf(`{"step":%d,"values":{"loss":1}}`, seq))}
}

func next(t *testing.T, s *Sub) Message {
	t.Helper()
	stop := make(chan struct{})
	tm := time.AfterFunc(5*time.Second, func() { close(stop) })
	defer tm.Stop()
	m, ok := s.Next(stop)
	if !ok {
		t.Fatalf("no message (err %v)", s.Err())
	}
	return m
}

func u(v uint64) *uint64 { return &v }

// waitUntil polls cond until it holds; it fails the test after 5 seconds
// instead of hanging.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestPublishOrderAndShape(t *testing.T) {
	h := NewHub(Config{})
	s := h.Subscribe(Filter{All: true}, nil)
	if s.Start() != 0 {
		t.Fatalf("start %d", s.Start())
	}
	for i := int64(1); i <= 100; i++ {
		if c := h.Publish(ev("a", i)); c != uint64(i) {
			t.Fatalf("cursor %d, want %d", c, i)
		}
	}
	for i := int64(1); i <= 100; i++ {
		g := decode(t, next(t, s))
		if g.Cursor != uint64(i) || g.Seq != i || g.Type != TypeMetric || g.RunID != "a" || g.Time.IsZero() {
			t.Fatalf("event %d: %+v", i, g)
		}
	}
	if s.Pending() != 0 || len(s.Replay()) != 0 {
		t.Fatal("extra messages")
	}
}

func TestFilter(t *testing.T) {
	h := NewHub(Config{})
	a := h.Subscribe(Filter{Runs: []string{"a", "c"}}, nil)
	all := h.Subscribe(Filter{All: true}, nil)
	h.Publish(ev("a", 1), ev("b", 1), ev("c", 1), ev("b", 2), ev("a", 2))
	var runs string
	for a.Pending() > 0 {
		runs += decode(t, next(t, a)).RunID
	}
	if runs != "aca" {
		t.Fatalf("filtered runs %q, want aca", runs)
	}
	if all.Pending() != 5 {
		t.Fatalf("all got %d, want 5", all.Pending())
	}
}

func TestReplayFromCursor(t *testing.T) {
	h := NewHub(Config{})
	for i := int64(1); i <= 10; i++ {
		h.Publish(ev("a", i), ev("b", i))
	}
	s := h.Subscribe(Filter{Runs: []string{"a"}}, u(10)) // cursors 11..20; a has odd ones
	r := s.Replay()
	if len(r) != 5 {
		t.Fatalf("replayed %d, want 5", len(r))
	}
	for i, m := range r {
		g := decode(t, m)
		if want := uint64(11 + 2*i); g.Cursor != want || g.RunID != "a" {
			t.Fatalf("replay %d: %+v, want cursor %d", i, g, want)
		}
	}
	h.Publish(ev("a", 11))
	if g := decode(t, next(t, s)); g.Cursor != 21 {
		t.Fatalf("live after replay: cursor %d, want 21", g.Cursor)
	}
	// From the current cursor: nothing to replay, and no gap.
	if r := h.Subscribe(Filter{All: true}, u(21)).Replay(); len(r) != 0 {
		t.Fatalf("replay from the head: %d messages", len(r))
	}
}

func TestGap(t *testing.T) {
	f := func(cfg Config, n int, from uint64, wantOldest uint64, wantReplay int) {
		t.Helper()
		h := NewHub(cfg)
		for i := 1; i <= n; i++ {
			h.Publish(ev("a", int64(i)))
		}
		if h.Oldest() != wantOldest {
			t.Fatalf("oldest %d, want %d", h.Oldest(), wantOldest)
		}
		r := h.Subscribe(Filter{All: true}, &from).Replay()
		if len(r) == 0 || !r[0].Gap || r[0].GapFrom != from || r[0].Cursor != wantOldest {
			t.Fatalf("first message %+v, want a gap from %d to %d", r, from, wantOldest)
		}
		if len(r)-1 != wantReplay || r[1].Cursor != wantOldest || r[len(r)-1].Cursor != uint64(n) {
			t.Fatalf("replayed %d (first %d), want %d from %d", len(r)-1, r[1].Cursor, wantReplay, wantOldest)
		}
	}
	f(Config{RingEvents: 100}, 250, 0, 151, 100)
	f(Config{RingEvents: 100}, 250, 120, 151, 100)
	// A byte budget evicts too: each message is about 110 bytes.
	h := NewHub(Config{RingBytes: 1100})
	for i := 1; i <= 50; i++ {
		h.Publish(ev("a", int64(i)))
	}
	if o := h.Oldest(); o < 35 || o > 50 {
		t.Fatalf("oldest %d with a 1,100-byte budget", o)
	}
}

func TestRingWraps(t *testing.T) {
	h := NewHub(Config{RingEvents: 1500})
	for i := 1; i <= 4000; i++ {
		h.Publish(ev("a", int64(i)))
		if i%700 == 0 { // replay stays contiguous and ends at the head
			r := h.Subscribe(Filter{All: true}, u(0)).Replay()
			want := min(i, 1500)
			if i <= 1500 {
				r = append([]Message{{Gap: true}}, r...) // no gap expected: cursor 1 is still there
			}
			if len(r)-1 != want {
				t.Fatalf("after %d: replayed %d, want %d", i, len(r)-1, want)
			}
			for j := 1; j < len(r); j++ {
				if r[j].Cursor != uint64(i-want+j) {
					t.Fatalf("after %d: replay[%d] = %d", i, j, r[j].Cursor)
				}
			}
		}
	}
}

func TestSlowSubscriberIsCutOff(t *testing.T) {
	h := NewHub(Config{Queue: 8})
	slow := h.Subscribe(Filter{All: true}, nil)
	fast := h.Subscribe(Filter{All: true}, nil)
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		for {
			if _, ok := fast.Next(nil); !ok {
				return
			}
			if n++; n == 100 {
				return
			}
		}
	}()
	for i := int64(1); i <= 100; i++ {
		h.Publish(ev("a", i)) // never blocks, whatever the slow one does
		waitUntil(t, "the fast subscriber to keep up", func() bool { return fast.Pending() <= 4 })
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the fast subscriber got %d of 100", n)
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("the slow subscriber was not cut off")
	}
	if !errors.Is(slow.Err(), ErrSlow) {
		t.Fatalf("slow err %v, want ErrSlow", slow.Err())
	}
	if fast.Err() != nil || n != 100 {
		t.Fatalf("fast subscriber: err %v, got %d of 100", fast.Err(), n)
	}
	if h.Subscribers() != 1 {
		t.Fatalf("%d subscribers left, want 1", h.Subscribers())
	}
	// It can come back from its last cursor and lose nothing.
	back := h.Subscribe(Filter{All: true}, u(8)).Replay()
	if len(back) != 92 || back[0].Cursor != 9 {
		t.Fatalf("resumed with %d messages from %d", len(back), back[0].Cursor)
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	h := NewHub(Config{})
	s := h.Subscribe(Filter{All: true}, nil)
	h.Close()
	if _, ok := s.Next(nil); ok || !errors.Is(s.Err(), ErrClosed) {
		t.Fatalf("after Close: err %v", s.Err())
	}
	if s2 := h.Subscribe(Filter{All: true}, nil); !errors.Is(s2.Err(), ErrClosed) {
		t.Fatal("subscribe after Close should end at once")
	}
	s.Close() // idempotent
}

// Concurrent publishers and subscribers: every subscriber sees strictly
// increasing cursors, and each publisher's events in its order (run with -race).
func TestConcurrentPublishers(t *testing.T) {
	const pubs, per = 8, 500
	h := NewHub(Config{Queue: pubs * per})
	var subs []*Sub
	for i := 0; i < 4; i++ {
		subs = append(subs, h.Subscribe(Filter{All: true}, nil))
	}
	var wg sync.WaitGroup
	for p := 0; p < pubs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); i <= per; i++ {
				h.Publish(ev(fmt.Sprintf("r%d", p), i))
			}
		}()
	}
	var rwg sync.WaitGroup
	for _, s := range subs {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			var last uint64
			seq := map[string]int64{}
			for n := 0; n < pubs*per; n++ {
				m, ok := s.Next(nil)
				if !ok {
					t.Errorf("subscription ended: %v", s.Err())
					return
				}
				var g got
				if err := json.Unmarshal(m.Msg, &g); err != nil {
					t.Error(err)
					return
				}
				if g.Cursor <= last || g.Seq != seq[g.RunID]+1 {
					t.Errorf("out of order: cursor %d after %d, %s seq %d after %d", g.Cursor, last, g.RunID, g.Seq, seq[g.RunID])
					return
				}
				last, seq[g.RunID] = g.Cursor, g.Seq
			}
		}()
	}
	wg.Wait()
	rwg.Wait()
	if h.Cursor() != pubs*per {
		t.Fatalf("cursor %d, want %d", h.Cursor(), pubs*per)
	}
	// Replay taken while publishers run is contiguous with the live queue.
	h2 := NewHub(Config{Queue: 100000})
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
				h2.Publish(ev("a", i))
			}
		}
	}()
	waitUntil(t, "100 events published", func() bool { return h2.Cursor() >= 100 })
	s := h2.Subscribe(Filter{All: true}, u(0))
	// Gate: events published after the subscription reached its live queue.
	waitUntil(t, "live events after the replay", func() bool { return s.Pending() >= 100 })
	close(stop)
	pwg.Wait()
	var last uint64
	for _, m := range s.Replay() {
		if m.Cursor != last+1 {
			t.Fatalf("replay: %d after %d", m.Cursor, last)
		}
		last = m.Cursor
	}
	for s.Pending() > 0 {
		m := next(t, s)
		if m.Cursor != last+1 {
			t.Fatalf("live: %d after %d", m.Cursor, last)
		}
		last = m.Cursor
	}
	if last != h2.Cursor() {
		t.Fatalf("ended at %d, hub at %d", last, h2.Cursor())
	}
}

func feedEv(c uint64, run string) Event {
	e := ev(run, int64(c))
	e.Cursor = c
	return e
}

// TestPublishFeed: a hub fed by the store's feed keeps the feed's cursors,
// skips what it already has, and turns a jump (entries trimmed before it
// read them) into a gap for live subscribers and for replays.
func TestPublishFeed(t *testing.T) {
	h := NewHub(Config{})
	defer h.Close()
	h.SetCursor(100) // the feed's last cursor when the dashboard started
	if h.Cursor() != 100 || h.Oldest() != 101 {
		t.Fatalf("cursor %d oldest %d", h.Cursor(), h.Oldest())
	}
	// A replay from before the start: a gap up to the hub's first event,
	// which the API fills from the feed table.
	early := h.Subscribe(Filter{All: true}, u(40))
	if r := early.Replay(); len(r) != 1 || !r[0].Gap || r[0].GapFrom != 40 || r[0].Cursor != 101 {
		t.Fatalf("replay from before the start: %+v", r)
	}
	live := h.Subscribe(Filter{All: true}, nil)
	if live.Start() != 100 {
		t.Fatalf("live start %d", live.Start())
	}
	if c := h.PublishFeed([]Event{feedEv(101, "a"), feedEv(102, "b")}); c != 102 {
		t.Fatalf("cursor %d", c)
	}
	// Already published: skipped.
	if c := h.PublishFeed([]Event{feedEv(101, "a"), feedEv(102, "b"), feedEv(103, "a")}); c != 103 {
		t.Fatalf("cursor %d", c)
	}
	for _, want := range []uint64{101, 102, 103} {
		if g := decode(t, next(t, live)); g.Cursor != want {
			t.Fatalf("live got %d, want %d", g.Cursor, want)
		}
	}
	// A jump: 104..109 were trimmed before this hub read them.
	h.PublishFeed([]Event{feedEv(110, "a")})
	if m := next(t, live); !m.Gap || m.GapFrom != 103 || m.Cursor != 110 {
		t.Fatalf("live gap: %+v", m)
	}
	if g := decode(t, next(t, live)); g.Cursor != 110 {
		t.Fatalf("after the gap: %d", g.Cursor)
	}
	// The ring starts again at the jump: a replay from before it has a gap.
	if h.Oldest() != 110 {
		t.Fatalf("oldest after the jump %d", h.Oldest())
	}
	s := h.Subscribe(Filter{Runs: []string{"a"}}, u(101))
	r := s.Replay()
	if len(r) != 2 || !r[0].Gap || r[0].GapFrom != 101 || r[0].Cursor != 110 || decode(t, r[1]).Cursor != 110 {
		t.Fatalf("replay over the jump: %+v", r)
	}
	// Encode gives the wire form of an event read from elsewhere.
	var g got
	if err := json.Unmarshal(Encode(feedEv(7, "z")), &g); err != nil || g.Cursor != 7 || g.RunID != "z" || g.Type != TypeMetric {
		t.Fatalf("Encode: %+v %v", g, err)
	}
	// SetCursor only moves an empty hub.
	h.SetCursor(5000)
	if h.Cursor() != 110 {
		t.Fatalf("SetCursor moved a hub that has events: %d", h.Cursor())
	}
}

// TestResumeAheadOfHub: a client resumes with a cursor this hub has not
// reached yet (another dashboard on the database published it first and
// this one's tailer is behind): what the hub publishes up to that cursor is
// not sent again.
func TestResumeAheadOfHub(t *testing.T) {
	h := NewHub(Config{})
	defer h.Close()
	h.SetCursor(10)
	s := h.Subscribe(Filter{All: true}, u(12))
	if r := s.Replay(); len(r) != 0 {
		t.Fatalf("replay: %+v", r)
	}
	h.PublishFeed([]Event{feedEv(11, "a"), feedEv(12, "a"), feedEv(13, "a")})
	if g := decode(t, next(t, s)); g.Cursor != 13 {
		t.Fatalf("got %d, want 13", g.Cursor)
	}
	// A gap wholly before its cursor is not its business either.
	s2 := h.Subscribe(Filter{All: true}, u(20))
	h.PublishFeed([]Event{feedEv(21, "a")})
	if m := next(t, s2); m.Gap || decode(t, m).Cursor != 21 {
		t.Fatalf("got %+v, want the event at 21", m)
	}
}
