package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"os"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/fw-serve/fw/internal/apierror"
	"github.com/valyala/fasthttp"
)

// MaxModelUploadBytes bounds an uploaded model file.
const MaxModelUploadBytes = 4 << 30

// SetRegistry enables /api/models and /api/deployments, and MLflow's model
// registry API over the same registry (503 until it is called).
func (s *Server) SetRegistry(r *registry.Service) {
	s.registry.Store(r)
	if r != nil {
		s.mlflow.SetRegistry(r.Reg)
	}
}

// modelRoutes answers /api/models/... and /api/deployments/...
func (s *Server) modelRoutes(ctx *fasthttp.RequestCtx, method string, parts []string) {
	r := s.registry.Load()
	if r == nil {
		writeError(ctx, apiErr(503, CodeUnavailable, "the model registry is not available; see the dashboard's log"))
		return
	}
	if parts[0] == "shared-server" {
		if len(parts) != 1 {
			s.noModelRoute(ctx, method)
			return
		}
		s.sharedServer(ctx, r, method)
		return
	}
	if parts[0] == "deployments" {
		switch {
		case len(parts) == 1:
			if s.allow(ctx, method, "GET") {
				list, err := r.Deployments(s.base)
				if err != nil {
					writeError(ctx, fromError(s.log, err))
					return
				}
				writeJSON(ctx, 200, map[string]any{"deployments": list})
			}
		case len(parts) >= 3:
			s.deploymentProxy(ctx, r, method, parts[1], strings.Join(parts[2:], "/"))
		case len(parts) == 2:
			if s.allow(ctx, method, "DELETE") {
				d, err := r.StopDeployment(s.base, parts[1])
				if e, ok := notOwner(err); ok {
					s.forward(ctx, e, nil) // another replica owns it
					return
				}
				if err != nil {
					writeError(ctx, fromError(s.log, err))
					return
				}
				writeJSON(ctx, 200, d)
			}
		default:
			s.noModelRoute(ctx, method)
		}
		return
	}
	switch {
	case len(parts) == 1:
		switch method {
		case "GET", "HEAD":
			list, err := r.Reg.List(s.base)
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 200, map[string]any{"models": list})
		case "POST":
			s.registerModel(ctx, r)
		default:
			s.allow(ctx, method, "GET, POST")
		}
	case len(parts) == 2 && parts[1] == "export":
		if s.allow(ctx, method, "POST") {
			var req registry.ExportRequest
			if !s.decode(ctx, &req, `{"run_id", "checkpoint"} or {"model", "version"}, with "format", "opset_version", "method", "name"`) {
				return
			}
			j, err := r.StartExport(s.base, req)
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 202, map[string]any{"id": j.ID, "state": j.State, "job": j})
		}
	case len(parts) == 2 && parts[1] == "exports":
		if s.allow(ctx, method, "GET") {
			list, err := r.Exports(s.base)
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			if list == nil {
				list = []registry.ExportJob{}
			}
			writeJSON(ctx, 200, map[string]any{"exports": list})
		}
	case len(parts) == 3 && parts[1] == "exports":
		if s.allow(ctx, method, "GET") {
			j, ok, err := r.Export(s.base, parts[2])
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			if !ok {
				writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no export %s started by this dashboard", parts[2])))
				return
			}
			writeJSON(ctx, 200, j)
		}
	case len(parts) == 2:
		s.model(ctx, r, method, parts[1])
	case len(parts) == 3 && parts[2] == "deploy":
		if s.allow(ctx, method, "POST") {
			var req registry.DeployRequest
			body, ok := s.decodeBody(ctx, &req, `{"version", "target", "port", "grpc_port", "device", "max_batch_size", "max_delay_ms"}`)
			if !ok {
				return
			}
			d, err := r.Deploy(s.base, parts[1], req)
			if e, ok := notOwner(err); ok {
				s.forward(ctx, e, body) // another replica runs the shared server
				return
			}
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 201, d)
		}
	case len(parts) == 4 && parts[2] == "versions":
		v, err := strconv.Atoi(parts[3])
		if err != nil || v < 1 {
			writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("version %q is not a version number", parts[3])))
			return
		}
		switch method {
		case "GET", "HEAD":
			ver, err := r.Reg.Resolve(s.base, parts[1], parts[3])
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 200, ver)
		case "DELETE":
			if err := r.Reg.Delete(s.base, parts[1], v); err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 200, map[string]any{"deleted": parts[1], "version": v})
		default:
			s.allow(ctx, method, "GET, DELETE")
		}
	default:
		s.noModelRoute(ctx, method)
	}
}

func (s *Server) noModelRoute(ctx *fasthttp.RequestCtx, method string) {
	writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no route %s %s; see docs/tracking.md (Model registry)", method, ctx.Path())))
}

func (s *Server) model(ctx *fasthttp.RequestCtx, r *registry.Service, method, name string) {
	switch method {
	case "GET", "HEAD":
		m, err := r.Reg.Get(s.base, name)
		if err != nil {
			writeError(ctx, fromError(s.log, err))
			return
		}
		writeJSON(ctx, 200, m)
	case "PATCH":
		var in struct {
			Aliases map[string]float64 `json:"aliases"` // JSON numbers: 3 and 3.0 are the same integer
		}
		if !s.decode(ctx, &in, `{"aliases": {"production": VERSION}} (0 removes an alias)`) {
			return
		}
		aliases := make(map[string]int, len(in.Aliases))
		for a, v := range in.Aliases {
			if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
				writeError(ctx, apiErr(400, CodeBadRequest, fmt.Sprintf("alias %q: %v is not a version number (0 removes the alias)", a, v)))
				return
			}
			aliases[a] = int(v)
		}
		m, err := r.Reg.SetAliases(s.base, name, aliases)
		if err != nil {
			writeError(ctx, fromError(s.log, err))
			return
		}
		writeJSON(ctx, 200, m)
	case "DELETE":
		if err := r.Reg.Delete(s.base, name, 0); err != nil {
			writeError(ctx, fromError(s.log, err))
			return
		}
		writeJSON(ctx, 200, map[string]any{"deleted": name})
	default:
		s.allow(ctx, method, "GET, PATCH, DELETE")
	}
}

// decode reads a JSON object body into v (unknown fields refused).
func (s *Server) decode(ctx *fasthttp.RequestCtx, v any, shape string) bool {
	_, ok := s.decodeBody(ctx, v, shape)
	return ok
}

// decodeBody is decode that also returns the body read (to forward it).
func (s *Server) decodeBody(ctx *fasthttp.RequestCtx, v any, shape string) ([]byte, bool) {
	body, e := s.readBody(ctx)
	if e != nil {
		writeError(ctx, e)
		return nil, false
	}
	return body, decodeBytes(ctx, body, v, shape)
}

// decodeBytes decodes a JSON object body into v (unknown fields refused),
// answering 400 when it is not one.
func decodeBytes(ctx *fasthttp.RequestCtx, body []byte, v any, shape string) bool {
	if !isJSONObject(body) {
		writeError(ctx, apiErr(400, CodeBadRequest, "the body must be a JSON object "+shape))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(ctx, apiErr(400, CodeBadRequest, "the body must be a JSON object "+shape+": "+err.Error()))
		return false
	}
	return true
}

// sharedServer answers /api/shared-server: GET its state and the versions
// its repository index lists, POST starts it (or answers the running one),
// DELETE stops it and ends every deployment on it. With replicas, the
// replica that owns it answers (forwarded).
func (s *Server) sharedServer(ctx *fasthttp.RequestCtx, r *registry.Service, method string) {
	var body []byte
	var err error
	var out *registry.SharedServer
	status := 200
	switch method {
	case "GET", "HEAD":
		var e *replica.NotOwnerError
		if e, err = r.RemoteShared(s.base); e != nil {
			s.forward(ctx, e, nil) // its process runs on the owner's host
			return
		}
		if err == nil {
			out, err = r.SharedStatus(s.base)
		}
	case "POST":
		var req registry.SharedRequest
		var e *Error
		if body, e = s.readBody(ctx); e != nil {
			writeError(ctx, e)
			return
		}
		if len(bytes.TrimSpace(body)) == 0 {
			body = []byte("{}") // no body: the defaults
		}
		if !decodeBytes(ctx, body, &req, `{"port", "grpc_port", "device"} (each optional)`) {
			return
		}
		var started bool
		if _, started, err = r.StartShared(s.base, req); err == nil {
			if started {
				status = 201
			}
			out, err = r.SharedStatus(s.base)
		}
	case "DELETE":
		out, err = r.StopShared(s.base)
	default:
		s.allow(ctx, method, "GET, POST, DELETE")
		return
	}
	if e, ok := notOwner(err); ok {
		s.forward(ctx, e, body)
		return
	}
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	writeJSON(ctx, status, out)
}

// registerModel answers POST /api/models: a JSON {name, run_id, checkpoint}
// registers a checkpoint; a multipart form (field "file", optional field
// "name") or a raw body with ?name= uploads an exported file.
func (s *Server) registerModel(ctx *fasthttp.RequestCtx, r *registry.Service) {
	ct, params, _ := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	name := string(ctx.QueryArgs().Peek("name"))
	if ct == "application/json" {
		var in struct {
			Name       string `json:"name"`
			RunID      string `json:"run_id"`
			Checkpoint string `json:"checkpoint"`
		}
		if !s.decode(ctx, &in, `{"name", "run_id", "checkpoint"}`) {
			return
		}
		if in.Name == "" {
			in.Name = name
		}
		if in.RunID == "" || in.Checkpoint == "" || in.Name == "" {
			writeError(ctx, apierror.New(422, "invalid_argument", `register a checkpoint with {"name", "run_id", "checkpoint"}, or upload an exported file (multipart field "file", or a raw body with ?name=)`, nil))
			return
		}
		v, err := r.RegisterCheckpoint(s.base, in.Name, in.RunID, in.Checkpoint)
		if err != nil {
			writeError(ctx, fromError(s.log, err))
			return
		}
		writeJSON(ctx, 201, map[string]any{"name": in.Name, "version": v})
		return
	}
	var body io.Reader = ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.PostBody())
	}
	tmp, err := r.TempFile()
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	filename, got := "", false
	if ct == "multipart/form-data" {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeError(ctx, apiErr(400, CodeBadRequest, "reading the multipart body: "+err.Error()))
				return
			}
			switch p.FormName() {
			case "name":
				b, _ := io.ReadAll(io.LimitReader(p, 256))
				name = strings.TrimSpace(string(b))
			case "file":
				if got { // a second file would be appended to the first
					writeError(ctx, apiErr(400, CodeBadRequest, `the multipart form has more than one "file" field; upload one model file per request`))
					return
				}
				filename = p.FileName()
				if e := copyUpload(tmp, p); e != nil {
					writeError(ctx, e)
					return
				}
				got = true
			}
		}
	} else {
		if e := copyUpload(tmp, body); e != nil {
			writeError(ctx, e)
			return
		}
		got = true
	}
	if !got {
		writeError(ctx, apierror.New(422, "invalid_argument", `the multipart form has no "file" field; send the exported model file as "file"`, nil))
		return
	}
	if name == "" {
		writeError(ctx, apierror.New(422, "invalid_argument", `name the model: ?name=NAME, or a "name" form field`, nil))
		return
	}
	if err := tmp.Close(); err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	v, err := r.Upload(s.base, name, tmp.Name(), filename)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	writeJSON(ctx, 201, map[string]any{"name": name, "version": v})
}

func copyUpload(dst io.Writer, src io.Reader) *Error {
	n, err := io.Copy(dst, io.LimitReader(src, MaxModelUploadBytes+1))
	if err != nil {
		return apiErr(400, CodeBadRequest, "reading the upload: "+err.Error())
	}
	if n > MaxModelUploadBytes {
		return apiErr(413, CodeTooLarge, fmt.Sprintf("the model file is larger than %d bytes", MaxModelUploadBytes))
	}
	return nil
}
