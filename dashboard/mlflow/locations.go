package mlflow

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/apierror"
)

// Artifact locations the client writes itself. By default every run's
// artifacts go through the dashboard's artifact proxy (runs get
// mlflow-artifacts:/ URIs). An experiment may instead have its own artifact
// location, as MLflow's server without --serve-artifacts gives: a local
// directory (an absolute path or a file:// URI) set by the client's
// artifact_location, or, for experiments created through MLflow's API, the
// dashboard's --default-artifact-root (Config.DefaultArtifactRoot: a local
// directory or s3://bucket/prefix; the location is <root>/<experiment id>).
// Runs of such an experiment get <location>/<run id>/artifacts, and MLflow's
// client reads and writes those files itself (a shared file system, or the
// bucket with its own credentials). The dashboard itself reads and writes
// them (artifacts/list, get-artifact, upload-artifact, a registered
// version's files) only inside the root, through its store
// (Config.ArtifactRoot): a location a client chose elsewhere is never a path
// or object the server opens. An s3:// location is taken only inside an
// s3:// root (a bucket the dashboard can read); a local one anywhere, as
// MLflow's client writes it on its own machine.

// maxLocalListing bounds the files one listing of a local run directory
// walks.
const maxLocalListing = 100_000

// localDir reads an artifact location the dashboard honours: an absolute,
// clean local path or a file:// URI of one (no host, no query). It returns
// the directory.
func localDir(loc string) (string, bool) {
	p := loc
	if strings.HasPrefix(loc, "file:") {
		u, err := url.Parse(loc)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return "", false
		}
		p = u.Path
	} else if strings.Contains(loc, "://") {
		return "", false
	}
	if p == "" || !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") {
		return "", false
	}
	for _, el := range strings.Split(strings.Trim(p, "/"), "/") {
		if el == ".." || el == "." {
			return "", false
		}
	}
	return path.Clean(p), true
}

// experimentLocation is the artifact location MLflow's API shows for an
// experiment: its own, or the proxy's mlflow-artifacts:/<id>.
func experimentLocation(e store.Experiment) string {
	if e.ArtifactLocation != "" {
		return e.ArtifactLocation
	}
	return "mlflow-artifacts:/" + mlExperimentID(e.ID, e.Name)
}

// runLocation returns the artifact location of a run's experiment ("" for
// the proxy), read once per experiment: a location never changes.
func (s *Server) runLocation(ctx context.Context, fwExpID string) string {
	if loc, ok := s.locations.Get(fwExpID); ok {
		return loc
	}
	page, err := s.st.ListExperiments(ctx, store.ListQuery{Filter: "id = " + quote(fwExpID), Limit: 1})
	if err != nil || len(page.Experiments) == 0 {
		return "" // answered as the proxy's URI; not cached, the next read asks again
	}
	loc := page.Experiments[0].ArtifactLocation
	s.locations.Put(fwExpID, loc, 1)
	return loc
}

// runArtifactURI is a run's artifact_uri.
func (s *Server) runArtifactURI(ctx context.Context, r store.Run) string {
	if loc := s.runLocation(ctx, r.ExperimentID); loc != "" {
		return strings.TrimRight(loc, "/") + "/" + r.ID + "/artifacts"
	}
	return artifactURI(mlExperimentID(r.ExperimentID, r.Experiment), r.ID)
}

// localRun is where the server reads a client-written run's files: the
// store and the key prefix of the run's directory in it (the root store;
// with an artifacts destination, a proxied run's <experiment id>/<run
// id>/artifacts there). ok is false for a run whose artifacts the proxy
// keeps in fw's own artifact storage; a location outside the root is an
// error that says so.
func (s *Server) localRun(ctx context.Context, r store.Run) (from blob.Store, prefix string, ok bool, e *apiError) {
	loc := s.runLocation(ctx, r.ExperimentID)
	if loc == "" {
		if s.dest == nil {
			return nil, "", false, nil
		}
		return s.dest, mlExperimentID(r.ExperimentID, r.Experiment) + "/" + r.ID + "/artifacts", true, nil
	}
	rel, inside := s.rootKey(loc)
	if !inside {
		return nil, "", true, errf(400, codeInvalidParameter, "the artifacts of run %s are at %s, a location outside the dashboard's --default-artifact-root: MLflow's client reads them there itself; the dashboard opens only files inside its root", r.ID, loc)
	}
	if rel != "" {
		rel += "/"
	}
	return s.root, rel + r.ID + "/artifacts", true, nil
}

// canonical is a location in one comparable form: a local directory's
// clean path, or s3://bucket/clean/path; ok is false for any other.
func canonical(loc string) (string, bool) {
	if dir, ok := localDir(loc); ok {
		return dir, true
	}
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", false
	}
	p := strings.Trim(u.Path, "/")
	if p == "" {
		return "s3://" + u.Host, true
	}
	if store.ValidateRelPath(p) != nil {
		return "", false
	}
	return "s3://" + u.Host + "/" + p, true
}

// rootKey returns a location's key in the root store when it lies inside
// DefaultArtifactRoot ("" for the root itself).
func (s *Server) rootKey(loc string) (string, bool) {
	root := s.rootCanon
	if s.root == nil || root == "" {
		return "", false
	}
	c, ok := canonical(loc)
	if !ok {
		return "", false
	}
	if c == root {
		return "", true
	}
	rel, ok := strings.CutPrefix(c, strings.TrimRight(root, "/")+"/")
	if !ok || store.ValidateRelPath(rel) != nil {
		return "", false
	}
	return rel, true
}

// honoured reports whether an experiment may have artifact_location loc:
// a local directory, or an s3:// location inside an s3:// root.
func (s *Server) honoured(loc string) bool {
	if _, ok := localDir(loc); ok {
		return true
	}
	_, inside := s.rootKey(loc)
	return inside && strings.HasPrefix(loc, "s3://")
}

// localArtifacts lists a client-written run's files (prefix in the store
// from), as the store lists a proxied run's.
func (s *Server) localArtifacts(ctx context.Context, from blob.Store, prefix string) ([]store.Artifact, *apiError) {
	l, ok := from.(blob.Lister)
	if !ok {
		return nil, errf(500, codeInternal, "the artifact root %s cannot be listed", from.String())
	}
	entries, err := l.List(ctx, prefix, maxLocalListing)
	switch {
	case errors.Is(err, blob.ErrTooMany):
		return nil, errf(400, codeInvalidParameter, "the run's artifact directory holds over %d files; list a subdirectory", maxLocalListing)
	case errors.Is(err, blob.ErrInvalidKey):
		return nil, errf(400, codeInvalidParameter, "the run's artifact directory is not a path inside the dashboard's artifact root")
	case err != nil:
		s.log.Error("mlflow api: listing a run's artifact directory", "prefix", prefix, "root", from.String(), "err", err)
		return nil, errf(500, codeInternal, "listing the run's artifact directory failed; see the dashboard's log")
	}
	out := make([]store.Artifact, len(entries))
	for i, e := range entries {
		out[i] = store.Artifact{Path: e.Key, Size: e.Size}
	}
	return out, nil
}

// runFiles lists a run's artifacts for MLflow's API: the files in its
// client-written or destination directory (localRun), with those fw's
// store lists for the run (uploaded through fw's own API or its SDK) that
// are not there under the same path; the store's alone for a run the
// proxy keeps in fw's storage.
func (s *Server) runFiles(ctx context.Context, r store.Run) ([]store.Artifact, *apiError) {
	arts, err := s.st.Artifacts(ctx, r.ID)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, s.runErr(err, r.ID)
	}
	from, prefix, local, e := s.localRun(ctx, r)
	if e != nil {
		return nil, e
	}
	if !local {
		return arts, nil
	}
	files, e := s.localArtifacts(ctx, from, prefix)
	if e != nil {
		return nil, e
	}
	return store.OverlayArtifacts(files, arts), nil
}

// ClientFiles returns where MLflow's client writes a run's files itself (a
// run whose experiment has an artifact location inside the default
// artifact root): the store and key prefix they are read from, and with
// list the files there, for fw's own run page (api.Config.ClientFiles). ok
// is false for a run whose files go through the proxy (fw's store lists
// them); a location outside the root is an error naming it.
func (s *Server) ClientFiles(ctx context.Context, runID string, list bool) (files []store.Artifact, from blob.Store, prefix string, ok bool, err error) {
	r, err := s.st.GetRun(ctx, runID)
	if err != nil {
		return nil, nil, "", false, err
	}
	from, prefix, ok, e := s.localRun(ctx, r)
	if e != nil {
		return nil, nil, "", true, e.asFW()
	}
	if !ok || !list {
		return nil, from, prefix, ok, nil
	}
	files, e = s.localArtifacts(ctx, from, prefix)
	if e != nil {
		if from == s.dest && s.dest != nil {
			// Every run has a directory there: one that cannot be listed
			// leaves the run's page with the files fw's own storage holds.
			s.log.Warn("mlflow api: listing a run's files in the artifacts destination", "run", runID, "err", e.msg)
			return nil, nil, "", false, nil
		}
		return nil, nil, "", true, e.asFW()
	}
	return files, from, prefix, true, nil
}

// asFW is the error in fw's own API shape (for fw's routes).
func (e *apiError) asFW() error {
	code := "bad_request"
	if e.status >= 500 {
		code = "internal"
	}
	return apierror.New(e.status, code, e.msg, nil)
}
