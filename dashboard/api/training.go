package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/valyala/fasthttp"
)

// SetJobs enables the /api/training routes (503 until it is called): the
// jobs of this dashboard through f, and those of the other replicas on its
// database (jobs.Fleet, docs/replicas.md).
func (s *Server) SetJobs(f *jobs.Fleet) { s.jobs.Store(f) }

func (s *Server) jobManager() *jobs.Fleet { return s.jobs.Load() }

// training answers /api/training/...: parts[0] == "training".
func (s *Server) training(ctx *fasthttp.RequestCtx, method string, parts []string) {
	m := s.jobManager()
	if m == nil {
		writeError(ctx, apiErr(503, CodeUnavailable, "training jobs are not available: the recipe registry did not load (see the dashboard's log; FW_PYTHON must name a Python with the fw package)"))
		return
	}
	switch {
	case len(parts) == 1:
		if s.allow(ctx, method, "GET") {
			list, err := m.List(s.base)
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 200, map[string]any{"jobs": list})
		}
	case len(parts) == 2 && parts[1] == "recipes":
		if s.allow(ctx, method, "GET") {
			writeJSON(ctx, 200, map[string]any{"recipes": m.Recipes()})
		}
	case len(parts) == 2 && parts[1] == "start":
		if s.allow(ctx, method, "POST") {
			s.startJob(ctx, m)
		}
	case len(parts) == 2:
		if s.allow(ctx, method, "GET") {
			info, ok, err := m.Get(s.base, parts[1])
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			if !ok {
				writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no training job %s; GET /api/training lists them", parts[1])))
				return
			}
			writeJSON(ctx, 200, info)
		}
	case len(parts) == 3 && parts[2] == "stop":
		if s.allow(ctx, method, "POST") {
			info, err := m.Stop(s.base, parts[1])
			if e, ok := notOwner(err); ok {
				s.forward(ctx, e, nil) // the job runs on another replica
				return
			}
			if err != nil {
				writeError(ctx, fromError(s.log, err))
				return
			}
			writeJSON(ctx, 202, info)
		}
	default:
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("no route %s %s; see docs/tracking.md (Training jobs)", method, ctx.Path())))
	}
}

func (s *Server) startJob(ctx *fasthttp.RequestCtx, m *jobs.Fleet) {
	body, e := s.readBody(ctx)
	if e != nil {
		writeError(ctx, e)
		return
	}
	var req jobs.StartRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(ctx, apiErr(400, CodeBadRequest, `the body must be a JSON object {"recipe": "...", "experiment": "...", "params": {...}}: `+err.Error()))
		return
	}
	info, err := m.Start(s.base, req)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	writeJSON(ctx, 202, map[string]any{"id": info.RunID, "status": info.State, "job": info})
}
