package api

import (
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/valyala/fasthttp"
)

// listRuns answers GET /api/runs: runs of every experiment, filtered, sorted
// and paged like GET /api/experiments/{id}/runs.
func (s *Server) listRuns(ctx *fasthttp.RequestCtx) { s.runPage(ctx, "") }

// checkpoints answers GET /api/runs/{id}/checkpoints: the run's checkpoints
// by step (404 for an unknown run).
func (s *Server) checkpoints(ctx *fasthttp.RequestCtx, id string) {
	if _, err := s.st.GetRun(s.base, id); err != nil {
		writeError(ctx, fromStore(s.log, err))
		return
	}
	cks, err := s.st.Checkpoints(s.base, id)
	if err != nil {
		writeError(ctx, fromStore(s.log, err))
		return
	}
	if cks == nil {
		cks = []store.Checkpoint{}
	}
	writeJSON(ctx, 200, map[string]any{"run_id": id, "checkpoints": cks})
}

// artifacts answers GET /api/runs/{id}/artifacts: the files the run logged.
func (s *Server) artifacts(ctx *fasthttp.RequestCtx, id string) {
	if _, err := s.st.GetRun(s.base, id); err != nil {
		writeError(ctx, fromStore(s.log, err))
		return
	}
	arts, err := s.st.Artifacts(s.base, id)
	if err != nil {
		writeError(ctx, fromStore(s.log, err))
		return
	}
	if arts == nil {
		arts = []store.Artifact{}
	}
	writeJSON(ctx, 200, map[string]any{"run_id": id, "artifacts": arts})
}
