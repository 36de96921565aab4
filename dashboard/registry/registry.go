// Package registry is the dashboard's model registry: named models with
// numbered versions (an exported file validated by content, or a reference
// to a run's checkpoint), aliases such as "production", export jobs that run
// `python -m fw.export` as a child process, and deployments: managed
// `fw serve` children that survive a dashboard restart.
//
// The registry lives in FW_EXPERIMENT_DIR/registry/registry.json and the
// deployments in FW_EXPERIMENT_DIR/deployments.json, both written atomically
// (temporary file, fsync, rename); model files live under
// FW_EXPERIMENT_DIR/models/<name>/<version>/model.<ext>.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/engine"
)

// Error is a refused request: the dashboard's one error type. An invalid
// name or request is fault.Unprocessable "invalid_argument"; a file that is
// not a model fault.Unprocessable with the engine's load error code; a
// missing model or version fault.NotFound; a taken port fault.Conflict.
type Error = fault.Error

func invalid(format string, a ...any) error {
	return fault.Newf(fault.Unprocessable, "invalid_argument", format, a...)
}

func notFound(format string, a ...any) error {
	return fault.Newf(fault.NotFound, "not_found", format, a...)
}

func conflict(format string, a ...any) error {
	return fault.Newf(fault.Conflict, "conflict", format, a...)
}

// FormatCheckpoint marks a version that references a run's checkpoint; it
// cannot be served until exported (POST /api/models/export).
const FormatCheckpoint = "checkpoint"

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName checks a model or alias name: letters, digits, '.', '_', '-',
// at most 64 characters, not starting with a punctuation mark.
func ValidName(what, name string) error {
	if !nameRE.MatchString(name) {
		return invalid("%s %q is not valid: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", what, name)
	}
	return nil
}

// Spec is an input or output tensor.
type Spec struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Source says where a version came from.
type Source struct {
	RunID      string `json:"run_id,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
	// Model and Version name the checkpoint-backed version it was exported from.
	Model    string `json:"model,omitempty"`
	Version  int    `json:"version,omitempty"`
	Upload   string `json:"upload,omitempty"` // the uploaded file's name
	ExportID string `json:"export_id,omitempty"`
}

// Version is one registered version of a model.
type Version struct {
	Version  int                `json:"version"`
	Format   string             `json:"format"`
	Size     int64              `json:"size"`
	Inputs   []Spec             `json:"inputs,omitempty"`
	Outputs  []Spec             `json:"outputs,omitempty"`
	Labels   []string           `json:"labels,omitempty"`
	Source   Source             `json:"source"`
	Metrics  map[string]float64 `json:"metrics,omitempty"` // the checkpoint's or fw.json's, at export
	Parity   json.RawMessage    `json:"parity,omitempty"`  // fw.export's JSON report
	Created  time.Time          `json:"created"`
	File     string             `json:"file,omitempty"` // relative to the experiment dir (checkpoint: absolute path)
	Embedded string             `json:"embedded_name,omitempty"`
}

// Model is a registered model.
type Model struct {
	Name     string         `json:"name"`
	Created  time.Time      `json:"created"`
	Aliases  map[string]int `json:"aliases"`
	Versions []*Version     `json:"versions"`
}

func (m *Model) version(v int) *Version {
	for _, x := range m.Versions {
		if x.Version == v {
			return x
		}
	}
	return nil
}

// Registry is the set of models, persisted as JSON.
type Registry struct {
	dir    string // the experiment dir
	file   string
	mu     sync.Mutex
	models map[string]*Model
	engine engine.Options // how model files are loaded to be inspected
}

// Open loads (or creates) the registry under expDir.
func Open(expDir string) (*Registry, error) {
	abs, err := filepath.Abs(expDir)
	if err != nil {
		return nil, err
	}
	r := &Registry{dir: abs, file: filepath.Join(abs, "registry", "registry.json"), models: map[string]*Model{}}
	for _, d := range []string{filepath.Dir(r.file), filepath.Join(abs, "models")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(r.file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if len(b) > 0 {
		var doc struct {
			Models []*Model `json:"models"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("reading %s: %w", r.file, err)
		}
		for _, m := range doc.Models {
			r.models[m.Name] = m
		}
	}
	return r, nil
}

// writeAtomic writes b to path through a temporary file and a rename.
func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// saveLocked persists the registry; r.mu is held.
func (r *Registry) saveLocked() error {
	doc := struct {
		Models []*Model `json:"models"`
	}{Models: r.listLocked()}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(r.file, b)
}

func (r *Registry) listLocked() []*Model {
	out := make([]*Model, 0, len(r.models))
	for _, m := range r.models {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func clone(m *Model) *Model {
	b, _ := json.Marshal(m)
	var c Model
	_ = json.Unmarshal(b, &c)
	return &c
}

// List returns every model (copies).
func (r *Registry) List() []*Model {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []*Model{}
	for _, m := range r.listLocked() {
		out = append(out, clone(m))
	}
	return out
}

// Get returns one model (a copy).
func (r *Registry) Get(name string) (*Model, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.models[name]
	if !ok {
		return nil, notFound("no model %q in the registry; GET /api/models lists them", name)
	}
	return clone(m), nil
}

// Resolve finds a version by number, or by alias when ref is not a number.
func (r *Registry) Resolve(name, ref string) (*Version, error) {
	m, err := r.Get(name)
	if err != nil {
		return nil, err
	}
	v, err := strconv.Atoi(ref)
	if err != nil {
		a, ok := m.Aliases[ref]
		if !ok {
			return nil, notFound("model %q has no version or alias %q", name, ref)
		}
		v = a
	}
	if x := m.version(v); x != nil {
		return x, nil
	}
	return nil, notFound("model %q has no version %d", name, v)
}

// FilePath is the absolute path of a version's file.
func (r *Registry) FilePath(v *Version) string {
	if filepath.IsAbs(v.File) {
		return v.File
	}
	return filepath.Join(r.dir, filepath.FromSlash(v.File))
}

// Inspect validates a model file by content (pickles refused) and loads it
// once, with one thread and eng's library paths, to read its specs, labels
// and metadata.
func Inspect(ctx context.Context, path string, eng engine.Options) (*Version, error) {
	info, err := engine.DetectFile(path)
	if err != nil {
		return nil, badFile(err)
	}
	eng.Threads = 1
	m, err := engine.Load(ctx, path, eng)
	if err != nil {
		return nil, badFile(err)
	}
	defer m.Close()
	v := &Version{Format: string(info.Format), Size: info.Size, Labels: m.Labels(), Embedded: m.Name()}
	if m.Meta != nil && m.Meta.Format == string(engine.FormatQuantized) {
		v.Format = string(engine.FormatQuantized)
	}
	if m.Format == engine.FormatONNXInt8 {
		v.Format = string(engine.FormatONNXInt8)
	}
	for _, s := range m.Inputs() {
		v.Inputs = append(v.Inputs, Spec{Name: s.Name, DType: s.DType.String(), Shape: s.Shape})
	}
	for _, s := range m.Outputs() {
		v.Outputs = append(v.Outputs, Spec{Name: s.Name, DType: s.DType.String(), Shape: s.Shape})
	}
	if m.Meta != nil {
		for k, x := range m.Meta.Metrics {
			if f, ok := x.(float64); ok {
				if v.Metrics == nil {
					v.Metrics = map[string]float64{}
				}
				v.Metrics[k] = f
			}
		}
	}
	return v, nil
}

func badFile(err error) error {
	var le *engine.LoadError
	if errors.As(err, &le) {
		msg := le.Msg
		if le.Err != nil {
			msg += ": " + le.Err.Error()
		}
		if le.Hint != "" {
			msg += ". Hint: " + le.Hint
		}
		return fault.New(fault.Unprocessable, fault.Code(le.Code), msg)
	}
	return fault.New(fault.Unprocessable, fault.Code(engine.CodeEngine), err.Error())
}

func ext(format string) string {
	switch format {
	case string(engine.FormatONNX):
		return "onnx"
	case string(engine.FormatQuantized):
		return "quant.pt"
	case string(engine.FormatONNXInt8):
		return "int8.onnx"
	case string(engine.FormatAOTI):
		return "pt2"
	}
	return "pt"
}

// AddFile validates the model file at src and registers it as the next
// version of name (created when missing); src is moved (or copied) into
// models/<name>/<version>/. meta carries the source, parity and metrics.
func (r *Registry) AddFile(ctx context.Context, name, src string, meta Version) (*Version, error) {
	if err := ValidName("model name", name); err != nil {
		return nil, err
	}
	v, err := Inspect(ctx, src, r.engine)
	if err != nil {
		return nil, err
	}
	v.Source, v.Parity, v.Created = meta.Source, meta.Parity, time.Now().UTC()
	if meta.Metrics != nil {
		v.Metrics = meta.Metrics
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.modelLocked(name)
	v.Version = nextVersion(m)
	rel := filepath.ToSlash(filepath.Join("models", name, strconv.Itoa(v.Version), "model."+ext(v.Format)))
	dst := filepath.Join(r.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, err
	}
	if err := moveFile(src, dst); err != nil {
		return nil, err
	}
	v.File = rel
	m.Versions = append(m.Versions, v)
	if err := r.saveLocked(); err != nil {
		return nil, err
	}
	return v, nil
}

// AddCheckpoint registers a reference to a run's checkpoint (abs is its
// resolved path) as the next version of name.
func (r *Registry) AddCheckpoint(name, runID, ckpt, abs string, metrics map[string]float64) (*Version, error) {
	if err := ValidName("model name", name); err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, notFound("checkpoint %s of run %s: %v", ckpt, runID, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.modelLocked(name)
	v := &Version{Version: nextVersion(m), Format: FormatCheckpoint, Size: st.Size(), File: abs,
		Source: Source{RunID: runID, Checkpoint: ckpt}, Metrics: metrics, Created: time.Now().UTC()}
	m.Versions = append(m.Versions, v)
	if err := r.saveLocked(); err != nil {
		return nil, err
	}
	return v, nil
}

func (r *Registry) modelLocked(name string) *Model {
	m, ok := r.models[name]
	if !ok {
		m = &Model{Name: name, Created: time.Now().UTC(), Aliases: map[string]int{}, Versions: []*Version{}}
		r.models[name] = m
	}
	return m
}

func nextVersion(m *Model) int {
	n := 0
	for _, v := range m.Versions {
		n = max(n, v.Version)
	}
	return n + 1
}

func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SetAliases points each alias at a version (0 removes the alias).
func (r *Registry) SetAliases(name string, aliases map[string]int) (*Model, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.models[name]
	if !ok {
		return nil, notFound("no model %q in the registry; GET /api/models lists them", name)
	}
	for a, v := range aliases {
		if err := ValidName("alias", a); err != nil {
			return nil, err
		}
		if v != 0 && m.version(v) == nil {
			return nil, notFound("model %q has no version %d for alias %q", name, v, a)
		}
	}
	for a, v := range aliases {
		if v == 0 {
			delete(m.Aliases, a)
		} else {
			m.Aliases[a] = v
		}
	}
	if err := r.saveLocked(); err != nil {
		return nil, err
	}
	return clone(m), nil
}

// Delete removes a model (version 0) or one version, with its files.
func (r *Registry) Delete(name string, version int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.models[name]
	if !ok {
		return notFound("no model %q in the registry; GET /api/models lists them", name)
	}
	dir := filepath.Join(r.dir, "models", name)
	if version == 0 {
		delete(r.models, name)
	} else {
		if m.version(version) == nil {
			return notFound("model %q has no version %d", name, version)
		}
		kept := m.Versions[:0]
		for _, v := range m.Versions {
			if v.Version != version {
				kept = append(kept, v)
			}
		}
		m.Versions = kept
		for a, v := range m.Aliases {
			if v == version {
				delete(m.Aliases, a)
			}
		}
		dir = filepath.Join(dir, strconv.Itoa(version))
	}
	if err := r.saveLocked(); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
