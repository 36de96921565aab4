package mlflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/engine/onnxdata"
)

// MLflow model versions fw can serve as they are: a version registered
// through MLflow's API whose source is an MLflow model with the ONNX
// flavor (mlflow.onnx.log_model: an MLmodel file whose flavors.onnx.data
// names the model file, its tensors by default in an external data file
// beside it) in the dashboard's artifact storage is stored in fw's
// registry as that model, its external data inlined into one file, so it
// deploys like any exported ONNX file. One with the PyTorch flavor saved as
// a torch.export program (data/model.pt2, mlflow.pytorch.log_model's
// default) is stored as that program (format torch_export), which the
// Models page exports into a file fw serves. Any other source (a pickled
// PyTorch model among them: fw never unpickles) stays a reference.

// maxMLmodelBytes bounds the MLmodel file read.
const maxMLmodelBytes = 1 << 20

// sourceDir is where a model version's source lies in the dashboard's
// storage: the store and the key of its directory; ok is false for a
// source the dashboard does not hold (another server's URI, a location
// outside its root).
func (s *Server) sourceDir(ctx context.Context, source string) (blob.Store, string, bool) {
	runDir := func(runID, dir string) (blob.Store, string, bool) {
		if store.ValidateID(runID) != nil {
			return nil, "", false
		}
		run, err := s.st.GetRun(ctx, runID)
		if err != nil {
			return nil, "", false
		}
		from, prefix, local, e := s.localRun(ctx, run)
		if e != nil {
			return nil, "", false
		}
		if !local {
			from, prefix = s.cfg.Artifacts, runID
		}
		return from, strings.Trim(prefix+"/"+dir, "/"), from != nil
	}
	freeDir := func(p string) (blob.Store, string, bool) {
		if s.dest != nil {
			if _, err := s.dest.Stat(ctx, p+"/MLmodel"); err == nil {
				return s.dest, p, true
			}
			// Else stored in fw's storage before the destination was set.
		}
		return s.cfg.Artifacts, freePrefix + p, s.cfg.Artifacts != nil
	}
	switch {
	case strings.HasPrefix(source, "runs:/"):
		run, dir, _ := strings.Cut(strings.TrimPrefix(source, "runs:/"), "/")
		return runDir(run, cleanDir(dir))
	case strings.HasPrefix(source, "models:/m-"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(source, "models:/"), "/")
		rec, err := s.st.GetRecord(ctx, loggedModelKind, id)
		if err != nil || !validModelID(id) {
			return nil, "", false
		}
		var m loggedModel
		if json.Unmarshal(rec.Body, &m) != nil {
			return nil, "", false
		}
		return freeDir(strings.Trim(m.ExperimentID+"/models/"+id+"/artifacts/"+cleanDir(sub), "/"))
	case strings.HasPrefix(source, "mlflow-artifacts:"):
		p := strings.TrimPrefix(source, "mlflow-artifacts:")
		if strings.HasPrefix(p, "//") { // mlflow-artifacts://host:port/path
			_, after, _ := strings.Cut(p[2:], "/")
			p = after
		}
		runID, inner, isRun, e := splitArtifactPath(p)
		if e != nil {
			return nil, "", false
		}
		if isRun {
			return runDir(runID, inner)
		}
		return freeDir(inner)
	case localSource(source) || strings.HasPrefix(source, "s3://"):
		p := source
		if after, ok := strings.CutPrefix(p, "file://"); ok {
			p = after
		}
		if under, inside := s.rootKey(p); inside && s.root != nil {
			return s.root, under, true
		}
	}
	return nil, "", false
}

// mlmodel is the part of an MLmodel file this reads.
type mlmodel struct {
	Flavors map[string]map[string]any `yaml:"flavors"`
}

// flavor reads the MLmodel file of a version's source in the dashboard's
// storage: the store and directory key of the model and its flavor name's
// settings; ok is false for a source that is not an MLflow model directory
// the dashboard holds, or one without that flavor.
func (s *Server) flavor(ctx context.Context, source, name string) (blob.Store, string, map[string]any, bool) {
	from, dir, ok := s.sourceDir(ctx, source)
	if !ok || store.ValidateRelPath(dir) != nil {
		return nil, "", nil, false
	}
	doc, err := readAll(ctx, from, dir+"/MLmodel", maxMLmodelBytes)
	if err != nil {
		return nil, "", nil, false
	}
	var mm mlmodel
	if err := yaml.Unmarshal(doc, &mm); err != nil {
		return nil, "", nil, false
	}
	settings, ok := mm.Flavors[name]
	return from, dir, settings, ok
}

// servableONNX writes, for a version's source that is an MLflow model
// with the ONNX flavor in the dashboard's storage, that model as one file
// into a temporary file of UploadDir and returns its path ("" for any
// other source). err says why an ONNX-flavored model could not be
// written (the version is then registered as a reference).
func (s *Server) servableONNX(ctx context.Context, source string) (string, error) {
	from, dir, flavor, ok := s.flavor(ctx, source, "onnx")
	if !ok {
		return "", nil
	}
	data, _ := flavor["data"].(string)
	if data == "" || store.ValidateRelPath(data) != nil {
		return "", fmt.Errorf("its MLmodel names the ONNX file %q, not a file inside the model", data)
	}
	key := dir + "/" + data
	modelBytes, err := readAll(ctx, from, key, min(s.cfg.MaxArtifactBytes, onnxdata.MaxModelBytes))
	if err != nil {
		return "", fmt.Errorf("reading its ONNX file %s: %w", data, err)
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var temps []string
	defer func() {
		for _, t := range temps {
			os.Remove(t)
		}
	}()
	limit := min(s.cfg.MaxArtifactBytes, onnxdata.MaxModelBytes)
	downloaded := int64(0) // what external data files downloaded from a bucket take on disk
	// open makes an external data file (beside the model file) readable at
	// any offset: the file itself in a directory store, else a download.
	open := func(location string) (*os.File, error) {
		if f, ok := files[location]; ok {
			return f, nil
		}
		k := path.Join(path.Dir(key), location)
		if store.ValidateRelPath(k) != nil || !strings.HasPrefix(k, dir+"/") {
			return nil, fmt.Errorf("%s is not a file of the model", location)
		}
		var f *os.File
		if p, local := from.Local(k); local {
			st, err := os.Lstat(p)
			if err != nil || !st.Mode().IsRegular() {
				return nil, fmt.Errorf("%s is not a file of the model's directory", location)
			}
			if f, err = os.Open(p); err != nil {
				return nil, err
			}
		} else {
			r, _, err := from.Get(ctx, k)
			if err != nil {
				return nil, err
			}
			defer r.Close()
			if f, err = os.CreateTemp(s.cfg.UploadDir, ".mlflow-onnx-data-*"); err != nil {
				return nil, err
			}
			temps = append(temps, f.Name())
			n, err := io.Copy(f, io.LimitReader(r, limit-downloaded+1))
			if err != nil {
				f.Close()
				return nil, err
			}
			if downloaded += n; downloaded > limit {
				f.Close()
				return nil, onnxdata.ErrTooLarge
			}
		}
		files[location] = f
		return f, nil
	}
	read := func(location string, offset, length int64) ([]byte, error) {
		f, err := open(location)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if offset > st.Size() {
			return nil, fmt.Errorf("%s holds %d bytes, less than the offset %d", location, st.Size(), offset)
		}
		if length < 0 {
			length = st.Size() - offset
		}
		if length > st.Size()-offset {
			return nil, fmt.Errorf("%s holds %d bytes after offset %d, not the %d the model names", location, st.Size()-offset, offset, length)
		}
		if length > limit {
			return nil, onnxdata.ErrTooLarge
		}
		b := make([]byte, length) // within the file's size and the limit
		n, err := f.ReadAt(b, offset)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b[:n], nil
	}
	out, _, err := onnxdata.Inline(modelBytes, read, limit)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(s.cfg.UploadDir, ".mlflow-onnx-*.onnx")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(out); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// readAll reads the object key of from, refusing one over limit bytes.
func readAll(ctx context.Context, from blob.Store, key string, limit int64) ([]byte, error) {
	r, _, err := from.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// programFile copies, for a version's source that is an MLflow model with
// the PyTorch flavor saved as a torch.export program (MLmodel's
// flavors.pytorch.model_data names a directory holding model.pt2) in the
// dashboard's storage, that program into a temporary file of UploadDir and
// returns its path ("" for any other source: another flavor, a pickled
// PyTorch model, a model the dashboard does not hold).
func (s *Server) programFile(ctx context.Context, source string) (string, error) {
	from, dir, flavor, ok := s.flavor(ctx, source, "pytorch")
	if !ok {
		return "", nil
	}
	data, _ := flavor["model_data"].(string)
	if data == "" {
		data = "data"
	}
	key := dir + "/" + strings.Trim(data, "/") + "/model.pt2"
	if store.ValidateRelPath(strings.Trim(data, "/")) != nil || store.ValidateRelPath(key) != nil {
		return "", fmt.Errorf("its MLmodel names the model data %q, not a directory inside the model", data)
	}
	r, _, err := from.Get(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return "", nil // a pickled model (data/model.pth)
	}
	if err != nil {
		return "", fmt.Errorf("reading its program %s: %w", key, err)
	}
	defer r.Close()
	f, err := os.CreateTemp(s.cfg.UploadDir, ".mlflow-program-*.pt2")
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(r, s.cfg.MaxArtifactBytes+1))
	if err == nil && n > s.cfg.MaxArtifactBytes {
		err = fmt.Errorf("its program is larger than %d bytes", s.cfg.MaxArtifactBytes)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("copying its program %s: %w", key, err)
	}
	return f.Name(), nil
}
