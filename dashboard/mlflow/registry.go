package mlflow

// MLflow's model registry API (registered models, model versions, tags,
// aliases, stages, search) over fw's registry (dashboard/registry): a
// version registered with mlflow.register_model is a version of fw's model
// of that name (format "mlflow": a reference to the MLflow model, shown on
// the Models page), and fw's own versions (exported files, checkpoints)
// are listed through MLflow's API. Messages begin with MLflow's sentences
// where its client or users match them.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/store"
)

// MLflow's stages (deprecated in MLflow, still in its API).
var stages = []string{"None", "Staging", "Production", "Archived"}

// Attributes a registered-model or model-version filter may name.
var (
	registeredModelAttrs = []string{"name", "creation_timestamp", "last_updated_timestamp"}
	modelVersionAttrs    = []string{"name", "version", "run_id", "source", "source_path", "current_stage", "creation_timestamp", "last_updated_timestamp", "model_id"}
)

// SetRegistry gives the API fw's model registry (nil: the registry routes
// answer 503 until it is set).
func (s *Server) SetRegistry(r *registry.Registry) { s.reg.Store(r) }

func (s *Server) registry() (*registry.Registry, *apiError) {
	r := s.reg.Load()
	if r == nil {
		return nil, errf(503, codeUnavailable, "the model registry is not available on this dashboard yet; retry")
	}
	return r, nil
}

// updatedOr is a last change, or created when there was none since.
func updatedOr(updated, created time.Time) time.Time {
	if updated.IsZero() {
		return created
	}
	return updated
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromRegistry maps a registry error to MLflow's codes, with MLflow's
// sentence for a missing model.
func (s *Server) fromRegistry(err error, name string, version int) *apiError {
	fe := fault.As(err)
	if fe != nil && fe.Kind == fault.NotFound {
		if version > 0 && !strings.Contains(fe.Msg, "no model") {
			return errf(404, codeNotFound, "Model Version (name=%s, version=%d) not found", name, version)
		}
		return errf(404, codeNotFound, "Registered Model with name=%s not found", name)
	}
	if fe != nil && fe.Kind == fault.Conflict {
		return errf(400, codeAlreadyExists, "Registered Model (name=%s) already exists. %s", name, fe.Msg)
	}
	return s.fromStore(err, "the model registry")
}

func wireTags(tags map[string]string) []map[string]string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]map[string]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, map[string]string{"key": k, "value": tags[k]})
	}
	return out
}

func stageOf(v *registry.Version) string {
	if v.Stage == "" {
		return "None"
	}
	return v.Stage
}

// wireVersion is MLflow's ModelVersion of v.
func wireVersion(m *registry.Model, v *registry.Version) map[string]any {
	source := v.Source.URI
	if source == "" {
		source = "models:/" + m.Name + "/" + strconv.Itoa(v.Version)
	}
	var aliases []string
	for a, n := range m.Aliases {
		if n == v.Version {
			aliases = append(aliases, a)
		}
	}
	sort.Strings(aliases)
	updated := updatedOr(v.Updated, v.Created)
	out := map[string]any{
		"name": m.Name, "version": strconv.Itoa(v.Version),
		"creation_timestamp": ms(v.Created), "last_updated_timestamp": ms(updated),
		"current_stage": stageOf(v), "description": v.Description, "source": source,
		"run_id": v.Source.RunID, "status": "READY", "tags": wireTags(v.Tags),
		"run_link": v.Source.RunLink, "aliases": append([]string{}, aliases...),
	}
	if v.Source.LoggedModel != "" {
		out["model_id"] = v.Source.LoggedModel
	}
	return out
}

// addVersion registers a version through MLflow's API: an MLflow model
// with the ONNX flavor in the dashboard's storage as that model's file (fw
// serves it as it is; onnxflavor.go), one with the PyTorch flavor saved as
// a torch.export program as that program (exported from the Models page),
// anything else as a reference (meta). A model that cannot be stored so is
// registered as a reference too, the reason logged.
func (s *Server) addVersion(ctx context.Context, reg *registry.Registry, name, source string, meta registry.Version) (*registry.Version, *apiError) {
	if _, err := reg.Get(ctx, name); err != nil {
		return nil, s.fromRegistry(err, name, 0)
	}
	// Each kind of model fw stores as a file: how the file is made from the
	// source ("" when the source is not of that kind) and how it is added.
	for _, kind := range []struct {
		what string
		file func(context.Context, string) (string, error)
		add  func(context.Context, string, string, registry.Version) (*registry.Version, error)
	}{
		{"an ONNX model", s.servableONNX, reg.AddFile},
		{"a PyTorch model (torch.export program)", s.programFile, reg.AddProgram},
	} {
		tmp, err := kind.file(ctx, source)
		if err != nil {
			s.log.Warn("mlflow api: a version of "+kind.what+" is registered as a reference (its file could not be made)", "model", name, "source", source, "err", err)
			continue
		}
		if tmp == "" {
			continue
		}
		fileMeta := meta
		fileMeta.Format = ""
		v, err := kind.add(ctx, name, tmp, fileMeta)
		os.Remove(tmp) // after a directory store moved it, a no-op
		if err == nil {
			return v, nil
		}
		s.log.Warn("mlflow api: a version of "+kind.what+" is registered as a reference (its file is not one fw takes)", "model", name, "source", source, "err", err)
	}
	v, err := reg.AddReference(ctx, name, meta)
	if err != nil {
		return nil, s.fromRegistry(err, name, 0)
	}
	return v, nil
}

// latestVersions are the newest version of each stage (MLflow's
// latest_versions), or of the stages asked for.
func latestVersions(m *registry.Model, only []string) []any {
	best := map[string]*registry.Version{}
	for _, v := range m.Versions {
		st := stageOf(v)
		if len(only) > 0 && !slices.ContainsFunc(only, func(s string) bool { return strings.EqualFold(s, st) }) {
			continue
		}
		if b := best[st]; b == nil || v.Version > b.Version {
			best[st] = v
		}
	}
	out := []any{}
	for _, st := range stages {
		if v := best[st]; v != nil {
			out = append(out, wireVersion(m, v))
		}
	}
	return out
}

// wireModel is MLflow's RegisteredModel of m.
func wireModel(m *registry.Model) map[string]any {
	aliases := []map[string]string{}
	names := make([]string, 0, len(m.Aliases))
	for a := range m.Aliases {
		names = append(names, a)
	}
	sort.Strings(names)
	for _, a := range names {
		aliases = append(aliases, map[string]string{"alias": a, "version": strconv.Itoa(m.Aliases[a])})
	}
	updated := updatedOr(m.Updated, m.Created)
	return map[string]any{
		"name": m.Name, "creation_timestamp": ms(m.Created), "last_updated_timestamp": ms(updated),
		"description": m.Description, "latest_versions": latestVersions(m, nil),
		"tags": wireTags(m.Tags), "aliases": aliases,
	}
}

// modelName reads the required "name" of a registry call.
func (r *request) modelName(field string) (string, *apiError) {
	name, e := r.str(field)
	if e != nil {
		return "", e
	}
	if name == "" {
		return "", errf(400, codeInvalidParameter, "Missing value for required parameter '%s'. Registered model names are 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (fw's registry rule)", field)
	}
	return name, nil
}

// versionNumber reads the required "version" (a string in MLflow's API).
func (r *request) versionNumber() (int, *apiError) {
	v, e := r.str("version")
	if e != nil {
		// MLflow's client sends a string; a JSON number is taken too.
		n, _, e2 := r.int64Field("version")
		if e2 != nil {
			return 0, e
		}
		v = strconv.FormatInt(n, 10)
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, errf(400, codeInvalidParameter, "Parameter 'version' must be an integer >= 1, got %q", v)
	}
	return n, nil
}

func (r *request) tagList(field string) (map[string]string, *apiError) {
	var kvs []kv
	if e := r.decode(field, &kvs); e != nil {
		return nil, e
	}
	if len(kvs) == 0 {
		return nil, nil
	}
	return kvMap(kvs, field, 1000)
}

func (s *Server) createRegisteredModel(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, e
	}
	desc, e := r.str("description")
	if e != nil {
		return nil, e
	}
	tags, e := r.tagList("tags")
	if e != nil {
		return nil, e
	}
	m, err := reg.CreateModel(r.ctx, name, desc, tags)
	if err != nil {
		return nil, s.fromRegistry(err, name, 0)
	}
	return map[string]any{"registered_model": wireModel(m)}, nil
}

func (s *Server) getModelByName(r *request) (*registry.Registry, *registry.Model, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, nil, e
	}
	m, err := reg.Get(r.ctx, name)
	if err != nil {
		return nil, nil, s.fromRegistry(err, name, 0)
	}
	return reg, m, nil
}

func (s *Server) getRegisteredModel(r *request) (any, *apiError) {
	_, m, e := s.getModelByName(r)
	if e != nil {
		return nil, e
	}
	return map[string]any{"registered_model": wireModel(m)}, nil
}

// editModel runs fn on the named model under the registry's transaction.
func (s *Server) editModel(r *request, version int, fn func(m *registry.Model, v *registry.Version) *apiError) (*registry.Model, *registry.Version, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, nil, e
	}
	var fnErr *apiError
	var got *registry.Version
	m, err := reg.Edit(r.ctx, name, func(m *registry.Model) error {
		var v *registry.Version
		if version > 0 {
			i := slices.IndexFunc(m.Versions, func(x *registry.Version) bool { return x.Version == version })
			if i < 0 {
				fnErr = errf(404, codeNotFound, "Model Version (name=%s, version=%d) not found", name, version)
				return errors.New("no version")
			}
			v = m.Versions[i]
			v.Updated = time.Now().UTC()
		}
		if fnErr = fn(m, v); fnErr != nil {
			return errors.New("refused")
		}
		got = v
		return nil
	})
	if fnErr != nil {
		return nil, nil, fnErr
	}
	if err != nil {
		return nil, nil, s.fromRegistry(err, name, version)
	}
	return m, got, nil
}

func (s *Server) updateRegisteredModel(r *request) (any, *apiError) {
	desc, e := r.str("description")
	if e != nil {
		return nil, e
	}
	m, _, e := s.editModel(r, 0, func(m *registry.Model, _ *registry.Version) *apiError {
		m.Description = desc
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"registered_model": wireModel(m)}, nil
}

func (s *Server) renameRegisteredModel(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, e
	}
	newName, e := r.modelName("new_name")
	if e != nil {
		return nil, e
	}
	m, err := reg.Rename(r.ctx, name, newName)
	if err != nil {
		if fe := fault.As(err); fe != nil && fe.Kind == fault.Conflict {
			return nil, errf(400, codeAlreadyExists, "Registered Model (name=%s) already exists.", newName)
		}
		return nil, s.fromRegistry(err, name, 0)
	}
	return map[string]any{"registered_model": wireModel(m)}, nil
}

func (s *Server) deleteRegisteredModel(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, e
	}
	if err := reg.Delete(r.ctx, name, 0); err != nil {
		return nil, s.fromRegistry(err, name, 0)
	}
	return map[string]any{}, nil
}

func (s *Server) setRegisteredModelTag(r *request) (any, *apiError) {
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	value, e := r.str("value")
	if e != nil {
		return nil, e
	}
	if _, e := kvMap([]kv{{key, value}}, "tag", 1); e != nil {
		return nil, e
	}
	_, _, e = s.editModel(r, 0, func(m *registry.Model, _ *registry.Version) *apiError {
		if m.Tags == nil {
			m.Tags = map[string]string{}
		}
		m.Tags[key] = value
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{}, nil
}

func (s *Server) deleteRegisteredModelTag(r *request) (any, *apiError) {
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	_, _, e = s.editModel(r, 0, func(m *registry.Model, _ *registry.Version) *apiError {
		if _, ok := m.Tags[key]; !ok {
			return errf(404, codeNotFound, "No tag with name: %s in registered model %s", key, m.Name)
		}
		delete(m.Tags, key)
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{}, nil
}

func (s *Server) getLatestVersions(r *request) (any, *apiError) {
	_, m, e := s.getModelByName(r)
	if e != nil {
		return nil, e
	}
	only, e := r.strs("stages")
	if e != nil {
		return nil, e
	}
	return map[string]any{"model_versions": latestVersions(m, only)}, nil
}

// alias answers POST (set), DELETE and GET registered-models/alias.
func (s *Server) setAlias(r *request) (any, *apiError) {
	alias, e := r.need("alias")
	if e != nil {
		return nil, e
	}
	version, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	if err := registry.ValidName("alias", alias); err != nil {
		return nil, errf(400, codeInvalidParameter, "%v", err)
	}
	_, _, e = s.editModel(r, version, func(m *registry.Model, v *registry.Version) *apiError {
		m.Aliases[alias] = v.Version
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{}, nil
}

func (s *Server) deleteAlias(r *request) (any, *apiError) {
	alias, e := r.need("alias")
	if e != nil {
		return nil, e
	}
	_, _, e = s.editModel(r, 0, func(m *registry.Model, _ *registry.Version) *apiError {
		delete(m.Aliases, alias)
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{}, nil
}

func (s *Server) getByAlias(r *request) (any, *apiError) {
	_, m, e := s.getModelByName(r)
	if e != nil {
		return nil, e
	}
	alias, e := r.need("alias")
	if e != nil {
		return nil, e
	}
	n, ok := m.Aliases[alias]
	i := slices.IndexFunc(m.Versions, func(v *registry.Version) bool { return v.Version == n })
	if !ok || i < 0 {
		return nil, errf(404, codeNotFound, "Registered model alias %s not found.", alias)
	}
	return map[string]any{"model_version": wireVersion(m, m.Versions[i])}, nil
}

// localSource reports whether an MLflow model source is a path on the
// server's file system (a bare path or file: URI).
func localSource(src string) bool {
	if strings.HasPrefix(src, "file:") || filepath.IsAbs(src) || strings.HasPrefix(src, ".") {
		return true
	}
	scheme, _, ok := strings.Cut(src, ":")
	return !ok || strings.ContainsAny(scheme, "/\\") || len(scheme) == 1 // C:\... or no scheme
}

// absoluteSource is MLflow's check of a non-local source: once
// percent-decoded (repeatedly), no ".." segment, no NUL, and a path (after
// the scheme and host) that is absolute and already clean, so that a
// source can never climb out of where it points.
func absoluteSource(src string) bool {
	for i := 0; i < 16; i++ {
		u := unquotePlus(src)
		if u == src {
			break
		}
		src = u
	}
	for _, seg := range strings.Split(src, "/") {
		if seg == ".." {
			return false
		}
	}
	p := strings.TrimRight(multiSlash.ReplaceAllString(sourcePath(src), "/"), "/")
	if strings.ContainsRune(p, 0) {
		return false
	}
	return p != "" && path.IsAbs(p) && path.Clean(p) == p
}

// unquotePlus is Python's urllib.parse.unquote_plus, as MLflow decodes a
// source: "+" is a space, each valid %XX its byte, an invalid escape kept
// as it is.
func unquotePlus(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// sourcePath is the path of a source as Python's urlparse reads it: after
// the scheme and the //host, before the query and the fragment.
func sourcePath(src string) string {
	rest := src
	if i := strings.IndexByte(src, ':'); i > 0 && !strings.ContainsFunc(src[:i], func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')
	}) {
		rest = src[i+1:]
	}
	if h, ok := strings.CutPrefix(rest, "//"); ok {
		j := strings.IndexAny(h, "/?#")
		if j < 0 {
			return ""
		}
		rest = h[j:]
	}
	if j := strings.IndexAny(rest, "?#"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// checkLocalSource is MLflow's rule for a local model version source: it
// must lie inside the artifact directory of the run named with it (a run of
// an experiment with a local artifact location, locations.go), so that a
// version can never name other files of the server.
func (s *Server) checkLocalSource(ctx context.Context, source, runID string) *apiError {
	refuse := errf(400, codeInvalidParameter, "To use a local path as a model version source, the run_id request parameter has to be specified and the local path has to be contained within the artifact directory of the run specified by the run_id. Runs of an experiment without a local artifact location keep their files in the dashboard's artifact storage: use runs:/<run_id>/<path>, models:/..., mlflow-artifacts:/... or a bucket URI")
	p := source
	if strings.HasPrefix(source, "file:") {
		u, err := url.Parse(source)
		if err != nil {
			return refuse
		}
		if u.Host != "" && u.Host != "localhost" {
			return errf(500, codeInternal, "'%s' is not a valid remote uri. For remote access on windows, please consider using a different scheme such as SMB (e.g. smb://<hostname>/<path>).", source)
		}
		p = u.Path
	}
	if runID == "" || !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") {
		return refuse
	}
	run, err := s.st.GetRun(ctx, runID)
	if err != nil {
		return s.fromStore(err, "reading run "+runID)
	}
	dir, ok := localDir(s.runArtifactURI(ctx, run))
	if !ok {
		return refuse
	}
	if clean := path.Clean(p); clean != dir && !strings.HasPrefix(clean, dir+"/") {
		return refuse
	}
	return nil
}

// multiSlash is a run of slashes, which a source's path is read without.
var multiSlash = regexp.MustCompile(`/+`)

func (s *Server) createModelVersion(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, e
	}
	source, e := r.need("source")
	if e != nil {
		return nil, e
	}
	if len(source) > 4096 || strings.ContainsFunc(source, func(c rune) bool { return c < 0x20 }) {
		return nil, errf(400, codeInvalidParameter, "Invalid model version source: at most 4,096 characters, no control characters")
	}
	runID, e := r.str("run_id")
	if e != nil {
		return nil, e
	}
	if localSource(source) {
		if e := s.checkLocalSource(r.ctx, source, runID); e != nil {
			return nil, e
		}
	} else if !absoluteSource(source) {
		return nil, errf(400, codeInvalidParameter, "Invalid model version source: '%s'. If supplying a source as an http, https, local file path, ftp, objectstore, or mlflow-artifacts uri, an absolute path must be provided without relative path references present. Please provide an absolute path.", source)
	}
	if runID != "" {
		if _, err := s.st.GetRun(r.ctx, runID); err != nil {
			return nil, s.fromStore(err, "reading run "+runID)
		}
	}
	desc, e := r.str("description")
	if e != nil {
		return nil, e
	}
	runLink, e := r.str("run_link")
	if e != nil {
		return nil, e
	}
	modelID, e := r.str("model_id")
	if e != nil {
		return nil, e
	}
	if modelID != "" {
		// A logged model's version: its run is the model's (as MLflow's
		// server fills it in).
		lm, e := s.getModel(r, modelID)
		if e != nil {
			return nil, e
		}
		if runID == "" {
			runID = lm.SourceRunID
		}
	}
	tags, e := r.tagList("tags")
	if e != nil {
		return nil, e
	}
	meta := registry.Version{
		Format: registry.FormatMLflow, Description: desc, Tags: tags, Stage: "None",
		Source: registry.Source{RunID: runID, URI: source, RunLink: runLink, LoggedModel: modelID},
	}
	v, e := s.addVersion(r.ctx, reg, name, source, meta)
	if e != nil {
		return nil, e
	}
	if modelID != "" {
		// MLflow's server lists a logged model's versions in its tag
		// mlflow.modelVersions (Python's json.dumps of [{name, version}]).
		if _, e := s.updateModel(r, modelID, func(lm *loggedModel) *apiError {
			var list []map[string]any
			_ = json.Unmarshal([]byte(lm.Tags[modelVersionsTag]), &list)
			list = append(list, map[string]any{"name": name, "version": v.Version})
			parts := make([]string, len(list))
			for i, x := range list {
				n, _ := json.Marshal(x["name"])
				parts[i] = fmt.Sprintf(`{"name": %s, "version": %v}`, n, x["version"])
			}
			if lm.Tags == nil {
				lm.Tags = map[string]string{}
			}
			lm.Tags[modelVersionsTag] = "[" + strings.Join(parts, ", ") + "]"
			return nil
		}); e != nil {
			s.log.Warn("mlflow api: recording a model version on its logged model", "model_id", modelID, "err", e.msg)
		}
	}
	m, err := reg.Get(r.ctx, name)
	if err != nil {
		return nil, s.fromRegistry(err, name, 0)
	}
	return map[string]any{"model_version": wireVersion(m, v)}, nil
}

// modelVersionsTag is the logged model tag listing its registered versions.
const modelVersionsTag = "mlflow.modelVersions"

func (s *Server) getModelVersion(r *request) (any, *apiError) {
	_, m, e := s.getModelByName(r)
	if e != nil {
		return nil, e
	}
	n, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	i := slices.IndexFunc(m.Versions, func(v *registry.Version) bool { return v.Version == n })
	if i < 0 {
		return nil, errf(404, codeNotFound, "Model Version (name=%s, version=%d) not found", m.Name, n)
	}
	return map[string]any{"model_version": wireVersion(m, m.Versions[i])}, nil
}

func (s *Server) updateModelVersion(r *request) (any, *apiError) {
	n, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	desc, e := r.str("description")
	if e != nil {
		return nil, e
	}
	m, v, e := s.editModel(r, n, func(_ *registry.Model, v *registry.Version) *apiError {
		v.Description = desc
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"model_version": wireVersion(m, v)}, nil
}

func (s *Server) transitionStage(r *request) (any, *apiError) {
	n, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	stage, e := r.need("stage")
	if e != nil {
		return nil, e
	}
	i := slices.IndexFunc(stages, func(st string) bool { return strings.EqualFold(st, stage) })
	if i < 0 {
		return nil, errf(400, codeInvalidParameter, "Invalid Model Version stage: %s. Value must be one of %s.", stage, strings.Join(stages, ", "))
	}
	stage = stages[i]
	archive := false
	if raw, ok := r.raw("archive_existing_versions"); ok {
		archive = strings.EqualFold(strings.Trim(string(raw), `"`), "true")
	}
	m, v, e := s.editModel(r, n, func(m *registry.Model, v *registry.Version) *apiError {
		v.Stage = stage
		if archive && (stage == "Staging" || stage == "Production") {
			for _, o := range m.Versions {
				if o.Version != v.Version && stageOf(o) == stage {
					o.Stage, o.Updated = "Archived", time.Now().UTC()
				}
			}
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"model_version": wireVersion(m, v)}, nil
}

func (s *Server) deleteModelVersion(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	name, e := r.modelName("name")
	if e != nil {
		return nil, e
	}
	n, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	if err := reg.Delete(r.ctx, name, n); err != nil {
		return nil, s.fromRegistry(err, name, n)
	}
	return map[string]any{}, nil
}

func (s *Server) setModelVersionTag(r *request) (any, *apiError) {
	n, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	value, e := r.str("value")
	if e != nil {
		return nil, e
	}
	if _, e := kvMap([]kv{{key, value}}, "tag", 1); e != nil {
		return nil, e
	}
	_, _, e = s.editModel(r, n, func(_ *registry.Model, v *registry.Version) *apiError {
		if v.Tags == nil {
			v.Tags = map[string]string{}
		}
		v.Tags[key] = value
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{}, nil
}

func (s *Server) deleteModelVersionTag(r *request) (any, *apiError) {
	n, e := r.versionNumber()
	if e != nil {
		return nil, e
	}
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	_, _, e = s.editModel(r, n, func(m *registry.Model, v *registry.Version) *apiError {
		if _, ok := v.Tags[key]; !ok {
			return errf(404, codeNotFound, "No tag with name: %s for model version (name=%s, version=%d)", key, m.Name, v.Version)
		}
		delete(v.Tags, key)
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{}, nil
}

func (s *Server) getDownloadURI(r *request) (any, *apiError) {
	out, e := s.getModelVersion(r)
	if e != nil {
		return nil, e
	}
	mv := out.(map[string]any)["model_version"].(map[string]any)
	return map[string]any{"artifact_uri": mv["source"]}, nil
}

// page reads max_results (default def, at most max) and page_token.
func (r *request) page(def, max int64) (int64, int, *apiError) {
	n, set, e := r.int64Field("max_results")
	if e != nil {
		return 0, 0, e
	}
	if !set {
		n = def
	}
	if n < 1 || n > max {
		return 0, 0, errf(400, codeInvalidParameter, "Invalid value %d for parameter 'max_results' supplied: it must be within 1..%d", n, max)
	}
	token, e := r.str("page_token")
	if e != nil {
		return 0, 0, e
	}
	offset := 0
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err == nil {
			offset, err = strconv.Atoi(string(b))
		}
		if err != nil || offset < 0 {
			return 0, 0, errf(400, codeInvalidParameter, "page_token is not one this server gave out; pass next_page_token from the previous answer unchanged")
		}
	}
	return n, offset, nil
}

// orderItems sorts items by MLflow's order_by clauses ("field [ASC|DESC]"),
// value giving each item's field; ties keep the given order.
func orderItems[T any](items []T, clauses []string, def string, value func(T, string) any) *apiError {
	if len(clauses) == 0 {
		clauses = []string{def}
	}
	type key struct {
		field string
		asc   bool
	}
	var keys []key
	for _, c := range clauses {
		f := strings.Fields(c)
		if len(f) == 0 || len(f) > 2 {
			return errf(400, codeInvalidParameter, "Invalid order_by clause %q: use \"<field> [ASC|DESC]\"", c)
		}
		k := key{field: strings.TrimPrefix(f[0], "attributes."), asc: true}
		if len(f) == 2 {
			switch strings.ToUpper(f[1]) {
			case "ASC":
			case "DESC":
				k.asc = false
			default:
				return errf(400, codeInvalidParameter, "Invalid order_by clause %q: use ASC or DESC", c)
			}
		}
		keys = append(keys, k)
	}
	sort.SliceStable(items, func(i, j int) bool {
		for _, k := range keys {
			if c := compareValues(value(items[i], k.field), value(items[j], k.field)); c != 0 {
				return (c < 0) == k.asc
			}
		}
		return false
	})
	return nil
}

// search holds what a registry search asks: its conditions, page and order.
type search struct {
	conds   []modelCond
	max     int64
	offset  int
	orderBy []string
}

// searchArgs reads a registry search's filter (over attrs), max_results
// (default def, at most max), page_token and order_by.
func (r *request) searchArgs(attrs []string, def, max int64) (search, *apiError) {
	var q search
	filter, e := r.str("filter")
	if e != nil {
		return q, e
	}
	if q.conds, e = parseModelFilter(filter, attrs); e != nil {
		return q, e
	}
	if q.max, q.offset, e = r.page(def, max); e != nil {
		return q, e
	}
	q.orderBy, e = r.strs("order_by")
	return q, e
}

// pageOf answers the page of hits that q asks for under key, with
// next_page_token when more are left.
func pageOf[T any](key string, hits []T, q search, wire func(T) any) map[string]any {
	page := []any{}
	for i := q.offset; i < len(hits) && len(page) < int(q.max); i++ {
		page = append(page, wire(hits[i]))
	}
	out := map[string]any{key: page}
	if next := q.offset + len(page); next < len(hits) {
		out["next_page_token"] = pageToken(next)
	}
	return out
}

// pageToken is the token of the page starting at offset (r.page reads it).
func pageToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(offset)))
}

func (s *Server) searchRegisteredModels(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	q, e := r.searchArgs(registeredModelAttrs, 100, 1000)
	if e != nil {
		return nil, e
	}
	all, err := reg.List(r.ctx)
	if err != nil {
		return nil, s.fromStore(err, "listing registered models")
	}
	value := func(m *registry.Model, f string) any {
		switch f {
		case "name":
			return m.Name
		case "creation_timestamp":
			return float64(ms(m.Created))
		case "last_updated_timestamp":
			return float64(ms(updatedOr(m.Updated, m.Created)))
		}
		if k, ok := strings.CutPrefix(f, "tags."); ok {
			if v, ok := m.Tags[k]; ok {
				return v
			}
		}
		return nil
	}
	var hits []*registry.Model
	for _, m := range all {
		if matchAll(q.conds, func(f string) any { return value(m, f) }, true) {
			hits = append(hits, m)
		}
	}
	if e := orderItems(hits, q.orderBy, "name ASC", value); e != nil {
		return nil, e
	}
	return pageOf("registered_models", hits, q, func(m *registry.Model) any { return wireModel(m) }), nil
}

func (s *Server) searchModelVersions(r *request) (any, *apiError) {
	reg, e := s.registry()
	if e != nil {
		return nil, e
	}
	q, e := r.searchArgs(modelVersionAttrs, 10000, 200000)
	if e != nil {
		return nil, e
	}
	all, err := reg.List(r.ctx)
	if err != nil {
		return nil, s.fromStore(err, "listing model versions")
	}
	// Each version's answer is made once; filter and order read it.
	type mv struct {
		v    *registry.Version
		wire map[string]any
	}
	value := func(x mv, f string) any {
		switch f {
		case "version":
			return float64(x.v.Version)
		case "creation_timestamp", "last_updated_timestamp":
			return float64(x.wire[f].(int64))
		case "source_path":
			return x.wire["source"]
		}
		if k, ok := strings.CutPrefix(f, "tags."); ok {
			if v, ok := x.v.Tags[k]; ok {
				return v
			}
			return nil
		}
		if v, ok := x.wire[f].(string); ok {
			return v
		}
		return nil
	}
	var hits []mv
	for _, m := range all {
		for _, v := range m.Versions {
			x := mv{v, wireVersion(m, v)}
			if matchAll(q.conds, func(f string) any { return value(x, f) }, true) {
				hits = append(hits, x)
			}
		}
	}
	if e := orderItems(hits, q.orderBy, "last_updated_timestamp DESC", value); e != nil {
		return nil, e
	}
	return pageOf("model_versions", hits, q, func(x mv) any { return x.wire }), nil
}

// modelVersionArtifact answers MLflow's GET
// /model-versions/get-artifact?name=&version=&path= (its web UI's download
// of a registered version's file): path inside the version's source, when
// that source is in this dashboard's artifact storage (runs:/RUN/PATH,
// mlflow-artifacts:/..., or an MLflow 3 logged model, models:/m-...).
func (s *Server) modelVersionArtifact(rctx context.Context, ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		writeErr(ctx, errf(405, codeBadRequest, "/model-versions/get-artifact takes GET"))
		return
	}
	raw := string(ctx.QueryArgs().Peek("path"))
	rel := cleanDir(raw)
	if err := store.ValidateRelPath(rel); rel != "" && err != nil {
		writeErr(ctx, invalidPath("%v; give a path inside the model version's files", err))
		return
	}
	if rel == "" {
		writeErr(ctx, missingValue("path"))
		return
	}
	if s.cfg.Artifacts == nil {
		writeErr(ctx, noArtifactStore())
		return
	}
	req, e := s.request(rctx, ctx)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	out, e := s.getModelVersion(req)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	source, _ := out.(map[string]any)["model_version"].(map[string]any)["source"].(string)
	join := func(dir string) string { return strings.Trim(cleanDir(dir)+"/"+rel, "/") }
	switch {
	case strings.HasPrefix(source, "runs:/"):
		run, dir, _ := strings.Cut(strings.TrimPrefix(source, "runs:/"), "/")
		if store.ValidateID(run) == nil {
			s.downloadFile(ctx, run, join(dir))
			return
		}
	case strings.HasPrefix(source, "mlflow-artifacts:"):
		p := strings.TrimPrefix(source, "mlflow-artifacts:")
		if strings.HasPrefix(p, "//") { // mlflow-artifacts://host:port/path
			if _, after, ok := strings.Cut(p[2:], "/"); ok {
				p = after
			} else {
				p = ""
			}
		}
		runID, inner, isRun, e := splitArtifactPath(join(p))
		if e != nil {
			writeErr(ctx, e)
			return
		}
		if isRun {
			s.downloadFile(ctx, runID, inner)
		} else {
			s.downloadFree(ctx, inner)
		}
		return
	case strings.HasPrefix(source, "models:/m-"):
		m, e := s.getModel(req, strings.TrimPrefix(source, "models:/"))
		if e != nil {
			writeErr(ctx, e)
			return
		}
		s.downloadFree(ctx, fmt.Sprintf("%s/models/%s/artifacts/%s", m.ExperimentID, m.ID, rel))
		return
	case localSource(source) || strings.HasPrefix(source, "s3://"):
		// A source a client wrote itself (a local one was checked at
		// registration to lie in its run's directory): read only inside
		// the dashboard's default artifact root.
		p := source
		if u, err := url.Parse(source); err == nil && u.Scheme == "file" {
			p = u.Path
		}
		if !strings.HasPrefix(p, "s3://") {
			p = path.Clean(p)
		}
		if under, inside := s.rootKey(p); inside {
			s.serveFrom(ctx, s.root, strings.TrimPrefix(under+"/"+rel, "/"), rel, "file "+rel+" of the model version")
			return
		}
	}
	writeErr(ctx, errf(404, codeNotFound, "model version source %q is not in this dashboard's artifact storage; download it from where it lives", source))
}
