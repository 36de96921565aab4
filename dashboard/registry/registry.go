// Package registry is the dashboard's model registry: named models with
// numbered versions (an exported file validated by content, or a reference
// to a run's checkpoint), aliases such as "production", export jobs that run
// `python -m fw.export` as a child process, and deployments: managed
// `fw serve` children that survive a dashboard restart.
//
// The registry, its export jobs and the deployments are records in the
// tracking store's database (SQLite or PostgreSQL: dashboards sharing one
// PostgreSQL share them); JSON files left by earlier versions are imported
// once (import.go). Model files live under
// FW_EXPERIMENT_DIR/models/<name>/<version>/model.<ext>.
package registry

import (
	"archive/zip"
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
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/store"
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

// FormatMLflow marks a version registered through MLflow's model registry
// API: a reference to an MLflow model (Source.URI), not a file fw serves.
const FormatMLflow = "mlflow"

// FormatProgram marks a version whose file is a torch.export program (a
// .pt2 archive of torch.export.save: what an MLflow PyTorch model holds as
// data/model.pt2, registered through MLflow's API). fw serve does not load
// it; exporting it (POST /api/models/export) makes a version it serves.
const FormatProgram = "torch_export"

// Servable reports whether a version is a model file fw serve can load
// (not a reference to a checkpoint or an MLflow model, nor a program that
// must be exported first).
func (v *Version) Servable() bool {
	return v.Format != FormatCheckpoint && v.Format != FormatMLflow && v.Format != FormatProgram
}

// Exportable reports whether POST /api/models/export takes a version: a
// checkpoint or a torch.export program.
func (v *Version) Exportable() bool { return v.Format == FormatCheckpoint || v.Format == FormatProgram }

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
	// URI is an MLflow model version's source (runs:/..., models:/...,
	// mlflow-artifacts:/..., s3://...), and LoggedModel the MLflow 3
	// logged model it names, when registered through MLflow's API.
	URI         string `json:"uri,omitempty"`
	LoggedModel string `json:"logged_model,omitempty"`
	RunLink     string `json:"run_link,omitempty"`
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
	// What MLflow's registry API keeps about a version: its description,
	// tags, stage (None, Staging, Production, Archived) and last change.
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Stage       string            `json:"stage,omitempty"`
	Updated     time.Time         `json:"updated,omitzero"`
}

// Model is a registered model.
type Model struct {
	Name     string         `json:"name"`
	Created  time.Time      `json:"created"`
	Aliases  map[string]int `json:"aliases"`
	Versions []*Version     `json:"versions"`
	// Description, Tags and Updated are what MLflow's registry API keeps
	// about a registered model (fw's own API reports them).
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Updated     time.Time         `json:"updated,omitzero"`
}

func (m *Model) version(v int) *Version {
	for _, x := range m.Versions {
		if x.Version == v {
			return x
		}
	}
	return nil
}

// Records is what the registry keeps its state in: the store's records
// (store.Store has them), so every dashboard sharing a database sees the
// same models, export jobs and deployments.
type Records interface {
	GetRecord(ctx context.Context, kind, key string) (store.Record, error)
	ListRecords(ctx context.Context, kind string) ([]store.Record, error)
	UpdateRecord(ctx context.Context, kind, key string, fn func(cur *store.Record) (json.RawMessage, error)) (store.Record, error)
	DeleteRecord(ctx context.Context, kind, key string) (bool, error)
}

// Record kinds of the registry's state.
const (
	kindModel           = "model"
	kindExport          = "export"
	kindDeployment      = "deployment"
	kindEndedDeployment = "deployment_ended"
)

// modelDoc is a model as stored: LastVersion is the highest version number
// ever given out, so a number is never reused, not even after its version
// was deleted (a file of a deleted version can never be taken for a new one).
type modelDoc struct {
	*Model
	LastVersion int `json:"last_version"`
}

// Registry is the set of models, kept as one record per model in the
// store; the version files live in a file store (the experiment dir, or a
// bucket: dashboard/blob) under models/<name>/<version>/.
type Registry struct {
	st       Records
	files    blob.Store
	cacheDir string         // where files of a bucket are fetched to
	engine   engine.Options // how model files are loaded to be inspected
}

// Open opens the registry kept in st, with version files in files (nil:
// the directory expDir) and fetched copies in cacheDir (default
// expDir/cache/models).
func Open(expDir string, st Records, files blob.Store, cacheDir string) (*Registry, error) {
	abs, err := filepath.Abs(expDir)
	if err != nil {
		return nil, err
	}
	if files == nil {
		if files, err = blob.NewDir(abs); err != nil {
			return nil, err
		}
	}
	if cacheDir == "" {
		cacheDir = filepath.Join(abs, "cache", "models")
	}
	if err := os.MkdirAll(filepath.Join(abs, "registry"), 0o755); err != nil {
		return nil, err
	}
	return &Registry{st: st, files: files, cacheDir: cacheDir}, nil
}

func decodeModel(rec store.Record) (*modelDoc, error) {
	d := &modelDoc{Model: &Model{}}
	if err := json.Unmarshal(rec.Body, d); err != nil {
		return nil, fmt.Errorf("reading model %q from the store: %w", rec.Key, err)
	}
	if d.Name == "" {
		d.Name = rec.Key
	}
	if d.Aliases == nil {
		d.Aliases = map[string]int{}
	}
	if d.Versions == nil {
		d.Versions = []*Version{}
	}
	for _, v := range d.Versions {
		d.LastVersion = max(d.LastVersion, v.Version)
	}
	return d, nil
}

// List returns every model, by name.
func (r *Registry) List(ctx context.Context) ([]*Model, error) {
	recs, err := r.st.ListRecords(ctx, kindModel)
	if err != nil {
		return nil, err
	}
	out := make([]*Model, 0, len(recs))
	for _, rec := range recs {
		d, err := decodeModel(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, d.Model)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func modelNotFound(name string) error {
	return notFound("no model %q in the registry; GET /api/models lists them", name)
}

// Get returns one model.
func (r *Registry) Get(ctx context.Context, name string) (*Model, error) {
	if !nameRE.MatchString(name) {
		return nil, modelNotFound(name)
	}
	rec, err := r.st.GetRecord(ctx, kindModel, name)
	if store.ErrorCode(err) == store.CodeNotFound {
		return nil, modelNotFound(name)
	}
	if err != nil {
		return nil, err
	}
	d, err := decodeModel(rec)
	if err != nil {
		return nil, err
	}
	return d.Model, nil
}

// update changes one model in one store transaction: fn gets the model
// (nil when missing) and returns it changed, or nil to delete it. Errors of
// fn are returned as they are.
func (r *Registry) update(ctx context.Context, name string, fn func(d *modelDoc) (*modelDoc, error)) (*modelDoc, error) {
	if !nameRE.MatchString(name) { // no model has this name (callers that create one check ValidName first)
		return nil, modelNotFound(name)
	}
	var out *modelDoc
	_, err := r.st.UpdateRecord(ctx, kindModel, name, func(cur *store.Record) (json.RawMessage, error) {
		var d *modelDoc
		if cur != nil {
			var err error
			if d, err = decodeModel(*cur); err != nil {
				return nil, err
			}
		}
		next, err := fn(d)
		if err != nil {
			return nil, err
		}
		out = next
		if next == nil {
			return nil, nil
		}
		return json.Marshal(next)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Resolve finds a version by number, or by alias when ref is not a number.
func (r *Registry) Resolve(ctx context.Context, name, ref string) (*Version, error) {
	m, err := r.Get(ctx, name)
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

// ModelFile returns a local path of a version's file: a checkpoint's own
// path, the file itself in a directory store, or a copy fetched from the
// bucket into this machine's cache (what `fw serve` loads).
func (r *Registry) ModelFile(ctx context.Context, v *Version) (string, error) {
	if filepath.IsAbs(v.File) {
		return v.File, nil
	}
	return blob.Fetch(ctx, r.files, v.File, r.cacheDir)
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

// ext is the registry file extension of a format (engine's formats table).
func ext(format string) string {
	if info, ok := engine.Format(format).Info(); ok {
		return info.RegistryExt
	}
	return "pt"
}

// AddFile validates the model file at src and registers it as the next
// version of name (created when missing); src is moved (or copied) into
// models/<name>/<version>/. meta carries the source, parity and metrics
// (and, for a version registered through MLflow's API, its description,
// tags and stage).
// The version number is taken from the store first, so two dashboards
// adding versions at once never write the same file.
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
	// What MLflow's registry API keeps about a version registered through it.
	v.Description, v.Tags, v.Stage = meta.Description, meta.Tags, meta.Stage
	if v.Description != "" || v.Tags != nil || v.Stage != "" {
		v.Updated = v.Created
	}
	if v.Version, err = r.reserve(ctx, name); err != nil {
		return nil, err
	}
	dir := versionKey(name, v.Version)
	rel := dir + "/model." + ext(v.Format)
	if err := r.files.PutFile(ctx, rel, src); err != nil {
		return nil, fmt.Errorf("storing version %d of %s: %w", v.Version, name, err)
	}
	v.File = rel
	if err := r.addVersion(ctx, name, v); err != nil {
		_ = r.files.DeletePrefix(context.WithoutCancel(ctx), dir)
		return nil, err
	}
	return v, nil
}

// versionKey is where a version's files live in the file store:
// models/<name>/<version> (name is checked by ValidName).
func versionKey(name string, version int) string {
	return "models/" + name + "/" + strconv.Itoa(version)
}

// reserve takes the next version number of name (creating the model).
func (r *Registry) reserve(ctx context.Context, name string) (int, error) {
	d, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			d = newModel(name)
		}
		d.LastVersion++
		return d, nil
	})
	if err != nil {
		return 0, err
	}
	return d.LastVersion, nil
}

// addVersion records v (its number reserved) in model name; a model deleted
// since the reservation is created again.
func (r *Registry) addVersion(ctx context.Context, name string, v *Version) error {
	_, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			d = newModel(name)
		}
		d.LastVersion = max(d.LastVersion, v.Version)
		d.Versions = append(d.Versions, v)
		sort.Slice(d.Versions, func(i, j int) bool { return d.Versions[i].Version < d.Versions[j].Version })
		return d, nil
	})
	return err
}

func newModel(name string) *modelDoc {
	return &modelDoc{Model: &Model{Name: name, Created: time.Now().UTC(), Aliases: map[string]int{}, Versions: []*Version{}}}
}

// AddCheckpoint registers a reference to a run's checkpoint (abs is its
// resolved path under the checkpoint directory, size its size: the caller
// found it there, or its copy in object storage) as the next version of
// name.
func (r *Registry) AddCheckpoint(ctx context.Context, name, runID, ckpt, abs string, size int64, metrics map[string]float64) (*Version, error) {
	if err := ValidName("model name", name); err != nil {
		return nil, err
	}
	var v *Version
	_, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			d = newModel(name)
		}
		d.LastVersion++
		v = &Version{Version: d.LastVersion, Format: FormatCheckpoint, Size: size, File: abs,
			Source: Source{RunID: runID, Checkpoint: ckpt}, Metrics: metrics, Created: time.Now().UTC()}
		d.Versions = append(d.Versions, v)
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// CreateModel registers an empty model: an error (conflict) when name is
// taken.
func (r *Registry) CreateModel(ctx context.Context, name, description string, tags map[string]string) (*Model, error) {
	if err := ValidName("model name", name); err != nil {
		return nil, err
	}
	d, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d != nil {
			return nil, conflict("a model named %q is registered already", name)
		}
		d = newModel(name)
		d.Description, d.Tags, d.Updated = description, tags, d.Created
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return d.Model, nil
}

// Edit changes model name in one store transaction: fn edits it (its
// description, tags, aliases, versions' metadata; not its name, number
// or files) or returns an error, which is returned as it is.
func (r *Registry) Edit(ctx context.Context, name string, fn func(m *Model) error) (*Model, error) {
	d, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			return nil, modelNotFound(name)
		}
		if err := fn(d.Model); err != nil {
			return nil, err
		}
		d.Name = name
		d.Updated = time.Now().UTC()
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return d.Model, nil
}

// maxProgramEntries bounds the archive entries read to tell a program.
const maxProgramEntries = 100_000

// IsProgram reports whether the file at path is a torch.export program: a
// zip archive whose <root>/archive_format says pt2 and that holds a
// <root>/models/*.json graph but no AOTInductor code (an AOTInductor
// package, which fw serve loads, has the same markers).
func IsProgram(path string) bool {
	z, err := zip.OpenReader(path)
	if err != nil {
		return false
	}
	defer z.Close()
	if len(z.File) > maxProgramEntries {
		return false
	}
	root, models, aoti := "", false, false
	for _, f := range z.File {
		dir, rest, ok := strings.Cut(f.Name, "/")
		if !ok {
			continue
		}
		switch {
		case rest == "archive_format" && f.UncompressedSize64 <= 16:
			r, err := f.Open()
			if err != nil {
				return false
			}
			b, err := io.ReadAll(io.LimitReader(r, 16))
			r.Close()
			if err != nil || strings.TrimSpace(string(b)) != "pt2" {
				return false
			}
			root = dir
		case strings.HasPrefix(rest, "models/") && strings.HasSuffix(rest, ".json"):
			models = true
		case strings.HasPrefix(rest, "data/aotinductor/"):
			aoti = true
		}
	}
	return root != "" && models && !aoti
}

// AddProgram registers the torch.export program at src (IsProgram) as the
// next version of name, which must exist, with format FormatProgram; src is
// moved (or copied) into models/<name>/<version>/model.pt2. meta carries
// what MLflow's API keeps about the version (source, description, tags,
// stage).
func (r *Registry) AddProgram(ctx context.Context, name, src string, meta Version) (*Version, error) {
	if !IsProgram(src) {
		return nil, invalid("the file is not a torch.export program (a .pt2 archive written by torch.export.save)")
	}
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if _, err := r.Get(ctx, name); err != nil {
		return nil, err
	}
	v := meta
	v.Format, v.Size, v.Created = FormatProgram, st.Size(), time.Now().UTC()
	v.Updated = v.Created
	if v.Version, err = r.reserve(ctx, name); err != nil {
		return nil, err
	}
	dir := versionKey(name, v.Version)
	rel := dir + "/model.pt2"
	if err := r.files.PutFile(ctx, rel, src); err != nil {
		return nil, fmt.Errorf("storing version %d of %s: %w", v.Version, name, err)
	}
	v.File = rel
	if err := r.addVersion(ctx, name, &v); err != nil {
		_ = r.files.DeletePrefix(context.WithoutCancel(ctx), dir)
		return nil, err
	}
	return &v, nil
}

// AddReference registers v (a reference: FormatMLflow or FormatCheckpoint,
// no file in the registry's store) as the next version of name, which must
// exist.
func (r *Registry) AddReference(ctx context.Context, name string, v Version) (*Version, error) {
	if v.Format != FormatMLflow && v.Format != FormatCheckpoint {
		return nil, invalid("a reference version must have format %q or %q", FormatMLflow, FormatCheckpoint)
	}
	var out *Version
	_, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			return nil, modelNotFound(name)
		}
		d.LastVersion++
		nv := v
		nv.Version = d.LastVersion
		nv.Created = time.Now().UTC()
		nv.Updated = nv.Created
		d.Versions = append(d.Versions, &nv)
		d.Updated = nv.Created
		out = &nv
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Rename gives model name the name newName (free). A model whose versions
// are only references (MLflow models, checkpoints) can be renamed; one with
// files in the registry's store cannot (they live under its name).
func (r *Registry) Rename(ctx context.Context, name, newName string) (*Model, error) {
	if err := ValidName("model name", newName); err != nil {
		return nil, err
	}
	old, err := r.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, v := range old.Versions {
		if v.File != "" && !filepath.IsAbs(v.File) {
			// Its files are stored under models/<name>/: a model later
			// registered under the old name would write over them.
			return nil, invalid("model %q has versions whose files the registry stores (version %d); renaming it is not supported: register the versions under the new name", name, v.Version)
		}
	}
	d, err := r.update(ctx, newName, func(d *modelDoc) (*modelDoc, error) {
		if d != nil {
			return nil, conflict("a model named %q is registered already", newName)
		}
		nd := &modelDoc{Model: old}
		for _, v := range old.Versions {
			nd.LastVersion = max(nd.LastVersion, v.Version)
		}
		nd.Name, nd.Updated = newName, time.Now().UTC()
		return nd, nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := r.update(ctx, name, func(*modelDoc) (*modelDoc, error) { return nil, nil }); err != nil {
		return nil, fmt.Errorf("renaming %q to %q: the new name is registered, removing the old one failed: %w", name, newName, err)
	}
	return d.Model, nil
}

// SetAliases points each alias at a version (0 removes the alias).
func (r *Registry) SetAliases(ctx context.Context, name string, aliases map[string]int) (*Model, error) {
	for a := range aliases {
		if err := ValidName("alias", a); err != nil {
			return nil, err
		}
	}
	d, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			return nil, modelNotFound(name)
		}
		for a, v := range aliases {
			if v != 0 && d.version(v) == nil {
				return nil, notFound("model %q has no version %d for alias %q", name, v, a)
			}
		}
		for a, v := range aliases {
			if v == 0 {
				delete(d.Aliases, a)
			} else {
				d.Aliases[a] = v
			}
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return d.Model, nil
}

// Delete removes a model (version 0) or one version, with its files.
func (r *Registry) Delete(ctx context.Context, name string, version int) error {
	if !nameRE.MatchString(name) {
		return modelNotFound(name)
	}
	_, err := r.update(ctx, name, func(d *modelDoc) (*modelDoc, error) {
		if d == nil {
			return nil, modelNotFound(name)
		}
		if version == 0 {
			return nil, nil
		}
		if d.version(version) == nil {
			return nil, notFound("model %q has no version %d", name, version)
		}
		kept := d.Versions[:0]
		for _, v := range d.Versions {
			if v.Version != version {
				kept = append(kept, v)
			}
		}
		d.Versions = kept
		for a, v := range d.Aliases {
			if v == version {
				delete(d.Aliases, a)
			}
		}
		return d, nil
	})
	if err != nil {
		return err
	}
	key := "models/" + name
	if version != 0 {
		key = versionKey(name, version)
	}
	if err := r.files.DeletePrefix(ctx, key); err != nil {
		return fmt.Errorf("deleting the files of %s: %w", key, err)
	}
	return nil
}
