package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fw-serve/fw/dashboard/jobs"
)

// SetJobs enables the /api/training routes (503 until it is called): the
// jobs of this dashboard through f, and those of the other replicas on its
// database (jobs.Fleet, docs/replicas.md).
func (s *Server) SetJobs(f *jobs.Fleet) { s.jobs.Store(f) }

func (s *Server) jobManager() *jobs.Fleet { return s.jobs.Load() }

// withJobs adapts a handler of the training routes: 503 on a dashboard
// without a job manager.
func (s *Server) withJobs(fn func(*call, *jobs.Fleet) (any, error)) func(*call) (any, error) {
	return func(c *call) (any, error) {
		m := s.jobManager()
		if m == nil {
			return nil, apiErr(503, CodeUnavailable, "training jobs are not available: the recipe registry did not load (see the dashboard's log; FW_PYTHON must name a Python with the fw package)")
		}
		return fn(c, m)
	}
}

// listJobs answers GET /api/training: the jobs of every replica.
func (s *Server) listJobs(c *call, m *jobs.Fleet) (any, error) {
	list, err := m.List(c.ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"jobs": list}, nil
}

// recipes answers GET /api/training/recipes.
func (s *Server) recipes(c *call, m *jobs.Fleet) (any, error) {
	return map[string]any{"recipes": m.Recipes()}, nil
}

// getJob answers GET /api/training/{id}.
func (s *Server) getJob(c *call, m *jobs.Fleet) (any, error) {
	id := c.param("id")
	info, ok, err := m.Get(c.ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apiErr(404, CodeNotFound, fmt.Sprintf("no training job %s; GET /api/training lists them", id))
	}
	return info, nil
}

// stopJob answers POST /api/training/{id}/stop (202; forwarded to the
// replica that runs the job).
func (s *Server) stopJob(c *call, m *jobs.Fleet) (any, error) {
	info, err := m.Stop(c.ctx, c.param("id"))
	if err != nil {
		return nil, err
	}
	c.status = 202
	return info, nil
}

// startJob answers POST /api/training/start (202).
func (s *Server) startJob(c *call, m *jobs.Fleet) (any, error) {
	body, e := s.readBody(c.rc)
	if e != nil {
		return nil, e
	}
	var req jobs.StartRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, apiErr(400, CodeBadRequest, `the body must be a JSON object {"recipe": "...", "experiment": "...", "params": {...}}: `+err.Error())
	}
	info, err := m.Start(c.ctx, req)
	if err != nil {
		return nil, err
	}
	c.status = 202
	return map[string]any{"id": info.RunID, "status": info.State, "job": info}, nil
}
