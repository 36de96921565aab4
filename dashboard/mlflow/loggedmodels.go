package mlflow

// MLflow 3's logged models (mlflow.<flavor>.log_model, autologging's
// models): kept as store records of kind loggedModelKind, one per model,
// so every replica sees them; their files go through the artifact proxy to
// the free path <experiment id>/models/<model id>/artifacts/.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
)

// loggedModelKind is the store record kind of MLflow's logged models.
const loggedModelKind = "mlflow.logged_model"

// Limits of a logged model.
const (
	maxModelTags    = 1000
	maxModelParams  = 1000
	maxModelMetrics = 1000 // latest value per (key, dataset, digest, run)
)

// LoggedModels lists MLflow 3's logged models for fw's own Models page
// (api.Config.LoggedModels): the newest first (creation time, then ID), at
// most limit, with how many there are; each with its experiment's fw ID
// and name where it still exists.
func (s *Server) LoggedModels(ctx context.Context, limit int) ([]store.LoggedModelSummary, int, error) {
	recs, err := s.st.ListRecords(ctx, loggedModelKind)
	if err != nil {
		return nil, 0, err
	}
	models := make([]loggedModel, 0, len(recs))
	for _, r := range recs {
		var m loggedModel
		if json.Unmarshal(r.Body, &m) == nil && m.ID != "" {
			models = append(models, m)
		}
	}
	slices.SortFunc(models, func(a, b loggedModel) int {
		if a.Created != b.Created {
			return cmp.Compare(b.Created, a.Created)
		}
		return strings.Compare(a.ID, b.ID)
	})
	total := len(models)
	models = models[:min(limit, len(models))]
	exps := map[string]store.Experiment{}
	out := make([]store.LoggedModelSummary, 0, len(models))
	for _, m := range models {
		e, seen := exps[m.ExperimentID]
		if !seen {
			e, _ = s.fwExperiment(ctx, m.ExperimentID) // gone: listed without it
			exps[m.ExperimentID] = e
		}
		out = append(out, store.LoggedModelSummary{ModelID: m.ID, Name: m.Name, ExperimentID: e.ID, Experiment: e.Name,
			MLflowExperimentID: m.ExperimentID, ModelType: m.ModelType, SourceRunID: m.SourceRunID, Status: m.Status,
			Created: m.Created, Updated: m.Updated, Tags: m.Tags,
			ArtifactURI: "mlflow-artifacts:/" + m.ExperimentID + "/models/" + m.ID + "/artifacts"})
	}
	return out, total, nil
}

// MLflow's LoggedModelStatus names.
var modelStatuses = []string{"LOGGED_MODEL_STATUS_UNSPECIFIED", "LOGGED_MODEL_PENDING", "LOGGED_MODEL_READY", "LOGGED_MODEL_UPLOAD_FAILED"}

// loggedModel is a logged model as fw keeps it (the record's body).
type loggedModel struct {
	ID            string            `json:"id"`
	ExperimentID  string            `json:"experiment_id"` // MLflow's ID ("0" for Default)
	Name          string            `json:"name"`
	ModelType     string            `json:"model_type,omitempty"`
	SourceRunID   string            `json:"source_run_id,omitempty"`
	Status        string            `json:"status"`
	StatusMessage string            `json:"status_message,omitempty"`
	Created       int64             `json:"created_ms"`
	Updated       int64             `json:"updated_ms"`
	Tags          map[string]string `json:"tags,omitempty"`
	Params        map[string]string `json:"params,omitempty"`
	Metrics       []modelMetric     `json:"metrics,omitempty"`
}

type modelMetric struct {
	Key           string      `json:"key"`
	Value         store.Float `json:"value"`
	Timestamp     int64       `json:"timestamp"`
	Step          int64       `json:"step"`
	RunID         string      `json:"run_id,omitempty"`
	ModelID       string      `json:"model_id,omitempty"`
	DatasetName   string      `json:"dataset_name,omitempty"`
	DatasetDigest string      `json:"dataset_digest,omitempty"`
}

// wire is the model in MLflow's LoggedModel JSON.
func (m *loggedModel) wire() map[string]any {
	tags := []kv{}
	for _, k := range sortedKeys(m.Tags) {
		tags = append(tags, kv{k, m.Tags[k]})
	}
	params := []kv{}
	for _, k := range sortedKeys(m.Params) {
		params = append(params, kv{k, m.Params[k]})
	}
	metrics := m.Metrics
	if metrics == nil {
		metrics = []modelMetric{}
	}
	info := map[string]any{
		"model_id": m.ID, "experiment_id": m.ExperimentID, "name": m.Name,
		"creation_timestamp_ms": m.Created, "last_updated_timestamp_ms": m.Updated,
		"artifact_uri": "mlflow-artifacts:/" + m.ExperimentID + "/models/" + m.ID + "/artifacts",
		"status":       m.Status, "tags": tags,
	}
	for k, v := range map[string]string{"model_type": m.ModelType, "source_run_id": m.SourceRunID, "status_message": m.StatusMessage} {
		if v != "" {
			info[k] = v
		}
	}
	return map[string]any{"info": info, "data": map[string]any{"params": params, "metrics": metrics}}
}

func newModelID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "m-" + hex.EncodeToString(b[:])
}

// validModelID: an ID this server hands out looks like m-<32 hex>; others
// are taken if they are safe as a record key and a path element.
func validModelID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func modelNotFound(id string) *apiError {
	return errf(404, codeNotFound, "Logged model with ID '%s' not found", id)
}

// getModel reads a logged model.
func (s *Server) getModel(r *request, id string) (*loggedModel, *apiError) {
	if !validModelID(id) {
		return nil, modelNotFound(id)
	}
	rec, err := s.st.GetRecord(r.ctx, loggedModelKind, id)
	if err != nil {
		if store.ErrorCode(err) == store.CodeNotFound {
			return nil, modelNotFound(id)
		}
		return nil, s.fromStore(err, "reading logged model "+id)
	}
	var m loggedModel
	if err := json.Unmarshal(rec.Body, &m); err != nil {
		return nil, s.fromStore(err, "decoding logged model "+id)
	}
	return &m, nil
}

// errModelGone aborts an update of a model deleted meanwhile.
var errModelGone = errors.New("logged model not found")

// updateModel changes a logged model in one store transaction (fn must not
// call the store); it returns the model as written.
func (s *Server) updateModel(r *request, id string, fn func(m *loggedModel) *apiError) (*loggedModel, *apiError) {
	if !validModelID(id) {
		return nil, modelNotFound(id)
	}
	var out loggedModel
	var fe *apiError
	_, err := s.st.UpdateRecord(r.ctx, loggedModelKind, id, func(cur *store.Record) (json.RawMessage, error) {
		if cur == nil {
			return nil, errModelGone
		}
		var m loggedModel
		if err := json.Unmarshal(cur.Body, &m); err != nil {
			return nil, err
		}
		if fe = fn(&m); fe != nil {
			return nil, store.ErrKeep
		}
		m.Updated = time.Now().UnixMilli()
		out = m
		return json.Marshal(m)
	})
	switch {
	case errors.Is(err, errModelGone):
		return nil, modelNotFound(id)
	case fe != nil:
		return nil, fe
	case err != nil:
		return nil, s.fromStore(err, "updating logged model "+id)
	}
	return &out, nil
}

func kvMap(kvs []kv, what string, limit int) (map[string]string, *apiError) {
	out := map[string]string{}
	for i, t := range kvs {
		if err := store.ValidateKey(t.Key); err != nil {
			return nil, errf(400, codeInvalidParameter, "%s[%d]: %v", what, i, err)
		}
		if err := store.ValidateTagValue(t.Value, store.MaxTagValueLen); err != nil {
			return nil, errf(400, codeInvalidParameter, "%s %q: %v", what, t.Key, err)
		}
		out[t.Key] = t.Value
	}
	if len(out) > limit {
		return nil, errf(400, codeInvalidParameter, "at most %d %s on a logged model", limit, what)
	}
	return out, nil
}

func (s *Server) createLoggedModel(r *request) (any, *apiError) {
	expID, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	x, e := s.fwExperiment(r.ctx, expID)
	if e != nil {
		return nil, e
	}
	if x.Archived {
		return nil, errf(400, codeInvalidParameter, "The experiment %s must be in the 'active' state; restore it first", expID)
	}
	m := loggedModel{ID: newModelID(), ExperimentID: mlExperimentID(x.ID, x.Name), Status: "LOGGED_MODEL_PENDING"}
	for _, f := range []struct {
		name string
		to   *string
	}{{"name", &m.Name}, {"model_type", &m.ModelType}, {"source_run_id", &m.SourceRunID}} {
		if *f.to, e = r.str(f.name); e != nil {
			return nil, e
		}
	}
	if m.Name == "" {
		m.Name = store.RunName(m.ID)
	}
	if err := store.ValidateExperimentName(m.Name); err != nil {
		return nil, errf(400, codeInvalidParameter, "Invalid model name: %v", err)
	}
	var tags, params []kv
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	if e := r.decode("params", &params); e != nil {
		return nil, e
	}
	if m.Tags, e = kvMap(tags, "tags", maxModelTags); e != nil {
		return nil, e
	}
	if m.Params, e = kvMap(params, "params", maxModelParams); e != nil {
		return nil, e
	}
	m.Created = time.Now().UnixMilli()
	m.Updated = m.Created
	body, err := json.Marshal(m)
	if err != nil {
		return nil, errf(500, codeInternal, "encoding the logged model failed")
	}
	if _, err := s.st.UpdateRecord(r.ctx, loggedModelKind, m.ID, func(*store.Record) (json.RawMessage, error) { return body, nil }); err != nil {
		return nil, s.fromStore(err, "creating a logged model")
	}
	return map[string]any{"model": m.wire()}, nil
}

// loggedModelRoute answers logged-models/{id}[/tags[/{key}]|/params|
// /artifacts/directories|/artifacts/files] (rest is what follows
// "logged-models/"); false when the path is none of them.
func (s *Server) loggedModelRoute(rctx context.Context, ctx *fasthttp.RequestCtx, rest string) bool {
	parts := strings.Split(rest, "/")
	id := parts[0]
	method := string(ctx.Method())
	var ops []pathOp
	switch {
	case len(parts) == 1:
		ops = []pathOp{
			{"GET", func(r *request) (any, *apiError) { return s.getLoggedModel(r, id) }},
			{"PATCH", func(r *request) (any, *apiError) { return s.finalizeLoggedModel(r, id) }},
			{"DELETE", func(r *request) (any, *apiError) { return s.deleteLoggedModel(r, id) }},
		}
	case len(parts) == 2 && parts[1] == "tags":
		ops = []pathOp{{"PATCH", func(r *request) (any, *apiError) { return s.setLoggedModelTags(r, id) }}}
	case len(parts) >= 3 && parts[1] == "tags":
		key := strings.Join(parts[2:], "/")
		ops = []pathOp{{"DELETE", func(r *request) (any, *apiError) { return s.deleteLoggedModelTag(r, id, key) }}}
	case len(parts) == 2 && parts[1] == "params":
		ops = []pathOp{{"POST", func(r *request) (any, *apiError) { return s.logLoggedModelParams(r, id) }}}
	case len(parts) == 3 && parts[1] == "artifacts" && parts[2] == "directories":
		ops = []pathOp{{"GET", func(r *request) (any, *apiError) { return s.listLoggedModelArtifacts(r, id) }}}
	case len(parts) == 3 && parts[1] == "artifacts" && parts[2] == "files":
		if method != "GET" && method != "HEAD" {
			ctx.Response.Header.Set("Allow", "GET")
			writeErr(ctx, errf(405, codeBadRequest, "logged model files take GET"))
			return true
		}
		s.loggedModelFile(ctx, id)
		return true
	default:
		return false
	}
	s.serveOps(rctx, ctx, ops)
	return true
}

// pathOp is one method of a route with an ID in its path.
type pathOp struct {
	method string
	fn     func(*request) (any, *apiError)
}

// serveOps answers the request with the op of its method (GET also
// answering HEAD), or 405 naming the methods there are.
func (s *Server) serveOps(rctx context.Context, ctx *fasthttp.RequestCtx, ops []pathOp) {
	method := string(ctx.Method())
	allowed := make([]string, 0, len(ops))
	for _, o := range ops {
		allowed = append(allowed, o.method)
		if o.method == method || (o.method == "GET" && method == "HEAD") {
			req, e := s.request(rctx, ctx)
			if e == nil {
				var out any
				if out, e = o.fn(req); e == nil {
					writeJSON(ctx, 200, out)
					return
				}
			}
			writeErr(ctx, e)
			return
		}
	}
	ctx.Response.Header.Set("Allow", strings.Join(allowed, ", "))
	writeErr(ctx, errf(405, codeBadRequest, "%s takes %s, not %s", ctx.Path(), strings.Join(allowed, " or "), method))
}

func (s *Server) getLoggedModel(r *request, id string) (any, *apiError) {
	m, e := s.getModel(r, id)
	if e != nil {
		return nil, e
	}
	return map[string]any{"model": m.wire()}, nil
}

// modelStatus reads a LoggedModelStatus: its name or number.
func modelStatus(raw json.RawMessage) (string, bool) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		if n, err := strconv.Atoi(name); err == nil && n >= 0 && n < len(modelStatuses) {
			return modelStatuses[n], true
		}
		for _, st := range modelStatuses {
			if st == name {
				return st, true
			}
		}
		return "", false
	}
	var n int
	if json.Unmarshal(raw, &n) == nil && n >= 0 && n < len(modelStatuses) {
		return modelStatuses[n], true
	}
	return "", false
}

func (s *Server) finalizeLoggedModel(r *request, id string) (any, *apiError) {
	raw, ok := r.raw("status")
	if !ok {
		return nil, missingValue("status")
	}
	st, ok := modelStatus(raw)
	if !ok {
		return nil, invalidValue("status", raw, "one of "+strings.Join(modelStatuses[1:], ", "))
	}
	m, e := s.updateModel(r, id, func(m *loggedModel) *apiError {
		m.Status = st
		return nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"model": m.wire()}, nil
}

// deleteLoggedModel removes the model's record; its files stay in the
// artifact storage (fw does not delete the proxy's free files).
func (s *Server) deleteLoggedModel(r *request, id string) (any, *apiError) {
	if !validModelID(id) {
		return nil, modelNotFound(id)
	}
	gone, err := s.st.DeleteRecord(r.ctx, loggedModelKind, id)
	if err != nil {
		return nil, s.fromStore(err, "deleting logged model "+id)
	}
	if !gone {
		return nil, modelNotFound(id)
	}
	return struct{}{}, nil
}

func (s *Server) setLoggedModelTags(r *request, id string) (any, *apiError) {
	var tags []kv
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	set, e := kvMap(tags, "tags", maxModelTags)
	if e != nil {
		return nil, e
	}
	_, e = s.updateModel(r, id, func(m *loggedModel) *apiError {
		if m.Tags == nil {
			m.Tags = map[string]string{}
		}
		for k, v := range set {
			m.Tags[k] = v
		}
		if len(m.Tags) > maxModelTags {
			return errf(400, codeInvalidParameter, "at most %d tags on a logged model", maxModelTags)
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

func (s *Server) deleteLoggedModelTag(r *request, id, key string) (any, *apiError) {
	_, e := s.updateModel(r, id, func(m *loggedModel) *apiError {
		if _, ok := m.Tags[key]; !ok {
			return errf(404, codeNotFound, "No tag with key %q found for logged model %s", key, id)
		}
		delete(m.Tags, key)
		return nil
	})
	if e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

func (s *Server) logLoggedModelParams(r *request, id string) (any, *apiError) {
	var params []kv
	if e := r.decode("params", &params); e != nil {
		return nil, e
	}
	set, e := kvMap(params, "params", maxModelParams)
	if e != nil {
		return nil, e
	}
	_, e = s.updateModel(r, id, func(m *loggedModel) *apiError {
		if m.Params == nil {
			m.Params = map[string]string{}
		}
		for k, v := range set {
			if old, ok := m.Params[k]; ok && old != v {
				return errf(400, codeInvalidParameter, "param %q of logged model %s is %q; MLflow does not allow changing a logged param's value", k, id, old)
			}
			m.Params[k] = v
		}
		if len(m.Params) > maxModelParams {
			return errf(400, codeInvalidParameter, "at most %d params on a logged model", maxModelParams)
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

// linkModelMetrics keeps the metrics of a run's call that name a logged
// model on that model too (the latest value per key, dataset and run).
func (s *Server) linkModelMetrics(r *request, runID string, ms []wireMetric) *apiError {
	byModel := map[string][]modelMetric{}
	var order []string
	for _, m := range ms {
		if m.ModelID == "" || m.Value == nil {
			continue
		}
		if _, ok := byModel[m.ModelID]; !ok {
			order = append(order, m.ModelID)
		}
		byModel[m.ModelID] = append(byModel[m.ModelID], modelMetric{Key: m.Key, Value: store.Float(*m.Value), Timestamp: m.Timestamp.v, Step: m.Step.v,
			RunID: runID, ModelID: m.ModelID, DatasetName: m.DatasetName, DatasetDigest: m.DatasetDigest})
	}
	for _, id := range order {
		_, e := s.updateModel(r, id, func(m *loggedModel) *apiError {
			for _, nm := range byModel[id] {
				i := len(m.Metrics) // a new series unless one matches
				for j, old := range m.Metrics {
					if old.Key == nm.Key && old.DatasetName == nm.DatasetName && old.DatasetDigest == nm.DatasetDigest && old.RunID == nm.RunID {
						i = j
						break
					}
				}
				switch {
				case i < len(m.Metrics):
					if old := m.Metrics[i]; nm.Step > old.Step || (nm.Step == old.Step && nm.Timestamp >= old.Timestamp) {
						m.Metrics[i] = nm
					}
				case len(m.Metrics) >= maxModelMetrics:
					return errf(400, codeLimitExceeded, "logged model %s has %d metric series; fw keeps at most %d", id, len(m.Metrics), maxModelMetrics)
				default:
					m.Metrics = append(m.Metrics, nm)
				}
			}
			return nil
		})
		if e != nil {
			return e
		}
	}
	return nil
}

// searchLoggedModels answers logged-models/search over the models of the
// given experiments: MLflow's filter (AND of comparisons on name,
// model_id, model_type, status, source_run_id, creation_timestamp,
// last_updated_timestamp, tags.K, params.K, metrics.K), datasets (models
// with a metric on one of them), order_by (default creation time
// descending, then ID), paged.
func (s *Server) searchLoggedModels(r *request) (any, *apiError) {
	expIDs, e := r.strs("experiment_ids")
	if e != nil {
		return nil, e
	}
	filter, e := r.str("filter")
	if e != nil {
		return nil, e
	}
	maxResults, offset, e := r.page(100, 1000)
	if e != nil {
		return nil, e
	}
	var datasets []struct {
		Name   string `json:"dataset_name"`
		Digest string `json:"dataset_digest"`
	}
	if e := r.decode("datasets", &datasets); e != nil {
		return nil, e
	}
	var orderBy []struct {
		Field     string `json:"field_name"`
		Ascending *bool  `json:"ascending"`
	}
	if e := r.decode("order_by", &orderBy); e != nil {
		return nil, e
	}
	conds, e := parseModelFilter(filter, loggedModelAttrs)
	if e != nil {
		return nil, e
	}
	recs, err := s.st.ListRecords(r.ctx, loggedModelKind)
	if err != nil {
		return nil, s.fromStore(err, "searching logged models")
	}
	want := map[string]bool{}
	for _, id := range expIDs {
		want[id] = true
	}
	var models []*loggedModel
	for _, rec := range recs {
		var m loggedModel
		if json.Unmarshal(rec.Body, &m) != nil {
			continue
		}
		if len(want) > 0 && !want[m.ExperimentID] {
			continue
		}
		if !m.matches(conds) || !m.onDatasets(datasets) {
			continue
		}
		models = append(models, &m)
	}
	field, asc := "creation_timestamp", false
	if len(orderBy) > 0 {
		field = orderBy[0].Field
		asc = orderBy[0].Ascending == nil || *orderBy[0].Ascending
	}
	sort.SliceStable(models, func(i, j int) bool {
		a, b := models[i].sortValue(field), models[j].sortValue(field)
		if c := compareValues(a, b); c != 0 {
			return (c < 0) == asc
		}
		return models[i].ID < models[j].ID
	})
	out := map[string]any{"models": []any{}}
	page := []any{}
	for i := offset; i < len(models) && len(page) < int(maxResults); i++ {
		page = append(page, models[i].wire())
	}
	out["models"] = page
	if next := offset + len(page); next < len(models) {
		out["next_page_token"] = pageToken(next)
	}
	return out, nil
}

func (m *loggedModel) onDatasets(ds []struct {
	Name   string `json:"dataset_name"`
	Digest string `json:"dataset_digest"`
}) bool {
	if len(ds) == 0 {
		return true
	}
	for _, d := range ds {
		for _, mm := range m.Metrics {
			if mm.DatasetName == d.Name && (d.Digest == "" || mm.DatasetDigest == d.Digest) {
				return true
			}
		}
	}
	return false
}

// modelCond is one comparison of a logged-model filter.
type modelCond struct {
	field string // attribute name, or tags./params./metrics. + key
	op    string // = != < <= > >= LIKE ILIKE
	str   string
	num   float64
	isNum bool
}

// loggedModelAttrs are the attributes a logged-model filter may name.
var loggedModelAttrs = []string{"name", "model_id", "model_type", "status", "source_run_id", "creation_timestamp", "creation_time", "last_updated_timestamp", "last_updated_time"}

// parseModelFilter reads a filter of comparisons joined by AND over attrs
// (bare or attributes.X), tags.X, params.X and metrics.X.
func parseModelFilter(filter string, attrs []string) ([]modelCond, *apiError) {
	return parseConds(filter, func(entity, key string) (string, *apiError) {
		switch strings.ToLower(entity) {
		case "tag", "tags":
			return "tags." + key, nil
		case "param", "params":
			return "params." + key, nil
		case "metric", "metrics":
			return "metrics." + key, nil
		case "", "attribute", "attributes", "attr":
			if !slices.Contains(attrs, key) {
				return "", errf(400, codeInvalidParameter, "Invalid filter %q: unknown attribute %q; the attributes are %s", filter, key, strings.Join(attrs, ", "))
			}
			return key, nil
		}
		return "", errf(400, codeInvalidParameter, "Invalid filter %q: unknown entity %q", filter, entity)
	})
}

// parseConds reads MLflow's filter language of comparisons joined by AND
// (field, =, !=, <, <=, >, >=, LIKE or ILIKE, a string or a number);
// field names what each compares: its entity ("" for a bare name) and
// key, as the field the caller's value function reads.
func parseConds(filter string, field func(entity, key string) (string, *apiError)) ([]modelCond, *apiError) {
	toks, e := lexMLflow(filter)
	if e != nil {
		return nil, e
	}
	var out []modelCond
	for i := 0; i < len(toks); {
		if len(out) > 0 {
			if toks[i].kind != 'i' || !strings.EqualFold(toks[i].text, "AND") {
				return nil, errf(400, codeInvalidParameter, "Invalid filter %q: comparisons are joined with AND (column %d)", filter, toks[i].pos)
			}
			i++
			if i == len(toks) {
				return nil, errf(400, codeInvalidParameter, "Invalid filter %q: expected a comparison after AND", filter)
			}
		}
		entity, key, n, ok := splitEntity(toks[i:])
		if !ok {
			if toks[i].kind != 'i' && toks[i].kind != 'q' {
				return nil, errf(400, codeInvalidParameter, "Invalid filter %q: expected a field at column %d", filter, toks[i].pos)
			}
			entity, key, n = "", toks[i].text, 1
		}
		var c modelCond
		if c.field, e = field(entity, key); e != nil {
			return nil, e
		}
		i += n
		if i+1 >= len(toks) {
			return nil, errf(400, codeInvalidParameter, "Invalid filter %q: expected an operator and a value after %s", filter, c.field)
		}
		op := toks[i]
		switch {
		case op.kind == 'o':
			c.op = strings.ReplaceAll(op.text, "==", "=")
		case op.kind == 'i' && (strings.EqualFold(op.text, "LIKE") || strings.EqualFold(op.text, "ILIKE")):
			c.op = strings.ToUpper(op.text)
		default:
			return nil, errf(400, codeInvalidParameter, "Invalid filter %q: unsupported operator %q at column %d", filter, op.text, op.pos)
		}
		v := toks[i+1]
		switch v.kind {
		case 's':
			c.str = v.text
		case 'n':
			f, err := strconv.ParseFloat(v.text, 64)
			if err != nil {
				return nil, errf(400, codeInvalidParameter, "Invalid filter %q: bad number %q", filter, v.text)
			}
			c.num, c.isNum, c.str = f, true, v.text
		default:
			return nil, errf(400, codeInvalidParameter, "Invalid filter %q: expected a value at column %d", filter, v.pos)
		}
		out = append(out, c)
		i += 2
	}
	return out, nil
}

// sortValue is a field's value for ordering: a float64, a string, or nil.
func (m *loggedModel) sortValue(field string) any {
	switch field {
	case "creation_timestamp", "creation_time":
		return float64(m.Created)
	case "last_updated_timestamp", "last_updated_time":
		return float64(m.Updated)
	case "name":
		return m.Name
	case "model_id":
		return m.ID
	case "model_type":
		return m.ModelType
	case "status":
		return m.Status
	case "source_run_id":
		return m.SourceRunID
	}
	if k, ok := strings.CutPrefix(field, "metrics."); ok {
		var latest *modelMetric
		for i := range m.Metrics {
			if mm := &m.Metrics[i]; mm.Key == k && (latest == nil || mm.Timestamp > latest.Timestamp) {
				latest = mm
			}
		}
		if latest == nil {
			return nil
		}
		return float64(latest.Value)
	}
	if k, ok := strings.CutPrefix(field, "params."); ok {
		if v, ok := m.Params[k]; ok {
			return v
		}
		return nil
	}
	if k, ok := strings.CutPrefix(field, "tags."); ok {
		if v, ok := m.Tags[k]; ok {
			return v
		}
	}
	return nil
}

// compareValues orders nil last, numbers before strings.
func compareValues(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	af, aNum := a.(float64)
	bf, bNum := b.(float64)
	switch {
	case aNum && bNum:
		switch {
		case af < bf:
			return -1
		case af > bf:
			return 1
		}
		return 0
	case aNum:
		return -1
	case bNum:
		return 1
	}
	return strings.Compare(a.(string), b.(string))
}

func (m *loggedModel) matches(conds []modelCond) bool { return matchAll(conds, m.sortValue, false) }

// matchAll reports whether every condition holds of the values value gives
// (a float64, a string, or nil for none). A field without a value fails
// every comparison, except != when absentUnequal (the model registry's
// search: MLflow's client excludes prompts with
// tags.`mlflow.prompt.is_prompt` != 'true', which a model without the tag
// passes).
func matchAll(conds []modelCond, value func(field string) any, absentUnequal bool) bool {
	for _, c := range conds {
		v := value(c.field)
		if v == nil {
			if absentUnequal && c.op == "!=" {
				continue
			}
			return false
		}
		if f, ok := v.(float64); ok {
			want := c.num
			if !c.isNum {
				var err error
				if want, err = strconv.ParseFloat(c.str, 64); err != nil {
					return false
				}
			}
			if !cmpNum(f, c.op, want) {
				return false
			}
			continue
		}
		if !cmpStr(v.(string), c.op, c.str) {
			return false
		}
	}
	return true
}

func cmpNum(a float64, op string, b float64) bool {
	if math.IsNaN(a) {
		return false
	}
	switch op {
	case "=":
		return a == b
	case "!=":
		return a != b
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	}
	return false
}

func cmpStr(a, op, b string) bool {
	switch op {
	case "=":
		return a == b
	case "!=":
		return a != b
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	case "LIKE":
		return likeMatch(a, b)
	case "ILIKE":
		return likeMatch(strings.ToLower(a), strings.ToLower(b))
	}
	return false
}

// likeMatch is SQL LIKE: % any run, _ one character, case kept.
func likeMatch(s, p string) bool {
	sr, pr := []rune(s), []rune(p)
	// dp over the pattern, iterative with backtracking on the last %.
	si, pi, star, mark := 0, 0, -1, 0
	for si < len(sr) {
		switch {
		case pi < len(pr) && (pr[pi] == '_' || pr[pi] == sr[si]):
			si++
			pi++
		case pi < len(pr) && pr[pi] == '%':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(pr) && pr[pi] == '%' {
		pi++
	}
	return pi == len(pr)
}

// listLoggedModelArtifacts answers logged-models/{id}/artifacts/directories
// (?artifact_directory_path=): the model's files under that directory.
func (s *Server) listLoggedModelArtifacts(r *request, id string) (any, *apiError) {
	m, e := s.getModel(r, id)
	if e != nil {
		return nil, e
	}
	dir, e := r.str("artifact_directory_path")
	if e != nil {
		return nil, e
	}
	dir = cleanDir(dir)
	if dir != "" {
		if err := store.ValidateRelPath(dir); err != nil {
			return nil, invalidPath("%v; give a path inside the artifacts", err)
		}
	}
	root := m.ExperimentID + "/models/" + m.ID + "/artifacts"
	full := root
	if dir != "" {
		full += "/" + dir
	}
	files, e := s.freeChildren(r.ctx, full)
	if e != nil {
		return nil, e
	}
	if dir != "" {
		for i := range files {
			files[i].Path = dir + "/" + files[i].Path
		}
	}
	return map[string]any{"root_uri": "mlflow-artifacts:/" + root, "files": files}, nil
}

// loggedModelFile answers logged-models/{id}/artifacts/files
// ?artifact_file_path=: one of the model's files.
func (s *Server) loggedModelFile(ctx *fasthttp.RequestCtx, id string) {
	m, e := s.getModel(&request{ctx: s.reqCtx(ctx)}, id)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	rel := cleanDir(string(ctx.QueryArgs().Peek("artifact_file_path")))
	if rel == "" {
		writeErr(ctx, missingValue("artifact_file_path"))
		return
	}
	if err := store.ValidateRelPath(rel); err != nil {
		writeErr(ctx, invalidPath("%v; give a path inside the artifacts", err))
		return
	}
	s.downloadFree(ctx, fmt.Sprintf("%s/models/%s/artifacts/%s", m.ExperimentID, m.ID, rel))
}
