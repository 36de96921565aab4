package api

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/internal/reqctx"
)

// route is one operation of the dashboard API: a method on a path pattern
// ("/api/runs/{id}/metrics"; a {name} segment matches any one segment), and
// the handler that answers it. The table (routeTable) is the API: Handler
// routes by it, the request metrics are labelled by its patterns, and a
// test holds it equal to the operations of openapi.json.
type route struct {
	method  string // GET (HEAD is answered too), POST, PUT, PATCH or DELETE
	pattern string
	segs    []string // pattern split at "/"
	// fn answers with a value, written as JSON with c.status (200 unless
	// the handler set another), or an error, written by answer.
	fn func(c *call) (any, error)
	// raw, instead of fn, writes its own answer: files, the WebSocket,
	// Prometheus' exposition, proxied answers.
	raw func(c *call)
	// open routes need no token: /health, /metrics, the docs, and the
	// stream, which checks its own (it also takes ?token=).
	open bool
}

// call is one request being answered by a route.
type call struct {
	// ctx is the request's context (internal/reqctx): cancelled when the
	// handler returns, when the client goes away while it runs and when
	// the server stops. Every store call of a handler takes it.
	ctx context.Context
	rc  *fasthttp.RequestCtx
	rt  *route
	// params holds the values of the pattern's {name} segments, in order.
	params []string
	// status is the answer's status when fn returns a value (default 200).
	status int
	// body is the request body a handler read, sent along when the answer
	// is forwarded to the replica that owns what was asked for.
	body []byte
}

// param is the value of the pattern's segment {name} ("" when the pattern
// has none).
func (c *call) param(name string) string {
	i := 0
	for _, seg := range c.rt.segs {
		if len(seg) > 2 && seg[0] == '{' {
			if seg[1:len(seg)-1] == name {
				return c.params[i]
			}
			i++
		}
	}
	return ""
}

// routeTable is every operation of the dashboard API but MLflow's (package
// mlflow, mounted beside it) and the web UI's pages. Where a literal
// segment and a {name} segment could both match ("/api/models/export",
// "/api/models/{name}"), the one listed first wins.
func (s *Server) routeTable() []route {
	rs := []route{
		{method: "GET", pattern: "/health", fn: s.health, open: true},
		{method: "GET", pattern: "/metrics", raw: s.serveMetrics, open: true},
		{method: "GET", pattern: "/openapi.json", raw: s.docs, open: true},
		{method: "GET", pattern: "/docs", raw: s.docs, open: true},
		{method: "GET", pattern: "/docs/{asset}", raw: s.docs, open: true},
		{method: "GET", pattern: "/api/training/stream", raw: s.stream, open: true},

		{method: "POST", pattern: "/api/ingest", fn: s.ingest},
		{method: "GET", pattern: "/api/experiments", fn: s.listExperiments},
		{method: "POST", pattern: "/api/experiments", fn: s.createExperiment},
		{method: "GET", pattern: "/api/experiments/{id}", fn: s.getExperiment},
		{method: "PATCH", pattern: "/api/experiments/{id}", fn: s.patchExperiment},
		{method: "DELETE", pattern: "/api/experiments/{id}", fn: s.deleteExperiment},
		{method: "GET", pattern: "/api/experiments/{id}/runs", fn: s.experimentRuns},
		{method: "GET", pattern: "/api/runs", fn: s.listRuns},
		{method: "GET", pattern: "/api/runs/{id}", fn: s.getRun},
		{method: "PATCH", pattern: "/api/runs/{id}", fn: s.patchRun},
		{method: "DELETE", pattern: "/api/runs/{id}", fn: s.deleteRun},
		{method: "GET", pattern: "/api/runs/{id}/metrics", fn: s.metrics},
		{method: "GET", pattern: "/api/runs/{id}/logs", fn: s.logs},
		{method: "GET", pattern: "/api/runs/{id}/checkpoints", fn: s.checkpoints},
		{method: "GET", pattern: "/api/runs/{id}/artifacts", fn: s.artifacts},
		{method: "GET", pattern: "/api/runs/{id}/traces", fn: s.runTraces},
		{method: "GET", pattern: "/api/logged-models", fn: s.loggedModels},
		{method: "GET", pattern: "/api/runs/{id}/download", raw: s.download},
		{method: "PUT", pattern: "/api/runs/{id}/files", fn: s.uploadFile},
		{method: "GET", pattern: "/api/compare", fn: s.compare},
		{method: "GET", pattern: "/api/activity", fn: s.activity},
		{method: "GET", pattern: "/api/system/status", fn: s.systemStatus},
		{method: "GET", pattern: "/api/system/history", fn: s.systemHistory},
		{method: "GET", pattern: "/api/system/replicas", fn: s.replicaList},

		{method: "GET", pattern: "/api/training", fn: s.withJobs(s.listJobs)},
		{method: "GET", pattern: "/api/training/recipes", fn: s.withJobs(s.recipes)},
		{method: "POST", pattern: "/api/training/start", fn: s.withJobs(s.startJob)},
		{method: "GET", pattern: "/api/training/{id}", fn: s.withJobs(s.getJob)},
		{method: "POST", pattern: "/api/training/{id}/stop", fn: s.withJobs(s.stopJob)},

		{method: "GET", pattern: "/api/models", fn: s.withRegistry(s.listModels)},
		{method: "POST", pattern: "/api/models", fn: s.withRegistry(s.registerModel)},
		{method: "POST", pattern: "/api/models/export", fn: s.withRegistry(s.startExport)},
		{method: "GET", pattern: "/api/models/exports", fn: s.withRegistry(s.listExports)},
		{method: "GET", pattern: "/api/models/exports/{id}", fn: s.withRegistry(s.getExport)},
		{method: "GET", pattern: "/api/models/{name}", fn: s.withRegistry(s.getModel)},
		{method: "PATCH", pattern: "/api/models/{name}", fn: s.withRegistry(s.patchModel)},
		{method: "DELETE", pattern: "/api/models/{name}", fn: s.withRegistry(s.deleteModel)},
		{method: "POST", pattern: "/api/models/{name}/deploy", fn: s.withRegistry(s.deploy)},
		{method: "GET", pattern: "/api/models/{name}/versions/{version}", fn: s.withRegistry(s.getVersion)},
		{method: "DELETE", pattern: "/api/models/{name}/versions/{version}", fn: s.withRegistry(s.deleteVersion)},
		{method: "GET", pattern: "/api/deployments", fn: s.withRegistry(s.listDeployments)},
		{method: "DELETE", pattern: "/api/deployments/{id}", fn: s.withRegistry(s.stopDeployment)},
		{method: "GET", pattern: "/api/shared-server", fn: s.withRegistry(s.sharedStatus)},

		{method: "POST", pattern: otlpTracesPath, raw: s.receiveTraces},
		{method: "GET", pattern: "/api/traces", fn: s.listTraces},
		{method: "GET", pattern: "/api/traces/{trace_id}", fn: s.getTrace},
		{method: "POST", pattern: "/api/payloads", fn: s.receivePayloads},
		{method: "GET", pattern: "/api/payloads", fn: s.listPayloads},
		{method: "GET", pattern: "/api/payloads/drift", fn: s.payloadDrift},
		{method: "POST", pattern: "/api/shared-server", fn: s.withRegistry(s.startShared)},
		{method: "DELETE", pattern: "/api/shared-server", fn: s.withRegistry(s.stopShared)},
	}
	for _, p := range deployProxyRoutes {
		rs = append(rs, route{method: p.method, pattern: "/api/deployments/{id}/" + p.path, raw: s.deploymentProxy})
	}
	for i := range rs {
		rs[i].segs = strings.Split(strings.TrimPrefix(rs[i].pattern, "/"), "/")
	}
	return rs
}

// match finds the route of method on path: rt is nil when none answers it,
// with allow listing the methods that do (empty: no route has the path).
// params are the values of rt's {name} segments.
func (s *Server) match(method, path string) (rt *route, params []string, allow string) {
	segs := pathSegs(path)
	var pattern string // the first pattern that matches the path
	var methods []string
	for i := range s.routes {
		r := &s.routes[i]
		if (pattern != "" && r.pattern != pattern) || !segsMatch(r.segs, segs) {
			continue
		}
		pattern = r.pattern
		if r.method == method || (method == "HEAD" && r.method == "GET") {
			return r, pathParams(r.segs, segs), ""
		}
		methods = append(methods, r.method)
	}
	sort.Strings(methods)
	return nil, nil, strings.Join(methods, ", ")
}

// pathSegs splits a request path into segments; a trailing slash is not
// one (/api/runs/ is /api/runs, /docs/ is /docs).
func pathSegs(path string) []string {
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	return strings.Split(strings.TrimPrefix(path, "/"), "/")
}

func segsMatch(pattern, segs []string) bool {
	if len(pattern) != len(segs) {
		return false
	}
	for i, p := range pattern {
		if isParam(p) {
			if segs[i] == "" {
				return false
			}
		} else if p != segs[i] {
			return false
		}
	}
	return true
}

func isParam(seg string) bool { return len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' }

func pathParams(pattern, segs []string) []string {
	var out []string
	for i, p := range pattern {
		if isParam(p) {
			out = append(out, segs[i])
		}
	}
	return out
}

// serveRoute answers a request with rt: the request's context is made
// (and ended when the answer is written), then rt's handler runs.
func (s *Server) serveRoute(ctx *fasthttp.RequestCtx, rt *route, params []string) {
	rctx, end := reqctx.New(s.base, ctx)
	defer end()
	c := &call{ctx: rctx, rc: ctx, rt: rt, params: params, status: 200}
	if rt.raw != nil {
		rt.raw(c)
		return
	}
	v, err := rt.fn(c)
	s.answer(c, v, err)
}

// answer is the one writer of a route's answer: v as JSON with c.status;
// or err: an *Error as it is, a replica.NotOwnerError forwarded to the
// replica that owns what was asked for, anything else through fromError
// (the status its fault.Kind means).
func (s *Server) answer(c *call, v any, err error) {
	if err == nil {
		writeJSON(c.rc, c.status, v)
		return
	}
	var e *Error
	if errors.As(err, &e) {
		writeError(c.rc, e)
		return
	}
	if no, ok := notOwner(err); ok {
		s.forward(c, no, c.body)
		return
	}
	writeError(c.rc, fromError(s.log, err))
}

// notFound is the 404 of a path no route has.
func notFound(method, path string) *Error {
	return apiErr(404, CodeNotFound, fmt.Sprintf("no route %s %s; GET /openapi.json lists the dashboard's routes (docs/tracking.md describes them)", method, path))
}

// methodNotAllowed is the 405 of a path whose routes take other methods.
func methodNotAllowed(ctx *fasthttp.RequestCtx, method, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, apiErr(405, CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed here; use %s", method, allow)))
}
