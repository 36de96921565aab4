package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fw-serve/fw/dashboard/store"

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
	passTrace(&ctx, h, true)
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
	passTrace(&ctx, h, false)
	want := telemetry.Traceparent(span.SpanContext())
	if h.Get("traceparent") != want || want[3:35] != caller[3:35] || want[36:52] == caller[36:52] || h.Get("tracestate") != "vendor=x" {
		t.Fatalf("traced: %v, want the dashboard's span %s in the caller's trace", h, want)
	}

	var bad fasthttp.RequestCtx
	bad.Request.Header.Set("traceparent", "00-XYZ")
	h = http.Header{}
	passTrace(&bad, h, false)
	if len(h) != 0 {
		t.Fatalf("a malformed traceparent was passed on: %v", h)
	}
	// Forced: a new sampled trace, for the deployment to trace.
	passTrace(&bad, h, true)
	if sc, ok := telemetry.ParseTraceparent([]byte(h.Get("traceparent"))); !ok || !sc.IsSampled() || h.Get("traceparent") == caller {
		t.Fatalf("forced: %v", h)
	}
}

// TestTraceStore: fw's own exporter sends a traced request's spans to the
// dashboard's OTLP receiver; the API lists the deployment's requests
// (recent and slowest) and reads the whole trace with its links.
func TestTraceStore(t *testing.T) {
	url := startCRUDServer(t, nil)
	cfg, _, err := telemetry.FromEnv(func(k string) string {
		return map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "fw.deployment=dep-1", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}[k]
	}, url+"/v1/traces", telemetry.ProtocolHTTP)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Service = "fw-serve"
	tr, err := telemetry.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(t.Context())
	start := time.Now()
	var ids []string
	for i, d := range []time.Duration{3 * time.Millisecond, 9 * time.Millisecond, time.Millisecond} {
		sp := tr.Start(nil, nil, start.Add(time.Duration(i)*time.Second))
		ctx, call := telemetry.StartCall(telemetry.With(t.Context(), sp))
		tr.Observer("digits", "1").EngineCall([]context.Context{ctx}, 1, start.Add(time.Duration(i)*time.Second), time.Millisecond, nil)
		call.Done("digits", "1", 0, nil)
		sp.End("POST /predict", trace.SpanKindServer, nil, start.Add(time.Duration(i)*time.Second+d), false, "")
		ids = append(ids, sp.SpanContext().TraceID().String())
	}
	if err := tr.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if exp, _, failed := tr.Counts(); failed != 0 || exp != 3*6 {
		t.Fatalf("exported %d, failed %d", exp, failed)
	}
	code, out := doJSON(t, "GET", url+"/api/traces?deployment=dep-1", "")
	reqs, _ := out["requests"].([]any)
	if code != 200 || len(reqs) != 3 || reqs[0].(map[string]any)["trace_id"] != ids[2] {
		t.Fatalf("recent: %d %v", code, out)
	}
	first := reqs[0].(map[string]any)
	if first["service"] != "fw-serve" || first["deployment"] != "dep-1" || first["name"] != "POST /predict" || first["kind"] != float64(2) {
		t.Fatalf("a request: %v", first)
	}
	code, out = doJSON(t, "GET", url+"/api/traces?deployment=dep-1&sort=slowest&limit=1", "")
	if reqs, _ := out["requests"].([]any); code != 200 || len(reqs) != 1 || reqs[0].(map[string]any)["trace_id"] != ids[1] {
		t.Fatalf("slowest: %d %v", code, out)
	}
	if code, out := doJSON(t, "GET", url+"/api/traces?deployment=other", ""); code != 200 || len(out["requests"].([]any)) != 0 {
		t.Fatalf("another deployment: %d %v", code, out)
	}
	code, out = doJSON(t, "GET", url+"/api/traces/"+ids[0], "")
	spans, _ := out["spans"].([]any)
	if code != 200 || len(spans) != 5 {
		t.Fatalf("trace: %d %v", code, out)
	}
	var infer map[string]any
	for _, s := range spans {
		if s.(map[string]any)["name"] == "infer" {
			infer = s.(map[string]any)
		}
	}
	links, _ := infer["links"].([]any)
	if len(links) != 1 {
		t.Fatalf("infer's links: %v", infer)
	}
	engine := links[0].(map[string]any)["trace_id"].(string)
	code, out = doJSON(t, "GET", url+"/api/traces/"+engine, "")
	if spans, _ := out["spans"].([]any); code != 200 || len(spans) != 1 || spans[0].(map[string]any)["name"] != "engine call digits" {
		t.Fatalf("the engine call's trace: %d %v", code, out)
	}
	for _, c := range []struct {
		path string
		code int
	}{{"/api/traces/" + strings.Repeat("0", 32), 404}, {"/api/traces/xyz", 400}, {"/api/traces?sort=fast", 400}, {"/api/traces?sort=", 400}, {"/api/traces?limit=0", 400}, {"/api/traces?since=yesterday", 400}} {
		if code, out := doJSON(t, "GET", url+c.path, ""); code != c.code || errCode(t, out) == "" {
			t.Errorf("GET %s: %d %v, want %d", c.path, code, out, c.code)
		}
	}
}

// TestTraceReceiverRefuses: what is not OTLP/HTTP protobuf is refused with
// OTLP's Status; spans with malformed IDs are counted as rejected, the
// rest kept; a gzip bomb is refused at the body limit; the token applies.
func TestTraceReceiverRefuses(t *testing.T) {
	var srv *Server
	url := startCRUDServer(t, func(s *Server) { srv = s })
	post := func(ct, enc string, body []byte) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status := func(b []byte) *spb.Status {
		t.Helper()
		var st spb.Status
		if err := proto.Unmarshal(b, &st); err != nil || st.GetMessage() == "" {
			t.Fatalf("not an OTLP Status: %q %v", b, err)
		}
		return &st
	}
	if code, b := post("text/plain", "", []byte(`{}`)); code != 415 || !strings.Contains(status(b).GetMessage(), "protobuf") {
		t.Fatalf("text: %d %q", code, b)
	}
	// OTLP/JSON: hex IDs; its errors in JSON.
	jsonSpan := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","spanId":"0b0b0b0b0b0b0b0b","name":"json span","kind":2,"startTimeUnixNano":"5","endTimeUnixNano":"9"}]}]}]}`
	if code, b := post("application/json", "", []byte(jsonSpan)); code != 200 || !json.Valid(b) {
		t.Fatalf("OTLP/JSON: %d %q", code, b)
	}
	if code, out := doJSON(t, "GET", url+"/api/traces/"+strings.Repeat("0a", 16), ""); code != 200 || out["spans"].([]any)[0].(map[string]any)["name"] != "json span" {
		t.Fatalf("the OTLP/JSON span read back: %d %v", code, out)
	}
	if code, b := post("application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`)); code != 400 || !strings.Contains(string(b), `"message"`) {
		t.Fatalf("OTLP/JSON with a bad ID: %d %q", code, b)
	}
	if code, b := post("application/x-protobuf", "", []byte{0xff, 0xff, 0xff}); code != 400 || status(b).GetCode() != 3 {
		t.Fatalf("garbage: %d %q", code, b)
	}
	if code, b := post("application/x-protobuf", "br", nil); code != 415 {
		t.Fatalf("brotli: %d %q", code, b)
	}
	good := &tracepb.Span{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: "POST /predict", Kind: tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: 1, EndTimeUnixNano: 2, Attributes: []*commonpb.KeyValue{{Key: "s", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: strings.Repeat("x", 10000)}}}}}
	bad := &tracepb.Span{TraceId: []byte{1, 2}, SpanId: bytes.Repeat([]byte{3}, 8)}
	zero := &tracepb.Span{TraceId: make([]byte, 16), SpanId: bytes.Repeat([]byte{3}, 8)}
	req := &collpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{good, bad, zero}}}}}}
	body, _ := proto.Marshal(req)
	code, b := post("application/x-protobuf", "", body)
	var resp collpb.ExportTraceServiceResponse
	if code != 200 || proto.Unmarshal(b, &resp) != nil || resp.GetPartialSuccess().GetRejectedSpans() != 2 {
		t.Fatalf("partial: %d %v", code, &resp)
	}
	code, out := doJSON(t, "GET", url+"/api/traces/"+strings.Repeat("01", 16), "")
	if spans, _ := out["spans"].([]any); code != 200 || len(spans) != 1 || len(spans[0].(map[string]any)["attributes"].(map[string]any)["s"].(string)) != maxAttrValueBytes {
		t.Fatalf("the kept span, its long attribute clipped: %d %v", code, out)
	}
	// A gzip bomb: a few KiB that expand past the body limit.
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	chunk := make([]byte, 1<<20)
	for range int(srv.cfg.MaxBodyBytes>>20) + 2 {
		zw.Write(chunk)
	}
	zw.Close()
	if code, b := post("application/x-protobuf", "gzip", zb.Bytes()); code != 413 || status(b).GetCode() != 8 {
		t.Fatalf("bomb of %d bytes: %d %q", zb.Len(), code, b)
	}
	if code, b := post("application/x-protobuf", "gzip", []byte("not gzip")); code != 400 {
		t.Fatalf("corrupt gzip: %d %q", code, b)
	}
	// GET is not OTLP's.
	resp2, err := http.Get(url + "/v1/traces")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 405 || resp2.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/traces: %d %v", resp2.StatusCode, resp2.Header)
	}
}

// ownsAll is a mounted API that claims every path, as MLflow's claims
// /v1/traces (MLflow's own OTLP route).
type ownsAll struct{}

func (ownsAll) Owns(string) bool                           { return true }
func (ownsAll) Handler(ctx *fasthttp.RequestCtx, _ string) { ctx.SetStatusCode(404) }
func (ownsAll) Unauthorized(ctx *fasthttp.RequestCtx)      { ctx.SetStatusCode(401) }
func (ownsAll) RoutePattern(string) string                 { return "mounted" }

// TestTraceReceiverNeedsTheToken: with a token, OTLP exporters send it as
// a header; without it, 401 in OTLP's shape. The receiver answers before a
// mounted API that also claims the path (MLflow's).
func TestTraceReceiverNeedsTheToken(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := New(context.Background(), st, Config{Token: "s3cret", Mounts: []Mount{ownsAll{}}}, slog.New(slog.DiscardHandler))
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/traces")
	ctx.Request.Header.SetContentType("application/x-protobuf")
	srv.Handler(&ctx)
	var s spb.Status
	if ctx.Response.StatusCode() != 401 || proto.Unmarshal(ctx.Response.Body(), &s) != nil || s.GetCode() != 16 {
		t.Fatalf("no token: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx.Response.Reset()
	ctx.Request.Header.Set("Authorization", "Bearer s3cret")
	srv.Handler(&ctx)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("with the token: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// FuzzReceiveTraces: any body to the receiver is answered (no panic), in
// OTLP's shapes, and what it stores reads back.
func FuzzReceiveTraces(f *testing.F) {
	good, _ := proto.Marshal(&collpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
		{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: "x", Links: []*tracepb.Span_Link{{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{4}, 8)}}},
	}}}}}})
	f.Add(good)
	f.Add([]byte{0x0a, 0x00})
	dir := f.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: dir})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv := New(context.Background(), st, Config{}, slog.New(slog.DiscardHandler))
	f.Fuzz(func(t *testing.T, body []byte) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/traces")
		ctx.Request.Header.SetContentType("application/x-protobuf")
		ctx.Request.SetBody(body)
		srv.Handler(&ctx)
		switch ctx.Response.StatusCode() {
		case 200:
			var r collpb.ExportTraceServiceResponse
			if err := proto.Unmarshal(ctx.Response.Body(), &r); err != nil {
				t.Fatalf("200 that is not a response: %v", err)
			}
		case 400, 413:
			var s spb.Status
			if err := proto.Unmarshal(ctx.Response.Body(), &s); err != nil || s.GetMessage() == "" {
				t.Fatalf("%d that is not a Status: %v", ctx.Response.StatusCode(), err)
			}
		default:
			t.Fatalf("answered %d: %q", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	})
}
