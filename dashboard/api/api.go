// Package api is the dashboard's HTTP API on fasthttp: event ingest from the
// training SDK, reads of runs, metrics, logs and experiments, and health.
// The store is passed in; every non-2xx answer uses the error shape of Error.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/fw-serve/fw/dashboard/mlflow"
	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/internal/hostguard"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/sysinfo"
	"github.com/fw-serve/fw/dashboard/webui"
	"github.com/fw-serve/fw/internal/docsite"
	"github.com/valyala/fasthttp"
)

// DefaultMaxBodyBytes bounds an ingest body: a full batch (10,000 events or
// 200,000 values) fits with room to spare.
const DefaultMaxBodyBytes = 64 << 20

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
	// artifact API (default mlflow.DefaultMaxArtifactBytes).
	MaxArtifactBytes int64
	// Hosts is the accepted Host headers (--allowed-hosts); nil accepts any.
	// CORSOrigins may call the API from a browser (--cors-origins). See guard.
	Hosts       *hostguard.Policy
	CORSOrigins []string
	// ReplicaID names this dashboard among the replicas sharing its
	// database (sent with the requests it forwards to another replica).
	ReplicaID string
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
	mlflow   *mlflow.Server             // MLflow's tracking API over the same store (/api/2.0/mlflow/...)
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
		s.maxFileBytes = mlflow.DefaultMaxArtifactBytes
	}
	s.mlflow = mlflow.New(base, st, mlflow.Config{Artifacts: s.artifactFiles, UploadDir: cfg.UploadDir, MaxBodyBytes: cfg.MaxBodyBytes, MaxArtifactBytes: cfg.MaxArtifactBytes}, log)
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
// (recover.go).
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	defer s.countRequest(ctx, path)
	defer closeUnreadBody(ctx) // the rest of a body a route did not read is never parsed as a request
	defer s.recoverPanic(ctx)
	if s.routeHook != nil {
		s.routeHook(ctx)
	}
	if !s.guardRequest(ctx, path) {
		return
	}
	if path == "/health" {
		s.health(ctx)
		return
	}
	if path == "/metrics" { // open without the token, like /health
		s.serveMetrics(ctx)
		return
	}
	if path == "/openapi.json" || path == "/docs" || strings.HasPrefix(path, "/docs/") { // open, like /health (docs.go)
		s.docs(ctx, path)
		return
	}
	if mlflow.Owns(path) { // MLflow's tracking API: the same token, MLflow's error shape (docs/mlflow.md)
		if !s.authorized(ctx) {
			mlflow.Unauthorized(ctx)
			return
		}
		s.mlflow.Handler(ctx, path)
		return
	}
	if path != "/api" && !strings.HasPrefix(path, "/api/") {
		if s.cfg.UI != nil && s.cfg.UI.Serve(ctx, path) {
			return
		}
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no route %s; the API lives under /api (and GET /health)", path)))
		return
	}
	if path == "/api/training/stream" { // before auth and any /api/training/ prefix: it also takes ?token= (stream.go)
		s.stream(ctx)
		return
	}
	if !s.authorized(ctx) {
		writeError(ctx, apiErr(401, CodeUnauthorized, "missing or wrong token: send `Authorization: Bearer <token>` with the dashboard's --token (FW_DASHBOARD_TOKEN)"))
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(path, "/api"), "/"), "/")
	method := string(ctx.Method())
	switch {
	case len(parts) == 1 && parts[0] == "ingest":
		if s.allow(ctx, method, "POST") {
			s.ingest(ctx)
		}
	case len(parts) == 1 && parts[0] == "experiments":
		switch method {
		case "GET":
			s.listExperiments(ctx)
		case "POST":
			s.createExperiment(ctx)
		default:
			s.allow(ctx, method, "GET, POST")
		}
	case len(parts) == 2 && parts[0] == "experiments":
		switch method {
		case "PATCH":
			s.patchExperiment(ctx, parts[1])
		case "DELETE":
			s.deleteExperiment(ctx, parts[1])
		default:
			if s.allow(ctx, method, "GET, PATCH, DELETE") {
				s.getExperiment(ctx, parts[1])
			}
		}
	case len(parts) == 3 && parts[0] == "experiments" && parts[2] == "runs":
		if s.allow(ctx, method, "GET") {
			s.experimentRuns(ctx, parts[1])
		}
	case len(parts) == 1 && parts[0] == "runs":
		if s.allow(ctx, method, "GET") {
			s.listRuns(ctx)
		}
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "checkpoints":
		if s.allow(ctx, method, "GET") {
			s.checkpoints(ctx, parts[1])
		}
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "artifacts":
		if s.allow(ctx, method, "GET") {
			s.artifacts(ctx, parts[1])
		}
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "download":
		if s.allow(ctx, method, "GET") {
			s.download(ctx, parts[1])
		}
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "files":
		if s.allow(ctx, method, "PUT") {
			s.uploadFile(ctx, parts[1])
		}
	case len(parts) == 1 && parts[0] == "activity":
		if s.allow(ctx, method, "GET") {
			s.activity(ctx)
		}
	case len(parts) == 2 && parts[0] == "runs":
		switch method {
		case "PATCH":
			s.patchRun(ctx, parts[1])
		case "DELETE":
			s.deleteRun(ctx, parts[1])
		default:
			if s.allow(ctx, method, "GET, PATCH, DELETE") {
				s.getRun(ctx, parts[1])
			}
		}
	case len(parts) == 1 && parts[0] == "compare":
		if s.allow(ctx, method, "GET") {
			s.compare(ctx)
		}
	case len(parts) == 2 && parts[0] == "system" && parts[1] == "status":
		if s.allow(ctx, method, "GET") {
			s.systemStatus(ctx)
		}
	case len(parts) == 2 && parts[0] == "system" && parts[1] == "replicas":
		if s.allow(ctx, method, "GET") {
			s.replicaList(ctx)
		}
	case len(parts) == 2 && parts[0] == "system" && parts[1] == "history":
		if s.allow(ctx, method, "GET") {
			s.systemHistory(ctx)
		}
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "metrics":
		if s.allow(ctx, method, "GET") {
			s.metrics(ctx, parts[1])
		}
	case len(parts) == 3 && parts[0] == "runs" && parts[2] == "logs":
		if s.allow(ctx, method, "GET") {
			s.logs(ctx, parts[1])
		}
	case parts[0] == "models" || parts[0] == "deployments" || parts[0] == "shared-server":
		s.modelRoutes(ctx, method, parts)
	case parts[0] == "training":
		s.training(ctx, method, parts)
	default:
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no route %s %s; see docs/tracking.md (Ingest API) for the routes", method, path)))
	}
}

func (s *Server) allow(ctx *fasthttp.RequestCtx, method, allowed string) bool {
	for _, m := range strings.Split(allowed, ", ") {
		if method == m || (method == "HEAD" && m == "GET") {
			return true
		}
	}
	ctx.Response.Header.Set("Allow", allowed)
	writeError(ctx, apiErr(405, CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed here; use %s", method, allowed)))
	return false
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

func (s *Server) health(ctx *fasthttp.RequestCtx) {
	if !s.allow(ctx, string(ctx.Method()), "GET") {
		return
	}
	if s.draining.Load() {
		writeError(ctx, apiErr(503, CodeUnavailable, "the dashboard is shutting down"))
		return
	}
	writeJSON(ctx, 200, map[string]string{"status": "ok", "version": s.cfg.Version})
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

func (s *Server) getRun(ctx *fasthttp.RequestCtx, id string) {
	r, err := s.st.GetRun(s.base, id)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	writeJSON(ctx, 200, r)
}

func (s *Server) metrics(ctx *fasthttp.RequestCtx, id string) {
	var q store.MetricsQuery
	var e *Error
	if q.System, e = queryBool(ctx, "system"); e != nil {
		writeError(ctx, e)
		return
	}
	if keys := string(ctx.QueryArgs().Peek("keys")); keys != "" {
		q.Keys = strings.Split(keys, ",")
	}
	if q.MaxPoints, e = queryInt(ctx, "max_points", 1000, 1, 100000); e != nil {
		writeError(ctx, e)
		return
	}
	series, err := s.st.Metrics(s.base, id, q)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	if series == nil {
		series = []store.Series{}
	}
	writeJSON(ctx, 200, map[string]any{"run_id": id, "series": series})
}

func (s *Server) logs(ctx *fasthttp.RequestCtx, id string) {
	var q store.LogQuery
	var e *Error
	if q.Tail, e = queryInt(ctx, "tail", 0, 0, 100000); e == nil {
		if q.Limit, e = queryInt(ctx, "limit", 1000, 1, 100000); e == nil {
			var after int
			after, e = queryInt(ctx, "after", 0, 0, 1<<62)
			q.After = int64(after)
		}
	}
	if e != nil {
		writeError(ctx, e)
		return
	}
	q.Stream = string(ctx.QueryArgs().Peek("stream"))
	lines, err := s.st.Logs(s.base, id, q)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	if lines == nil {
		lines = []store.LogLine{}
	}
	writeJSON(ctx, 200, map[string]any{"run_id": id, "lines": lines})
}

func (s *Server) listExperiments(ctx *fasthttp.RequestCtx) {
	q, e := listQuery(ctx)
	if e != nil {
		writeError(ctx, e)
		return
	}
	page, err := s.st.ListExperiments(s.base, q)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	if page.Experiments == nil {
		page.Experiments = []store.ExperimentDetail{}
	}
	writeJSON(ctx, 200, page)
}

func (s *Server) getExperiment(ctx *fasthttp.RequestCtx, idOrName string) {
	d, err := s.st.GetExperiment(s.base, idOrName)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	writeJSON(ctx, 200, d)
}

func (s *Server) createExperiment(ctx *fasthttp.RequestCtx) {
	body, e := s.readBody(ctx)
	if e != nil {
		writeError(ctx, e)
		return
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
		writeError(ctx, apiErr(400, string(store.CodeInvalidJSON), msg))
		return
	}
	tags, nulls := splitTags(in.Tags)
	if len(nulls) > 0 {
		writeError(ctx, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("tag %q is null: give it a string value or leave it out", nulls[0])))
		return
	}
	exp, err := s.st.CreateExperiment(s.base, store.ExperimentInput{Name: in.Name, Description: in.Description, Tags: tags})
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	writeJSON(ctx, 201, exp)
}
