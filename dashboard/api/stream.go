package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/dashboard/tracking"
)

// WebSocket close codes of /api/training/stream (docs/stream.md).
const (
	// CloseSlowConsumer: the client did not keep up and its send queue
	// filled; reconnect with "from" set to the last cursor received.
	CloseSlowConsumer = 4008
)

// Stream timing (the heartbeat interval is the hub's).
const (
	streamPongWait  = 60 * time.Second
	streamPing      = 25 * time.Second
	streamWriteWait = 10 * time.Second
)

// maxClientMessage bounds a client's subscription message.
const maxClientMessage = 1 << 20

// streamAuthorized accepts the token as a Bearer header or ?token= (a
// browser's WebSocket cannot set headers).
func (s *Server) streamAuthorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.Token == "" {
		return true
	}
	if s.authorized(ctx) {
		return true
	}
	q := ctx.QueryArgs().Peek("token")
	if len(q) == 0 {
		return false
	}
	got := sha256.Sum256(q)
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

var streamUpgrader = websocket.FastHTTPUpgrader{
	HandshakeTimeout: 10 * time.Second,
	ReadBufferSize:   4096,
	WriteBufferSize:  16384,
	// CheckOrigin nil: same origin only (a page elsewhere cannot read the stream).
	Error: func(ctx *fasthttp.RequestCtx, status int, reason error) {
		code := CodeBadRequest
		switch status {
		case fasthttp.StatusForbidden:
			code = "forbidden"
		case fasthttp.StatusMethodNotAllowed:
			code = CodeMethodNotAllowed
		}
		writeError(ctx, apiErr(status, code, reason.Error()))
	},
}

// clientMsg is a subscription message: {"subscribe": ["run", ...] | "*", "from": cursor}.
type clientMsg struct {
	Subscribe json.RawMessage `json:"subscribe"`
	From      *uint64         `json:"from"`
}

type subscribeReq struct {
	filter stream.Filter
	from   *uint64
	err    string
}

func parseClientMsg(b []byte) subscribeReq {
	var m clientMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return subscribeReq{err: `a message must be a JSON object {"subscribe": ["run_id", ...] | "*", "from": cursor}: ` + err.Error()}
	}
	var all string
	var runs []string
	switch {
	case json.Unmarshal(m.Subscribe, &all) == nil && all == "*":
		return subscribeReq{filter: stream.Filter{All: true}, from: m.From}
	case json.Unmarshal(m.Subscribe, &runs) == nil && runs != nil:
		return subscribeReq{filter: stream.Filter{Runs: runs}, from: m.From}
	}
	return subscribeReq{err: `"subscribe" must be "*" or an array of run IDs`}
}

// stream serves GET /api/training/stream (WebSocket; protocol in docs/stream.md).
func (s *Server) stream(c *call) {
	ctx := c.rc
	if !s.streamAuthorized(ctx) {
		writeError(ctx, apiErr(401, CodeUnauthorized, "missing or wrong token: send `Authorization: Bearer <token>` or ?token=<token> with the dashboard's --token (FW_DASHBOARD_TOKEN)"))
		return
	}
	hub := s.cfg.Hub
	if hub == nil {
		writeError(ctx, apiErr(503, CodeUnavailable, "the live stream is not enabled on this server"))
		return
	}
	if !websocket.FastHTTPIsWebSocketUpgrade(ctx) {
		writeError(ctx, apiErr(400, CodeBadRequest, "this is a WebSocket endpoint: connect with a WebSocket client (see docs/stream.md)"))
		return
	}
	err := streamUpgrader.Upgrade(ctx, func(c *websocket.Conn) { s.serveStream(hub, c) })
	if err != nil {
		s.log.Debug("stream: upgrade failed", "err", err)
	}
}

func (s *Server) serveStream(hub *stream.Hub, c *websocket.Conn) {
	reqs := make(chan subscribeReq, 4)
	readDone := make(chan struct{})
	quit := make(chan struct{})
	// The connection must not be used once this returns (fasthttp reuses
	// it): stop the reader by closing the connection and wait for it.
	defer func() {
		close(quit)
		c.Close()
		<-readDone
	}()
	go func() { // the only reader
		defer close(readDone)
		c.SetReadLimit(maxClientMessage)
		_ = c.SetReadDeadline(time.Now().Add(streamPongWait))
		c.SetPongHandler(func(string) error { return c.SetReadDeadline(time.Now().Add(streamPongWait)) })
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(streamPongWait))
			select {
			case reqs <- parseClientMsg(b):
			case <-quit:
				return
			}
		}
	}()

	var sub *stream.Sub
	var last uint64 // cursor up to which this client has everything it asked for
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	write := func(b []byte) bool {
		_ = c.SetWriteDeadline(time.Now().Add(streamWriteWait))
		return c.WriteMessage(websocket.TextMessage, b) == nil
	}
	writeJSONMsg := func(v any) bool {
		b, _ := json.Marshal(v)
		return write(b)
	}
	// closeWith sends the close frame with the normal write deadline: a slow
	// client first drains what is buffered, then reads why it was cut off.
	closeWith := func(code int, text string) {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(streamWriteWait))
	}
	cutOff := func() {
		if errors.Is(sub.Err(), stream.ErrSlow) {
			closeWith(CloseSlowConsumer, "too slow: reconnect with from="+strconv.FormatUint(last, 10))
		} else {
			closeWith(websocket.CloseGoingAway, "the dashboard is shutting down")
		}
	}
	send := func(m stream.Message) bool {
		if m.Gap {
			last = m.Cursor - 1
			return writeJSONMsg(map[string]any{"type": "gap", "from": m.GapFrom, "oldest": m.Cursor, "cursor": m.Cursor - 1})
		}
		last = m.Cursor
		return write(m.Msg)
	}
	heartbeat := time.NewTicker(hub.Heartbeat())
	defer heartbeat.Stop()
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	var live <-chan stream.Message
	var done <-chan struct{}
	for {
		select {
		case <-readDone:
			return
		case <-s.base.Done():
			closeWith(websocket.CloseGoingAway, "the dashboard is shutting down")
			return
		case r := <-reqs:
			if r.err != "" {
				if !writeJSONMsg(map[string]any{"type": "error", "error": map[string]string{"code": CodeBadRequest, "message": r.err}}) {
					return
				}
				continue
			}
			from := r.from
			if from == nil && sub != nil {
				from = &last // changing runs: continue where this connection is
			}
			if sub != nil {
				sub.Close()
			}
			sub = hub.Subscribe(r.filter, from)
			live, done = sub.C(), sub.Done()
			if from == nil {
				// Live from here: nothing before the subscription matters.
				last = sub.Start()
			}
			runs := any(r.filter.Runs)
			if r.filter.All {
				runs = "*"
			}
			if !writeJSONMsg(map[string]any{"type": "subscribed", "runs": runs, "from": from, "cursor": sub.Start()}) {
				return
			}
			replay := sub.Replay()
			if len(replay) > 0 && replay[0].Gap && s.st != nil {
				// Older than this hub's ring: from the store's feed, the
				// source of truth (across restarts and replicas).
				gap := replay[0]
				replay = replay[1:]
				ok, err := tracking.ReplayFeed(s.base, s.st, gap.GapFrom, gap.Cursor, sub.Match, send)
				if !ok {
					return
				}
				if err != nil {
					s.log.Warn("stream: replaying from the store's feed failed; the client gets a gap", "from", gap.GapFrom, "err", err)
					if last < gap.Cursor-1 && !send(stream.Message{Gap: true, GapFrom: last, Cursor: gap.Cursor}) {
						return
					}
				}
			}
			for _, m := range replay {
				if !send(m) {
					return
				}
			}
		case <-done:
			cutOff()
			return
		case m := <-live:
			select {
			case <-done: // cut off: close now rather than send what is still queued
				cutOff()
				return
			default:
			}
			if !send(m) {
				return
			}
		case <-heartbeat.C:
			if sub == nil {
				continue
			}
			select {
			case <-done: // cut off: it missed events, the cursor must not move
				continue
			default:
			}
			cur := last
			// Everything up to c is queued; with the queue empty it was all sent.
			if c := hub.Cursor(); sub.Pending() == 0 && c > cur {
				cur, last = c, c
			}
			if !writeJSONMsg(map[string]any{"type": "heartbeat", "cursor": cur, "time": time.Now().UTC()}) {
				return
			}
		case <-ping.C:
			if c.WriteControl(websocket.PingMessage, nil, time.Now().Add(streamWriteWait)) != nil {
				return
			}
		}
	}
}
