package httpapi

import (
	"bytes"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"

	"github.com/valyala/fasthttp"
)

// maxRequestIDLen bounds an X-Request-Id taken from the client.
const maxRequestIDLen = 128

// routeSafely runs route and is the last net under every request: a panic
// in any route is answered 500 "internal" in the error shape, logged with
// the request id and the stack, and counted in fw_http_panics_total, and the
// server goes on serving. Input checks are what keep requests from panicking;
// this only keeps one missed check from ending the process.
func (s *Server) routeSafely(ctx *fasthttp.RequestCtx) (ep string) {
	defer func() {
		if r := recover(); r != nil {
			ep = panicEndpoint(ctx.Path())
			s.recovered(ctx, r, debug.Stack())
		}
	}()
	return s.route(ctx)
}

// recovered answers, logs and counts a panic recovered from a route.
func (s *Server) recovered(ctx *fasthttp.RequestCtx, r any, stack []byte) {
	s.metrics.panics.Inc()
	id := s.requestID(ctx)
	s.log.Error("panic while serving a request; answered 500", "request_id", id,
		"method", string(ctx.Method()), "path", string(ctx.Path()), "panic", fmt.Sprint(r), "stack", string(stack))
	// Drop whatever the route had set (headers, a body or a body stream
	// writer) but keep the connection's state: the caller's drain logic
	// still sees the request.
	ctx.Response.Reset()
	ctx.Response.Header.Set("X-Request-Id", id)
	writeError(ctx, newError(500, CodeInternal,
		"the server failed on this request because of a bug (it was logged with request id "+id+"); the request may succeed if retried, and please report it with the request id",
		map[string]any{"request_id": id}))
	if bytes.HasPrefix(ctx.Path(), []byte("/v2")) {
		v2ErrorBody(ctx)
	}
}

// requestID is the request's X-Request-Id when the client sent a usable one
// (printable ASCII, at most maxRequestIDLen bytes), else one made from the
// server's start time and fasthttp's per-request id.
func (s *Server) requestID(ctx *fasthttp.RequestCtx) string {
	if h := ctx.Request.Header.Peek("X-Request-Id"); len(h) > 0 && len(h) <= maxRequestIDLen && printableASCII(h) {
		return string(h)
	}
	return strconv.FormatInt(s.started.Unix(), 36) + "-" + strconv.FormatUint(ctx.ID(), 36)
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// panicEndpoint is the fw_http_requests_total endpoint label of a request
// whose route panicked before naming it.
func panicEndpoint(path []byte) string {
	switch p := string(path); {
	case p == "/predict":
		return "predict"
	case p == "/predict/image":
		return "predict_image"
	case p == "/predict/batch":
		return "predict_batch"
	case bytes.HasPrefix(path, []byte("/v2/")) && bytes.HasSuffix(path, []byte("/infer")):
		return "v2_infer"
	case bytes.HasPrefix(path, []byte("/v2")):
		return "v2"
	}
	return "other"
}

// drainBody reads and drops what is left of a streamed request body, up to
// maxDrainBytes, so a client still sending gets to read an error answer
// instead of a reset. It reports whether the body was read to its end: only
// then may the connection carry another request.
func drainBody(ctx *fasthttp.RequestCtx) bool {
	_, err := io.CopyN(io.Discard, ctx.RequestBodyStream(), maxDrainBytes)
	return err == io.EOF
}
