package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// streamMsg is any server message of /api/training/stream.
type streamMsg struct {
	Type   string          `json:"type"`
	Cursor uint64          `json:"cursor"`
	RunID  string          `json:"run_id"`
	Seq    int64           `json:"seq"`
	Time   time.Time       `json:"time"`
	Data   json.RawMessage `json:"data"`
	Error  json.RawMessage `json:"error"`
}

func dialStream(t *testing.T, url, query string, h http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ws := "ws" + strings.TrimPrefix(url, "http") + "/api/training/stream" + query
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	return d.Dial(ws, h)
}

func subscribe(t *testing.T, c *websocket.Conn, runs any, from *uint64) streamMsg {
	t.Helper()
	m := map[string]any{"subscribe": runs}
	if from != nil {
		m["from"] = *from
	}
	if err := c.WriteJSON(m); err != nil {
		t.Fatal(err)
	}
	ack := readMsg(t, c)
	if ack.Type != "subscribed" {
		t.Fatalf("first answer %+v, want subscribed", ack)
	}
	return ack
}

func readMsg(t *testing.T, c *websocket.Conn) streamMsg {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var m streamMsg
	if err := c.ReadJSON(&m); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return m
}

// readEvents reads n events (skipping heartbeats) and checks their cursors increase.
func readEvents(t *testing.T, c *websocket.Conn, n int) []streamMsg {
	t.Helper()
	var out []streamMsg
	for len(out) < n {
		m := readMsg(t, c)
		switch m.Type {
		case "heartbeat":
			continue
		case "gap", "error":
			t.Fatalf("unexpected %+v", m)
		}
		if len(out) > 0 && m.Cursor <= out[len(out)-1].Cursor {
			t.Fatalf("cursor %d after %d", m.Cursor, out[len(out)-1].Cursor)
		}
		out = append(out, m)
	}
	return out
}

func ingest(t *testing.T, url, body string) {
	t.Helper()
	code, out := call(t, "POST", url+"/api/ingest", "", "", body)
	if code != 200 || len(out["errors"].([]any)) != 0 {
		t.Fatalf("ingest: %d %v", code, out)
	}
}

func TestStreamEndToEnd(t *testing.T) {
	p := startDashboard(t, t.TempDir(), "--stream-heartbeat", "200ms")
	c, _, err := dialStream(t, p.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	subscribe(t, c, []string{"r1"}, nil)

	ingest(t, p.url, `[{"type":"run_start","run_id":"r1","writer":"w1","seq":1,"experiment":"e","name":"n"},
		{"type":"run_start","run_id":"other","writer":"w1","seq":1,"experiment":"e"},
		{"type":"progress","run_id":"r1","writer":"w1","seq":2,"step":1,"total_steps":10},
		{"type":"log","run_id":"r1","writer":"w1","seq":3,"stream":"stdout","lines":["hello"]},
		{"type":"system","run_id":"r1","writer":"w1","seq":4,"values":{"cpu":0.5}},
		{"type":"param","run_id":"r1","writer":"w1","seq":5,"params":{"lr":0.1}}]`)
	ingest(t, p.url, metricEvents("r1", 6, 10))
	// A duplicate (already stored) and a refused event are not published.
	code, out := call(t, "POST", p.url+"/api/ingest", "", "", `[{"type":"metrics","run_id":"r1","writer":"w1","seq":8,"step":8,"values":{"loss":9}},
		{"type":"status","run_id":"r1","writer":"w1","seq":11,"status":"bogus"}]`)
	if code != 200 || out["duplicates"].(float64) != 1 || len(out["errors"].([]any)) != 1 {
		t.Fatalf("dup batch: %d %v", code, out)
	}
	ingest(t, p.url, `[{"type":"run_end","run_id":"r1","writer":"w1","seq":12,"status":"finished"}]`)

	got := readEvents(t, c, 10)
	wantTypes := "status progress log system metric metric metric metric metric status"
	var types []string
	for i, m := range got {
		types = append(types, m.Type)
		if m.RunID != "r1" || m.Time.IsZero() {
			t.Fatalf("event %d: %+v", i, m)
		}
	}
	if strings.Join(types, " ") != wantTypes {
		t.Fatalf("types %q, want %q", strings.Join(types, " "), wantTypes)
	}
	var metric struct {
		Step   int64              `json:"step"`
		Values map[string]float64 `json:"values"`
	}
	if err := json.Unmarshal(got[4].Data, &metric); err != nil || metric.Step != 6 || metric.Values["loss"] != 1.0/6 || got[4].Seq != 6 {
		t.Fatalf("metric data %s (seq %d): %v", got[4].Data, got[4].Seq, err)
	}
	if !strings.Contains(string(got[9].Data), `"status":"finished"`) || !strings.Contains(string(got[2].Data), `"hello"`) {
		t.Fatalf("status %s, log %s", got[9].Data, got[2].Data)
	}
	last := got[len(got)-1].Cursor
	// A heartbeat comes with the current cursor.
	for {
		if m := readMsg(t, c); m.Type == "heartbeat" {
			if m.Cursor < last {
				t.Fatalf("heartbeat cursor %d behind %d", m.Cursor, last)
			}
			break
		}
	}
	c.Close()

	// While disconnected: more events for a second run; reconnect from the
	// last cursor and subscribe to everything.
	ingest(t, p.url, `[{"type":"run_start","run_id":"r2","writer":"w1","seq":1,"experiment":"e"}]`)
	ingest(t, p.url, metricEvents("r2", 2, 30))
	c, _, err = dialStream(t, p.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	subscribe(t, c, "*", &last)
	got = readEvents(t, c, 30)
	for i, m := range got {
		if m.RunID != "r2" || m.Seq != int64(i+1) || m.Cursor <= last {
			t.Fatalf("replayed event %d: %+v (resumed after %d)", i, m, last)
		}
	}
	// Then live, without duplicates.
	ingest(t, p.url, metricEvents("r2", 31, 31))
	if m := readEvents(t, c, 1)[0]; m.Seq != 31 || m.Cursor != got[29].Cursor+1 {
		t.Fatalf("live after replay: %+v", m)
	}
	// Changing the subscription on the same connection.
	sub := subscribe(t, c, []string{"r3"}, nil)
	if sub.Cursor == 0 {
		t.Fatalf("subscribed without a cursor: %+v", sub)
	}
	ingest(t, p.url, metricEvents("r2", 32, 32))
	ingest(t, p.url, `[{"type":"run_start","run_id":"r3","writer":"w1","seq":1,"experiment":"e"}]`)
	if m := readEvents(t, c, 1)[0]; m.RunID != "r3" || m.Type != "status" {
		t.Fatalf("after resubscribing to r3: %+v", m)
	}
	// A bad message gets an error message, the connection stays.
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"subscribe": 5}`)); err != nil {
		t.Fatal(err)
	}
	for {
		m := readMsg(t, c)
		if m.Type == "error" {
			break
		}
		if m.Type != "heartbeat" {
			t.Fatalf("want an error message, got %+v", m)
		}
	}
	// A plain GET is told to use a WebSocket, in the error shape.
	if code, out := call(t, "GET", p.url+"/api/training/stream", "", "", ""); code != 400 || errorCode(t, out) != "bad_request" {
		t.Fatalf("plain GET: %d %v", code, out)
	}
	p.stop(t)
}

func TestStreamToken(t *testing.T) {
	p := startDashboard(t, t.TempDir(), "--token", "s3cret")
	for _, q := range []string{"", "?token=wrong"} {
		_, resp, err := dialStream(t, p.url, q, nil)
		if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != 401 {
			code := 0
			if resp != nil {
				code = resp.StatusCode
			}
			t.Fatalf("without the token (%q): err %v, status %d; want 401", q, err, code)
		}
	}
	ok := func(q string, h http.Header) {
		t.Helper()
		c, _, err := dialStream(t, p.url, q, h)
		if err != nil {
			t.Fatalf("with the token (%q %v): %v", q, h, err)
		}
		subscribe(t, c, "*", nil)
		c.Close()
	}
	ok("?token=s3cret", nil)
	ok("", http.Header{"Authorization": {"Bearer s3cret"}})
	p.stop(t)
}

// TestStreamShutdown: SIGTERM closes stream connections with 1001 and the
// process still exits 0.
func TestStreamShutdown(t *testing.T) {
	p := startDashboard(t, t.TempDir())
	c, _, err := dialStream(t, p.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	subscribe(t, c, "*", nil)
	p.stop(t)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("after SIGTERM: %v, want close 1001", fmt.Sprint(err))
	}
}

// TestStreamTrainingJob watches a real training job (the built-in
// digits_mlp recipe started through the API) over the stream: its metric,
// log and progress events arrive, and after a stop its stopped status.
func TestStreamTrainingJob(t *testing.T) {
	py := trainingPython(t)
	t.Setenv("FW_PYTHON", py)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	p := startDashboard(t, t.TempDir(), "--stream-heartbeat", "1s", "--stop-grace", "30s")
	c, _, err := dialStream(t, p.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	subscribe(t, c, "*", nil) // the run ID is not known before the start

	code, out := call(t, "POST", p.url+"/api/training/start", "", "application/json",
		`{"recipe":"digits_mlp","experiment":"watched","params":{"epochs":50,"batch_size":256,"hidden":16,"step_delay":0.1}}`)
	if code != 202 {
		t.Fatalf("start: %d %v", code, out)
	}
	id := out["id"].(string)

	var lastCursor uint64
	// next reads the run's next event (heartbeats and other runs skipped);
	// the deadlines are generous: the process imports torch first.
	next := func(what string) streamMsg {
		t.Helper()
		deadline := time.Now().Add(120 * time.Second)
		for {
			_ = c.SetReadDeadline(deadline)
			var m streamMsg
			if err := c.ReadJSON(&m); err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			switch m.Type {
			case "heartbeat":
				continue
			case "gap", "error":
				t.Fatalf("waiting for %s: unexpected %+v", what, m)
			}
			if m.Cursor <= lastCursor {
				t.Fatalf("cursor %d after %d", m.Cursor, lastCursor)
			}
			lastCursor = m.Cursor
			if m.RunID == id {
				return m
			}
		}
	}
	seen := map[string]int{}
	for seen["metric"] == 0 || seen["log"] == 0 || seen["progress"] == 0 {
		m := next("metric, log and progress events")
		seen[m.Type]++
		var data map[string]any
		if err := json.Unmarshal(m.Data, &data); err != nil {
			t.Fatalf("event data %s: %v", m.Data, err)
		}
		switch m.Type {
		case "metric":
			if v, _ := data["values"].(map[string]any); v["train/loss"] == nil && v["val/loss"] == nil {
				t.Fatalf("metric event: %s", m.Data)
			}
		case "log":
			if l, _ := data["lines"].([]any); len(l) == 0 {
				t.Fatalf("log event: %s", m.Data)
			}
		case "progress":
			if data["total_steps"] != float64(300) {
				t.Fatalf("progress event: %s", m.Data)
			}
		case "status":
			if s := data["status"]; s != "queued" && s != "running" {
				t.Fatalf("status before the stop: %s", m.Data)
			}
		}
	}

	if code, out := call(t, "POST", p.url+"/api/training/"+id+"/stop", "", "", ""); code != 202 {
		t.Fatalf("stop: %d %v", code, out)
	}
	for {
		m := next("the stopped status")
		if m.Type != "status" {
			continue
		}
		var data map[string]any
		if err := json.Unmarshal(m.Data, &data); err != nil {
			t.Fatalf("status data %s: %v", m.Data, err)
		}
		if data["status"] == "stopped" {
			break
		}
		if data["status"] == "finished" || data["status"] == "failed" {
			t.Fatalf("the run ended %s, want stopped: %s", data["status"], m.Data)
		}
	}
	if code, r := call(t, "GET", p.url+"/api/runs/"+id, "", "", ""); code != 200 || r["status"] != "stopped" {
		t.Fatalf("GET /api/runs/%s after the stopped event: %d %v", id, code, r)
	}
	p.stop(t)
}
