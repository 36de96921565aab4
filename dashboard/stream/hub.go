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
	Type  string          `json:"type"`
	RunID string          `json:"run_id"`
	Seq   int64           `json:"seq"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data"`
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

// Publish publishes events in order and returns the cursor of the last one.
// It never blocks on subscribers.
func (h *Hub) Publish(events ...Event) uint64 {
	// Encode outside the lock; the cursor is spliced in under it.
	bodies := make([][]byte, len(events))
	for i := range events {
		ev := &events[i]
		if ev.Time.IsZero() {
			ev.Time = time.Now()
		}
		if len(ev.Data) == 0 {
			ev.Data = json.RawMessage("{}")
		}
		b, err := json.Marshal(ev)
		if err != nil { // invalid Data: keep the event, drop its data
			ev.Data = json.RawMessage("{}")
			b, _ = json.Marshal(ev)
		}
		bodies[i] = b
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return h.cursor
	}
	for i, body := range bodies {
		h.cursor++
		msg := make([]byte, 0, len(body)+24)
		msg = append(msg, `{"cursor":`...)
		msg = strconv.AppendUint(msg, h.cursor, 10)
		msg = append(msg, ',')
		msg = append(msg, body[1:]...)
		e := entry{cursor: h.cursor, runID: events[i].RunID, msg: msg}
		h.push(e)
		for s := range h.subs {
			if s.match(e.runID) {
				select {
				case s.q <- Message{Cursor: e.cursor, Msg: e.msg}:
				default:
					h.end(s, ErrSlow)
				}
			}
		}
	}
	return h.cursor
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
}

// Start is the hub's cursor when the subscription was made: live events
// have higher cursors.
func (s *Sub) Start() uint64 { return s.start }

func (s *Sub) match(runID string) bool { return s.all || s.runs[runID] }

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
