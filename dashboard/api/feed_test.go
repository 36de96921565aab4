package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/dashboard/tracking"
	"github.com/fw-serve/fw/internal/teststore"
)

// replica is one dashboard API in this process: its own store handle, hub
// and feed tailer, on a database it may share with others.
type testReplica struct {
	url string
	st  store.Store
	hub *stream.Hub
}

func startReplica(t *testing.T, cfg store.Config, ring int) *testReplica {
	t.Helper()
	cfg.Feed = tracking.FeedOf
	st := teststore.Open(t, cfg)
	hub := stream.NewHub(stream.Config{RingEvents: ring})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	tail := tracking.NewFeedTailer(st, hub, 0, log)
	if err := tail.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tailed := make(chan struct{})
	go func() { defer close(tailed); tail.Run(ctx) }()
	srv := New(ctx, st, Config{Hub: hub}, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler}
	go hs.Serve(ln)
	t.Cleanup(func() { cancel(); hub.Close(); _ = hs.Shutdown(); <-tailed })
	return &testReplica{url: "http://" + ln.Addr().String(), st: st, hub: hub}
}

func (r *testReplica) ingest(t *testing.T, body string) {
	t.Helper()
	resp, err := http.Post(r.url+"/api/ingest", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"errors":[]`)) {
		t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
}

type wire struct {
	Type   string `json:"type"`
	Cursor uint64 `json:"cursor"`
	RunID  string `json:"run_id"`
	Seq    int64  `json:"seq"`
	From   uint64 `json:"from"`
	Oldest uint64 `json:"oldest"`
}

// dial subscribes to runs ("*" or a list) from cursor from (nil: live).
func (r *testReplica) dial(t *testing.T, runs any, from *uint64) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(r.url, "http")+"/api/training/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	msg := map[string]any{"subscribe": runs}
	if from != nil {
		msg["from"] = *from
	}
	if err := c.WriteJSON(msg); err != nil {
		t.Fatal(err)
	}
	if m := read(t, c); m.Type != "subscribed" {
		t.Fatalf("first message %+v", m)
	}
	return c
}

func read(t *testing.T, c *websocket.Conn) wire {
	t.Helper()
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		var m wire
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if m.Type != "heartbeat" {
			return m
		}
	}
}

// expect reads events and checks their cursors are exactly want, in order.
func expect(t *testing.T, c *websocket.Conn, want ...uint64) {
	t.Helper()
	for _, w := range want {
		if m := read(t, c); m.Cursor != w || m.Type == "gap" {
			t.Fatalf("got %+v, want the event at cursor %d", m, w)
		}
	}
}

func span(from, to uint64) []uint64 {
	var out []uint64
	for c := from; c <= to; c++ {
		out = append(out, c)
	}
	return out
}

func metricBatch(run string, from, to int) string {
	var b strings.Builder
	b.WriteString("[")
	for s := from; s <= to; s++ {
		if s > from {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"type":"metrics","run_id":%q,"seq":%d,"step":%d,"values":{"loss":%d}}`, run, s, s, s)
	}
	b.WriteString("]")
	return b.String()
}

func ptr(v uint64) *uint64 { return &v }

// TestStreamAcrossReplicas: two dashboard APIs on one database (SQLite
// file, or PostgreSQL under scripts/pg-test.sh). Events ingested through A
// reach a client of B in cursor order; a client reconnecting to either one
// with its last cursor gets exactly what it missed, also when that is older
// than the replica's ring (read from the store's feed); what the feed no
// longer keeps is a gap.
func TestStreamAcrossReplicas(t *testing.T) {
	teststore.ForEach(t, func(t *testing.T, cfg store.Config) {
		a := startReplica(t, cfg, 4)
		b := startReplica(t, cfg, 4)

		onB := b.dial(t, "*", nil)
		onlyR2 := b.dial(t, []string{"r2"}, nil)
		a.ingest(t, `[{"type":"run_start","run_id":"r1","seq":1,"experiment":"x"}]`)
		a.ingest(t, metricBatch("r1", 2, 11))
		b.ingest(t, `[{"type":"run_start","run_id":"r2","seq":1,"experiment":"x"},{"type":"param","run_id":"r2","seq":2,"params":{"lr":1}}]`)
		expect(t, onB, span(1, 12)...) // the param is not streamed
		if m := read(t, onlyR2); m.RunID != "r2" || m.Cursor != 12 {
			t.Fatalf("run filter: %+v", m)
		}
		onB.Close()

		// Missed while away: 13..22; A's ring holds only the last 4.
		a.ingest(t, metricBatch("r1", 12, 21))
		expect(t, a.dial(t, "*", ptr(12)), span(13, 22)...)
		// The same from B, and everything from the start.
		expect(t, b.dial(t, "*", ptr(12)), span(13, 22)...)
		expect(t, b.dial(t, []string{"r1"}, ptr(0)), append(span(1, 11), span(13, 22)...)...)

		// Trimmed from the feed: a gap, then what is kept.
		if err := a.st.TrimFeed(context.Background(), 5); err != nil {
			t.Fatal(err)
		}
		c := a.dial(t, "*", ptr(3))
		if m := read(t, c); m.Type != "gap" || m.From != 3 || m.Oldest != 18 || m.Cursor != 17 {
			t.Fatalf("after trimming: %+v", m)
		}
		expect(t, c, span(18, 22)...)

		// Restart of a replica: its hub starts at the feed's end, and a client
		// resuming with a cursor from before the restart loses nothing.
		a2 := startReplica(t, cfg, 4)
		if a2.hub.Cursor() != 22 {
			t.Fatalf("restarted hub cursor %d", a2.hub.Cursor())
		}
		b.ingest(t, metricBatch("r2", 3, 4))
		expect(t, a2.dial(t, "*", ptr(20)), 21, 22, 23, 24)
	})
}
