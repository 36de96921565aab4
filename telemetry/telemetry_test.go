package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fw-serve/fw/internal/testleak"
)

func TestMain(m *testing.M) { testleak.Main(m) }

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseTraceparent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{"00-" + tid + "-" + sid + "-01", true, true},
		{"00-" + tid + "-" + sid + "-00", true, false},
		{"00-" + tid + "-" + sid + "-03", true, true}, // unknown flags are ignored
		{"01-" + tid + "-" + sid + "-01-extra", true, true},
		{"00-" + tid + "-" + sid + "-01-extra", false, false}, // version 00 has exactly four fields
		{"ff-" + tid + "-" + sid + "-01", false, false},
		{"00-" + strings.ToUpper(tid) + "-" + sid + "-01", false, false},
		{"00-00000000000000000000000000000000-" + sid + "-01", false, false},
		{"00-" + tid + "-0000000000000000-01", false, false},
		{"00-" + tid + "-" + sid + "-0g", false, false},
		{"00_" + tid + "-" + sid + "-01", false, false},
		{"", false, false},
		{"00-" + tid + "-" + sid, false, false},
	} {
		sc, ok := ParseTraceparent([]byte(c.in))
		if ok != c.ok || (ok && sc.IsSampled() != c.sampled) {
			t.Errorf("%q: ok %v sampled %v, want %v %v", c.in, ok, sc.IsSampled(), c.ok, c.sampled)
		}
		if ok && (sc.TraceID().String() != tid || sc.SpanID().String() != sid || !sc.IsRemote()) {
			t.Errorf("%q: read %s", c.in, sc.TraceID())
		}
		if ok && Traceparent(sc)[3:52] != c.in[3:52] {
			t.Errorf("%q: written back as %q", c.in, Traceparent(sc))
		}
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	f.Add([]byte("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, ok := ParseTraceparent(b)
		if !ok {
			return
		}
		if !sc.IsValid() || len(b) < 55 {
			t.Fatalf("%q accepted as %v", b, sc)
		}
		if got := Traceparent(sc); got[3:52] != string(b[3:52]) {
			t.Fatalf("%q written back as %q", b, got)
		}
	})
}

func TestSamplers(t *testing.T) {
	for _, c := range []struct {
		name, arg string
		want      Sampler
		err       bool
	}{
		{"", "", Sampler{ParentBased: true, Ratio: 1}, false},
		{"always_on", "", Sampler{Ratio: 1}, false},
		{"always_off", "", Sampler{Ratio: 0}, false},
		{"traceidratio", "0.25", Sampler{Ratio: 0.25}, false},
		{"parentbased_traceidratio", "0.01", Sampler{ParentBased: true, Ratio: 0.01}, false},
		{"parentbased_always_off", "", Sampler{ParentBased: true}, false},
		{"traceidratio", "2", Sampler{}, true},
		{"traceidratio", "NaN", Sampler{}, true},
		{"jaeger_remote", "", Sampler{}, true},
	} {
		got, err := ParseSampler(c.name, c.arg)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("%q %q: %+v %v, want %+v (error %v)", c.name, c.arg, got, err, c.want, c.err)
		}
	}
}

// newTracer is a tracer sending to url over HTTP.
func newTracer(t *testing.T, url string, extra ...string) *Tracer {
	t.Helper()
	cfg, on, err := FromEnv(env(extra...), url, ProtocolHTTP)
	if err != nil || !on {
		t.Fatalf("FromEnv: %v %v", on, err)
	}
	tr, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

func TestRatioSamplingIsByTraceID(t *testing.T) {
	tr := newTracer(t, "http://127.0.0.1:1")
	tr.bound = uint64(0.1 * float64(1<<63))
	tr.cfg.Sampler = Sampler{Ratio: 0.1}
	n := 0
	for range 20000 {
		if tr.Start(nil, nil, time.Now()) != nil {
			n++
		}
	}
	if n < 1600 || n > 2400 {
		t.Fatalf("a ratio of 0.1 sampled %d of 20000", n)
	}
	// Not parent-based: the parent's trace ID decides, whatever its flag.
	var tid trace.TraceID
	tid[8] = 0x01 // low half small: below the bound
	lo := []byte("00-" + hex.EncodeToString(tid[:]) + "-00f067aa0ba902b7-00")
	if tr.Start(lo, nil, time.Now()) == nil {
		t.Fatal("a trace ID under the ratio's bound was not sampled")
	}
	tid[8] = 0xff
	if tr.Start([]byte("00-"+hex.EncodeToString(tid[:])+"-00f067aa0ba902b7-01"), nil, time.Now()) != nil {
		t.Fatal("a trace ID over the ratio's bound was sampled")
	}
	// Parent-based: the parent's flag decides.
	tr.cfg.Sampler.ParentBased = true
	if tr.Start(lo, nil, time.Now()) != nil {
		t.Fatal("an unsampled parent's request was traced")
	}
}

func TestFromEnv(t *testing.T) {
	cfg, on, err := FromEnv(env(), "", "")
	if err != nil || on {
		t.Fatalf("no endpoint: on %v, %v", on, err)
	}
	cfg, on, err = FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base/", "OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, X-Team=ml",
		"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "OTEL_BSP_SCHEDULE_DELAY", "250", "OTEL_SERVICE_NAME", "scorer",
		"OTEL_RESOURCE_ATTRIBUTES", "service.name=other,deployment.environment=prod%2Ceu"), "", "")
	if err != nil || !on {
		t.Fatal(on, err)
	}
	e := cfg.Export
	if cfg.Protocol != ProtocolHTTP || e.Endpoint != "http://collector:4318/base/v1/traces" || !e.Gzip || e.Delay != 250*time.Millisecond ||
		e.Headers["api-key"] != "a b" || e.Headers["x-team"] != "ml" {
		t.Fatalf("%+v", cfg)
	}
	want := []attribute.KeyValue{attribute.String("service.name", "scorer"), attribute.String("deployment.environment", "prod,eu")}
	if len(cfg.Resource) != 2 || cfg.Resource[0] != want[0] || cfg.Resource[1] != want[1] {
		t.Fatalf("resource %v", cfg.Resource)
	}
	// The per-signal endpoint is used as it is; the flag wins over both.
	cfg, _, _ = FromEnv(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c:443/custom", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:1"), "", "")
	if cfg.Export.Endpoint != "https://c:443/custom" {
		t.Fatal(cfg.Export.Endpoint)
	}
	cfg, _, _ = FromEnv(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c:443/custom"), "http://127.0.0.1:4318", "")
	if cfg.Export.Endpoint != "http://127.0.0.1:4318/v1/traces" {
		t.Fatal(cfg.Export.Endpoint)
	}
	cfg, _, _ = FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "", "")
	if cfg.Protocol != ProtocolGRPC || cfg.Export.Endpoint != "c:4317" || !cfg.Export.Insecure {
		t.Fatalf("%+v", cfg.Export)
	}
	cfg, _, _ = FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "", "")
	if cfg.Export.Insecure {
		t.Fatal("a gRPC endpoint without a scheme is TLS unless OTEL_EXPORTER_OTLP_INSECURE=true")
	}
	for _, off := range []func(string) string{
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_SDK_DISABLED", "true"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_TRACES_EXPORTER", "none"),
	} {
		if _, on, err := FromEnv(off, "", ""); on || err != nil {
			t.Fatal("disabled tracing is on", err)
		}
	}
	for _, bad := range []func(string) string{
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_TRACES_EXPORTER", "zipkin"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "c:1"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_EXPORTER_OTLP_HEADERS", "novalue"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_BSP_MAX_QUEUE_SIZE", "-1"),
		env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:1", "OTEL_RESOURCE_ATTRIBUTES", "=x"),
	} {
		if _, _, err := FromEnv(bad, "", ""); err == nil {
			t.Error("a bad setting was accepted")
		}
	}
}

// receiver is an OTLP/HTTP receiver decoding what it gets with OTLP's own
// protobuf types.
type receiver struct {
	mu      sync.Mutex
	reqs    []*collpb.ExportTraceServiceRequest
	headers []http.Header
	block   chan struct{} // when set, requests wait on it
	srv     *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.block != nil {
			<-r.block
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var m collpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, &m)
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, m := range r.reqs {
		for _, rs := range m.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				out = append(out, ss.GetSpans()...)
			}
		}
	}
	return out
}

// TestSpansAsOTLPDecodesThem: a traced request with one inference is sent
// as OTLP that OTLP's own types decode: the server span under the caller's
// parent (remote), its four phases, and the engine call linked both ways.
func TestSpansAsOTLPDecodesThem(t *testing.T) {
	rcv := newReceiver(t)
	tr := newTracer(t, rcv.srv.URL, "OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20k",
		"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	start := time.Now()
	sp := tr.Start([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), []byte("vendor=x"), start)
	if sp == nil {
		t.Fatal("a sampled parent's request was not traced")
	}
	ctx, call := StartCall(With(context.Background(), sp))
	other := context.Background() // an untraced request batched with it
	tr.Observer("digits", "1").EngineCall([]context.Context{other, ctx}, 3, start.Add(time.Millisecond), 2*time.Millisecond, nil)
	call.Done("digits", "1", 500*time.Microsecond, nil)
	sp.End("POST /predict", trace.SpanKindServer, []attribute.KeyValue{attribute.Int("http.response.status_code", 200), attribute.Bool("b", true),
		attribute.Float64("f", 1.5), attribute.StringSlice("s", []string{"a"})}, start.Add(5*time.Millisecond), false, "")
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.spans()
	if len(spans) != 6 {
		t.Fatalf("%d spans", len(spans))
	}
	by := map[string]*tracepb.Span{}
	for _, s := range spans {
		by[s.GetName()] = s
	}
	srv, eng := by["POST /predict"], by["engine call digits"]
	if srv == nil || eng == nil {
		t.Fatalf("spans %v", by)
	}
	if hex.EncodeToString(srv.GetTraceId()) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(srv.GetParentSpanId()) != "00f067aa0ba902b7" ||
		srv.GetTraceState() != "vendor=x" || srv.GetKind() != tracepb.Span_SPAN_KIND_SERVER || srv.GetFlags() != 0x301 {
		t.Fatalf("server span %v", srv)
	}
	if srv.GetStartTimeUnixNano() != uint64(start.UnixNano()) || srv.GetEndTimeUnixNano() != uint64(start.Add(5*time.Millisecond).UnixNano()) {
		t.Fatal("server span times", srv)
	}
	got := map[string]string{}
	for _, kv := range srv.GetAttributes() {
		got[kv.GetKey()] = kv.GetValue().String()
	}
	for k, want := range map[string]string{"http.response.status_code": "int_value:200", "b": "bool_value:true", "f": "double_value:1.5",
		"s": `string_value:"[\"a\"]"`, "fw.model": `string_value:"digits"`, "fw.inferences": "int_value:1"} {
		if strings.ReplaceAll(got[k], " ", "") != strings.ReplaceAll(want, " ", "") {
			t.Errorf("attribute %s = %q, want %q", k, got[k], want)
		}
	}
	for _, name := range []string{"decode", "queue", "infer", "encode"} {
		c := by[name]
		if c == nil || !bytes.Equal(c.GetParentSpanId(), srv.GetSpanId()) || !bytes.Equal(c.GetTraceId(), srv.GetTraceId()) {
			t.Fatalf("%s: %v", name, c)
		}
		if c.GetStartTimeUnixNano() < srv.GetStartTimeUnixNano() || c.GetEndTimeUnixNano() > srv.GetEndTimeUnixNano() || c.GetEndTimeUnixNano() < c.GetStartTimeUnixNano() {
			t.Errorf("%s outside its request: %v", name, c)
		}
	}
	if in := by["infer"]; len(in.GetLinks()) != 1 || !bytes.Equal(in.GetLinks()[0].GetSpanId(), eng.GetSpanId()) ||
		in.GetStartTimeUnixNano() != uint64(start.Add(time.Millisecond).UnixNano()) {
		t.Fatalf("infer %v", in)
	}
	if q := by["queue"]; q.GetEndTimeUnixNano()-q.GetStartTimeUnixNano() != uint64(500*time.Microsecond) {
		t.Fatalf("queue %v", q)
	}
	if len(eng.GetLinks()) != 1 || !bytes.Equal(eng.GetLinks()[0].GetSpanId(), srv.GetSpanId()) || len(eng.GetParentSpanId()) != 0 {
		t.Fatalf("engine call %v", eng)
	}
	rs := rcv.reqs[0].GetResourceSpans()[0]
	res := map[string]string{}
	for _, kv := range rs.GetResource().GetAttributes() {
		res[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if res["service.name"] != "fw" || res["deployment.environment"] != "test" || rs.GetScopeSpans()[0].GetScope().GetName() != "github.com/fw-serve/fw/telemetry" {
		t.Fatalf("resource %v scope %v", res, rs.GetScopeSpans()[0].GetScope())
	}
	if h := rcv.headers[0]; h.Get("Authorization") != "Bearer k" || h.Get("Content-Type") != "application/x-protobuf" || h.Get("Content-Encoding") != "gzip" {
		t.Fatalf("headers %v", h)
	}
	if exp, drop, fail := tr.Counts(); exp != 6 || drop != 0 || fail != 0 {
		t.Fatalf("counts %d %d %d", exp, drop, fail)
	}
}

// TestFailedSpans: a failed request and a failed engine call carry an error
// status with the message.
func TestFailedSpans(t *testing.T) {
	rcv := newReceiver(t)
	tr := newTracer(t, rcv.srv.URL)
	sp := tr.Start(nil, nil, time.Now())
	ctx, call := StartCall(With(context.Background(), sp))
	tr.Observer("m", "1").EngineCall([]context.Context{ctx}, 1, time.Now(), time.Millisecond, io.ErrUnexpectedEOF)
	call.Done("m", "1", 0, io.ErrUnexpectedEOF)
	sp.End("POST /predict", trace.SpanKindServer, nil, time.Now(), true, "the engine failed")
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range rcv.spans() {
		want := map[string]string{"POST /predict": "the engine failed", "engine call m": "unexpected EOF", "infer": "unexpected EOF"}[s.GetName()]
		if want == "" {
			if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_UNSET {
				t.Errorf("%s: status %v", s.GetName(), s.GetStatus())
			}
			continue
		}
		if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.GetStatus().GetMessage() != want {
			t.Errorf("%s: status %v, want an error %q", s.GetName(), s.GetStatus(), want)
		}
	}
	if sp2 := tr.Start(nil, nil, time.Now()); len(sp2.SpanContext().TraceID().String()) != 32 || sp2.SpanContext().TraceID() == sp.SpanContext().TraceID() {
		t.Fatal("root traces share an ID")
	}
}

// TestQueueBoundedWhenReceiverStalls: with the receiver stuck, requests
// keep being answered at once; what does not fit the queue is dropped and
// counted, and shutdown is bounded by its context.
func TestQueueBoundedWhenReceiverStalls(t *testing.T) {
	rcv := newReceiver(t)
	rcv.block = make(chan struct{})
	defer close(rcv.block)
	tr := newTracer(t, rcv.srv.URL, "OTEL_BSP_MAX_QUEUE_SIZE", "60", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10", "OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	var slow atomic.Int64
	for range 1000 {
		t0 := time.Now()
		sp := tr.Start(nil, nil, t0)
		sp.End("GET /health", trace.SpanKindServer, nil, time.Now(), false, "")
		if d := time.Since(t0); d > 50*time.Millisecond {
			slow.Add(1)
		}
	}
	if slow.Load() > 0 {
		t.Fatalf("%d requests waited on the stuck receiver", slow.Load())
	}
	_, dropped, _ := tr.Counts()
	if dropped < 900 {
		t.Fatalf("only %d of 1000 spans dropped with a queue of 60", dropped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	t0 := time.Now()
	_ = tr.Shutdown(ctx)
	if time.Since(t0) > 3500*time.Millisecond {
		t.Fatal("shutdown outlived its context")
	}
}

// TestUnreachableReceiver: spans to a receiver that is not there fail,
// counted, without holding anything up.
func TestUnreachableReceiver(t *testing.T) {
	tr := newTracer(t, "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TIMEOUT", "500")
	tr.Start(nil, nil, time.Now()).End("GET /x", trace.SpanKindServer, nil, time.Now(), false, "")
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exp, _, failed := tr.Counts(); exp != 0 || failed != 1 {
		t.Fatalf("exported %d failed %d", exp, failed)
	}
}

// TestNilTracer: a server without tracing calls the same methods on nil.
func TestNilTracer(t *testing.T) {
	var tr *Tracer
	if tr.Start([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), nil, time.Now()) != nil || tr.Observer("m", "1") != nil {
		t.Fatal("a nil tracer traced")
	}
	ctx, call := StartCall(context.Background())
	call.Done("m", "1", 0, nil)
	if From(ctx) != nil || call != nil {
		t.Fatal("an untraced request carries a trace")
	}
	var sp *Span
	sp.End("x", trace.SpanKindServer, nil, time.Now(), false, "")
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkUntracedRequest is what tracing costs a request it does not
// sample (1 % sampling: 99 of 100 requests).
func BenchmarkUntracedRequest(b *testing.B) {
	tr, err := New(Config{Protocol: ProtocolHTTP, Sampler: Sampler{ParentBased: true, Ratio: 0}, Export: Export{
		Endpoint: "http://127.0.0.1:1/v1/traces", Timeout: time.Second, Delay: time.Second, MaxQueue: 10, MaxBatch: 10,
	}}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		sp := tr.Start(nil, nil, time.Now())
		ctx, call := StartCall(With(context.Background(), sp))
		_ = ctx
		call.Done("m", "1", 0, nil)
		sp.End("x", trace.SpanKindServer, nil, time.Now(), false, "")
	}
}
