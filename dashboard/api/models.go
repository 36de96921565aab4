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
	"github.com/fw-serve/fw/internal/apierror"
)

// MaxModelUploadBytes bounds an uploaded model file.
const MaxModelUploadBytes = 4 << 30

// SetRegistry enables /api/models and /api/deployments (503 until it is
// called). MLflow's registry API, a mount, is given the registry by its
// owner (cmd/fw).
func (s *Server) SetRegistry(r *registry.Service) { s.registry.Store(r) }

// withRegistry adapts a handler of the model registry's routes: 503 on a
// dashboard without one.
func (s *Server) withRegistry(fn func(*call, *registry.Service) (any, error)) func(*call) (any, error) {
	return func(c *call) (any, error) {
		r, err := s.reg()
		if err != nil {
			return nil, err
		}
		return fn(c, r)
	}
}

// reg is the model registry, or the 503 of a dashboard without one.
func (s *Server) reg() (*registry.Service, error) {
	r := s.registry.Load()
	if r == nil {
		return nil, apiErr(503, CodeUnavailable, "the model registry is not available; see the dashboard's log")
	}
	return r, nil
}

// listDeployments answers GET /api/deployments.
func (s *Server) listDeployments(c *call, r *registry.Service) (any, error) {
	list, err := r.Deployments(c.ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"deployments": list}, nil
}

// stopDeployment answers DELETE /api/deployments/{id} (forwarded to the
// replica that runs it).
func (s *Server) stopDeployment(c *call, r *registry.Service) (any, error) {
	return r.StopDeployment(c.ctx, c.param("id"))
}

// listModels answers GET /api/models.
func (s *Server) listModels(c *call, r *registry.Service) (any, error) {
	list, err := r.Reg.List(c.ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"models": list}, nil
}

// startExport answers POST /api/models/export (202: the export job).
func (s *Server) startExport(c *call, r *registry.Service) (any, error) {
	var req registry.ExportRequest
	if e := s.decode(c, &req, `{"run_id", "checkpoint"} or {"model", "version"}, with "format", "opset_version", "method", "name"`); e != nil {
		return nil, e
	}
	j, err := r.StartExport(c.ctx, req)
	if err != nil {
		return nil, err
	}
	c.status = 202
	return map[string]any{"id": j.ID, "state": j.State, "job": j}, nil
}

// listExports answers GET /api/models/exports.
func (s *Server) listExports(c *call, r *registry.Service) (any, error) {
	list, err := r.Exports(c.ctx)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []registry.ExportJob{}
	}
	return map[string]any{"exports": list}, nil
}

// getExport answers GET /api/models/exports/{id}.
func (s *Server) getExport(c *call, r *registry.Service) (any, error) {
	id := c.param("id")
	j, ok, err := r.Export(c.ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apiErr(404, CodeNotFound, fmt.Sprintf("no export %s started by this dashboard", id))
	}
	return j, nil
}

// deploy answers POST /api/models/{name}/deploy (201; forwarded to the
// replica that runs the shared server when it is another).
func (s *Server) deploy(c *call, r *registry.Service) (any, error) {
	var req registry.DeployRequest
	if e := s.decode(c, &req, `{"version", "target", "port", "grpc_port", "device", "max_batch_size", "max_delay_ms"}`); e != nil {
		return nil, e
	}
	d, err := r.Deploy(c.ctx, c.param("name"), req)
	if err != nil {
		return nil, err
	}
	c.status = 201
	return d, nil
}

// version reads the {version} of a version route: a number from 1.
func version(c *call) (int, error) {
	p := c.param("version")
	v, err := strconv.Atoi(p)
	if err != nil || v < 1 {
		return 0, apiErr(404, CodeNotFound, fmt.Sprintf("version %q is not a version number", p))
	}
	return v, nil
}

// getVersion answers GET /api/models/{name}/versions/{version}.
func (s *Server) getVersion(c *call, r *registry.Service) (any, error) {
	if _, err := version(c); err != nil {
		return nil, err
	}
	return r.Reg.Resolve(c.ctx, c.param("name"), c.param("version"))
}

// deleteVersion answers DELETE /api/models/{name}/versions/{version}.
func (s *Server) deleteVersion(c *call, r *registry.Service) (any, error) {
	v, err := version(c)
	if err != nil {
		return nil, err
	}
	name := c.param("name")
	if err := r.Reg.Delete(c.ctx, name, v); err != nil {
		return nil, err
	}
	return map[string]any{"deleted": name, "version": v}, nil
}

// getModel answers GET /api/models/{name}.
func (s *Server) getModel(c *call, r *registry.Service) (any, error) {
	return r.Reg.Get(c.ctx, c.param("name"))
}

// patchModel answers PATCH /api/models/{name}: the aliases.
func (s *Server) patchModel(c *call, r *registry.Service) (any, error) {
	var in struct {
		Aliases map[string]float64 `json:"aliases"` // JSON numbers: 3 and 3.0 are the same integer
	}
	if e := s.decode(c, &in, `{"aliases": {"production": VERSION}} (0 removes an alias)`); e != nil {
		return nil, e
	}
	aliases := make(map[string]int, len(in.Aliases))
	for a, v := range in.Aliases {
		if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
			return nil, apiErr(400, CodeBadRequest, fmt.Sprintf("alias %q: %v is not a version number (0 removes the alias)", a, v))
		}
		aliases[a] = int(v)
	}
	return r.Reg.SetAliases(c.ctx, c.param("name"), aliases)
}

// deleteModel answers DELETE /api/models/{name}: every version.
func (s *Server) deleteModel(c *call, r *registry.Service) (any, error) {
	name := c.param("name")
	if err := r.Reg.Delete(c.ctx, name, 0); err != nil {
		return nil, err
	}
	return map[string]any{"deleted": name}, nil
}

// decode reads a JSON object body into v (unknown fields refused), keeping
// it in c.body (to forward it).
func (s *Server) decode(c *call, v any, shape string) *Error {
	body, e := s.readBody(c.rc)
	if e != nil {
		return e
	}
	c.body = body
	return decodeBytes(body, v, shape)
}

// decodeBytes decodes a JSON object body into v (unknown fields refused):
// a 400 when it is not one.
func decodeBytes(body []byte, v any, shape string) *Error {
	if !isJSONObject(body) {
		return apiErr(400, CodeBadRequest, "the body must be a JSON object "+shape)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apiErr(400, CodeBadRequest, "the body must be a JSON object "+shape+": "+err.Error())
	}
	return nil
}

// sharedStatus answers GET /api/shared-server: its state and the versions
// its repository index lists, from the replica that owns it (forwarded:
// its process runs on the owner's host).
func (s *Server) sharedStatus(c *call, r *registry.Service) (any, error) {
	if e, err := r.RemoteShared(c.ctx); e != nil {
		return nil, e
	} else if err != nil {
		return nil, err
	}
	return r.SharedStatus(c.ctx)
}

// startShared answers POST /api/shared-server: starts it (201), or
// answers the running one (200).
func (s *Server) startShared(c *call, r *registry.Service) (any, error) {
	body, e := s.readBody(c.rc)
	if e != nil {
		return nil, e
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}") // no body: the defaults
	}
	c.body = body
	var req registry.SharedRequest
	if e := decodeBytes(body, &req, `{"port", "grpc_port", "device"} (each optional)`); e != nil {
		return nil, e
	}
	_, started, err := r.StartShared(c.ctx, req)
	if err != nil {
		return nil, err
	}
	if started {
		c.status = 201
	}
	return r.SharedStatus(c.ctx)
}

// stopShared answers DELETE /api/shared-server: stops it and ends every
// deployment on it.
func (s *Server) stopShared(c *call, r *registry.Service) (any, error) {
	return r.StopShared(c.ctx)
}

// registerModel answers POST /api/models: a JSON {name, run_id, checkpoint}
// registers a checkpoint; a multipart form (field "file", optional field
// "name") or a raw body with ?name= uploads an exported file.
func (s *Server) registerModel(c *call, r *registry.Service) (any, error) {
	ctx := c.rc
	ct, params, _ := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	name := string(ctx.QueryArgs().Peek("name"))
	if ct == "application/json" {
		var in struct {
			Name       string `json:"name"`
			RunID      string `json:"run_id"`
			Checkpoint string `json:"checkpoint"`
		}
		if e := s.decode(c, &in, `{"name", "run_id", "checkpoint"}`); e != nil {
			return nil, e
		}
		if in.Name == "" {
			in.Name = name
		}
		if in.RunID == "" || in.Checkpoint == "" || in.Name == "" {
			return nil, apierror.New(422, "invalid_argument", `register a checkpoint with {"name", "run_id", "checkpoint"}, or upload an exported file (multipart field "file", or a raw body with ?name=)`, nil)
		}
		v, err := r.RegisterCheckpoint(c.ctx, in.Name, in.RunID, in.Checkpoint)
		if err != nil {
			return nil, err
		}
		c.status = 201
		return map[string]any{"name": in.Name, "version": v}, nil
	}
	var body io.Reader = ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.PostBody())
	}
	tmp, err := r.TempFile()
	if err != nil {
		return nil, err
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
				return nil, apiErr(400, CodeBadRequest, "reading the multipart body: "+err.Error())
			}
			switch p.FormName() {
			case "name":
				b, _ := io.ReadAll(io.LimitReader(p, 256))
				name = strings.TrimSpace(string(b))
			case "file":
				if got { // a second file would be appended to the first
					return nil, apiErr(400, CodeBadRequest, `the multipart form has more than one "file" field; upload one model file per request`)
				}
				filename = p.FileName()
				if e := copyUpload(tmp, p); e != nil {
					return nil, e
				}
				got = true
			}
		}
	} else {
		if e := copyUpload(tmp, body); e != nil {
			return nil, e
		}
		got = true
	}
	if !got {
		return nil, apierror.New(422, "invalid_argument", `the multipart form has no "file" field; send the exported model file as "file"`, nil)
	}
	if name == "" {
		return nil, apierror.New(422, "invalid_argument", `name the model: ?name=NAME, or a "name" form field`, nil)
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	v, err := r.Upload(c.ctx, name, tmp.Name(), filename)
	if err != nil {
		return nil, err
	}
	c.status = 201
	return map[string]any{"name": name, "version": v}, nil
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
