package api

import (
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/valyala/fasthttp"
)

// maxRequestIDLen bounds an X-Request-Id taken from the client.
const maxRequestIDLen = 128

// recoverPanic is the last net under every request, deferred by Handler: a
// panic in a route is answered 500 "internal" in the error shape with a
// request id, logged with that id and the stack, and counted in
// fw_dashboard_http_panics_total, and the dashboard goes on serving. Input
// checks are what keep requests from panicking; this only keeps one missed
// check from ending the process (fasthttp does not recover handlers).
func (s *Server) recoverPanic(ctx *fasthttp.RequestCtx) {
	r := recover()
	if r == nil {
		return
	}
	stack := debug.Stack()
	if s.prom != nil {
		s.prom.panics.Inc()
	}
	id := requestID(ctx)
	s.log.Error("panic while serving a request; answered 500", "request_id", id,
		"method", string(ctx.Method()), "path", string(ctx.Path()), "panic", fmt.Sprint(r), "stack", string(stack))
	if ctx.Hijacked() {
		return // a WebSocket upgrade: the connection is no longer an HTTP exchange
	}
	ctx.Response.Reset()
	ctx.Response.Header.Set("X-Request-Id", id)
	e := apiErr(fasthttp.StatusInternalServerError, CodeInternal,
		"the dashboard failed on this request because of a bug (it was logged with request id "+id+"); the request may succeed if retried, and please report it with the request id")
	e.Details = map[string]any{"request_id": id}
	writeError(ctx, e)
}

// requestID is the request's X-Request-Id when the client sent a usable one
// (printable ASCII, at most maxRequestIDLen bytes), else fasthttp's
// per-connection request id with the connection's start time.
func requestID(ctx *fasthttp.RequestCtx) string {
	if h := ctx.Request.Header.Peek("X-Request-Id"); len(h) > 0 && len(h) <= maxRequestIDLen && printableASCII(h) {
		return string(h)
	}
	return strconv.FormatInt(ctx.ConnTime().Unix(), 36) + "-" + strconv.FormatUint(ctx.ID(), 36)
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
