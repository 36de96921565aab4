package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/registry"
)

// deployProxyTimeout bounds one forwarded request to a deployment.
const deployProxyTimeout = 60 * time.Second

// deployProxyRoutes are the model-server routes the dashboard forwards
// (/api/deployments/{id}/<path>, each a route of routeTable); nothing else
// of a deployment is reachable through it.
var deployProxyRoutes = []struct{ method, path string }{
	{"POST", "predict"},
	{"POST", "predict/image"},
	{"POST", "predict/batch"},
	{"GET", "model"},
	{"GET", "health/ready"},
}

// deploymentProxy answers /api/deployments/{id}/{predict,predict/image,
// predict/batch,model,health/ready} by forwarding the request to the managed
// `fw serve` process on its loopback URL and passing its answer back as it
// is (status, content type, body). The browser UI's "try it" panel uses it:
// it never talks to a deployment's port itself (no CORS; the dashboard's
// token applies). The target URL comes from the deployment record, never
// from the request.
func (s *Server) deploymentProxy(c *call) {
	ctx := c.rc
	r, err := s.reg()
	if err != nil {
		s.answer(c, nil, err)
		return
	}
	method, id := string(ctx.Method()), c.param("id")
	route := strings.TrimPrefix(c.rt.pattern, "/api/deployments/{id}/")
	// The record only: probing every deployment's health on each prediction
	// would put HTTP calls on the request path.
	dep, ok, err := r.Record(c.ctx, id)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	if !ok {
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no deployment %s; GET /api/deployments lists them", id)))
		return
	}
	if dep.State != registry.DeployRunning {
		writeError(ctx, apiErr(409, CodeConflict, fmt.Sprintf("deployment %s is %s, not running; deploy the model again", id, dep.State)))
		return
	}
	if e, err := r.Remote(c.ctx, dep); err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	} else if e != nil {
		s.forward(c, e, nil) // its process runs on the owner replica's host
		return
	}
	target, err := url.Parse(dep.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") {
		writeError(ctx, apiErr(500, CodeInternal, fmt.Sprintf("deployment %s has no usable URL %q", id, dep.URL)))
		return
	}
	target.Path = strings.TrimSuffix(target.Path, "/") + "/" + route
	target.RawQuery = string(ctx.QueryArgs().QueryString())
	if dep.Shared() {
		// The shared server serves many models: name this deployment's
		// version (whatever the request said).
		q, _ := url.ParseQuery(target.RawQuery)
		q.Set("model", dep.Model)
		q.Set("version", strconv.Itoa(dep.Version))
		target.RawQuery = q.Encode()
		if route == "health/ready" {
			target.Path, target.RawQuery = "/v2/models/"+url.PathEscape(dep.Model)+"/versions/"+strconv.Itoa(dep.Version)+"/ready", ""
		}
	}

	var body []byte
	if method == "POST" {
		var e *Error
		if body, e = s.readBody(ctx); e != nil {
			writeError(ctx, e)
			return
		}
	}
	rctx, cancel := context.WithTimeout(c.ctx, deployProxyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, target.String(), bytes.NewReader(body))
	if err != nil {
		writeError(ctx, apiErr(500, CodeInternal, "building the request to the deployment: "+err.Error()))
		return
	}
	for _, h := range []string{"Content-Type", "Accept"} {
		if v := ctx.Request.Header.Peek(h); len(v) > 0 {
			req.Header.Set(h, string(v))
		}
	}
	passTrace(ctx, req.Header, s.cfg.TraceProxied)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		writeError(ctx, apiErr(502, CodeBadGateway, fmt.Sprintf("deployment %s at %s did not answer: %v; check its log (%s)", id, dep.URL, err, dep.Log)))
		return
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		writeError(ctx, apiErr(502, CodeBadGateway, fmt.Sprintf("reading deployment %s's answer: %v", id, err)))
		return
	}
	ctx.SetStatusCode(resp.StatusCode)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		ctx.SetContentType(ct)
	}
	if route == "health/ready" && resp.StatusCode == 200 && len(out) == 0 {
		// A shared server's V2 model readiness answers 200 with no body, as
		// Triton's does; the dashboard's API answers JSON.
		ctx.SetContentType("application/json")
		out, _ = json.Marshal(map[string]any{"name": dep.Model, "ready": true})
	}
	ctx.SetBody(out)
}
