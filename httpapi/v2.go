package httpapi

// The Open Inference Protocol (KServe V2 REST, as Triton and MLServer speak
// it) under /v2, with Triton's binary tensor data extension. See
// https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/
// and triton-inference-server/server docs/protocol/extension_binary_data.md.
//
// Errors keep fw's code and details but put the message where V2 clients
// look for it: {"error": "<message>", "code": "...", "details": {...}}.
// tritonclient builds its exception from the value of "error" and
// concatenates it with a string, so an object there would break it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
)

// routeV2 serves every path under /v2 and returns the metrics label. A
// POST whose body is declared larger than MaxBodyBytes is refused before
// the route is looked at (as Triton refuses one, on its routes fw does not
// serve too). Errors are answered with Triton's status codes: fw's 413 (too
// large) and 422 (invalid input) are 400 here, Triton's INVALID_ARG, with
// fw's code (payload_too_large, invalid_input) kept in the body.
func (s *Server) routeV2(ctx *fasthttp.RequestCtx) string {
	var ep string
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > s.cfg.MaxBodyBytes && ctx.IsPost() {
		writeError(ctx, s.bodyTooLarge(ctx, int64(cl), s.cfg.MaxBodyBytes, false))
		ep = "v2"
		if bytes.HasSuffix(ctx.Path(), []byte("/infer")) {
			ep = "v2_infer"
		}
	} else {
		ep = s.serveV2(ctx)
	}
	if code := ctx.Response.StatusCode(); code >= 400 {
		ctx.Response.SetStatusCode(v2Status(code))
		v2ErrorBody(ctx)
	}
	return ep
}

func (s *Server) serveV2(ctx *fasthttp.RequestCtx) string {
	path := string(ctx.Path())
	rest, ok := strings.CutPrefix(path, "/v2")
	if !ok || (rest != "" && rest[0] != '/') {
		v2NoRoute(ctx)
		return "v2"
	}
	rest = strings.TrimSuffix(rest, "/")
	switch rest {
	case "":
		if s.allow(ctx, "GET") && s.authorized(ctx) {
			writeJSON(ctx, 200, map[string]any{"name": s.cfg.Name, "version": s.cfg.Version, "extensions": serving.Extensions()})
		}
		return "v2"
	case "/health/live":
		if s.allow(ctx, "GET", "HEAD") {
			ctx.SetStatusCode(200) // an empty body, as Triton's: its scripts compare curl's output with "200"
		}
		return "v2"
	case "/health/ready":
		if s.allow(ctx, "GET", "HEAD") && s.v2Ready(ctx) {
			ctx.SetStatusCode(200) // empty, as Triton's
		}
		return "v2"
	}
	if rest == "/models/stats" {
		if s.allow(ctx, "GET") && s.authorized(ctx) {
			s.v2Stats(ctx, s.models.Loaded()...)
		}
		return "v2"
	}
	if repo, ok := strings.CutPrefix(rest, "/repository"); ok {
		return s.routeRepository(ctx, repo)
	}
	if rest == "/trace/setting" {
		if s.allow(ctx, "GET", "POST") && s.authorized(ctx) {
			s.v2Trace(ctx, "")
		}
		return "v2"
	}
	if rest == "/logging" {
		if s.allow(ctx, "GET", "POST") && s.authorized(ctx) {
			s.v2Logging(ctx)
		}
		return "v2"
	}
	if shm, ok := strings.CutPrefix(rest, "/systemsharedmemory"); ok {
		return s.routeSharedMemory(ctx, false, shm)
	}
	if shm, ok := strings.CutPrefix(rest, "/cudasharedmemory"); ok {
		return s.routeSharedMemory(ctx, true, shm)
	}
	tail, ok := strings.CutPrefix(rest, "/models/")
	if !ok {
		v2NoRoute(ctx)
		return "v2"
	}
	// {name}[/versions/{v}][/ready|/infer]
	parts := strings.Split(tail, "/")
	name, version, action := parts[0], "", ""
	parts = parts[1:]
	if len(parts) == 2 && parts[0] == "trace" && parts[1] == "setting" && name != "" {
		if s.allow(ctx, "GET", "POST") && s.authorized(ctx) {
			s.v2Trace(ctx, name)
		}
		return "v2"
	}
	if len(parts) >= 2 && parts[0] == "versions" {
		version, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 0:
	case 1:
		action = parts[0]
	default:
		v2NoRoute(ctx)
		return "v2"
	}
	if name == "" {
		v2NoRoute(ctx)
		return "v2"
	}
	switch action {
	case "":
		if s.allow(ctx, "GET") && s.authorized(ctx) {
			if inst := s.v2Model(ctx, name, version); inst != nil {
				s.v2ModelMetadata(ctx, inst)
			}
		}
		return "v2"
	case "ready":
		if s.allow(ctx, "GET", "HEAD") && s.authorized(ctx) {
			if err := s.models.Probe(ctx, name, version); err != nil {
				s.logNotReady(err)
				writeError(ctx, modelError(err))
			} else if s.v2Ready(ctx) {
				ctx.SetStatusCode(200) // empty, as Triton's
			}
		}
		return "v2"
	case "infer":
		if s.allow(ctx, "POST") && s.authorized(ctx) {
			s.v2Infer(ctx, name, version)
		}
		return "v2_infer"
	case "generate", "generate_stream":
		if s.allow(ctx, "POST") && s.authorized(ctx) {
			s.v2Generate(ctx, name, version, action == "generate_stream")
		}
		return "v2_generate"
	case "config":
		if s.allow(ctx, "GET") && s.authorized(ctx) {
			if inst := s.v2Model(ctx, name, version); inst != nil {
				writeJSON(ctx, 200, serving.ConfigJSON(inst.Config))
			}
		}
		return "v2"
	case "stats":
		if s.allow(ctx, "GET") && s.authorized(ctx) {
			if all := serving.Versions(s.models, name); version == "" && len(all) > 0 {
				s.v2Stats(ctx, all...) // every loaded version, as Triton's
			} else if inst := s.v2Model(ctx, name, version); inst != nil {
				s.v2Stats(ctx, inst)
			}
		}
		return "v2"
	}
	v2NoRoute(ctx)
	return "v2"
}

// v2Ready answers readiness: false (with 503 written) unless the server is
// ready (the models it must serve are loaded); draining turns it false
// before the listener closes, while inference is still served.
func (s *Server) v2Ready(ctx *fasthttp.RequestCtx) bool {
	st, reason := s.State()
	if st == serving.StateReady {
		return true
	}
	e := newError(503, CodeNotReady, "the server is not ready: "+reason, map[string]any{"status": st.String()})
	e.RetryAfter = 1
	writeError(ctx, e)
	return false
}

// logNotReady logs a model's own readiness check that failed (a Python
// model's process or its is_ready()), as Triton logs it.
func (s *Server) logNotReady(err error) {
	if msg, ok := serving.FailedCheck(err); ok {
		s.log.Warn(msg)
	}
}

func v2NoRoute(ctx *fasthttp.RequestCtx) {
	writeError(ctx, newError(404, CodeNotFound, fmt.Sprintf("no route %s %s; the V2 routes are GET /v2, /v2/health/live, /v2/health/ready, /v2/models/{name}[/versions/{v}][/ready] and POST /v2/models/{name}[/versions/{v}]/infer, /generate and /generate_stream, GET /v2/models/{name}[/versions/{v}]/config and /stats, GET /v2/models/stats, POST /v2/repository/index, /v2/repository/models/{name}/load and /unload, /v2/systemsharedmemory/... and /v2/cudasharedmemory/... (status, register, unregister), GET and POST /v2/logging and /v2[/models/{name}]/trace/setting", ctx.Method(), ctx.Path()), nil))
}

// v2Model returns the loaded instance of name (and version, if given);
// else it writes 404 for a model not served (Triton's "Request for unknown
// model" sentence first) or 503 for one not ready.
func (s *Server) v2Model(ctx *fasthttp.RequestCtx, name, version string) *serving.Instance {
	inst, err := s.models.Get(name, version)
	if err != nil {
		writeError(ctx, modelError(err))
		return nil
	}
	return inst
}

type v2TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func v2TensorMetas(specs []engine.TensorSpec) []v2TensorMeta {
	out := make([]v2TensorMeta, len(specs))
	for i, sp := range specs {
		shape := sp.Shape
		if shape == nil {
			shape = []int64{}
		}
		out[i] = v2TensorMeta{Name: sp.Name, Datatype: serving.DatatypeName(sp.DType), Shape: shape}
	}
	return out
}

func (s *Server) v2ModelMetadata(ctx *fasthttp.RequestCtx, inst *serving.Instance) {
	writeJSON(ctx, 200, map[string]any{
		"name":     inst.Name(),
		"versions": []string{inst.Version()},
		"platform": inst.Config.Platform,
		"inputs":   v2TensorMetas(inst.Inputs()),
		"outputs":  v2TensorMetas(inst.Outputs()),
	})
}

// v2ErrorBody rewrites fw's error shape {"error": {"code", "message",
// "details"}} already in the response into V2's, where "error" is the
// message string: {"error": message, "code": code, "details": details}.
func v2ErrorBody(ctx *fasthttp.RequestCtx) {
	body := ctx.Response.Body()
	if !bytes.HasPrefix(body, []byte(`{"error":{`)) {
		return
	}
	var in struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details,omitempty"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return
	}
	out, err := json.Marshal(struct {
		Error   string          `json:"error"`
		Code    string          `json:"code"`
		Details json.RawMessage `json:"details,omitempty"`
	}{in.Error.Message, in.Error.Code, in.Error.Details})
	if err != nil {
		return
	}
	ctx.Response.Header.Del("Inference-Header-Content-Length")
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(out)
}
