package mlflow

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/valyala/fasthttp"
)

// fileInfo is MLflow's FileInfo.
type fileInfo struct {
	Path     string `json:"path"`
	IsDir    bool   `json:"is_dir"`
	FileSize *int64 `json:"file_size,omitempty"`
}

// artifactsProxy answers MLflow's proxied artifact API under
// /api/2.0/mlflow-artifacts/artifacts: PUT uploads a file, GET downloads it,
// GET on the root with ?path= lists a directory. Paths are
// <experiment id>/<run id>/artifacts/<path>, as runs' artifact_uri gives
// them; files go to the artifact store (Config.Artifacts: fw's artifact
// directory, or the bucket of FW_ARTIFACT_URI) under <run id>/<path>, with
// the same path checks as fw's own files (store.ValidateRelPath, and for a
// directory SafeJoin: no symbolic link out of it), and each upload is
// recorded as the run's artifact event.
func (s *Server) artifactsProxy(ctx *fasthttp.RequestCtx, sub string) {
	if s.cfg.Artifacts == nil {
		writeErr(ctx, errf(503, codeUnavailable, "the dashboard has no artifact storage; start it with FW_ARTIFACT_DIR, FW_EXPERIMENT_DIR or FW_ARTIFACT_URI"))
		return
	}
	sub = strings.TrimPrefix(sub, "/")
	method := string(ctx.Method())
	if sub == "" {
		if method != "GET" && method != "HEAD" {
			ctx.Response.Header.Set("Allow", "GET")
			writeErr(ctx, errf(405, codeBadRequest, "list artifacts with GET ?path=<experiment id>/<run id>/artifacts[/dir]"))
			return
		}
		s.proxyList(ctx, string(ctx.QueryArgs().Peek("path")))
		return
	}
	runID, rel, e := splitArtifactPath(sub)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	if rel == "" {
		writeErr(ctx, errf(400, codeInvalidParameter, "name a file under %s/artifacts/", runID))
		return
	}
	switch method {
	case "PUT":
		if e := s.upload(ctx, runID, rel); e != nil {
			writeErr(ctx, e)
			return
		}
		writeJSON(ctx, 200, struct{}{})
	case "GET", "HEAD":
		s.downloadFile(ctx, runID, rel)
	default:
		ctx.Response.Header.Set("Allow", "GET, PUT")
		writeErr(ctx, errf(405, codeBadRequest, "artifacts take GET (download) and PUT (upload); fw does not delete single artifacts (fw's DELETE /api/runs/{id} removes a run with its files)"))
	}
}

// splitArtifactPath splits <exp>/<run>/artifacts[/rel].
func splitArtifactPath(p string) (runID, rel string, e *apiError) {
	parts := strings.SplitN(strings.Trim(p, "/"), "/", 4)
	if len(parts) < 3 || parts[2] != "artifacts" {
		return "", "", errf(400, codeInvalidParameter, "artifact path %q must be <experiment id>/<run id>/artifacts/<path>, as the run's artifact_uri gives it", p)
	}
	if err := store.ValidateID(parts[1]); err != nil {
		return "", "", errf(404, codeNotFound, "Run with id=%s not found", parts[1])
	}
	if len(parts) == 4 {
		rel = cleanDir(parts[3])
	}
	if rel != "" {
		if err := store.ValidateRelPath(rel); err != nil {
			return "", "", errf(400, codeInvalidParameter, "artifact path: %v", err)
		}
	}
	return parts[1], rel, nil
}

// cleanDir drops the "." and empty elements of a client's artifact path, as
// MLflow's client and server read them: "." and "" are the run's root
// (list_artifacts(run, "."), download_artifacts(run_id, ".")), "./a/" is
// "a". ".." is kept, for ValidateRelPath to refuse.
func cleanDir(p string) string {
	var keep []string
	for _, el := range strings.Split(p, "/") {
		if el != "" && el != "." {
			keep = append(keep, el)
		}
	}
	return strings.Join(keep, "/")
}

// getArtifact answers MLflow's GET /get-artifact?run_id=&path= (what its
// web UI and some scripts download a run's file with).
func (s *Server) getArtifact(ctx *fasthttp.RequestCtx) {
	if s.cfg.Artifacts == nil {
		writeErr(ctx, errf(503, codeUnavailable, "the dashboard has no artifact storage; start it with FW_ARTIFACT_DIR, FW_EXPERIMENT_DIR or FW_ARTIFACT_URI"))
		return
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		writeErr(ctx, errf(405, codeBadRequest, "/get-artifact takes GET"))
		return
	}
	runID := string(ctx.QueryArgs().Peek("run_id"))
	if runID == "" {
		runID = string(ctx.QueryArgs().Peek("run_uuid"))
	}
	if runID == "" {
		writeErr(ctx, errf(400, codeInvalidParameter, "Missing value for required parameter 'run_id'"))
		return
	}
	if err := store.ValidateID(runID); err != nil {
		writeErr(ctx, errf(404, codeNotFound, "Run with id=%s not found", runID))
		return
	}
	rel := cleanDir(string(ctx.QueryArgs().Peek("path")))
	if rel == "" {
		writeErr(ctx, errf(400, codeInvalidParameter, "Missing value for required parameter 'path': name a file of the run"))
		return
	}
	if err := store.ValidateRelPath(rel); err != nil {
		writeErr(ctx, errf(400, codeInvalidParameter, "Invalid path: %v", err))
		return
	}
	s.downloadFile(ctx, runID, rel)
}

// upload streams the request's body into a temporary file of UploadDir
// (at most MaxArtifactBytes), stores it in the artifact store under
// <run id>/<rel> and records the run's artifact event.
func (s *Server) upload(ctx *fasthttp.RequestCtx, runID, rel string) *apiError {
	if _, err := s.st.GetRun(s.base, runID); err != nil {
		return s.runErr(err, runID)
	}
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > s.cfg.MaxArtifactBytes {
		return errf(413, codeLimitExceeded, "the artifact is larger than %d bytes (--max-artifact-bytes)", s.cfg.MaxArtifactBytes)
	}
	if err := os.MkdirAll(s.cfg.UploadDir, 0o755); err != nil {
		s.log.Error("mlflow api: creating the upload directory", "dir", s.cfg.UploadDir, "err", err)
		return errf(500, codeInternal, "writing the artifact failed; see the dashboard's log")
	}
	f, err := os.CreateTemp(s.cfg.UploadDir, ".artifact-upload-*")
	if err != nil {
		s.log.Error("mlflow api: creating an artifact", "run", runID, "err", err)
		return errf(500, codeInternal, "writing the artifact failed; see the dashboard's log")
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a directory store moved it, a no-op
	var body io.Reader = ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.PostBody())
	}
	n, err := io.Copy(f, io.LimitReader(body, s.cfg.MaxArtifactBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errf(400, codeBadRequest, "reading the artifact's body: %v", err)
	}
	if n > s.cfg.MaxArtifactBytes {
		return errf(413, codeLimitExceeded, "the artifact is larger than %d bytes (--max-artifact-bytes)", s.cfg.MaxArtifactBytes)
	}
	if err := s.cfg.Artifacts.PutFile(s.base, runID+"/"+rel, tmp); err != nil {
		if errors.Is(err, blob.ErrInvalidKey) {
			return errf(400, codeInvalidParameter, "artifact path %q: %v", rel, err)
		}
		s.log.Error("mlflow api: storing an artifact", "run", runID, "store", s.cfg.Artifacts.String(), "err", err)
		return errf(500, codeInternal, "storing the artifact failed; see the dashboard's log")
	}
	return s.apply(s.base, runID, []store.Event{{Type: store.EventArtifact, Path: rel, Size: store.Ptr(n)}})
}

// downloadFile answers GET (and HEAD) of one artifact the store lists for
// the run, read from the artifact store.
func (s *Server) downloadFile(ctx *fasthttp.RequestCtx, runID, rel string) {
	arts, err := s.st.Artifacts(s.base, runID)
	if err != nil {
		writeErr(ctx, s.runErr(err, runID))
		return
	}
	listed := false
	for _, a := range arts {
		if a.Path == rel {
			listed = true
			break
		}
	}
	if !listed {
		writeErr(ctx, errf(404, codeNotFound, "run %s has no artifact %q", runID, rel))
		return
	}
	key := runID + "/" + rel
	var r io.ReadCloser
	var info blob.Info
	if ctx.IsHead() {
		info, err = s.cfg.Artifacts.Stat(s.base, key)
	} else {
		r, info, err = s.cfg.Artifacts.Get(s.base, key)
	}
	switch {
	case errors.Is(err, blob.ErrInvalidKey):
		writeErr(ctx, errf(404, codeNotFound, "run %s has no artifact %q", runID, rel))
		return
	case errors.Is(err, blob.ErrNotFound):
		writeErr(ctx, errf(404, codeNotFound, "the file of artifact %q of run %s is gone from the artifact storage", rel, runID))
		return
	case err != nil:
		s.log.Error("mlflow api: reading an artifact", "run", runID, "store", s.cfg.Artifacts.String(), "err", err)
		writeErr(ctx, errf(500, codeInternal, "reading the artifact from storage failed; see the dashboard's log"))
		return
	}
	ctx.SetContentType(mimeType(rel))
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.Header.Set("Content-Disposition", contentDisposition(path.Base(rel)))
	if r == nil {
		ctx.Response.Header.SetContentLength(int(info.Size))
		return
	}
	ctx.SetBodyStream(r, int(info.Size)) // fasthttp closes r
}

// children lists the entries directly under dir ("" = the run's root) of a
// run's artifacts: files with their size, directories once.
func children(arts []store.Artifact, dir string) []fileInfo {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	seen := map[string]bool{}
	out := []fileInfo{}
	for _, a := range arts {
		rest, ok := strings.CutPrefix(a.Path, prefix)
		if !ok || rest == "" {
			continue
		}
		name, _, isDir := strings.Cut(rest, "/")
		if seen[name] {
			continue
		}
		seen[name] = true
		fi := fileInfo{Path: name, IsDir: isDir}
		if !isDir {
			fi.FileSize = store.Ptr(a.Size)
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// proxyList answers GET .../mlflow-artifacts/artifacts?path=<exp>/<run>/artifacts[/dir]:
// the entries of that directory, named relative to it.
func (s *Server) proxyList(ctx *fasthttp.RequestCtx, p string) {
	runID, dir, e := splitArtifactPath(p)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	arts, err := s.st.Artifacts(s.base, runID)
	if err != nil {
		writeErr(ctx, s.runErr(err, runID))
		return
	}
	writeJSON(ctx, 200, map[string]any{"files": children(arts, dir)})
}

// listRunArtifacts answers the tracking API's artifacts/list?run_id=&path=:
// entries named relative to the run's artifact root.
func (s *Server) listRunArtifacts(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	dir, e := r.str("path")
	if e != nil {
		return nil, e
	}
	dir = cleanDir(dir)
	if dir != "" {
		if err := store.ValidateRelPath(dir); err != nil {
			return nil, errf(400, codeInvalidParameter, "path: %v", err)
		}
	}
	got, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	arts, err := s.st.Artifacts(r.ctx, id)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			arts = nil
		} else {
			return nil, s.runErr(err, id)
		}
	}
	files := children(arts, dir)
	if dir != "" {
		for i := range files {
			files[i].Path = dir + "/" + files[i].Path
		}
	}
	return map[string]any{"root_uri": s.toRun(got).Info.ArtifactURI, "files": files}, nil
}
