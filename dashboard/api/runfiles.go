package api

import (
	"context"
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
	writeRunList(s, ctx, id, "checkpoints", s.st.Checkpoints)
}

// artifacts answers GET /api/runs/{id}/artifacts: the files the run logged.
func (s *Server) artifacts(ctx *fasthttp.RequestCtx, id string) {
	writeRunList(s, ctx, id, "artifacts", s.st.Artifacts)
}

// writeRunList answers {"run_id", name: list} for a known run, [] when empty.
func writeRunList[T any](s *Server, ctx *fasthttp.RequestCtx, id, name string, list func(context.Context, string) ([]T, error)) {
	if _, err := s.st.GetRun(s.base, id); err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	items, err := list(s.base, id)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	if items == nil {
		items = []T{}
	}
	writeJSON(ctx, 200, map[string]any{"run_id": id, name: items})
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
		writeError(ctx, fromError(s.log, err))
		return
	}
	var listed bool
	var err error
	if kind == "checkpoints" {
		listed, err = isListed(s.base, id, rel, s.st.Checkpoints, func(c store.Checkpoint) string { return c.Path })
	} else {
		listed, err = isListed(s.base, id, rel, s.st.Artifacts, func(a store.Artifact) string { return a.Path })
	}
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
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

// isListed reports whether the store lists rel among a run's files.
func isListed[T any](ctx context.Context, id, rel string, list func(context.Context, string) ([]T, error), pathOf func(T) string) (bool, error) {
	items, err := list(ctx, id)
	if err != nil {
		return false, err
	}
	for _, it := range items {
		if pathOf(it) == rel {
			return true, nil
		}
	}
	return false, nil
}
