package api

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/telemetry"
)

// TestPassTrace: the deployment proxy passes the trace on: the dashboard's
// own span when it traced the request, else the caller's context as it
// came; a malformed traceparent is not passed.
func TestPassTrace(t *testing.T) {
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("traceparent", caller)
	ctx.Request.Header.Set("tracestate", "vendor=x")
	h := http.Header{}
	passTrace(&ctx, h)
	if h.Get("traceparent") != caller || h.Get("tracestate") != "vendor=x" {
		t.Fatalf("untraced: %v", h)
	}

	cfg, _, err := telemetry.FromEnv(func(string) string { return "" }, "http://127.0.0.1:1", telemetry.ProtocolHTTP)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := telemetry.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(t.Context())
	span := tr.Start([]byte(caller), []byte("vendor=x"), time.Now())
	ctx.SetUserValue(spanKey{}, span)
	h = http.Header{}
	passTrace(&ctx, h)
	want := telemetry.Traceparent(span.SpanContext())
	if h.Get("traceparent") != want || want[3:35] != caller[3:35] || want[36:52] == caller[36:52] || h.Get("tracestate") != "vendor=x" {
		t.Fatalf("traced: %v, want the dashboard's span %s in the caller's trace", h, want)
	}

	var bad fasthttp.RequestCtx
	bad.Request.Header.Set("traceparent", "00-XYZ")
	h = http.Header{}
	passTrace(&bad, h)
	if len(h) != 0 {
		t.Fatalf("a malformed traceparent was passed on: %v", h)
	}
}
