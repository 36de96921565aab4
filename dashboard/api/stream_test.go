package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/stream"
)

// startStreamServer serves the API (no store: only the stream is used) on a free port.
func startStreamServer(t *testing.T, hub *stream.Hub, token string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := New(ctx, nil, Config{Token: token, Hub: hub}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler}
	go hs.Serve(ln)
	t.Cleanup(func() { cancel(); hub.Close(); _ = hs.Shutdown() })
	return "ws://" + ln.Addr().String() + "/api/training/stream"
}

func TestStreamSlowClientGets4008(t *testing.T) {
	hub := stream.NewHub(stream.Config{Queue: 16})
	url := startStreamServer(t, hub, "")
	slow, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	for _, c := range []*websocket.Conn{slow, fast} {
		if err := c.WriteJSON(map[string]any{"subscribe": "*"}); err != nil {
			t.Fatal(err)
		}
		if _, b, err := c.ReadMessage(); err != nil || !strings.Contains(string(b), `"subscribed"`) {
			t.Fatalf("ack %s %v", b, err)
		}
	}
	// The fast client reads everything; the slow one reads nothing until
	// the socket buffers and its queue are full. The publisher waits for the
	// fast client to get each event before the next, so only the slow one
	// can fall behind, however loaded the machine is.
	fastCur := make(chan uint64, 1)
	fastGot := make(chan uint64, 1)
	go func() {
		var last uint64
		for {
			_, b, err := fast.ReadMessage()
			if err != nil {
				close(fastCur)
				fastGot <- last
				return
			}
			var m struct{ Cursor uint64 }
			_ = json.Unmarshal(b, &m)
			last = m.Cursor
			fastCur <- last
		}
	}()
	data := json.RawMessage(fmt.Sprintf(`{"lines":[%q]}`, strings.Repeat("x", 4096)))
	var n uint64
	for deadline := time.Now().Add(60 * time.Second); hub.Subscribers() == 2; {
		if time.Now().After(deadline) {
			t.Fatal("the slow client was never cut off")
		}
		n = hub.Publish(stream.Event{Type: stream.TypeLog, RunID: "r", Seq: int64(n + 1), Data: data})
		for got := uint64(0); got < n; {
			var ok bool
			select {
			case got, ok = <-fastCur:
				if !ok {
					t.Fatalf("the fast client was cut off at cursor %d", n)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the fast client never got cursor %d", n)
			}
		}
	}
	// The slow client drains what it was sent, then gets 4008.
	_ = slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, _, err := slow.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != CloseSlowConsumer || !strings.Contains(ce.Text, "from=") {
			t.Fatalf("slow client: %v, want close %d", err, CloseSlowConsumer)
		}
		break
	}
	if hub.Subscribers() != 1 {
		t.Fatalf("%d subscribers, want the fast one", hub.Subscribers())
	}
	fast.Close()
	go func() {
		for range fastCur { // let the reader finish
		}
	}()
	<-fastGot
}

// A client message over maxClientMessage closes the connection with 1009
// (message too big), as docs/stream.md says, and the hub forgets the client.
func TestStreamOversizedMessageGets1009(t *testing.T) {
	hub := stream.NewHub(stream.Config{})
	url := startStreamServer(t, hub, "")
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteJSON(map[string]any{"subscribe": "*"}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, b, err := c.ReadMessage(); err != nil || !strings.Contains(string(b), `"subscribed"`) {
		t.Fatalf("ack %s %v", b, err)
	}
	big := `{"subscribe": "` + strings.Repeat("r", maxClientMessage) + `"}`
	if err := c.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatalf("write: %v", err)
	}
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue // events or heartbeats sent before the close
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
			t.Fatalf("after an oversized message: %v, want close 1009", err)
		}
		break
	}
	deadline := time.Now().Add(30 * time.Second)
	for hub.Subscribers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers left after the close", hub.Subscribers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
