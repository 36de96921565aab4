// Package telemetry is fw's OpenTelemetry tracing: one server span per
// request, with child spans for the phases of each inference it made
// (decode, queue, infer, encode) and one span per engine call that ran a
// traced request, linked to every traced request it batched. Spans go to an
// OTLP receiver over gRPC or HTTP/protobuf, configured by OpenTelemetry's
// standard environment (OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG], OTEL_BSP_*).
//
// The serving path pays for tracing only when a request is sampled. The
// decision is made when a request arrives (Tracer.Start: a W3C traceparent
// is parsed when sent, and the sampler drawn); an unsampled request carries
// nothing. A sampled request's spans are built after it is answered, from
// the times the transports and the batcher measure anyway, and queued for
// one exporter goroutine, which writes OTLP's protobuf straight from them
// (otlp.go) and sends it in batches. A full queue drops spans, counted; the
// serving path never waits on the receiver.
package telemetry

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Protocols an OTLP exporter speaks.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is how a server traces. The zero value does not trace.
type Config struct {
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// Export is the receiver and the batching.
	Export Export
	// Sampler decides which requests are traced.
	Sampler Sampler
	// Resource is the attributes describing the process
	// (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME as service.name).
	Resource []attribute.KeyValue
	// Service is the service.name when Resource has none; Version its
	// service.version.
	Service, Version string
}

// Sampler is one of OpenTelemetry's standard samplers: a request with a
// sampled parent (ParentBased) is traced when its parent was; any other is
// traced with probability Ratio, decided from its trace ID as
// TraceIdRatioBased does, so every service of a trace agrees.
type Sampler struct {
	ParentBased bool
	Ratio       float64 // 0 (always_off) to 1 (always_on)
}

// String is the sampler's name as OTEL_TRACES_SAMPLER spells it, with its
// ratio.
func (s Sampler) String() string {
	name := "traceidratio"
	switch s.Ratio {
	case 1:
		name = "always_on"
	case 0:
		name = "always_off"
	}
	if s.ParentBased {
		name = "parentbased_" + name
	}
	if name == "traceidratio" || name == "parentbased_traceidratio" {
		name += " " + strconv.FormatFloat(s.Ratio, 'g', -1, 64)
	}
	return name
}

// FromEnv reads the standard OpenTelemetry environment through getenv
// into a Config, with a flag's endpoint URL and protocol winning over it
// ("" when not given), and whether tracing is asked for at all: an OTLP
// traces endpoint is set (by the environment or the flag),
// OTEL_SDK_DISABLED is not true and OTEL_TRACES_EXPORTER is not "none". A
// value fw cannot honour is an error naming it.
func FromEnv(getenv func(string) string, endpoint, protocol string) (Config, bool, error) {
	var c Config
	on := endpoint != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		on = false
	}
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		on = false
	default:
		return c, false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: fw exports traces over OTLP only; set otlp or none", e)
	}
	var err error
	if protocol != "" {
		if c.Protocol, err = ParseProtocol(protocol); err != nil {
			return c, false, err
		}
	} else {
		p := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if p == "" {
			p = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if c.Protocol, err = ParseProtocol(p); err != nil {
			return c, false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %w", err)
		}
	}
	if c.Sampler, err = ParseSampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return c, false, err
	}
	if c.Resource, err = ParseResource(getenv("OTEL_RESOURCE_ATTRIBUTES"), getenv("OTEL_SERVICE_NAME")); err != nil {
		return c, false, err
	}
	if !on {
		return c, false, nil
	}
	if c.Export, err = exportFromEnv(getenv, c.Protocol, endpoint); err != nil {
		return c, false, err
	}
	return c, true, nil
}

// ParseResource reads OTEL_RESOURCE_ATTRIBUTES (KEY=VALUE pairs separated
// by commas, values percent-encoded) and OTEL_SERVICE_NAME, which wins for
// service.name.
func ParseResource(attrs, service string) ([]attribute.KeyValue, error) {
	var out []attribute.KeyValue
	seen := map[string]int{}
	set := func(k, v string) {
		if i, ok := seen[k]; ok {
			out[i] = attribute.String(k, v)
			return
		}
		seen[k] = len(out)
		out = append(out, attribute.String(k, v))
	}
	for _, kv := range strings.Split(attrs, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q is not KEY=VALUE", kv)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q: the value is not percent-encoded correctly", kv)
		}
		set(k, dv)
	}
	if s := strings.TrimSpace(service); s != "" {
		set("service.name", s)
	}
	return out, nil
}

// ParseProtocol reads an OTLP protocol name; "" is OpenTelemetry's default,
// http/protobuf.
func ParseProtocol(p string) (string, error) {
	switch strings.TrimSpace(p) {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	case "http/json":
		return "", errors.New(`"http/json" is not supported by fw's exporter; use grpc or http/protobuf`)
	}
	return "", fmt.Errorf("unknown OTLP protocol %q; use grpc or http/protobuf", p)
}

// ParseSampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG: "" is
// the default, parentbased_always_on.
func ParseSampler(name, arg string) (Sampler, error) {
	name = strings.TrimSpace(name)
	s := Sampler{ParentBased: true, Ratio: 1}
	if name == "" {
		return s, nil
	}
	base, parent := strings.CutPrefix(name, "parentbased_")
	s.ParentBased = parent
	switch base {
	case "always_on":
	case "always_off":
		s.Ratio = 0
	case "traceidratio":
		if strings.TrimSpace(arg) == "" {
			break // OpenTelemetry's default ratio, 1.0
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || math.IsNaN(r) || r < 0 || r > 1 {
			return s, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: give the fraction of requests to trace, from 0 to 1", arg)
		}
		s.Ratio = r
	default:
		return s, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: use always_on, always_off, traceidratio, or one of them prefixed parentbased_", name)
	}
	return s, nil
}

// Tracer samples requests and sends their spans. Safe for concurrent use;
// a nil *Tracer traces nothing.
type Tracer struct {
	cfg   Config
	bound uint64 // traceidratio: a trace ID's low 63 bits below this are sampled
	x     *exporter
}

// New starts a Tracer exporting as cfg says; its errors go to log. The
// receiver is reached lazily: one that is not up yet costs dropped spans
// (counted, logged), not a failed start.
func New(cfg Config, log *slog.Logger) (*Tracer, error) {
	if cfg.Protocol != ProtocolGRPC && cfg.Protocol != ProtocolHTTP {
		return nil, fmt.Errorf("OTLP protocol %q: use grpc or http/protobuf", cfg.Protocol)
	}
	if cfg.Export.Endpoint == "" || cfg.Export.MaxQueue <= 0 || cfg.Export.MaxBatch <= 0 || cfg.Export.Delay <= 0 || cfg.Export.Timeout <= 0 {
		return nil, errors.New("telemetry: an incomplete Export configuration (read it with FromEnv)")
	}
	service := cfg.Service
	if service == "" {
		service = "fw"
	}
	res := []attribute.KeyValue{attribute.String("service.name", service)}
	if cfg.Version != "" {
		res = append(res, attribute.String("service.version", cfg.Version))
	}
	res = append(res, attribute.String("telemetry.sdk.name", "fw"), attribute.String("telemetry.sdk.language", "go"))
	for _, kv := range cfg.Resource { // the environment's win
		replaced := false
		for i := range res {
			if res[i].Key == kv.Key {
				res[i], replaced = kv, true
			}
		}
		if !replaced {
			res = append(res, kv)
		}
	}
	x, err := newExporter(cfg.Export, cfg.Protocol, appendResource(nil, res), appendScope(nil, "github.com/fw-serve/fw/telemetry", cfg.Version), log)
	if err != nil {
		return nil, err
	}
	t := &Tracer{cfg: cfg, x: x}
	switch r := cfg.Sampler.Ratio; {
	case r >= 1:
		t.bound = math.MaxUint64
	case r > 0:
		t.bound = uint64(r * (1 << 63))
	}
	return t, nil
}

// Config is the configuration t runs with.
func (t *Tracer) Config() Config { return t.cfg }

// Counts are the spans t has sent, dropped (its queue was full) and failed
// to send (the receiver refused or was unreachable).
func (t *Tracer) Counts() (exported, dropped, failed uint64) {
	if t == nil {
		return 0, 0, 0
	}
	return t.x.exported.Load(), t.x.dropped.Load(), t.x.failed.Load()
}

// Shutdown sends the spans still queued and stops the exporter; ctx bounds
// the wait.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.x.shutdown(ctx)
}

// ForceFlush sends the spans queued so far.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.x.flush(ctx)
}

// Start decides whether a request that arrived at start with W3C trace
// context traceparent and tracestate (empty when it sent none) is traced.
// It returns nil when it is not: the request then carries nothing.
func (t *Tracer) Start(traceparent, tracestate []byte, start time.Time) *Span {
	if t == nil {
		return nil
	}
	parent, ok := ParseTraceparent(traceparent)
	var tid trace.TraceID
	if ok {
		if t.cfg.Sampler.ParentBased {
			if !parent.IsSampled() {
				return nil
			}
		} else if !t.ratioSampled(parent.TraceID()) {
			return nil
		}
		tid = parent.TraceID()
		if len(tracestate) > 0 {
			if ts, err := trace.ParseTraceState(string(tracestate)); err == nil {
				parent = parent.WithTraceState(ts)
			}
		}
	} else {
		// The low half decides (as TraceIdRatioBased reads it); the high
		// half is drawn only for a request that is traced.
		lo := rand.Uint64()
		binary.BigEndian.PutUint64(tid[8:], lo)
		if !t.ratioSampled(tid) {
			return nil
		}
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: newSpanID(), TraceFlags: trace.FlagsSampled, TraceState: parent.TraceState(),
	})
	return &Span{t: t, sc: sc, parent: parent, start: start}
}

func (t *Tracer) ratioSampled(tid trace.TraceID) bool {
	if t.bound == math.MaxUint64 {
		return true
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < t.bound
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for id == (trace.SpanID{}) {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// ParseTraceparent reads a W3C traceparent header: version 00 exactly, or
// a later version's first four fields. ok is false for anything else,
// which then starts a new trace.
func ParseTraceparent(h []byte) (trace.SpanContext, bool) {
	if len(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	if _, err := hex.Decode(ver[:], h[0:2]); err != nil || ver[0] == 0xff || (ver[0] == 0 && len(h) != 55) || (len(h) > 55 && h[55] != '-') {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !lowerHex(h[3:35]) || !lowerHex(h[36:52]) || !lowerHex(h[53:55]) {
		return trace.SpanContext{}, false
	}
	_, e1 := hex.Decode(tid[:], h[3:35])
	_, e2 := hex.Decode(sid[:], h[36:52])
	_, e3 := hex.Decode(flags[:], h[53:55])
	if e1 != nil || e2 != nil || e3 != nil || !tid.IsValid() || !sid.IsValid() {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	}), true
}

// lowerHex: W3C trace context allows lowercase hex digits only.
func lowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Traceparent is sc as a W3C traceparent header value.
func Traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Span is one traced request: its server span, and the inferences it made
// (Calls). Made by Tracer.Start and ended once by End.
type Span struct {
	t      *Tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	start  time.Time

	mu    sync.Mutex
	calls []*Call
}

// SpanContext is the request's server span's identity: what a call it makes
// to another service passes on as its parent.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// Call is one inference of a traced request: where its time went, filled
// by Done, and the engine call that ran it, filled by the batcher's hook
// (Observer) before the inference returns.
type Call struct {
	span      *Span
	submitted time.Time // when the transport handed the inputs on

	// Written by the batcher's worker before it hands the result back
	// (which orders it before Done's reads).
	engine    trace.SpanContext
	callStart time.Time
	callTook  time.Duration
	batchRows int
	batchReqs int

	model, version string
	queue          time.Duration
	err            error
	done           time.Time
}

type ctxKey int

const (
	spanKey ctxKey = iota
	callKey
)

// With returns ctx carrying s (nil: ctx itself).
func With(ctx context.Context, s *Span) context.Context {
	if s == nil {
		return ctx
	}
	return context.WithValue(ctx, spanKey, s)
}

// From is the traced request ctx carries, or nil.
func From(ctx context.Context) *Span {
	s, _ := ctx.Value(spanKey).(*Span)
	return s
}

// StartCall begins an inference of the traced request in ctx, if any: the
// returned context carries it to the batcher. Without a traced request it
// returns ctx and nil, at the cost of one context lookup.
func StartCall(ctx context.Context) (context.Context, *Call) {
	s := From(ctx)
	if s == nil {
		return ctx, nil
	}
	c := &Call{span: s, submitted: time.Now()}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	return context.WithValue(ctx, callKey, c), c
}

// Done records how the inference went: the model and version that ran it,
// how long it waited in the queue, and its error.
func (c *Call) Done(model, version string, queue time.Duration, err error) {
	if c == nil {
		return
	}
	c.span.mu.Lock()
	c.model, c.version, c.queue, c.err, c.done = model, version, queue, err, time.Now()
	c.span.mu.Unlock()
}

// Observer is the batcher's hook (batcher.CallObserver) for one model
// version: each engine call that ran a traced request becomes a span,
// linked to each traced request in it.
type Observer struct {
	t              *Tracer
	model, version string
}

// Observer returns the hook for model and version's batcher, or nil when t
// is nil.
func (t *Tracer) Observer(model, version string) *Observer {
	if t == nil {
		return nil
	}
	return &Observer{t: t, model: model, version: version}
}

// EngineCall implements batcher.CallObserver.
func (o *Observer) EngineCall(ctxs []context.Context, rows int, start time.Time, took time.Duration, err error) {
	n := 0
	for _, ctx := range ctxs {
		if c, _ := ctx.Value(callKey).(*Call); c != nil {
			n++
		}
	}
	if n == 0 {
		return
	}
	r := o.t.x.get()
	r.spans = append(r.spans, span{
		name: "engine call " + o.model, kind: kindInternal, start: start.UnixNano(), end: start.Add(took).UnixNano(),
		links: make([]link, 0, n),
		attrs: []attribute.KeyValue{
			attribute.String("fw.model", o.model), attribute.String("fw.model.version", o.version),
			attribute.Int("fw.batch.rows", rows), attribute.Int("fw.batch.requests", len(ctxs)),
			attribute.Int("fw.batch.traced_requests", n),
		},
	})
	sp := &r.spans[0]
	binary.BigEndian.PutUint64(sp.traceID[:8], rand.Uint64())
	binary.BigEndian.PutUint64(sp.traceID[8:], rand.Uint64())
	sp.spanID = newSpanID()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: sp.traceID, SpanID: sp.spanID, TraceFlags: trace.FlagsSampled})
	for _, ctx := range ctxs {
		c, _ := ctx.Value(callKey).(*Call)
		if c == nil {
			continue
		}
		c.engine, c.callStart, c.callTook, c.batchRows, c.batchReqs = sc, start, took, rows, len(ctxs)
		sp.links = append(sp.links, link{traceID: c.span.sc.TraceID(), spanID: c.span.sc.SpanID()})
	}
	if err != nil {
		sp.failed, sp.statusMessage = true, err.Error()
	}
	o.t.x.put(r)
}

const (
	kindInternal = 1
	kindServer   = 2
)

// ModelAttrs is how many attributes End adds to a server span's that made
// an inference (the model, its version, the inferences): room a transport
// leaves in the attrs it passes saves a copy.
const ModelAttrs = 3

// End sends the request's spans: the server span (name, kind, attributes,
// ending at end; failed marks it an error with message) and, for each of
// its inferences, its phases as child spans. End owns attrs from then on.
func (s *Span) End(name string, kind trace.SpanKind, attrs []attribute.KeyValue, end time.Time, failed bool, message string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	calls := s.calls
	s.calls = nil
	s.mu.Unlock()
	r := s.t.x.get()
	r.spans = append(r.spans, span{
		traceID: s.sc.TraceID(), spanID: s.sc.SpanID(), parentID: s.parent.SpanID(), parentRemote: s.parent.IsValid(),
		traceState: s.sc.TraceState().String(), name: name, kind: int32(kind),
		start: s.start.UnixNano(), end: end.UnixNano(), attrs: attrs, failed: failed, statusMessage: message,
	})
	for i, c := range calls {
		s.mu.Lock()
		cc := *c
		s.mu.Unlock()
		r.spans = s.phases(r.spans, &cc, end)
		if i == len(calls)-1 && cc.model != "" {
			r.spans[0].attrs = append(r.spans[0].attrs,
				attribute.String("fw.model", cc.model), attribute.String("fw.model.version", cc.version), attribute.Int("fw.inferences", len(calls)))
		}
	}
	s.t.x.put(r)
}

// phases appends c's child spans to spans: decode (from the request's start
// to its inputs handed on), queue, infer (the engine call, linked to its
// span) and encode (to the request's end).
func (s *Span) phases(spans []span, c *Call, end time.Time) []span {
	child := func(name string, from, to time.Time) *span {
		if to.Before(from) {
			to = from
		}
		spans = append(spans, span{
			traceID: s.sc.TraceID(), spanID: newSpanID(), parentID: s.sc.SpanID(),
			name: name, kind: kindInternal, start: from.UnixNano(), end: to.UnixNano(),
		})
		return &spans[len(spans)-1]
	}
	if c.callStart.IsZero() { // it never reached an engine call
		child("decode", s.start, c.submitted)
		in := child("infer", c.submitted, c.done)
		if c.err != nil {
			in.failed, in.statusMessage = true, c.err.Error()
		}
		return spans
	}
	queued := c.callStart.Add(-c.queue)
	if queued.Before(c.submitted) {
		queued = c.submitted
	}
	callEnd := c.callStart.Add(c.callTook)
	child("decode", s.start, c.submitted)
	child("queue", queued, c.callStart)
	in := child("infer", c.callStart, callEnd)
	in.attrs = []attribute.KeyValue{
		attribute.String("fw.model", c.model), attribute.String("fw.model.version", c.version),
		attribute.Int("fw.batch.rows", c.batchRows), attribute.Int("fw.batch.requests", c.batchReqs),
	}
	in.links = []link{{traceID: c.engine.TraceID(), spanID: c.engine.SpanID()}}
	if c.err != nil {
		in.failed, in.statusMessage = true, c.err.Error()
	}
	child("encode", callEnd, end)
	return spans
}
