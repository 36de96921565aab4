package api

import (
	"fmt"
	"mime"
	"os"
	"path"
	"strings"

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

// download answers GET /api/runs/{id}/download?kind=checkpoint|artifact&path=P:
// the file itself, as an attachment.
func (s *Server) download(ctx *fasthttp.RequestCtx, id string) {
	args := ctx.QueryArgs()
	rel := string(args.Peek("path"))
	var kind string
	switch string(args.Peek("kind")) {
	case "checkpoint":
		kind = "checkpoints"
	case "artifact":
		kind = "artifacts"
	default:
		writeError(ctx, apiErr(400, CodeBadRequest, "kind must be checkpoint or artifact, with path as GET /api/runs/{id}/checkpoints or /artifacts lists it"))
		return
	}
	if rel == "" {
		writeError(ctx, apiErr(400, CodeBadRequest, "path is missing: the file's path as GET /api/runs/{id}/"+kind+" lists it"))
		return
	}
	s.runFile(ctx, id, kind, rel)
}

// runFile serves one of a run's checkpoints or artifacts. Only a path the
// store lists for that run is served, resolved with SafeJoin under the run's
// directory of that kind (symlinks out of it are refused), so a request can
// never name another file.
func (s *Server) runFile(ctx *fasthttp.RequestCtx, id, kind, rel string) {
	root := s.cfg.CheckpointDir
	if kind == "artifacts" {
		root = s.cfg.ArtifactDir
	}
	if root == "" {
		writeError(ctx, apiErr(503, CodeUnavailable, "this dashboard was started without a "+kind+" directory"))
		return
	}
	if _, err := s.st.GetRun(s.base, id); err != nil {
		writeError(ctx, fromStore(s.log, err))
		return
	}
	listed := false
	if kind == "checkpoints" {
		cks, err := s.st.Checkpoints(s.base, id)
		if err != nil {
			writeError(ctx, fromStore(s.log, err))
			return
		}
		for _, c := range cks {
			listed = listed || c.Path == rel
		}
	} else {
		arts, err := s.st.Artifacts(s.base, id)
		if err != nil {
			writeError(ctx, fromStore(s.log, err))
			return
		}
		for _, a := range arts {
			listed = listed || a.Path == rel
		}
	}
	if !listed {
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("run %s has no %s %q; GET /api/runs/%s/%s lists them", id, strings.TrimSuffix(kind, "s"), rel, id, kind)))
		return
	}
	runDir, err := store.SafeJoin(root, id)
	var abs string
	if err == nil {
		abs, err = store.SafeJoin(runDir, rel)
	}
	if err != nil {
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("%s %q of run %s is not a servable path", strings.TrimSuffix(kind, "s"), rel, id)))
		return
	}
	f, err := os.Open(abs)
	if err != nil {
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("%s %q of run %s is recorded but its file is gone", strings.TrimSuffix(kind, "s"), rel, id)))
		return
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		writeError(ctx, apiErr(404, CodeNotFound, fmt.Sprintf("%s %q of run %s is not a regular file", strings.TrimSuffix(kind, "s"), rel, id)))
		return
	}
	ctx.SetContentType("application/octet-stream")
	ctx.Response.Header.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(rel)}))
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	if ctx.IsHead() {
		f.Close()
		ctx.Response.Header.SetContentLength(int(st.Size()))
		return
	}
	ctx.SetBodyStream(f, int(st.Size())) // fasthttp closes f when sent
}
