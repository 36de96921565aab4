package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
)

// listRuns answers GET /api/runs: runs of every experiment, filtered, sorted
// and paged like GET /api/experiments/{id}/runs.
func (s *Server) listRuns(c *call) (any, error) { return s.runPage(c, "") }

// checkpoints answers GET /api/runs/{id}/checkpoints: the run's checkpoints
// by step (404 for an unknown run).
func (s *Server) checkpoints(c *call) (any, error) {
	return runList(c, s, "checkpoints", s.st.Checkpoints)
}

// artifacts answers GET /api/runs/{id}/artifacts: the files the run logged,
// and those MLflow's client wrote itself into the run's artifact location.
func (s *Server) artifacts(c *call) (any, error) {
	return runList(c, s, "artifacts", s.runArtifacts)
}

// runArtifacts is the store's list of a run's artifacts, with the files
// MLflow's client wrote itself (Config.ClientFiles) in place of any of the
// same path.
func (s *Server) runArtifacts(ctx context.Context, id string) ([]store.Artifact, error) {
	arts, err := s.st.Artifacts(ctx, id)
	if err != nil || s.cfg.ClientFiles == nil {
		return arts, err
	}
	files, _, _, ok, err := s.cfg.ClientFiles(ctx, id, true)
	if err != nil || !ok {
		return arts, err
	}
	files = store.OverlayArtifacts(files, arts)
	slices.SortFunc(files, func(a, b store.Artifact) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// runList answers {"run_id", name: list} for a known run, [] when empty.
func runList[T any](c *call, s *Server, name string, list func(context.Context, string) ([]T, error)) (any, error) {
	id := c.param("id")
	if _, err := s.st.GetRun(c.ctx, id); err != nil {
		return nil, err
	}
	items, err := list(c.ctx, id)
	if err != nil {
		return nil, err
	}
	if items == nil {
		items = []T{}
	}
	return map[string]any{"run_id": id, name: items}, nil
}

// download answers GET /api/runs/{id}/download?kind=checkpoint|artifact&path=P:
// the file itself, as an attachment.
func (s *Server) download(c *call) {
	args := c.rc.QueryArgs()
	rel := string(args.Peek("path"))
	kind := runFileKind(string(args.Peek("kind")))
	var err error
	switch {
	case kind == "":
		err = apiErr(400, CodeBadRequest, "kind must be checkpoint or artifact, with path as GET /api/runs/{id}/checkpoints or /artifacts lists it")
	case rel == "":
		err = apiErr(400, CodeBadRequest, "path is missing: the file's path as GET /api/runs/{id}/"+kind+" lists it")
	default:
		err = s.runFile(c, c.param("id"), kind, rel)
	}
	if err != nil {
		s.answer(c, nil, err)
	}
}

// runFilesReady is nil when there is a store for the run's files of kind
// (kind is "checkpoints" or "artifacts") and the run exists.
func (s *Server) runFilesReady(ctx context.Context, files blob.Store, id, kind string) error {
	if files == nil {
		return apiErr(503, CodeUnavailable, "this dashboard was started without a "+kind+" directory")
	}
	_, err := s.st.GetRun(ctx, id)
	return err
}

// runFile serves one of a run's checkpoints or artifacts. Only a path the
// store lists for that run is served, read from the run's files of that
// kind (key <run id>/<path>): the checkpoint directory, or the artifact
// store (the artifact directory, or object storage then this host's
// artifact directory). A directory store resolves the key with SafeJoin
// (symlinks out of it are refused), so a request can never name another
// file. The file is read under the server's context: fasthttp sends the
// body after the handler returns, when the request's context has ended.
func (s *Server) runFile(c *call, id, kind, rel string) error {
	ctx := c.rc
	files := s.checkpointFiles
	if kind == "artifacts" {
		files = s.artifactFiles
	}
	if err := s.runFilesReady(c.ctx, files, id, kind); err != nil {
		return err
	}
	key := id + "/" + rel
	var listed bool
	if kind == "artifacts" && s.cfg.ClientFiles != nil {
		// A file MLflow's client wrote itself: read from where it is (one
		// lookup of that file, not a listing of the run's directory; the
		// store resolves the key inside its root).
		_, from, prefix, ok, err := s.cfg.ClientFiles(c.ctx, id, false)
		if err != nil {
			return err
		}
		if ok {
			if _, err := from.Stat(c.ctx, prefix+"/"+rel); err == nil {
				files, key, listed = from, prefix+"/"+rel, true
			}
		}
	}
	var err error
	switch {
	case listed:
	case kind == "checkpoints":
		listed, err = isListed(c.ctx, id, rel, s.st.Checkpoints, func(c store.Checkpoint) string { return c.Path })
	default:
		listed, err = isListed(c.ctx, id, rel, s.st.Artifacts, func(a store.Artifact) string { return a.Path })
	}
	if err != nil {
		return err
	}
	one := strings.TrimSuffix(kind, "s")
	if !listed {
		return apiErr(404, CodeNotFound, fmt.Sprintf("run %s has no %s %q; GET /api/runs/%s/%s lists them", id, one, rel, id, kind))
	}
	var r io.ReadCloser
	var info blob.Info
	if ctx.IsHead() {
		info, err = files.Stat(c.ctx, key)
	} else {
		r, info, err = files.Get(s.base, key)
	}
	switch {
	case errors.Is(err, blob.ErrInvalidKey):
		return apiErr(404, CodeNotFound, fmt.Sprintf("%s %q of run %s is not a servable path", one, rel, id))
	case errors.Is(err, blob.ErrNotFound):
		return apiErr(404, CodeNotFound, fmt.Sprintf("%s %q of run %s is recorded but its file is gone (or not a regular file)", one, rel, id))
	case err != nil:
		s.log.Error("reading a run's file", "run", id, "kind", kind, "path", rel, "store", files.String(), "err", err)
		return apiErr(503, CodeUnavailable, fmt.Sprintf("reading %s %q of run %s from its storage failed; retry, and see the dashboard's log if it persists", one, rel, id))
	}
	ctx.SetContentType("application/octet-stream")
	ctx.Response.Header.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(rel)}))
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	if r == nil {
		ctx.Response.Header.SetContentLength(int(info.Size))
		return nil
	}
	ctx.SetBodyStream(r, int(info.Size)) // fasthttp closes r when sent
	return nil
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

// runFileKind maps the kind query parameter of the run-file routes
// (checkpoint, artifact) to the name of the run's list (checkpoints,
// artifacts); "" for anything else.
func runFileKind(k string) string {
	switch k {
	case "checkpoint":
		return "checkpoints"
	case "artifact":
		return "artifacts"
	}
	return ""
}

// maxUploadPathChars bounds the path of an uploaded file, in characters
// (besides store.ValidateRelPath's 1,024 bytes): percent-encoded, the
// longest such path still fits the 4 KiB request head fasthttp reads.
const maxUploadPathChars = 200

// uploadFile answers PUT /api/runs/{id}/files?kind=checkpoint|artifact&path=P:
// the body is the file a training process wrote on its own machine
// (FW_UPLOAD_FILES=1, docs/tracking.md), stored as the run's file of that
// kind under key <run id>/<path> in the store the downloads read (with a
// bucket: its checkpoints/ or artifacts/; else this host's directory), so
// every replica serves it. It records no event: the process's checkpoint
// or artifact event names the path, before or after the upload. The size
// is checked against --max-artifact-mib before the body is read, the
// body streamed into a temporary file of the upload directory (at most
// that many bytes), then stored.
func (s *Server) uploadFile(c *call) (any, error) {
	ctx, id := c.rc, c.param("id")
	args := ctx.QueryArgs()
	kind := runFileKind(string(args.Peek("kind")))
	if kind == "" {
		return nil, apiErr(400, CodeBadRequest, "kind must be checkpoint or artifact (?kind=checkpoint&path=<path as the run's checkpoint event names it>)")
	}
	one := strings.TrimSuffix(kind, "s")
	rel := string(args.Peek("path"))
	if n := utf8.RuneCountInString(rel); n > maxUploadPathChars {
		return nil, apiErr(400, CodeBadRequest, fmt.Sprintf("path has %d characters, more than the %d an upload takes (its URL must fit the request head); write the %s under a shorter name", n, maxUploadPathChars, one))
	}
	if err := store.ValidateRelPath(rel); err != nil {
		return nil, apiErr(400, CodeBadRequest, fmt.Sprintf("path: %v; send the %s's path relative to the run's %s directory, as its event names it (e.g. step_100.pt)", err, one, one))
	}
	files := s.checkpointUploads
	if kind == "artifacts" {
		files = s.artifactFiles
	}
	if err := s.runFilesReady(c.ctx, files, id, kind); err != nil {
		return nil, err
	}
	tooLarge := apiErr(413, CodeTooLarge, fmt.Sprintf("the %s is larger than the %d bytes this dashboard accepts (fw dashboard --max-artifact-mib); keep it on the training machine or raise the limit", one, s.maxFileBytes))
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > s.maxFileBytes {
		return nil, tooLarge
	}
	if err := os.MkdirAll(s.cfg.UploadDir, 0o755); err != nil {
		s.log.Error("run files: creating the upload directory", "dir", s.cfg.UploadDir, "err", err)
		return nil, apiErr(500, CodeInternal, "writing the file failed; see the dashboard's log")
	}
	f, err := os.CreateTemp(s.cfg.UploadDir, ".run-file-upload-*")
	if err != nil {
		s.log.Error("run files: creating a temporary file", "dir", s.cfg.UploadDir, "err", err)
		return nil, apiErr(500, CodeInternal, "writing the file failed; see the dashboard's log")
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a directory store moved it, a no-op
	var body io.Reader = ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.PostBody())
	}
	n, err := io.Copy(f, io.LimitReader(body, s.maxFileBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, apiErr(400, CodeBadRequest, fmt.Sprintf("reading the request's body: %v; send the file as the body, with its Content-Length", err))
	}
	if n > s.maxFileBytes {
		return nil, tooLarge
	}
	switch err := files.PutFile(c.ctx, id+"/"+rel, tmp); {
	case errors.Is(err, blob.ErrInvalidKey):
		return nil, apiErr(400, CodeBadRequest, fmt.Sprintf("%s path %q of run %s cannot be stored: %v; choose another path", one, rel, id, err))
	case err != nil:
		s.log.Error("run files: storing an uploaded file", "run", id, "kind", kind, "path", rel, "store", files.String(), "err", err)
		return nil, apiErr(503, CodeUnavailable, fmt.Sprintf("storing %s %q of run %s failed; retry, and see the dashboard's log if it persists", one, rel, id))
	}
	return map[string]any{"run_id": id, "kind": strings.TrimSuffix(kind, "s"), "path": rel, "size": n}, nil
}
