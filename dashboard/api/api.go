// Package api is the dashboard's HTTP API on fasthttp: event ingest from the
// training SDK, reads and edits of runs, metrics, logs and experiments, run
// files, the model registry and deployments, training jobs, system status,
// health and the live stream. Its operations are one route table
// (routes.go), the same list as its OpenAPI document; handlers return a
// value or an error and one writer answers; every non-2xx answer uses the
// error shape of Error. The store is passed in; other APIs (MLflow's) are
// mounted beside it through Config.Mounts.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/internal/hostguard"
	"github.com/fw-serve/fw/telemetry"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/sysinfo"
	"github.com/fw-serve/fw/dashboard/webui"
	"github.com/fw-serve/fw/internal/docsite"
)

// DefaultMaxBodyBytes bounds an ingest body: a full batch (10,000 events or
// 200,000 values) fits with room to spare.
const DefaultMaxBodyBytes = 64 << 20

// DefaultMaxFileBytes bounds one run file uploaded (PUT /api/runs/{id}/files)
// when Config.MaxArtifactBytes is not set: MLflow's artifact API's default.
const DefaultMaxFileBytes = 4 << 30

// Config configures a Server.
type Config struct {
	// Token, when set, is required as `Authorization: Bearer TOKEN` on every
	// /api route; /health stays open.
	Token string
	// MaxBodyBytes bounds a request body (413 beyond it).
	MaxBodyBytes int64
	// Version is reported by /health.
	Version string
	// Hub is the live stream behind /api/training/stream; nil disables it.
	Hub *stream.Hub
	// CheckpointDir and ArtifactDir are the roots of the runs' files
	// (<dir>/<run id>/<path>), for downloads; "" answers 503 there.
	CheckpointDir, ArtifactDir string
	// Artifacts, when set, is where run artifacts are stored and read
	// instead of the directory ArtifactDir (key <run id>/<path>): with
	// FW_ARTIFACT_URI=s3://..., the bucket, then this host's ArtifactDir
	// (blob.Layered), so an artifact uploaded through any replica
	// downloads on every other.
	Artifacts blob.Store
	// Checkpoints, when set, is where checkpoint downloads read instead
	// of the directory CheckpointDir (key <run id>/<path>): with
	// FW_ARTIFACT_URI=s3://..., this host's CheckpointDir, then the bucket.
	Checkpoints blob.Store
	// CheckpointUploads, when set, is where PUT /api/runs/{id}/files
	// stores checkpoints (with FW_ARTIFACT_URI=s3://..., the bucket's
	// checkpoints/, which Checkpoints reads after this host's directory);
	// default the directory CheckpointDir.
	CheckpointUploads blob.Store
	// UploadDir is where an artifact upload is streamed to before it is
	// stored (default ArtifactDir, from where a directory store renames it
	// into place; else the system's temporary directory).
	UploadDir string
	// UI, when set, serves the web UI at every GET outside /api, /docs,
	// /health, /metrics and /openapi.json (open without the token: the page
	// holds no data; its API calls need the token).
	UI *webui.Site
	// MaxArtifactBytes bounds one artifact uploaded through MLflow's
	// artifact API and one run file uploaded (default DefaultMaxFileBytes).
	MaxArtifactBytes int64
	// Hosts is the accepted Host headers (--allowed-hosts); nil accepts any.
	// CORSOrigins may call the API from a browser (--cors-origins). See guard.
	Hosts       *hostguard.Policy
	CORSOrigins []string
	// ReplicaID names this dashboard among the replicas sharing its
	// database (sent with the requests it forwards to another replica).
	ReplicaID string
	// Mounts are the other APIs this listener serves beside this one
	// (MLflow's tracking API, package mlflow), behind the same guard, token
	// and request metrics.
	Mounts []Mount
	// RunTraces lists the MLflow traces made in or linked to a run (package
	// mlflow's Server.RunTraces), for GET /api/runs/{id}/traces; nil: none.
	RunTraces func(ctx context.Context, runID string, limit int) ([]store.TraceSummary, error)
	// LoggedModels lists MLflow 3's logged models, newest first, at most
	// limit, with how many there are (package mlflow's
	// Server.LoggedModels), for GET /api/logged-models; nil: none.
	LoggedModels func(ctx context.Context, limit int) ([]store.LoggedModelSummary, int, error)
	// ClientFiles returns the store and key prefix of the files MLflow's
	// client wrote itself for a run whose experiment has an artifact
	// location in the default artifact root, and with list those files
	// (package mlflow's Server.ClientFiles); ok false: the run's artifacts
	// are fw's store's. nil: none.
	ClientFiles func(ctx context.Context, runID string, list bool) (files []store.Artifact, from blob.Store, prefix string, ok bool, err error)
	// TraceRetention and TraceMaxSpans bound the trace store that POST
	// /v1/traces fills (spans received longer ago, then the oldest beyond
	// the count, are removed); zero: DefaultTraceRetention and
	// DefaultTraceMaxSpans.
	TraceRetention time.Duration
	TraceMaxSpans  int
	// PayloadRetention and PayloadMaxRecords bound the payload store that
	// POST /api/payloads fills; zero: DefaultPayloadRetention and
	// DefaultPayloadMaxRecords.
	PayloadRetention  time.Duration
	PayloadMaxRecords int
	// TraceProxied traces every request through the deployment proxy (a
	// sampled traceparent is sent when the caller sent none and the
	// dashboard did not trace it): the web UI's "Try it" requests show in
	// the deployment's traces.
	TraceProxied bool
	// Telemetry, when set, traces requests (OpenTelemetry: a W3C
	// traceparent header is the parent, and the deployment proxy passes the
	// trace on to the deployment). Nil traces none.
	Telemetry *telemetry.Tracer
}

// Mount is an API served beside this one: it answers the paths it owns,
// with its own error shape.
type Mount interface {
	// Owns reports whether path is the mount's.
	Owns(path string) bool
	// Handler answers a request for one of its paths (the token checked).
	Handler(ctx *fasthttp.RequestCtx, path string)
	// Unauthorized answers a request without the token, in its shape.
	Unauthorized(ctx *fasthttp.RequestCtx)
	// RoutePattern labels the request metrics (a bounded set of values).
	RoutePattern(path string) string
}

// Server answers the dashboard API from a store.
type Server struct {
	st       store.Store
	cfg      Config
	log      *slog.Logger
	token    [sha256.Size]byte
	draining atomic.Bool
	base     context.Context
	jobs     atomic.Pointer[jobs.Fleet] // nil until SetJobs: /api/training answers 503
	docsSite *docsite.Site              // /docs and /openapi.json
	routes   []route                    // the API's operations (routes.go)
	// registry is nil until SetRegistry: /api/models answers 503.
	registry atomic.Pointer[registry.Service]

	started       time.Time
	sampler       *sysinfo.Sampler  // nil until SetSystem: /api/system/status answers 503 (system.go)
	deployCounter DeploymentCounter // optional (SetDeployments)
	replicas      ReplicaLister     // nil until SetReplicas: /api/system/replicas answers 503
	prom          *promState        // nil until SetMetrics: no /metrics
	guard         guard             // Host, cross-site and CORS checks (guard.go)

	// artifactFiles and checkpointFiles hold the runs' files (key <run
	// id>/<path>); nil when the dashboard has none of that kind (503).
	artifactFiles, checkpointFiles blob.Store
	// checkpointUploads is where uploaded checkpoints are stored (nil:
	// 503); maxFileBytes bounds one uploaded file (--max-artifact-mib).
	checkpointUploads blob.Store
	maxFileBytes      int64

	// traces is the OTLP receiver's state (traces.go); payloads the
	// payload receiver's (payloads.go).
	traces   traceStore
	payloads payloadStore

	// routeHook, when set (by tests only), runs first on every request.
	routeHook func(*fasthttp.RequestCtx)
}

// New creates a server over st. base bounds every request's store calls.
func New(base context.Context, st store.Store, cfg Config, log *slog.Logger) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{st: st, cfg: cfg, log: log, base: base, started: time.Now(), docsSite: newDocsSite(nil), guard: newGuard(cfg)}
	if cfg.UploadDir == "" {
		cfg.UploadDir = cfg.ArtifactDir
	}
	s.cfg.UploadDir = cfg.UploadDir
	if s.cfg.UploadDir == "" {
		s.cfg.UploadDir = os.TempDir()
	}
	s.artifactFiles, s.checkpointFiles = cfg.Artifacts, cfg.Checkpoints
	if s.artifactFiles == nil {
		s.artifactFiles = dirStore(cfg.ArtifactDir, log)
	}
	if s.checkpointFiles == nil {
		s.checkpointFiles = dirStore(cfg.CheckpointDir, log)
	}
	s.checkpointUploads = cfg.CheckpointUploads
	if s.checkpointUploads == nil {
		s.checkpointUploads = s.checkpointFiles
	}
	s.maxFileBytes = cfg.MaxArtifactBytes
	if s.maxFileBytes <= 0 {
		s.maxFileBytes = DefaultMaxFileBytes
	}
	s.routes = s.routeTable()
	if cfg.Token != "" {
		s.token = sha256.Sum256([]byte(cfg.Token))
	}
	return s
}

// dirStore opens the directory store of dir; nil for "" (or when it
// cannot be created: logged, and the routes of its files answer 503).
func dirStore(dir string, log *slog.Logger) blob.Store {
	if dir == "" {
		return nil
	}
	d, err := blob.NewDir(dir)
	if err != nil {
		log.Error("the runs' file directory", "err", err)
		return nil
	}
	return d
}

// SetDraining makes /health answer 503 (the process is shutting down).
func (s *Server) SetDraining() { s.draining.Store(true) }

// Handler is the fasthttp handler (serve it with StreamRequestBody on). A
// panic in a route is answered 500 "internal" and the server keeps serving
// (recover.go). Every request passes the guard (Host, cross-site and CORS
// checks); then an open route (/health, /metrics, the docs, the stream)
// answers, or a mounted API that owns the path (MLflow's), or a route of
// routeTable (with the token under /api); other GETs are the web UI's.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if s.cfg.Telemetry != nil {
		if span := s.cfg.Telemetry.Start(ctx.Request.Header.Peek("traceparent"), ctx.Request.Header.Peek("tracestate"), ctx.Time()); span != nil {
			ctx.SetUserValue(spanKey{}, span)
		}
	}
	defer s.countRequest(ctx, path)
	defer closeUnreadBody(ctx) // the rest of a body a route did not read is never parsed as a request
	defer s.recoverPanic(ctx)
	if s.routeHook != nil {
		s.routeHook(ctx)
	}
	if !s.guardRequest(ctx, path) {
		return
	}
	method := string(ctx.Method())
	rt, params, allow := s.match(method, path)
	if rt != nil && rt.open {
		s.serveRoute(ctx, rt, params)
		return
	}
	// OTLP/HTTP (before MLflow's mount, whose paths include it): the token
	// as for /api, OTLP's error shape. Spans sent to an MLflow experiment
	// (MLflow's client names it in a header) are the mount's: MLflow traces.
	if path == otlpTracesPath && len(ctx.Request.Header.Peek(mlflowExperimentHeader)) == 0 {
		if !s.authorized(ctx) {
			otlpError(ctx, 401, "missing or wrong token: send `Authorization: Bearer <token>` (OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>)")
			return
		}
		switch {
		case rt != nil:
			s.serveRoute(ctx, rt, params)
		default:
			ctx.Response.Header.Set("Allow", allow)
			otlpError(ctx, 405, fmt.Sprintf("%s %s: OTLP/HTTP takes POST", method, path))
		}
		return
	}
	for _, m := range s.cfg.Mounts {
		if m.Owns(path) { // the same token; the mount's own error shape
			if !s.authorized(ctx) {
				m.Unauthorized(ctx)
				return
			}
			m.Handler(ctx, path)
			return
		}
	}
	if path != "/api" && !strings.HasPrefix(path, "/api/") {
		switch {
		case allow != "": // an open route's path
			methodNotAllowed(ctx, method, allow)
		case s.cfg.UI != nil && s.cfg.UI.Serve(ctx, path):
		default:
			writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no route %s; the API lives under /api (and GET /health)", path)))
		}
		return
	}
	if !s.authorized(ctx) {
		writeError(ctx, apiErr(401, CodeUnauthorized, "missing or wrong token: send `Authorization: Bearer <token>` with the dashboard's --token (FW_DASHBOARD_TOKEN)"))
		return
	}
	switch {
	case rt != nil:
		s.serveRoute(ctx, rt, params)
	case allow != "":
		methodNotAllowed(ctx, method, allow)
	default:
		writeError(ctx, notFound(method, path))
	}
}

func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.Token == "" {
		return true
	}
	h := ctx.Request.Header.Peek("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(string(h[:len(prefix)]), prefix) {
		return false
	}
	got := sha256.Sum256(h[len(prefix):])
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// health answers GET /health: 503 while the process shuts down.
func (s *Server) health(c *call) (any, error) {
	if s.draining.Load() {
		return nil, apiErr(503, CodeUnavailable, "the dashboard is shutting down")
	}
	return map[string]string{"status": "ok", "version": s.cfg.Version}, nil
}

// readBody reads the request body up to the limit (413 in the error shape beyond it).
func (s *Server) readBody(ctx *fasthttp.RequestCtx) ([]byte, *Error) {
	var r io.Reader = ctx.RequestBodyStream()
	if r == nil {
		return ctx.PostBody(), nil
	}
	b, err := io.ReadAll(io.LimitReader(r, s.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, apiErr(400, CodeBadRequest, "reading the request body: "+err.Error())
	}
	if int64(len(b)) > s.cfg.MaxBodyBytes {
		return nil, apiErr(413, CodeTooLarge, fmt.Sprintf("the body is larger than %d bytes; send smaller batches (at most %d events or %d values each)",
			s.cfg.MaxBodyBytes, store.MaxBatchEvents, store.MaxBatchValues))
	}
	return b, nil
}

func queryInt(ctx *fasthttp.RequestCtx, name string, def, lo, hi int) (int, *Error) {
	if !ctx.QueryArgs().Has(name) {
		return def, nil
	}
	v := ctx.QueryArgs().Peek(name) // present but empty ("?limit=") is refused below, not read as absent
	n, err := strconv.Atoi(string(v))
	if err != nil || n < lo || n > hi {
		return 0, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?%s=%q must be an integer within %d..%d", name, v, lo, hi))
	}
	return n, nil
}

// getRun answers GET /api/runs/{id}.
func (s *Server) getRun(c *call) (any, error) {
	return s.st.GetRun(c.ctx, c.param("id"))
}

// metrics answers GET /api/runs/{id}/metrics: the run's series.
func (s *Server) metrics(c *call) (any, error) {
	var q store.MetricsQuery
	var e *Error
	if q.System, e = queryBool(c.rc, "system"); e != nil {
		return nil, e
	}
	if keys := string(c.rc.QueryArgs().Peek("keys")); keys != "" {
		q.Keys = strings.Split(keys, ",")
	}
	if q.MaxPoints, e = queryInt(c.rc, "max_points", 1000, 1, 100000); e != nil {
		return nil, e
	}
	id := c.param("id")
	series, err := s.st.Metrics(c.ctx, id, q)
	if err != nil {
		return nil, err
	}
	if series == nil {
		series = []store.Series{}
	}
	return map[string]any{"run_id": id, "series": series}, nil
}

// logs answers GET /api/runs/{id}/logs: the run's log lines.
func (s *Server) logs(c *call) (any, error) {
	var q store.LogQuery
	var e *Error
	if q.Tail, e = queryInt(c.rc, "tail", 0, 0, 100000); e == nil {
		if q.Limit, e = queryInt(c.rc, "limit", 1000, 1, 100000); e == nil {
			var after int
			after, e = queryInt(c.rc, "after", 0, 0, 1<<62)
			q.After = int64(after)
		}
	}
	if e != nil {
		return nil, e
	}
	q.Stream = string(c.rc.QueryArgs().Peek("stream"))
	id := c.param("id")
	lines, err := s.st.Logs(c.ctx, id, q)
	if err != nil {
		return nil, err
	}
	if lines == nil {
		lines = []store.LogLine{}
	}
	return map[string]any{"run_id": id, "lines": lines}, nil
}

// listExperiments answers GET /api/experiments.
func (s *Server) listExperiments(c *call) (any, error) {
	q, e := listQuery(c.rc)
	if e != nil {
		return nil, e
	}
	page, err := s.st.ListExperiments(c.ctx, q)
	if err != nil {
		return nil, err
	}
	if page.Experiments == nil {
		page.Experiments = []store.ExperimentDetail{}
	}
	return page, nil
}

// getExperiment answers GET /api/experiments/{id} (an ID or a name).
func (s *Server) getExperiment(c *call) (any, error) {
	return s.st.GetExperiment(c.ctx, c.param("id"))
}

// createExperiment answers POST /api/experiments (201).
func (s *Server) createExperiment(c *call) (any, error) {
	body, e := s.readBody(c.rc)
	if e != nil {
		return nil, e
	}
	var in struct {
		Name        string             `json:"name"`
		Description string             `json:"description"`
		Tags        map[string]*string `json:"tags"`
	}
	if err := json.Unmarshal(body, &in); err != nil || !isJSONObject(body) {
		msg := `the body must be a JSON object {"name": "...", "description": "...", "tags": {...}}`
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, apiErr(400, string(store.CodeInvalidJSON), msg)
	}
	tags, nulls := splitTags(in.Tags)
	if len(nulls) > 0 {
		return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("tag %q is null: give it a string value or leave it out", nulls[0]))
	}
	exp, err := s.st.CreateExperiment(c.ctx, store.ExperimentInput{Name: in.Name, Description: in.Description, Tags: tags})
	if err != nil {
		return nil, err
	}
	c.status = 201
	return exp, nil
}
