package mlflow

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
)

// Local artifact locations. By default every run's artifacts go through the
// dashboard's artifact proxy (runs get mlflow-artifacts:/ URIs). An
// experiment may instead have a local artifact location, as MLflow's
// server without --serve-artifacts gives: an absolute directory (a path or
// a file:// URI) set by the client's artifact_location or, for experiments
// created through MLflow's API, by the dashboard's --default-artifact-root
// (Config.DefaultArtifactRoot; the location is <root>/<experiment id>).
// Runs of such an experiment get <location>/<run id>/artifacts, and
// MLflow's client reads and writes those files itself (client and dashboard
// share the file system: one machine or a shared mount). The dashboard
// itself reads them (artifacts/list, get-artifact, a registered version's
// files) only inside DefaultArtifactRoot: a location a client chose
// elsewhere is never a path the server opens.

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

// localRun is where the server reads a local-location run's files: the
// key prefix of the run's directory in the local root store. ok is false
// for a run whose artifacts go through the proxy; a location outside the
// root is an error that says so.
func (s *Server) localRun(ctx context.Context, r store.Run) (prefix string, ok bool, e *apiError) {
	loc := s.runLocation(ctx, r.ExperimentID)
	if loc == "" {
		return "", false, nil
	}
	dir, _ := localDir(loc)
	rel, inside := s.underRoot(dir)
	if !inside {
		return "", true, errf(400, codeInvalidParameter, "the artifacts of run %s are at %s, a local location outside the dashboard's --default-artifact-root: MLflow's client reads them there itself; the dashboard opens only files inside its root", r.ID, loc)
	}
	if rel != "" {
		rel += "/"
	}
	return rel + r.ID + "/artifacts", true, nil
}

// rootDir is the directory of DefaultArtifactRoot ("" without one).
func (s *Server) rootDir() string {
	dir, _ := localDir(s.cfg.DefaultArtifactRoot)
	return dir
}

// underRoot returns dir relative to DefaultArtifactRoot when it is inside.
func (s *Server) underRoot(dir string) (string, bool) {
	root := s.rootDir()
	if root == "" || s.localRoot == nil || dir == "" {
		return "", false
	}
	if dir == root {
		return "", true
	}
	rel, ok := strings.CutPrefix(dir, strings.TrimRight(root, "/")+"/")
	if !ok || store.ValidateRelPath(rel) != nil {
		return "", false
	}
	return rel, true
}

// localArtifacts lists the regular files under the run directory prefix of
// the local root (symbolic links are not followed), as the store lists a
// proxied run's files.
func (s *Server) localArtifacts(prefix string) ([]store.Artifact, *apiError) {
	dir, ok := s.localRoot.Local(prefix)
	if !ok {
		return nil, errf(400, codeInvalidParameter, "the run's artifact directory is not a path inside the dashboard's artifact root")
	}
	var out []store.Artifact
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // nothing logged yet
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if len(out) >= maxLocalListing {
			return errTooMany
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, store.Artifact{Path: filepath.ToSlash(rel), Size: info.Size(), Time: info.ModTime().UTC()})
		return nil
	})
	switch {
	case errors.Is(err, errTooMany):
		return nil, errf(400, codeInvalidParameter, "the run's artifact directory holds over %d files; list a subdirectory", maxLocalListing)
	case err != nil:
		s.log.Error("mlflow api: listing a local artifact directory", "dir", dir, "err", err)
		return nil, errf(500, codeInternal, "listing the run's artifact directory failed; see the dashboard's log")
	}
	return out, nil
}

var errTooMany = errors.New("too many files")

// openLocalRoot opens DefaultArtifactRoot as a directory store (created
// when missing, as MLflow's server creates its root).
func openLocalRoot(root string) (*blob.Dir, error) {
	if root == "" {
		return nil, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return blob.NewDir(root)
}
