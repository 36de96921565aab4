package mlflow

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/url"
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
// GET on the root with ?path= lists a directory. A path
// <experiment id>/<run id>/artifacts/<path>, as runs' artifact_uri gives
// it, is a run's file: stored in the artifact store (Config.Artifacts: fw's
// artifact directory, or the bucket of FW_ARTIFACT_URI) under
// <run id>/<path>, with the same path checks as fw's own files
// (store.ValidateRelPath, and for a directory SafeJoin: no symbolic link out
// of it), and recorded as the run's artifact event. Any other path is a
// free file, as MLflow's proxy takes them (MLflow 3's logged models, scripts
// using the proxy as a file store): stored under _mlflow-artifacts/<path>
// (no run ID starts with '_') and listed from the store's records.
func (s *Server) artifactsProxy(ctx *fasthttp.RequestCtx, sub string) {
	if s.cfg.Artifacts == nil {
		writeErr(ctx, noArtifactStore())
		return
	}
	sub = strings.TrimPrefix(sub, "/")
	if climbs(ctx.Request.URI().PathOriginal()) {
		// fasthttp has already folded the ".." into the path it hands over
		// (a/../../x under a run's artifacts became a free file beside the
		// run); the client meant a path out of where it wrote: refused, as
		// MLflow refuses it.
		writeErr(ctx, invalidPath("the artifact path has a '..' element; give a path inside the run's artifacts"))
		return
	}
	method := string(ctx.Method())
	if sub == "" {
		if method != "GET" && method != "HEAD" {
			ctx.Response.Header.Set("Allow", "GET")
			writeErr(ctx, errf(405, codeBadRequest, "list artifacts with GET ?path=<directory>"))
			return
		}
		s.proxyList(ctx, string(ctx.QueryArgs().Peek("path")))
		return
	}
	runID, rel, isRun, e := splitArtifactPath(sub)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	if rel == "" {
		writeErr(ctx, errf(400, codeInvalidParameter, "name a file (the path %q is a directory)", sub))
		return
	}
	switch method {
	case "PUT":
		var e *apiError
		if isRun {
			e = s.upload(ctx, runID, rel)
		} else {
			e = s.uploadFree(ctx, rel)
		}
		if e != nil {
			writeErr(ctx, e)
			return
		}
		writeJSON(ctx, 200, struct{}{})
	case "GET", "HEAD":
		if isRun {
			s.downloadFile(ctx, runID, rel)
		} else {
			s.downloadFree(ctx, rel)
		}
	default:
		ctx.Response.Header.Set("Allow", "GET, PUT")
		writeErr(ctx, errf(405, codeBadRequest, "artifacts take GET (download) and PUT (upload); fw does not delete single artifacts (fw's DELETE /api/runs/{id} removes a run with its files)"))
	}
}

// splitArtifactPath splits a proxy path: <exp>/<run>/artifacts[/rel] (a
// run ID fw accepts in the second place) is a run's (isRun, rel relative to
// the run's root); anything else is a free path (rel is all of it). "." and
// empty elements are dropped, as MLflow's client sends them.
func splitArtifactPath(p string) (runID, rel string, isRun bool, e *apiError) {
	clean := cleanDir(p)
	if clean != "" {
		if err := store.ValidateRelPath(clean); err != nil {
			return "", "", false, invalidPath("%v; give a path inside the artifacts", err)
		}
	}
	parts := strings.SplitN(clean, "/", 4)
	if len(parts) < 3 || parts[2] != "artifacts" || store.ValidateID(parts[1]) != nil {
		return "", clean, false, nil
	}
	if len(parts) == 4 {
		rel = parts[3]
	}
	return parts[1], rel, true, nil
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

// noArtifactStore is the 503 of the artifact routes on a dashboard without
// artifact storage.
func noArtifactStore() *apiError {
	return errf(503, codeUnavailable, "the dashboard has no artifact storage; start it with FW_ARTIFACT_DIR, FW_EXPERIMENT_DIR or FW_ARTIFACT_URI")
}

// queryRunID reads ?run_id= or MLflow's older ?run_uuid=.
func queryRunID(args *fasthttp.Args) string {
	if id := string(args.Peek("run_id")); id != "" {
		return id
	}
	return string(args.Peek("run_uuid"))
}

// getArtifact answers MLflow's GET /get-artifact?run_id=&path= (what its
// web UI and some scripts download a run's file with).
func (s *Server) getArtifact(ctx *fasthttp.RequestCtx) {
	if s.cfg.Artifacts == nil {
		writeErr(ctx, noArtifactStore())
		return
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		writeErr(ctx, errf(405, codeBadRequest, "/get-artifact takes GET"))
		return
	}
	runID := queryRunID(ctx.QueryArgs())
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
		writeErr(ctx, invalidPath("%v; give a path inside the artifacts", err))
		return
	}
	s.downloadFile(ctx, runID, rel)
}

// uploadArtifact answers MLflow's POST
// /ajax-api/2.0/mlflow/upload-artifact?run_uuid=&path= (its web UI's upload
// of a file to a run): the body is the file, stored and listed as the
// run's artifact at path. Refusals carry MLflow's sentences.
func (s *Server) uploadArtifact(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", "POST")
		writeErr(ctx, errf(405, codeBadRequest, "upload-artifact takes POST"))
		return
	}
	if s.cfg.Artifacts == nil {
		writeErr(ctx, noArtifactStore())
		return
	}
	args := ctx.QueryArgs()
	runID := queryRunID(args)
	if runID == "" {
		writeErr(ctx, errf(400, codeInvalidParameter, "Request must specify run_uuid."))
		return
	}
	raw := string(args.Peek("path"))
	if raw == "" {
		writeErr(ctx, errf(400, codeInvalidParameter, "Request must specify path."))
		return
	}
	rel := cleanDir(raw)
	if err := store.ValidateRelPath(rel); err != nil || rel == "" {
		writeErr(ctx, invalidPath("%q is not a file path inside the run's artifacts (no '..', not absolute)", raw))
		return
	}
	empty := ctx.Request.Header.ContentLength() == 0 // a streamed body is not read here
	if !ctx.Request.IsBodyStream() {
		empty = len(ctx.PostBody()) == 0
	}
	if empty {
		writeErr(ctx, errf(400, codeInvalidParameter, "Request must specify data."))
		return
	}
	if err := store.ValidateID(runID); err != nil {
		writeErr(ctx, errf(404, codeNotFound, "Run with id=%s not found", runID))
		return
	}
	if e := s.upload(ctx, runID, rel); e != nil {
		writeErr(ctx, e)
		return
	}
	writeJSON(ctx, 200, struct{}{})
}

// upload streams the request's body into the artifact store under
// <run id>/<rel> and records the run's artifact event.
func (s *Server) upload(ctx *fasthttp.RequestCtx, runID, rel string) *apiError {
	got, err := s.st.GetRun(s.reqCtx(ctx), runID)
	if err != nil {
		return s.runErr(err, runID)
	}
	if from, prefix, local, e := s.localRun(s.reqCtx(ctx), got); e != nil {
		return e
	} else if local {
		// A run with a local location: the file goes where the client's
		// own writes go (inside the root), as MLflow's server writes it;
		// with an artifacts destination, into the run's directory there.
		_, e := s.store(ctx, from, prefix+"/"+rel, rel)
		return e
	}
	n, e := s.store(ctx, s.cfg.Artifacts, runID+"/"+rel, rel)
	if e != nil {
		return e
	}
	return s.apply(s.reqCtx(ctx), runID, []store.Event{{Type: store.EventArtifact, Path: rel, Size: store.Ptr(n)}})
}

// store streams the request's body into a temporary file of UploadDir (at
// most MaxArtifactBytes), then stores it in the store into under key;
// it returns the size. rel names the file in messages.
func (s *Server) store(ctx *fasthttp.RequestCtx, into blob.Store, key, rel string) (int64, *apiError) {
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > s.cfg.MaxArtifactBytes {
		return 0, errf(413, codeLimitExceeded, "the artifact is larger than %d bytes (--max-artifact-mib)", s.cfg.MaxArtifactBytes)
	}
	if err := os.MkdirAll(s.cfg.UploadDir, 0o755); err != nil {
		s.log.Error("mlflow api: creating the upload directory", "dir", s.cfg.UploadDir, "err", err)
		return 0, errf(500, codeInternal, "writing the artifact failed; see the dashboard's log")
	}
	f, err := os.CreateTemp(s.cfg.UploadDir, ".artifact-upload-*")
	if err != nil {
		s.log.Error("mlflow api: creating an artifact", "key", key, "err", err)
		return 0, errf(500, codeInternal, "writing the artifact failed; see the dashboard's log")
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
		return 0, errf(400, codeBadRequest, "reading the artifact's body: %v", err)
	}
	if n > s.cfg.MaxArtifactBytes {
		return 0, errf(413, codeLimitExceeded, "the artifact is larger than %d bytes (--max-artifact-mib)", s.cfg.MaxArtifactBytes)
	}
	if err := into.PutFile(s.reqCtx(ctx), key, tmp); err != nil {
		if errors.Is(err, blob.ErrInvalidKey) {
			return 0, errf(400, codeInvalidParameter, "artifact path %q: %v", rel, err)
		}
		s.log.Error("mlflow api: storing an artifact", "key", key, "store", into.String(), "err", err)
		return 0, errf(500, codeInternal, "storing the artifact failed; see the dashboard's log")
	}
	return n, nil
}

// freePrefix is where the proxy's free files live in the artifact store: no
// run ID starts with '_', so none can be reached through a run's path.
const freePrefix = "_mlflow-artifacts/"

// freeKind is the store record kind listing the free files (key: a hash
// of the path, which may be longer than a record key).
const freeKind = "mlflow.artifact"

type freeFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

func freeKey(rel string) string {
	h := sha256.Sum256([]byte(rel))
	return hex.EncodeToString(h[:16])
}

// uploadFree stores a free file and records it; with an artifacts
// destination, it is stored there under its path, which lists it.
func (s *Server) uploadFree(ctx *fasthttp.RequestCtx, rel string) *apiError {
	if s.dest != nil {
		_, e := s.store(ctx, s.dest, rel, rel)
		return e
	}
	n, e := s.store(ctx, s.cfg.Artifacts, freePrefix+rel, rel)
	if e != nil {
		return e
	}
	body, _ := json.Marshal(freeFile{Path: rel, Size: n})
	if _, err := s.st.UpdateRecord(s.reqCtx(ctx), freeKind, freeKey(rel), func(*store.Record) (json.RawMessage, error) { return body, nil }); err != nil {
		return s.fromStore(err, "recording artifact "+rel)
	}
	return nil
}

// freeChildren lists the free files and directories directly under dir
// ("" the top): from the artifacts destination's directory, or from the
// recorded free files.
func (s *Server) freeChildren(ctx context.Context, dir string) ([]fileInfo, *apiError) {
	if s.dest == nil {
		arts, e := s.freeFiles(ctx)
		if e != nil {
			return nil, e
		}
		return children(arts, dir), nil
	}
	l, ok := s.dest.(blob.Lister)
	if !ok {
		return nil, errf(500, codeInternal, "the artifacts destination %s cannot be listed", s.dest.String())
	}
	entries, err := l.ListDir(ctx, dir, maxLocalListing)
	switch {
	case errors.Is(err, blob.ErrTooMany):
		return nil, errf(400, codeInvalidParameter, "the directory %q holds over %d entries", dir, maxLocalListing)
	case errors.Is(err, blob.ErrInvalidKey):
		return nil, invalidPath("%q is not a path inside the artifacts", dir)
	case err != nil:
		s.log.Error("mlflow api: listing the artifacts destination", "dir", dir, "dest", s.dest.String(), "err", err)
		return nil, errf(500, codeInternal, "listing the artifacts failed; see the dashboard's log")
	}
	out := make([]fileInfo, 0, len(entries))
	seen := make(map[string]bool, len(entries))
	for _, en := range entries {
		fi := fileInfo{Path: en.Key, IsDir: en.Dir}
		if !en.Dir {
			fi.FileSize = store.Ptr(en.Size)
		}
		out = append(out, fi)
		seen[en.Key] = true
	}
	// What the proxy stored in fw's storage before the destination was
	// set is listed beside it (the destination's entry wins a name).
	arts, e := s.freeFiles(ctx)
	if e != nil {
		return nil, e
	}
	for _, fi := range children(arts, dir) {
		if !seen[fi.Path] {
			out = append(out, fi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// freeFiles lists the recorded free files.
func (s *Server) freeFiles(ctx context.Context) ([]store.Artifact, *apiError) {
	recs, err := s.st.ListRecords(ctx, freeKind)
	if err != nil {
		return nil, s.fromStore(err, "listing artifacts")
	}
	out := make([]store.Artifact, 0, len(recs))
	for _, r := range recs {
		var f freeFile
		if json.Unmarshal(r.Body, &f) == nil {
			out = append(out, store.Artifact{Path: f.Path, Size: f.Size})
		}
	}
	return out, nil
}

// downloadFree answers GET (and HEAD) of a recorded free file (one in the
// artifacts destination).
func (s *Server) downloadFree(ctx *fasthttp.RequestCtx, rel string) {
	if s.dest != nil {
		// The destination's file, else one the proxy stored in fw's
		// storage before the destination was set (below).
		if _, err := s.dest.Stat(s.reqCtx(ctx), rel); err == nil || !errors.Is(err, blob.ErrNotFound) {
			s.serveFrom(ctx, s.dest, rel, rel, "artifact "+rel)
			return
		}
	}
	if _, err := s.st.GetRecord(s.reqCtx(ctx), freeKind, freeKey(rel)); err != nil {
		if store.ErrorCode(err) == store.CodeNotFound {
			writeErr(ctx, errf(404, codeNotFound, "no artifact %q", rel))
			return
		}
		writeErr(ctx, s.fromStore(err, "reading artifact "+rel))
		return
	}
	s.serveBlob(ctx, freePrefix+rel, rel, "artifact "+rel)
}

// downloadFile answers GET (and HEAD) of one artifact the store lists for
// the run, read from the artifact store.
func (s *Server) downloadFile(ctx *fasthttp.RequestCtx, runID, rel string) {
	got, err := s.st.GetRun(s.reqCtx(ctx), runID)
	if err != nil {
		writeErr(ctx, s.runErr(err, runID))
		return
	}
	if from, prefix, local, e := s.localRun(s.reqCtx(ctx), got); e != nil {
		writeErr(ctx, e)
		return
	} else if local {
		// A local location (or the artifacts destination): the file as
		// the client wrote it, read inside the root (no symbolic link out
		// of it); one fw's own API stored for the run is read from fw's
		// storage below.
		if _, err := from.Stat(s.reqCtx(ctx), prefix+"/"+rel); err == nil || !errors.Is(err, blob.ErrNotFound) {
			s.serveFrom(ctx, from, prefix+"/"+rel, rel, "artifact "+rel+" of run "+runID)
			return
		}
	}
	arts, err := s.st.Artifacts(s.reqCtx(ctx), runID)
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
	s.serveBlob(ctx, runID+"/"+rel, rel, "artifact "+rel+" of run "+runID)
}

// serveBlob answers GET (and HEAD) of the artifact store's object key with
// MLflow's download headers; rel names the file, what names it in messages.
func (s *Server) serveBlob(ctx *fasthttp.RequestCtx, key, rel, what string) {
	s.serveFrom(ctx, s.cfg.Artifacts, key, rel, what)
}

// serveFrom is serveBlob from the store from.
func (s *Server) serveFrom(ctx *fasthttp.RequestCtx, from blob.Store, key, rel, what string) {
	var r io.ReadCloser
	var info blob.Info
	var err error
	if ctx.IsHead() {
		info, err = from.Stat(s.reqCtx(ctx), key)
	} else {
		r, info, err = from.Get(s.base, key) // the server's: fasthttp sends the body after the handler returns
	}
	switch {
	case errors.Is(err, blob.ErrInvalidKey):
		writeErr(ctx, errf(404, codeNotFound, "no %s", what))
		return
	case errors.Is(err, blob.ErrNotFound):
		writeErr(ctx, errf(404, codeNotFound, "the file of %s is gone from the artifact storage", what))
		return
	case err != nil:
		s.log.Error("mlflow api: reading an artifact", "key", key, "store", from.String(), "err", err)
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

// proxyList answers GET .../mlflow-artifacts/artifacts?path=<dir>: the
// entries of that directory, named relative to it: a run's
// (<exp>/<run>/artifacts[/dir]) or the free files'.
func (s *Server) proxyList(ctx *fasthttp.RequestCtx, p string) {
	runID, dir, isRun, e := splitArtifactPath(p)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	if !isRun {
		files, e := s.freeChildren(s.reqCtx(ctx), dir)
		if e != nil {
			writeErr(ctx, e)
			return
		}
		writeJSON(ctx, 200, map[string]any{"files": files})
		return
	}
	got, err := s.st.GetRun(s.reqCtx(ctx), runID)
	if err != nil {
		writeErr(ctx, s.runErr(err, runID))
		return
	}
	arts, e := s.runFiles(s.reqCtx(ctx), got)
	if e != nil {
		writeErr(ctx, e)
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
			return nil, invalidPath("%v; give a path inside the artifacts", err)
		}
	}
	got, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	arts, e := s.runFiles(r.ctx, got)
	if e != nil {
		return nil, e
	}
	files := children(arts, dir)
	if dir != "" {
		for i := range files {
			files[i].Path = dir + "/" + files[i].Path
		}
	}
	return map[string]any{"root_uri": s.runArtifactURI(r.ctx, got), "files": files}, nil
}

// climbs reports whether a request's path, as the client sent it (percent
// escapes decoded), has a ".." element.
func climbs(raw []byte) bool {
	p := string(raw)
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	for _, el := range strings.Split(strings.ReplaceAll(p, "\\", "/"), "/") {
		if el == ".." {
			return true
		}
	}
	return false
}
