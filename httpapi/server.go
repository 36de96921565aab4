// Package httpapi is the model server's HTTP front end on fasthttp: the
// prediction endpoints (JSON rows, images, bulk batches), the Open Inference
// Protocol (KServe V2), health, model metadata, OpenAPI docs and Prometheus
// metrics. Requests go through the dynamic micro-batcher into the engine.
// Request bodies may be compressed (Content-Encoding gzip or deflate), and
// inference responses are compressed when Accept-Encoding asks (compress.go).
package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/fw-serve/fw/internal/hostguard"
	"github.com/fw-serve/fw/payloadlog"
	"github.com/fw-serve/fw/reqtrace"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"github.com/fw-serve/fw/telemetry"
)

// Config holds the server's limits and options. Zero values take the defaults
// of DefaultConfig.
type Config struct {
	// MaxBodyBytes bounds a request body (413 beyond it), its decoded size
	// when it is compressed. NDJSON bulk requests stream and are bounded
	// per line instead, and a compressed one in total too.
	MaxBodyBytes int64
	// MaxRows bounds the rows of one /predict request or one batch item.
	MaxRows int
	// MaxImagePixels bounds width*height of an image, checked from its header.
	MaxImagePixels int64
	// Timeout bounds one request's wait for its result (504 beyond it).
	Timeout time.Duration
	// APIKeys, when any, are required as Bearer tokens on the prediction and
	// V2 endpoints; health, metrics, model and docs stay open.
	APIKeys []string
	// AccessLog logs every request at info level.
	AccessLog bool
	// BatchConcurrency bounds how many items of one /predict/batch request
	// are in flight at once.
	BatchConcurrency int
	// Version is the fw version reported by GET /v2.
	Version string
	// Name is the server's name in GET /v2 (tritonserver's --id); "" is "fw".
	Name string
	// ForwardHeaders picks the request headers that reach the model as
	// request parameters (--http-header-forward-pattern); nil forwards none.
	ForwardHeaders *regexp.Regexp
	// Hosts is the accepted Host headers (--allowed-hosts; hostguard.go); nil accepts any.
	Hosts *hostguard.Policy
	// SharedMemory is the system shared memory registry (shared with the
	// gRPC front end); nil turns the extension off.
	SharedMemory *sharedmem.Registry
	// Tracer is Triton's trace extension (GET/POST /v2[/models/{m}]/trace/
	// setting) and the sampler every answered inference request is recorded
	// to; nil: the routes answer that tracing is not served.
	Tracer *reqtrace.Tracer
	// Logging is Triton's logging extension (GET/POST /v2/logging); nil
	// answers 404.
	Logging *serving.LogSettings
	// Restricted are the API categories that need a header
	// (--http-restricted-api, tritonserver's flag).
	Restricted serving.Restrictions
	// Telemetry, when set, traces requests (OpenTelemetry: a W3C
	// traceparent header is the parent). Nil traces none.
	Telemetry *telemetry.Tracer
	// Payloads, when set, logs a sample of the inferences (payloadlog).
	Payloads *payloadlog.Logger
	// Pprof serves Go's runtime profiles under /debug/pprof/ (--pprof),
	// behind APIKeys when any; off, those paths are 404 like any unknown one.
	Pprof bool
}

// DefaultConfig returns the defaults the fw serve flags document.
func DefaultConfig() Config {
	return Config{MaxBodyBytes: 64 << 20, MaxRows: 4096, MaxImagePixels: 40_000_000, Timeout: 30 * time.Second, BatchConcurrency: 256}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxRows <= 0 {
		c.MaxRows = d.MaxRows
	}
	if c.MaxImagePixels <= 0 {
		c.MaxImagePixels = d.MaxImagePixels
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.BatchConcurrency <= 0 {
		c.BatchConcurrency = d.BatchConcurrency
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Name == "" {
		c.Name = "fw"
	}
	return c
}

// maxDrainBytes bounds how much of an unread request body is read and
// dropped before an error response, so clients still sending see the error.
const maxDrainBytes = 16 << 20

// Server serves the model of a Slot over HTTP. Create it with New and serve
// Handler with a fasthttp.Server.
type Server struct {
	cfg      Config
	log      *slog.Logger
	models   serving.Models
	metrics  *Metrics
	metricsH fasthttp.RequestHandler
	started  time.Time
	keys     serving.Keys
	bufs     sync.Pool // response buffers (getBuf)
	bodyBufs sync.Pool // request body buffers (v2Infer), apart so that a grown one is found again
	// bodyKept holds a few grown body buffers across garbage collections,
	// which empty bodyBufs: without it a refused chunked body (read up to
	// Triton's 65,536 chunks) regrew its buffer from 4 KiB after each GC, and
	// 100 such requests grew the server's RSS by 1-2 MiB (Triton's L0 test
	// allows 1 MiB). At most cap(bodyKept) buffers of at most maxKeptBody.
	bodyKept chan *[]byte
	base     context.Context
	docs     servedDocs // GET /openapi.json, built for the models served (openapi_served.go)

	// routeHook, when set (by tests only), runs first on every request.
	routeHook func(*fasthttp.RequestCtx)
	// testSlot is the *TestSlot a test server (NewTestServer) serves from.
	testSlot any
}

// New creates a server over models (serving.One of a slot, or a
// repository). metrics (NewMetrics) is where requests are counted; gatherer
// serves /metrics. base is cancelled on shutdown and bounds every request's
// context.
func New(base context.Context, cfg Config, models serving.Models, metrics *Metrics, log *slog.Logger, gatherer prometheus.Gatherer) *Server {
	s := &Server{cfg: cfg.withDefaults(), log: log, models: models, metrics: metrics, started: time.Now(), base: base}
	s.metricsH = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	s.keys = serving.NewKeys(s.cfg.APIKeys)
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	s.bodyBufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	s.bodyKept = make(chan *[]byte, keptBodies)
	return s
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Current is the default instance serving now (nil while none is, or when
// several models are served).
func (s *Server) Current() *serving.Instance {
	inst, _ := s.models.Default()
	return inst
}

// State returns the readiness state and its reason.
func (s *Server) State() (serving.State, string) { return s.models.State() }

// Handler is the fasthttp request handler for every route. A panic in a
// route is answered 500 "internal" and the server keeps serving
// (routeSafely).
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	s.metrics.inflight.Inc()
	var span *telemetry.Span
	if s.cfg.Telemetry != nil {
		span = s.cfg.Telemetry.Start(ctx.Request.Header.Peek("traceparent"), ctx.Request.Header.Peek("tracestate"), ctx.Time())
		if span != nil {
			ctx.SetUserValue(spanKey{}, span)
		}
	}
	ep := s.routeSafely(ctx)
	switch ep {
	case "predict", "predict_image", "predict_batch", "v2_infer":
		s.compressResponse(ctx)
	}
	s.metrics.inflight.Dec()
	code := ctx.Response.StatusCode()
	if code >= 400 && ctx.Request.IsBodyStream() && !drainBody(ctx) {
		// More body is left than drainBody reads: close rather than parse
		// the rest as a request. An answer (a 503 or 504 included) to a
		// request whose body was read to its end keeps the connection.
		ctx.SetConnectionClose()
	}
	d := time.Since(start)
	if span != nil {
		s.metrics.observeRequest(ep, code, d, span.SpanContext().TraceID().String())
		s.endSpan(ctx, span, ep, code)
	} else {
		s.metrics.observeRequest(ep, code, d, "")
	}
	if s.cfg.AccessLog {
		out := -1 // a streamed response (NDJSON) is not measured: reading it would buffer it
		if !ctx.Response.IsBodyStream() {
			out = len(ctx.Response.Body())
		}
		s.log.Info("request", "method", string(ctx.Method()), "path", string(ctx.Path()), "status", code,
			"duration_ms", float64(d.Microseconds())/1000, "remote", ctx.RemoteAddr().String(), "bytes_in", ctx.Request.Header.ContentLength(), "bytes_out", out)
	}
}

func (s *Server) route(ctx *fasthttp.RequestCtx) string {
	if s.routeHook != nil {
		s.routeHook(ctx)
	}
	if !s.hostAllowed(ctx) {
		return "other"
	}
	path := ctx.Path()
	if s.cfg.Restricted.Any() && !s.allowedCategory(ctx, routeCategory(path)) {
		return "other"
	}
	switch string(path) {
	case "/predict":
		if s.allow(ctx, "POST") && s.authorized(ctx) {
			s.handlePredict(ctx)
		}
		return "predict"
	case "/predict/image":
		if s.allow(ctx, "POST") && s.authorized(ctx) {
			s.handleImage(ctx)
		}
		return "predict_image"
	case "/predict/batch":
		if s.allow(ctx, "POST") && s.authorized(ctx) {
			s.handleBatch(ctx)
		}
		return "predict_batch"
	case "/health", "/health/ready":
		if s.allow(ctx, "GET", "HEAD") {
			s.handleReady(ctx)
		}
		return "health"
	case "/health/live":
		if s.allow(ctx, "GET", "HEAD") {
			writeJSON(ctx, 200, map[string]any{"status": "alive", "uptime_s": time.Since(s.started).Seconds()})
		}
		return "health"
	case "/model":
		if s.allow(ctx, "GET") {
			s.handleModel(ctx)
		}
		return "model"
	case "/metrics":
		if s.allow(ctx, "GET") {
			s.metricsH(ctx)
		}
		return "metrics"
	case "/docs", "/docs/":
		if s.allow(ctx, "GET") {
			s.handleDocs(ctx)
		}
		return "docs"
	case "/openapi.json":
		if s.allow(ctx, "GET") {
			s.handleOpenAPI(ctx)
		}
		return "docs"
	case "/":
		if s.allow(ctx, "GET") {
			ctx.Redirect("/docs", fasthttp.StatusFound)
		}
		return "docs"
	}
	if bytes.HasPrefix(path, []byte("/docs/")) {
		if s.allow(ctx, "GET") {
			s.handleDocsAsset(ctx)
		}
		return "docs"
	}
	if bytes.HasPrefix(path, []byte("/v2")) {
		return s.routeV2(ctx)
	}
	if s.cfg.Pprof && bytes.HasPrefix(path, []byte("/debug/pprof")) {
		// POST too: `go tool pprof` posts symbol lookups to /debug/pprof/symbol.
		if s.allow(ctx, "GET", "POST") && s.authorized(ctx) {
			pprofhandler.PprofHandler(ctx)
		}
		return "debug"
	}
	writeError(ctx, newError(404, CodeNotFound, fmt.Sprintf("no route %s %s; see GET /docs for the API", ctx.Method(), path), nil))
	return "other"
}

// routeCategory is the API category of a path, as Triton's restricted-API
// flag names them ("" for what no flag restricts: docs, metrics).
func routeCategory(path []byte) string {
	p := string(path)
	switch {
	case strings.HasPrefix(p, "/predict"):
		return "inference"
	case p == "/model":
		return "metadata"
	case strings.HasPrefix(p, "/health"):
		return "health"
	case p == "/v2" || p == "/v2/":
		return "metadata"
	case strings.HasPrefix(p, "/v2/health"):
		return "health"
	case strings.HasPrefix(p, "/v2/repository"):
		return "model-repository"
	case strings.HasPrefix(p, "/v2/systemsharedmemory"), strings.HasPrefix(p, "/v2/cudasharedmemory"):
		return "shared-memory"
	case strings.HasPrefix(p, "/v2/logging"):
		return "logging"
	case strings.HasPrefix(p, "/v2/trace"):
		return "trace"
	case strings.HasPrefix(p, "/v2/models/"):
		tail := strings.TrimSuffix(p, "/")
		switch tail[strings.LastIndexByte(tail, '/')+1:] {
		case "stats":
			return "statistics"
		case "ready":
			return "health"
		case "infer", "generate", "generate_stream":
			return "inference"
		case "config":
			return "model-config"
		}
		return "metadata"
	}
	return ""
}

// allowedCategory answers 403 when the category is restricted and the
// request lacks its header (Triton's sentence first).
func (s *Server) allowedCategory(ctx *fasthttp.RequestCtx, category string) bool {
	if category == "" {
		return true
	}
	missing := s.cfg.Restricted.Check(category, "", func(k string) string { return string(ctx.Request.Header.Peek(k)) })
	if missing == "" {
		return true
	}
	writeError(ctx, newError(403, CodeForbidden, fmt.Sprintf("This API is restricted, expecting header '%s' (fw serve --http-restricted-api restricts the %s API)", missing, category), map[string]any{"category": category}))
	if strings.HasPrefix(string(ctx.Path()), "/v2") {
		v2ErrorBody(ctx)
	}
	return false
}

// allow answers 405 unless the method is one of methods.
func (s *Server) allow(ctx *fasthttp.RequestCtx, methods ...string) bool {
	m := ctx.Method()
	for _, want := range methods {
		if string(m) == want {
			return true
		}
	}
	ctx.Response.Header.Set("Allow", strings.Join(methods, ", "))
	writeError(ctx, newError(405, CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s; use %s", m, ctx.Path(), strings.Join(methods, " or ")), nil))
	return false
}

// authorized checks the Bearer key in constant time when keys are configured.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	if !s.keys.Required() {
		return true
	}
	switch s.keys.Check(ctx.Request.Header.Peek("Authorization")) {
	case serving.KeyValid:
		return true
	case serving.KeyInvalid:
		writeError(ctx, newError(401, CodeUnauthorized, "the API key is not valid", nil))
		return false
	}
	writeError(ctx, newError(401, CodeUnauthorized, "this endpoint needs an API key: send the header `Authorization: Bearer <key>`", nil))
	return false
}

// ready returns the instance a prediction route serves: the model named by
// the query parameters `model` (and `version`), else the one model served
// (in the version `version` names, when given). Otherwise it writes the
// error (503 while not ready, 404 for an unknown model or version, 400 when
// several are served and none is named) and returns nil.
// While draining, predictions are still served (only /health turns 503, so
// load balancers stop sending before the listener closes).
func (s *Server) ready(ctx *fasthttp.RequestCtx) *serving.Instance {
	if !s.serving(ctx) {
		return nil
	}
	var inst *serving.Instance
	var err error
	args := ctx.QueryArgs()
	for _, k := range []string{"model", "version"} {
		if args.Len() > 0 && args.Has(k) && len(args.Peek(k)) == 0 {
			writeError(ctx, newError(400, CodeBadRequest, fmt.Sprintf("?%s= is empty: name a %s, or leave the parameter out", k, k), map[string]any{"parameter": k}))
			return nil
		}
	}
	switch {
	case args.Len() > 0 && args.Has("model"):
		inst, err = s.models.Get(string(args.Peek("model")), string(args.Peek("version")))
	case args.Len() > 0 && args.Has("version"):
		if inst, err = s.models.Default(); err == nil {
			inst, err = s.models.Get(inst.Name(), string(args.Peek("version")))
		}
	default:
		inst, err = s.models.Default()
	}
	if err != nil {
		writeError(ctx, modelError(err))
		return nil
	}
	return inst
}

// readyToPredict is ready for the unprefixed prediction routes, which
// cannot name a sequence: a stateful model (sequence batching) is refused
// with a 400 saying where its requests go.
func (s *Server) readyToPredict(ctx *fasthttp.RequestCtx) *serving.Instance {
	inst := s.ready(ctx)
	if inst == nil {
		return nil
	}
	if err := serving.Stateless(inst); err != nil {
		writeError(ctx, s.submitError(err))
		return nil
	}
	return inst
}

// serving reports whether the server answers predictions now; when not,
// it writes 503 with the reason.
func (s *Server) serving(ctx *fasthttp.RequestCtx) bool {
	st, reason := s.State()
	if st.Serving() {
		return true
	}
	e := newError(503, CodeNotReady, "the server is not ready: "+reason, map[string]any{"status": st.String()})
	e.RetryAfter = 1
	writeError(ctx, e)
	return false
}

// modelError maps a failure to find, load or unload a model
// (*serving.ModelError) to the API error shape.
func modelError(err error) *APIError {
	me, ok := serving.AsModelError(err)
	if !ok {
		return newError(500, CodeInternal, err.Error(), nil)
	}
	d := map[string]any{}
	if me.Model != "" {
		d["model"] = me.Model
	}
	if me.Version != "" {
		d["version"] = me.Version
	}
	var e *APIError
	switch me.Kind {
	case serving.ModelUnknown:
		e = newError(404, CodeNotFound, me.Message, d)
	case serving.ModelNotReady:
		e = newError(503, CodeNotReady, me.Message, d)
		e.RetryAfter = max(1, me.RetryAfter)
	case serving.ModelControlDisabled:
		e = newError(400, CodeControlDisabled, me.Message, d)
	case serving.ModelLoadFailed:
		e = newError(400, CodeLoadFailed, me.Message, d)
	case serving.ModelRepositoryFailed:
		e = newError(500, CodeLoadFailed, me.Message, d) // Triton's status: INTERNAL
	default:
		e = newError(400, CodeBadRequest, me.Message, d)
	}
	return e
}

// readBody returns the whole request body, decoded when it is compressed
// (requestBody); or it writes the error (beyond MaxBodyBytes, which bounds
// the decoded size: 413, or on /v2 Triton's 400 (bodyTooLarge); 415 for an
// encoding fw does not read; 400 for a body that does not decode) and
// returns false.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	return s.readBodyLimit(ctx, s.cfg.MaxBodyBytes)
}

// readBodyLimit is readBody with a smaller bound than MaxBodyBytes (max),
// for the routes whose bodies are small: a larger one is refused once max
// bytes are read, never read whole.
func (s *Server) readBodyLimit(ctx *fasthttp.RequestCtx, max int64) ([]byte, bool) {
	body, _, ok := s.readBodyTo(ctx, max, nil)
	return body, ok
}

// readBodyTo is readBodyLimit reading a streamed body into dst's capacity,
// grown as needed, for a caller that reuses its buffer (v2Infer pools it:
// a refused request then leaves little garbage behind). buf is the buffer
// the body was read into (nil when the body is fasthttp's own).
func (s *Server) readBodyTo(ctx *fasthttp.RequestCtx, max int64, dst []byte) (body, buf []byte, ok bool) {
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > max {
		writeError(ctx, s.bodyTooLarge(ctx, int64(cl), max, false))
		return nil, nil, false
	}
	r, compressed, aerr := s.requestBody(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return nil, nil, false
	}
	if !compressed && !ctx.Request.IsBodyStream() {
		b := ctx.Request.Body() // read already: no copy
		if int64(len(b)) > max {
			writeError(ctx, s.bodyTooLarge(ctx, int64(len(b)), max, false))
			return nil, nil, false
		}
		return b, nil, true
	}
	var expect int64 // the declared length: growth stops there, not 25 % past it
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && !compressed {
		expect = int64(cl)
	}
	b, err := readAllLimit(r, max+1, dst[:0], expect)
	if err != nil {
		aerr := asAPIError(err)
		if aerr.Code == CodeTooLarge { // the decoded body passed max
			aerr = s.bodyTooLarge(ctx, -1, max, true)
		}
		writeError(ctx, aerr)
		return nil, b, false
	}
	if int64(len(b)) > max {
		writeError(ctx, s.bodyTooLarge(ctx, -1, max, compressed))
		return nil, b, false
	}
	return b, b, true
}

// readAllLimit is io.ReadAll of at most limit bytes of r, appended to b.
// The buffer doubles as bytes arrive (append's 1.25x growth for large
// slices allocated five times a 60 MB body, and the heap's peak followed),
// up to expect+1 bytes when the length is declared (expect > 0): memory
// follows what was received, never what a client merely announced.
func readAllLimit(r io.Reader, limit int64, b []byte, expect int64) ([]byte, error) {
	if cap(b) == 0 {
		b = make([]byte, 0, 512)
	}
	for limit > 0 {
		if len(b) == cap(b) {
			grown := 2 * int64(cap(b))
			if expect > 0 && int64(len(b)) <= expect && grown >= expect {
				grown = expect + 1 // one more, to see the end
			}
			grown = min(grown, int64(len(b))+limit)
			nb := make([]byte, len(b), grown) // > len(b): each bound above is, and limit > 0
			copy(nb, b)
			b = nb
		}
		p := b[len(b):cap(b)]
		if int64(len(p)) > limit {
			p = p[:limit]
		}
		n, err := r.Read(p)
		b, limit = b[:len(b)+n], limit-int64(n)
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

func tooLarge(size, max int64) *APIError {
	msg := fmt.Sprintf("the request body exceeds the limit of %d bytes (--max-body-bytes); send fewer rows per request or use /predict/batch with application/x-ndjson", max)
	d := map[string]any{"max_body_bytes": max}
	if size > 0 {
		d["body_bytes"] = size
	}
	return &APIError{Status: 413, Code: CodeTooLarge, Message: msg, Details: d}
}

// mediaType returns the lower-case media type without parameters.
func mediaType(ctx *fasthttp.RequestCtx) string {
	ct := string(ctx.Request.Header.ContentType())
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// requestContext bounds a request by the server's base context and
// Timeout; it carries the request's trace when it is traced.
func (s *Server) requestContext(ctx *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	base := s.base
	if sp, _ := ctx.UserValue(spanKey{}).(*telemetry.Span); sp != nil {
		base = telemetry.With(base, sp)
	}
	if s.cfg.Payloads.Sample() {
		base = payloadlog.With(base, s.cfg.Payloads)
	}
	return context.WithTimeout(base, s.cfg.Timeout)
}

// submitError maps an inference error (serving.Classify) to the API error
// shape.
func (s *Server) submitError(err error) *APIError {
	f := serving.Classify(err, s.cfg.Timeout)
	switch f.Kind {
	case serving.KindInvalidInput:
		d, ie := map[string]any{}, f.Input
		if ie.Input != "" {
			d["input"] = ie.Input
		}
		if ie.Expected != "" {
			d["expected"] = ie.Expected
			d["received"] = ie.Received
		}
		return &APIError{Status: 422, Code: CodeInvalidInput, Message: f.Message, Details: d}
	case serving.KindBadRequest:
		return newError(400, CodeBadRequest, f.Message, nil)
	case serving.KindOverloaded:
		e := newError(503, CodeOverloaded, f.Message, nil)
		e.RetryAfter = 1
		return e
	case serving.KindNotReady:
		e := newError(503, CodeNotReady, f.Message, nil)
		e.RetryAfter = 1
		return e
	case serving.KindTimeout:
		e := newError(504, CodeTimeout, f.Message, nil)
		e.RetryAfter = 1
		return e
	case serving.KindAnswered:
		return newError(answeredStatus(f.Code), CodeModelError, f.Message, map[string]any{"triton_error_code": f.Code})
	}
	s.log.Error("engine failure", "err", err)
	return newError(500, CodeEngine, f.Message, nil)
}

// answeredStatus is the HTTP status of an error a model answered, by its
// Triton error code, as Triton's HTTP front end maps it.
func answeredStatus(code int) int {
	switch code {
	case 1: // INTERNAL
		return 500
	case 2: // NOT_FOUND
		return 404
	case 4: // UNAVAILABLE
		return 503
	case 5: // UNSUPPORTED
		return 501
	}
	return 400 // UNKNOWN, INVALID_ARG, ALREADY_EXISTS, CANCELLED and others, as Triton's
}

func (s *Server) getBuf() *[]byte { return s.bufs.Get().(*[]byte) }

// getBodyBuf and putBodyBuf pool request body buffers as getBuf and putBuf
// pool response buffers; the largest few also wait in bodyKept, which
// garbage collection does not empty.
func (s *Server) getBodyBuf() *[]byte {
	select {
	case b := <-s.bodyKept:
		return b
	default:
		return s.bodyBufs.Get().(*[]byte)
	}
}

// keptBodies and maxKeptBody bound what bodyKept holds: 4 buffers of at
// most 1 MiB.
const (
	keptBodies  = 4
	maxKeptBody = 1 << 20
)

func (s *Server) putBodyBuf(b *[]byte) {
	if cap(*b) > maxKeptBody {
		return
	}
	*b = (*b)[:0]
	if cap(*b) > 4096 {
		select {
		case s.bodyKept <- b:
			return
		default:
		}
	}
	s.bodyBufs.Put(b)
}

func (s *Server) putBuf(b *[]byte) {
	if cap(*b) <= 1<<20 {
		*b = (*b)[:0]
		s.bufs.Put(b)
	}
}
