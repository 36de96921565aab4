// Package stream is the dashboard's live event hub: every published event
// gets a global monotonic cursor, is kept in a bounded ring for replay, and
// is fanned out to subscribers through bounded queues. A subscriber whose
// queue is full is cut off (ErrSlow) instead of slowing publishers down.
// The WebSocket protocol on top of it is in docs/stream.md.
package stream

import (
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"
)

// Stream event types (the "type" field of an event message).
const (
	TypeMetric   = "metric"
	TypeLog      = "log"
	TypeProgress = "progress"
	TypeStatus   = "status"
	TypeSystem   = "system"
	TypeExport   = "export"
	TypeDeploy   = "deploy"
)

// Defaults of Config.
const (
	DefaultRingEvents = 100000
	DefaultRingBytes  = 256 << 20
	DefaultQueue      = 4096
	DefaultHeartbeat  = 15 * time.Second
)

// ErrSlow ends a subscription whose send queue was full.
var ErrSlow = errors.New("stream: subscriber too slow, its send queue is full")

// ErrClosed ends every subscription when the hub is closed.
var ErrClosed = errors.New("stream: hub closed")

// Event is one stream event as published.
type Event struct {
	// Cursor is the event's cursor when it comes from a feed that gave it
	// one (PublishFeed); Publish gives out its own.
	Cursor uint64          `json:"-"`
	Type   string          `json:"type"`
	RunID  string          `json:"run_id"`
	Seq    int64           `json:"seq"`
	Time   time.Time       `json:"time"`
	Data   json.RawMessage `json:"data"`
}

// Config bounds a hub; zero fields take the defaults.
type Config struct {
	// RingEvents is the most events kept for replay.
	RingEvents int
	// RingBytes is the most encoded bytes kept for replay.
	RingBytes int
	// Queue is each subscriber's send queue, in messages.
	Queue int
	// Heartbeat is how often a connection sends a heartbeat message.
	Heartbeat time.Duration
}

type entry struct {
	cursor uint64
	runID  string
	msg    []byte
}

// Hub assigns cursors, keeps the replay ring and fans events out.
type Hub struct {
	cfg    Config
	mu     sync.Mutex
	cursor uint64
	ring   []entry // circular, len == cfg.RingEvents once full
	head   int     // index of the oldest entry
	n      int
	bytes  int
	subs   map[*Sub]struct{}
	closed bool
}

// NewHub creates a hub.
func NewHub(cfg Config) *Hub {
	if cfg.RingEvents <= 0 {
		cfg.RingEvents = DefaultRingEvents
	}
	if cfg.RingBytes <= 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	return &Hub{cfg: cfg, subs: map[*Sub]struct{}{}}
}

// Heartbeat is the configured heartbeat interval.
func (h *Hub) Heartbeat() time.Duration { return h.cfg.Heartbeat }

// Cursor is the cursor of the last published event (0 before the first).
func (h *Hub) Cursor() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cursor
}

// Oldest is the cursor of the oldest event still in the ring (cursor+1
// when the ring is empty).
func (h *Hub) Oldest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.oldest()
}

func (h *Hub) oldest() uint64 {
	if h.n == 0 {
		return h.cursor + 1
	}
	return h.ring[h.head].cursor
}

// Publish publishes events in order, giving each the next cursor, and
// returns the cursor of the last one. It never blocks on subscribers. A hub
// fed by PublishFeed must not be given events through Publish.
func (h *Hub) Publish(events ...Event) uint64 {
	bodies := encode(events)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return h.cursor
	}
	for i, body := range bodies {
		h.publishLocked(h.cursor+1, events[i].RunID, body)
	}
	return h.cursor
}

// PublishFeed publishes events whose cursors a feed gave out (the store's
// change feed, shared by every dashboard on one database), in cursor order,
// and returns the hub's cursor. An event at or below the hub's cursor was
// published already and is skipped. An event past cursor+1 means the ones
// in between are gone from the feed (trimmed before this hub read them):
// the ring is emptied, so a replay from before it starts with a gap, and
// every live subscriber gets a gap message first.
func (h *Hub) PublishFeed(events []Event) uint64 {
	bodies := encode(events)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return h.cursor
	}
	for i, body := range bodies {
		c := events[i].Cursor
		if c <= h.cursor {
			continue
		}
		if c > h.cursor+1 {
			h.jumpLocked(c)
		}
		h.publishLocked(c, events[i].RunID, body)
	}
	return h.cursor
}

// SetCursor starts a hub that has published nothing at cursor (the feed's
// last): live subscriptions start after it, and replays from before it
// start with a gap (the events are in the feed, not in this hub).
func (h *Hub) SetCursor(cursor uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 && cursor > h.cursor {
		h.cursor = cursor
	}
}

// jumpLocked moves the hub to just before cursor c, past events it never
// had: the ring is emptied and live subscribers are told of the gap.
func (h *Hub) jumpLocked(c uint64) {
	from := h.cursor
	for h.n > 0 {
		h.ring[h.head] = entry{}
		h.head = (h.head + 1) % len(h.ring)
		h.n--
	}
	h.bytes = 0
	h.cursor = c - 1
	for s := range h.subs {
		if c-1 <= s.after { // the subscriber resumed past the missing events
			continue
		}
		select {
		case s.q <- Message{Gap: true, GapFrom: max(from, s.after), Cursor: c}:
		default:
			h.end(s, ErrSlow)
		}
	}
}

// encode marshals each event without its cursor (spliced in when published).
func encode(events []Event) [][]byte {
	bodies := make([][]byte, len(events))
	for i := range events {
		bodies[i] = encodeOne(&events[i])
	}
	return bodies
}

// Encode is the message subscribers receive for ev, with ev.Cursor as its
// cursor (for events replayed from elsewhere than the hub's ring).
func Encode(ev Event) []byte {
	return message(ev.Cursor, encode([]Event{ev})[0])
}

// message splices cursor c into an encoded event.
func message(c uint64, body []byte) []byte {
	msg := make([]byte, 0, len(body)+24)
	msg = append(msg, `{"cursor":`...)
	msg = strconv.AppendUint(msg, c, 10)
	msg = append(msg, ',')
	return append(msg, body[1:]...)
}

// publishLocked makes body the event at cursor c and fans it out.
func (h *Hub) publishLocked(c uint64, runID string, body []byte) {
	h.cursor = c
	e := entry{cursor: c, runID: runID, msg: message(c, body)}
	h.push(e)
	for s := range h.subs {
		if s.match(e.runID) && c > s.after {
			select {
			case s.q <- Message{Cursor: e.cursor, Msg: e.msg}:
			default:
				h.end(s, ErrSlow)
			}
		}
	}
}

func (h *Hub) push(e entry) {
	for h.n > 0 && (h.n >= h.cfg.RingEvents || h.bytes+len(e.msg) > h.cfg.RingBytes) {
		h.bytes -= len(h.ring[h.head].msg)
		h.ring[h.head] = entry{}
		h.head = (h.head + 1) % len(h.ring)
		h.n--
	}
	if h.n == len(h.ring) { // physically full but under RingEvents: grow, oldest first
		grown := make([]entry, 0, min(max(2*h.n, 1024), h.cfg.RingEvents))
		for i := 0; i < h.n; i++ {
			grown = append(grown, h.ring[(h.head+i)%len(h.ring)])
		}
		h.ring, h.head = grown[:cap(grown)], 0
	}
	h.ring[(h.head+h.n)%len(h.ring)] = e
	h.n++
	h.bytes += len(e.msg)
}

// Filter selects runs: All, or the runs named in Runs.
type Filter struct {
	All  bool
	Runs []string
}

// Message is one message for a subscriber: an event (Cursor, Msg) or, with
// Gap set, the notice that events from GapFrom+1 to Cursor-1 are gone
// from the ring.
type Message struct {
	Cursor uint64
	Msg    []byte
	Gap    bool
	// GapFrom is the cursor the subscriber asked to resume after.
	GapFrom uint64
}

// Sub is one subscription.
type Sub struct {
	h      *Hub
	all    bool
	runs   map[string]bool
	q      chan Message
	replay []Message
	done   chan struct{}
	err    error
	start  uint64
	// after: live events at or below it are not for this subscriber (it
	// resumed from a cursor this hub had not reached yet: another
	// dashboard on the database published it first).
	after uint64
}

// Start is the hub's cursor when the subscription was made: live events
// have higher cursors.
func (s *Sub) Start() uint64 { return s.start }

func (s *Sub) match(runID string) bool { return s.all || s.runs[runID] }

// Match reports whether the subscription takes events of runID (for a
// replay read from elsewhere, e.g. the store's feed).
func (s *Sub) Match(runID string) bool { return s.match(runID) }

// Subscribe registers a subscription. With from nil it starts live (after
// the current cursor); otherwise every retained event after *from that
// matches f is replayed first, preceded by a gap message when events after
// *from have already left the ring. No event is missed or repeated between
// the replay and the live queue.
func (h *Hub) Subscribe(f Filter, from *uint64) *Sub {
	s := &Sub{h: h, all: f.All, runs: map[string]bool{}, q: make(chan Message, h.cfg.Queue), done: make(chan struct{})}
	for _, r := range f.Runs {
		s.runs[r] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.err = ErrClosed
		close(s.done)
		return s
	}
	if from != nil && *from < h.cursor {
		start := *from + 1
		if old := h.oldest(); start < old {
			s.replay = append(s.replay, Message{Gap: true, GapFrom: *from, Cursor: old})
			start = old
		}
		for i := 0; i < h.n; i++ {
			e := h.ring[(h.head+i)%len(h.ring)]
			if e.cursor >= start && s.match(e.runID) {
				s.replay = append(s.replay, Message{Cursor: e.cursor, Msg: e.msg})
			}
		}
	}
	if from != nil && *from > h.cursor {
		s.after = *from
	}
	s.start = h.cursor
	h.subs[s] = struct{}{}
	return s
}

// Replay returns the messages to send before the live ones (once).
func (s *Sub) Replay() []Message {
	r := s.replay
	s.replay = nil
	return r
}

// Next returns the next live message, or ok false when the subscription
// ended (see Err). It blocks until one of them or until stop is closed.
func (s *Sub) Next(stop <-chan struct{}) (m Message, ok bool) {
	select {
	case <-s.done:
		return Message{}, false
	default:
	}
	select {
	case m := <-s.q:
		return m, true
	case <-s.done:
		return Message{}, false
	case <-stop:
		return Message{}, false
	}
}

// C is the live queue, for callers that select on more channels; check
// Done first, a cut-off subscription keeps what was queued.
func (s *Sub) C() <-chan Message { return s.q }

// Done is closed when the subscription ends (slow, closed, or Close).
func (s *Sub) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended (nil while it runs or after Close).
func (s *Sub) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.err
}

// Pending is the number of live messages queued and not yet taken.
func (s *Sub) Pending() int { return len(s.q) }

// Close ends the subscription.
func (s *Sub) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.h.end(s, nil)
}

func (h *Hub) end(s *Sub, err error) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	s.err = err
	close(s.done)
}

// Subscribers is the number of live subscriptions.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close ends every subscription with ErrClosed; later publishes are dropped.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.end(s, ErrClosed)
	}
}
