// Package mlflow serves MLflow's tracking REST API (under /api/2.0/mlflow/,
// /api/3.0/mlflow/ and /ajax-api/2.0/mlflow/), MLflow 3's logged models
// and its proxied artifact API (/api/2.0/mlflow-artifacts/artifacts/) over
// the dashboard's own store, so
// existing MLflow logging code and autologgers write into fw unchanged: one
// store, the same runs, live on the same stream. Writes become store events
// (writer "mlflow"), reads come from the store's queries. Errors use MLflow's
// shape {"error_code", "message"} on these routes only. What maps and what is
// left out is in docs/mlflow.md.
package mlflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/query"
	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/lru"
	"github.com/fw-serve/fw/internal/reqctx"
)

// Writer is the event writer name of everything this API logs.
const Writer = "mlflow"

// DefaultExperiment is the fw experiment that is MLflow's experiment "0".
const DefaultExperiment = "Default"

// Reserved run tag holding MLflow's soft delete (lifecycle_stage "deleted").
// It is hidden from MLflow's tag lists and visible in fw's own API.
const lifecycleTag = "fw.lifecycle"

// MLflow's limits (mlflow/utils/validation.py).
const (
	maxMetricsPerBatch = 1000
	maxParamsPerBatch  = 100
	maxTagsPerBatch    = 100
	maxEntitiesBatch   = 1000
	maxParamValue      = 6000
	maxResultsRuns     = 50000
	maxResultsExps     = 50000
)

// Config configures a Server.
type Config struct {
	// Artifacts is where the artifact API stores and reads the runs' files
	// (key <run id>/<path>): the directory store of ArtifactDir, or with
	// object storage (FW_ARTIFACT_URI=s3://...) the bucket, then this
	// host's ArtifactDir (blob.Layered). nil: the directory ArtifactDir.
	Artifacts blob.Store
	// ArtifactDir is the root of the runs' artifacts (<dir>/<run id>/<path>),
	// the same the store and fw's own API use, used when Artifacts is nil;
	// both unset answers 503 on the artifact routes.
	ArtifactDir string
	// UploadDir is where an uploaded artifact is streamed to before it is
	// stored (default the system's temporary directory).
	UploadDir string
	// MaxBodyBytes bounds a JSON request body.
	MaxBodyBytes int64
	// MaxArtifactBytes bounds one uploaded artifact file.
	MaxArtifactBytes int64
	// DefaultArtifactRoot is MLflow's --default-artifact-root without
	// artifact serving: a local directory (an absolute, clean path or a
	// file:// URI of one) or s3://bucket/prefix: experiments created through
	// MLflow's API get the artifact location <root>/<experiment id> and
	// their runs' files are written there by the client itself, which the
	// dashboard reads back (locations.go). Empty: runs' artifacts go
	// through the artifact proxy (mlflow-artifacts:/ URIs).
	DefaultArtifactRoot string
	// ArtifactRoot is DefaultArtifactRoot's store (the directory, or the
	// bucket under the prefix), through which the dashboard reads and
	// writes the files clients write there. nil with a local root: opened
	// here.
	ArtifactRoot blob.Store
	// ArtifactsDestination, when set, is MLflow's --artifacts-destination:
	// where the artifact proxy keeps what MLflow's clients upload, in
	// MLflow's own layout: a run's files under <experiment id>/<run
	// id>/artifacts/<path>, any other path as it is given (logged models'
	// <experiment id>/models/<model id>/artifacts/..., traces', scripts'),
	// so a directory or bucket an MLflow server wrote is read as it is,
	// and the other way round. Runs still get mlflow-artifacts:/ URIs. nil:
	// the proxy keeps runs' files in Artifacts (<run id>/<path>) and other
	// paths under Artifacts' _mlflow-artifacts/. Not with
	// DefaultArtifactRoot (without artifact serving there is no proxy).
	ArtifactsDestination blob.Store
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes     = 64 << 20
	DefaultMaxArtifactBytes = 4 << 30
)

// Server answers MLflow's tracking API from a store. Writes to one run are
// ordered (the stripe lock around sequence numbering and Apply), so
// concurrent requests for a run (MLflow's asynchronous logging) never reorder
// or drop each other's events.
type Server struct {
	st   store.Store
	cfg  Config
	log  *slog.Logger
	base context.Context

	seq   atomic.Int64 // last sequence number handed out
	locks [64]sync.Mutex

	defaultMu sync.Mutex
	defaultID string // fw ID of DefaultExperiment, once known

	routes map[string]route // by path after /api/2.0/mlflow/ (built once in New)

	reg atomic.Pointer[registry.Registry] // fw's model registry (SetRegistry), behind MLflow's registry API

	parsers fastjson.ParserPool // log-batch's metrics (decodeMetricsFast)

	root      blob.Store                 // Config.ArtifactRoot; nil without a root
	dest      blob.Store                 // Config.ArtifactsDestination; nil without one
	rootCanon string                     // DefaultArtifactRoot in canonical form (locations.go); "" without one
	locations *lru.Cache[string, string] // experiment ID -> its artifact location (locations.go)
}

// New creates a server over st (the publishing store, so MLflow-logged
// events reach the live stream). base bounds every store call.
func New(base context.Context, st store.Store, cfg Config, log *slog.Logger) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxArtifactBytes <= 0 {
		cfg.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	if cfg.Artifacts == nil && cfg.ArtifactDir != "" {
		d, err := blob.NewDir(cfg.ArtifactDir)
		if err != nil {
			log.Error("mlflow api: the artifact directory", "err", err) // the artifact routes answer 503
		} else {
			cfg.Artifacts = d
		}
	}
	if cfg.UploadDir == "" {
		cfg.UploadDir = os.TempDir()
	}
	s := &Server{st: st, cfg: cfg, log: log, base: base, locations: lru.New[string, string](100_000)}
	s.root = cfg.ArtifactRoot
	s.dest = cfg.ArtifactsDestination
	s.rootCanon, _ = canonical(cfg.DefaultArtifactRoot)
	if dir, ok := localDir(cfg.DefaultArtifactRoot); ok && s.root == nil {
		if d, err := blob.NewDir(dir); err != nil {
			log.Error("mlflow api: the default artifact root", "root", cfg.DefaultArtifactRoot, "err", err) // its runs' files are then not read back
		} else {
			s.root = d
		}
	}
	s.routes = s.routeTable()
	return s
}

// Version is the MLflow release whose client and tests fw's API is checked
// against (python/mlflow_tests), answered at GET /version as MLflow's
// server answers its own version: the client reads it to decide what the
// server supports.
const Version = "3.17.2"

// Owns reports whether path belongs to this API: MLflow's REST API (2.0 and
// 3.0) and artifact proxy, with their /ajax-api twins (the paths MLflow's
// own web UI uses), GET /version, GET /get-artifact, MLflow's span intake
// POST /v1/traces (with the x-mlflow-experiment-id header; without it the
// dashboard's own trace store answers first), and MLflow's GraphQL
// endpoint (not served: ENDPOINT_NOT_FOUND in MLflow's shape, rather than
// fw's web UI).
func Owns(path string) bool {
	for _, p := range []string{"/api/2.0/mlflow", "/api/3.0/mlflow", "/ajax-api"} {
		if rest, ok := strings.CutPrefix(path, p); ok && (rest == "" || rest[0] == '/' || strings.HasPrefix(rest, "-artifacts")) {
			return true
		}
	}
	switch path {
	case "/version", "/get-artifact", "/model-versions/get-artifact", "/graphql", "/v1/traces":
		return true
	}
	return false
}

// RoutePattern is the metrics label of a path of this API: the endpoint
// (/api/2.0/mlflow/runs/log-batch, the /ajax-api form counted with it), the
// artifact API as one route, "other" for unknown ones.
func (s *Server) RoutePattern(path string) string {
	rest, ok := "", false
	for _, p := range []string{"/api/2.0/", "/ajax-api/2.0/", "/api/3.0/", "/ajax-api/3.0/"} {
		if rest, ok = strings.CutPrefix(path, p); ok {
			break
		}
	}
	switch path {
	case "/version", "/get-artifact", "/model-versions/get-artifact", "/ajax-api/2.0/mlflow/upload-artifact", "/v1/traces":
		return path
	}
	if strings.HasPrefix(rest, "mlflow-artifacts/") {
		return "/api/2.0/mlflow-artifacts/artifacts"
	}
	if r, ok := strings.CutPrefix(rest, "mlflow/"); ok {
		if _, known := s.routes[r]; known {
			return "/api/2.0/mlflow/" + r
		}
		if strings.HasPrefix(r, "logged-models/") {
			return "/api/2.0/mlflow/logged-models/{id}"
		}
		if strings.HasPrefix(r, "traces/") {
			return "/api/2.0/mlflow/traces/{id}"
		}
		if r == "get-trace-artifact" {
			return "/api/2.0/mlflow/get-trace-artifact"
		}
	}
	return "other"
}

// reqCtxKey is the RequestCtx user value holding the request's context.
type reqCtxKey struct{}

// reqCtx is the context of the request ctx answers (set by Handler), or
// the server's outside one.
func (s *Server) reqCtx(ctx *fasthttp.RequestCtx) context.Context {
	if c, ok := ctx.UserValue(reqCtxKey{}).(context.Context); ok {
		return c
	}
	return s.base
}

// Handler answers one request of this API (Owns(path) is true; the caller
// has checked the token).
func (s *Server) Handler(ctx *fasthttp.RequestCtx, path string) {
	rctx, end := reqctx.New(s.base, ctx) // cancelled when the client goes away
	defer end()
	ctx.SetUserValue(reqCtxKey{}, rctx) // for the artifact routes (reqCtx)
	switch path {
	case "/version":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString(Version)
		return
	case "/get-artifact":
		s.getArtifact(ctx)
		return
	case "/ajax-api/2.0/mlflow/upload-artifact":
		s.uploadArtifact(ctx)
		return
	case "/model-versions/get-artifact":
		s.modelVersionArtifact(rctx, ctx)
		return
	case "/ajax-api/2.0/mlflow/get-trace-artifact", "/api/2.0/mlflow/get-trace-artifact":
		s.traceArtifact(ctx)
		return
	case "/v1/traces":
		if len(ctx.Request.Header.Peek(ExperimentHeader)) > 0 {
			s.receiveSpans(ctx)
			return
		}
	}
	rest, ok := "", false
	for _, p := range []string{"/api/2.0/", "/ajax-api/2.0/", "/api/3.0/", "/ajax-api/3.0/"} {
		if rest, ok = strings.CutPrefix(path, p); ok {
			break
		}
	}
	if a, isArt := strings.CutPrefix(rest, "mlflow-artifacts/artifacts"); ok && isArt && (a == "" || a[0] == '/') {
		s.artifactsProxy(ctx, a)
		return
	}
	route, isML := strings.CutPrefix(rest, "mlflow/")
	h, known := s.routes[route]
	if ok && isML && !known {
		if m, isModel := strings.CutPrefix(route, "logged-models/"); isModel && s.loggedModelRoute(rctx, ctx, m) {
			return
		}
		if t, isTrace := strings.CutPrefix(route, "traces/"); isTrace && s.serveTraceRoute(rctx, ctx, t) {
			return
		}
	}
	if !ok || !isML || !known {
		writeErr(ctx, errf(404, codeEndpointNotFound, "No API endpoint %s %s in fw's MLflow API; docs/mlflow.md lists what fw serves", ctx.Method(), path))
		return
	}
	method := string(ctx.Method())
	fn := h.fn
	if other, ok := h.other[method]; ok {
		fn = other
	} else if method != h.method && !(h.method == "GET" && method == "HEAD") && !(h.alsoGet && method == "GET") {
		allow := []string{h.method}
		for m := range h.other {
			allow = append(allow, m)
		}
		sort.Strings(allow[1:])
		ctx.Response.Header.Set("Allow", strings.Join(allow, ", "))
		writeErr(ctx, errf(405, codeBadRequest, "%s takes %s, not %s", path, strings.Join(allow, " or "), method))
		return
	}
	req, e := s.request(rctx, ctx)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	out, e := fn(req)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	writeJSON(ctx, 200, out)
}

type route struct {
	method  string
	alsoGet bool // search endpoints: MLflow's UI reads them with GET too
	fn      func(*request) (any, *apiError)
	// other answers more methods on the same path (registered-models/alias:
	// POST sets, DELETE removes, GET reads).
	other map[string]func(*request) (any, *apiError)
}

func (s *Server) routeTable() map[string]route {
	return map[string]route{
		"experiments/create":                {method: "POST", fn: s.createExperiment},
		"experiments/get":                   {method: "GET", fn: s.getExperiment},
		"experiments/get-by-name":           {method: "GET", fn: s.getExperimentByName},
		"experiments/search":                {method: "POST", alsoGet: true, fn: s.searchExperiments},
		"experiments/update":                {method: "POST", fn: s.updateExperiment},
		"experiments/delete":                {method: "POST", fn: s.deleteExperiment},
		"experiments/restore":               {method: "POST", fn: s.restoreExperiment},
		"experiments/set-experiment-tag":    {method: "POST", fn: s.setExperimentTag},
		"experiments/delete-experiment-tag": {method: "POST", fn: s.deleteExperimentTag},
		"runs/create":                       {method: "POST", fn: s.createRun},
		"runs/get":                          {method: "GET", fn: s.getRun},
		"runs/update":                       {method: "POST", fn: s.updateRun},
		"runs/delete":                       {method: "POST", fn: s.deleteRun},
		"runs/restore":                      {method: "POST", fn: s.restoreRun},
		"runs/search":                       {method: "POST", alsoGet: true, fn: s.searchRuns},
		"runs/log-metric":                   {method: "POST", fn: s.logMetric},
		"runs/log-batch":                    {method: "POST", fn: s.logBatch},
		"runs/log-parameter":                {method: "POST", fn: s.logParam},
		"runs/set-tag":                      {method: "POST", fn: s.setTag},
		"runs/delete-tag":                   {method: "POST", fn: s.deleteTag},
		"runs/log-inputs":                   {method: "POST", fn: s.logInputs},
		"runs/log-model":                    {method: "POST", fn: s.logModel},
		"metrics/get-history":               {method: "GET", fn: s.getHistory},
		"metrics/get-history-bulk-interval": {method: "GET", fn: s.getHistoryBulk},
		"metrics/get-history-bulk":          {method: "GET", fn: s.getHistoryAll},
		"artifacts/list":                    {method: "GET", fn: s.listRunArtifacts},
		"runs/outputs":                      {method: "POST", fn: s.logOutputs},
		// MLflow 3's logged models (loggedmodels.go); logged-models/{id}/...
		// are matched in Handler.
		"logged-models":        {method: "POST", fn: s.createLoggedModel},
		"logged-models/search": {method: "POST", fn: s.searchLoggedModels},
		// MLflow's tracing API (traces.go); traces/{id}/... are matched in
		// Handler, the spans arrive at /v1/traces (otlp.go).
		"traces": {method: "POST", fn: s.startTrace, other: map[string]func(*request) (any, *apiError){
			"GET": s.searchTracesV2}},
		"traces/search":                       {method: "POST", alsoGet: true, fn: s.searchTracesV3},
		"traces/get":                          {method: "GET", fn: s.getTrace},
		"traces/batchGet":                     {method: "GET", fn: s.batchGetTraces},
		"traces/batchGetInfos":                {method: "POST", fn: s.batchGetTraceInfos},
		"traces/link-to-run":                  {method: "POST", fn: s.linkTracesToRun},
		"traces/delete-traces":                {method: "POST", fn: s.deleteTraces},
		"traces/metrics":                      {method: "POST", fn: s.queryTraceMetrics},
		"traces/calculate-filter-correlation": {method: "POST", fn: s.calculateTraceFilterCorrelation},
		// The model registry (registry.go), over fw's registry.
		"registered-models/create":              {method: "POST", fn: s.createRegisteredModel},
		"registered-models/get":                 {method: "GET", fn: s.getRegisteredModel},
		"registered-models/rename":              {method: "POST", fn: s.renameRegisteredModel},
		"registered-models/update":              {method: "PATCH", fn: s.updateRegisteredModel},
		"registered-models/delete":              {method: "DELETE", fn: s.deleteRegisteredModel},
		"registered-models/search":              {method: "GET", fn: s.searchRegisteredModels},
		"registered-models/get-latest-versions": {method: "POST", alsoGet: true, fn: s.getLatestVersions},
		"registered-models/set-tag":             {method: "POST", fn: s.setRegisteredModelTag},
		"registered-models/delete-tag":          {method: "DELETE", fn: s.deleteRegisteredModelTag},
		"registered-models/alias": {method: "POST", fn: s.setAlias, other: map[string]func(*request) (any, *apiError){
			"DELETE": s.deleteAlias, "GET": s.getByAlias}},
		"model-versions/create":           {method: "POST", fn: s.createModelVersion},
		"model-versions/get":              {method: "GET", fn: s.getModelVersion},
		"model-versions/update":           {method: "PATCH", fn: s.updateModelVersion},
		"model-versions/delete":           {method: "DELETE", fn: s.deleteModelVersion},
		"model-versions/search":           {method: "GET", fn: s.searchModelVersions},
		"model-versions/get-download-uri": {method: "GET", fn: s.getDownloadURI},
		"model-versions/transition-stage": {method: "POST", fn: s.transitionStage},
		"model-versions/set-tag":          {method: "POST", fn: s.setModelVersionTag},
		"model-versions/delete-tag":       {method: "DELETE", fn: s.deleteModelVersionTag},
	}
}

// request is one decoded API call: the JSON body (POST) or the query string
// (GET, as MLflow's client sends it) as one object.
type request struct {
	ctx  context.Context
	body map[string]json.RawMessage
	// query holds GET parameters (repeated ones in order).
	query url.Values
	get   bool
}

func (s *Server) request(rctx context.Context, ctx *fasthttp.RequestCtx) (*request, *apiError) {
	r := &request{ctx: rctx}
	if ctx.IsGet() || ctx.IsHead() {
		r.get = true
		r.query = url.Values{}
		for k, v := range ctx.QueryArgs().All() {
			r.query.Add(string(k), string(v))
		}
		return r, nil
	}
	body, e := readBody(ctx, s.cfg.MaxBodyBytes)
	if e != nil {
		return nil, e
	}
	r.body = map[string]json.RawMessage{}
	if len(strings.TrimSpace(string(body))) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(body, &r.body); err != nil {
		return nil, errf(400, codeMalformedRequest, "the body must be a JSON object: %v", err)
	}
	return r, nil
}

// apiError is an answer in MLflow's error shape.
type apiError struct {
	status int
	code   string
	msg    string
	// details, when set, is fw's explanation beside a message that must be
	// MLflow's exact words.
	details string
}

// MLflow's error codes (mlflow/protos/databricks.proto).
const (
	codeInvalidParameter = "INVALID_PARAMETER_VALUE"
	codeNotFound         = "RESOURCE_DOES_NOT_EXIST"
	codeAlreadyExists    = "RESOURCE_ALREADY_EXISTS"
	codeInvalidState     = "INVALID_STATE"
	codeBadRequest       = "BAD_REQUEST"
	codeMalformedRequest = "MALFORMED_REQUEST"
	codeEndpointNotFound = "ENDPOINT_NOT_FOUND"
	codeInternal         = "INTERNAL_ERROR"
	codeUnavailable      = "TEMPORARILY_UNAVAILABLE"
	codeLimitExceeded    = "RESOURCE_LIMIT_EXCEEDED"
	codeUnauthenticated  = "UNAUTHENTICATED"
)

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// Owns reports whether path is this API's (the package's Owns): with
// Handler, Unauthorized and RoutePattern, what mounts the API beside fw's
// own in the dashboard (api.Mount).
func (s *Server) Owns(path string) bool { return Owns(path) }

// Unauthorized answers a request without the dashboard's token, in
// MLflow's error shape.
func (s *Server) Unauthorized(ctx *fasthttp.RequestCtx) {
	writeErr(ctx, errf(401, codeUnauthenticated, "missing or wrong token: set MLFLOW_TRACKING_TOKEN to the dashboard's --token (FW_DASHBOARD_TOKEN); MLflow's client sends it as `Authorization: Bearer <token>`"))
}

// Forbidden and other answers from the dashboard's guard keep fw's shape; the
// routes here answer in MLflow's.
func writeErr(ctx *fasthttp.RequestCtx, e *apiError) {
	out := map[string]string{"error_code": e.code, "message": e.msg}
	if e.details != "" {
		out["details"] = e.details
	}
	writeJSON(ctx, e.status, out)
}

// invalidPath is MLflow's refusal of an artifact path that leaves its
// root: MLflow's exact message, which its clients and tests compare whole,
// and what is wrong with the path in "details".
func invalidPath(format string, args ...any) *apiError {
	e := errf(400, codeInvalidParameter, "Invalid path")
	e.details = fmt.Sprintf(format, args...)
	return e
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = 500
		b = []byte(`{"error_code":"INTERNAL_ERROR","message":"encoding the answer failed"}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// fromStore maps a store error to MLflow's codes.
func (s *Server) fromStore(err error, what string) *apiError {
	fe := fault.As(err)
	if fe == nil || fe.Kind == fault.Internal {
		s.log.Error("mlflow api: store failure", "op", what, "err", err)
		return errf(500, codeInternal, "%s failed; see the dashboard's log", what)
	}
	if fe.Code == store.CodeClosed {
		return errf(503, codeUnavailable, "the dashboard is shutting down; retry")
	}
	msg := fe.Msg
	if fe.Err != nil {
		var qe *query.Error
		if errors.As(fe.Err, &qe) {
			msg += ": " + qe.Error()
		} else if fe.Kind == fault.BadRequest {
			msg += ": " + fe.Err.Error()
		}
	}
	switch fe.Kind {
	case fault.NotFound:
		return errf(404, codeNotFound, "%s", msg)
	case fault.Conflict:
		if fe.Code == store.CodeInvalidTransition {
			return errf(400, codeInvalidState, "%s", msg)
		}
		return errf(400, codeAlreadyExists, "%s", msg)
	case fault.TooLarge:
		return errf(400, codeLimitExceeded, "%s", msg)
	case fault.Unavailable:
		return errf(503, codeUnavailable, "%s", msg)
	}
	return errf(400, codeInvalidParameter, "%s", msg)
}

// lock returns the stripe lock of a run.
func (s *Server) lock(runID string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(runID))
	return &s.locks[h.Sum32()%uint32(len(s.locks))]
}

// nextSeq hands out increasing sequence numbers, starting from the clock so
// that a restarted dashboard continues above what it stored before.
func (s *Server) nextSeq() int64 {
	for {
		last := s.seq.Load()
		n := max(last+1, time.Now().UnixNano())
		if s.seq.CompareAndSwap(last, n) {
			return n
		}
	}
}

// apply stores events of one run in order under the run's lock, numbering
// them for writer "mlflow". A refused event fails the call with MLflow's code
// for it; nothing of a refused batch is kept (the store applies a batch's
// valid events, so a batch is validated here first where it can be).
func (s *Server) apply(ctx context.Context, runID string, events []store.Event) *apiError {
	mu := s.lock(runID)
	mu.Lock()
	defer mu.Unlock()
	for attempt := 0; ; attempt++ {
		for i := range events {
			events[i].RunID = runID
			events[i].Writer = Writer
			events[i].Seq = s.nextSeq()
		}
		res, err := s.st.Apply(ctx, events)
		if err != nil {
			return s.fromStore(err, "logging to run "+runID)
		}
		if len(res.Errors) > 0 {
			return eventError(res.Errors[0])
		}
		if res.Duplicates == 0 || attempt > 0 {
			return nil
		}
		// The store had higher numbers for this writer (a clock that went
		// back since they were written): continue above them and apply the
		// events it took for duplicates.
		for _, a := range res.Acked {
			if a.RunID == runID && a.Writer == Writer {
				for {
					last := s.seq.Load()
					if last >= a.Seq || s.seq.CompareAndSwap(last, a.Seq) {
						break
					}
				}
			}
		}
		// Numbers are increasing in a batch, so the refused ones are its head.
		events = events[:res.Duplicates]
	}
}

func eventError(e store.EventError) *apiError {
	switch e.Code {
	case store.CodeUnknownRun, store.CodeNotFound:
		return errf(404, codeNotFound, "%s", e.Msg)
	case store.CodeInvalidTransition:
		return errf(400, codeInvalidState, "%s", e.Msg)
	case store.CodeParamConflict:
		return errf(400, codeInvalidParameter, "%s (MLflow does not allow changing a logged param's value)", e.Msg)
	case store.CodeRunConflict:
		return errf(400, codeAlreadyExists, "%s", e.Msg)
	}
	return errf(400, codeInvalidParameter, "%s", e.Msg)
}
