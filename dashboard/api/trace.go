package api

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/telemetry"
)

// spanKey is the RequestCtx user value holding a traced request's span.
type spanKey struct{}

// endSpan sends a traced request's server span, named by its method and
// route pattern (label: "other" for a path no route has), an error when it
// was answered 5xx, with the error's message.
func endSpan(ctx *fasthttp.RequestCtx, span *telemetry.Span, method, path, label string, code int) {
	route := label
	if label == "other" {
		route = ""
	}
	span.EndHTTP(telemetry.HTTPRequest{
		Method: method, Path: path, Route: route, Status: code, Remote: ctx.RemoteAddr(), UserAgent: ctx.Request.Header.UserAgent(), BodySize: -1,
		ErrorMessage: func() string {
			var body struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if ctx.Response.IsBodyStream() || json.Unmarshal(ctx.Response.Body(), &body) != nil {
				return ""
			}
			return body.Error.Message
		},
	})
}

// passTrace sets the W3C trace context of a request the dashboard makes on
// behalf of ctx's (the deployment proxy's): its own span when it is traced,
// else the caller's traceparent and tracestate as they came, so that the
// deployment's spans join the caller's trace either way. With neither,
// force starts a sampled trace (the deployment traces the request).
func passTrace(ctx *fasthttp.RequestCtx, h http.Header, force bool) {
	if span, _ := ctx.UserValue(spanKey{}).(*telemetry.Span); span != nil {
		sc := span.SpanContext()
		h.Set("traceparent", telemetry.Traceparent(sc))
		if ts := sc.TraceState().String(); ts != "" {
			h.Set("tracestate", ts)
		}
		return
	}
	if tp := ctx.Request.Header.Peek("traceparent"); len(tp) > 0 {
		if _, ok := telemetry.ParseTraceparent(tp); ok {
			h.Set("traceparent", string(tp))
			if ts := ctx.Request.Header.Peek("tracestate"); len(ts) > 0 {
				h.Set("tracestate", string(ts))
			}
			return
		}
	}
	if force {
		var id [24]byte
		binary.BigEndian.PutUint64(id[0:], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64()|1)
		binary.BigEndian.PutUint64(id[16:], rand.Uint64()|1)
		h.Set("traceparent", "00-"+hex.EncodeToString(id[:16])+"-"+hex.EncodeToString(id[16:])+"-01")
	}
}
