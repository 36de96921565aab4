package mlflow

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
)

// Reserved tags MLflow's clients set.
const (
	tagRunName    = "mlflow.runName"
	tagUser       = "mlflow.user"
	tagSourceName = "mlflow.source.name"
	tagGitCommit  = "mlflow.source.git.commit"
	tagModelHist  = "mlflow.log-model.history"
	// inputsTag records log-inputs (MLflow's dataset inputs) as JSON.
	inputsTag = "fw.mlflow.inputs"
	// modelInputsTag records log-inputs' models (MLflow 3) as JSON.
	modelInputsTag = "fw.mlflow.model_inputs"
	// outputsTag records log-outputs (MLflow 3's models a run produced) as
	// JSON.
	outputsTag = "fw.mlflow.outputs"
)

// reservedTag reports whether a run tag is fw's bookkeeping of MLflow's
// state: hidden from MLflow's tag lists, refused from clients.
func reservedTag(k string) bool {
	switch k {
	case lifecycleTag, inputsTag, modelInputsTag, outputsTag:
		return true
	}
	return false
}

type runInfo struct {
	RunID          string `json:"run_id"`
	RunUUID        string `json:"run_uuid"`
	RunName        string `json:"run_name"`
	ExperimentID   string `json:"experiment_id"`
	UserID         string `json:"user_id"`
	Status         string `json:"status"`
	StartTime      int64  `json:"start_time"`
	EndTime        *int64 `json:"end_time,omitempty"`
	ArtifactURI    string `json:"artifact_uri"`
	LifecycleStage string `json:"lifecycle_stage"`
}

type metric struct {
	Key       string      `json:"key"`
	Value     store.Float `json:"value"`
	Timestamp int64       `json:"timestamp"`
	Step      int64       `json:"step"`
	RunID     string      `json:"run_id,omitempty"` // get-history-bulk-interval only
}

type runData struct {
	Metrics []metric `json:"metrics"`
	Params  []kv     `json:"params"`
	Tags    []kv     `json:"tags"`
}

type runInputs struct {
	DatasetInputs []json.RawMessage `json:"dataset_inputs"`
	ModelInputs   []json.RawMessage `json:"model_inputs,omitempty"`
}

type runOutputs struct {
	ModelOutputs []json.RawMessage `json:"model_outputs,omitempty"`
}

type run struct {
	Info    runInfo    `json:"info"`
	Data    runData    `json:"data"`
	Inputs  runInputs  `json:"inputs"`
	Outputs runOutputs `json:"outputs"`
}

// MLflow's run statuses and fw's.
func mlStatus(s store.Status) string {
	switch s {
	case store.StatusQueued:
		return "SCHEDULED"
	case store.StatusFinished:
		return "FINISHED"
	case store.StatusFailed:
		return "FAILED"
	case store.StatusStopped:
		return "KILLED"
	}
	return "RUNNING"
}

func fwStatus(s string) (store.Status, bool) {
	switch strings.ToUpper(s) {
	case "RUNNING", "1":
		return store.StatusRunning, true
	case "SCHEDULED", "2":
		return store.StatusQueued, true
	case "FINISHED", "3":
		return store.StatusFinished, true
	case "FAILED", "4":
		return store.StatusFailed, true
	case "KILLED", "5":
		return store.StatusStopped, true
	}
	return "", false
}

// paramString is a param's value as MLflow shows it (a string).
func paramString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func artifactURI(expID, runID string) string {
	return "mlflow-artifacts:/" + expID + "/" + runID + "/artifacts"
}

func (s *Server) toRun(ctx context.Context, r store.Run) run {
	expID := mlExperimentID(r.ExperimentID, r.Experiment)
	name := r.Name
	if n := r.Tags[tagRunName]; n != "" {
		name = n
	}
	start := r.Created
	if r.Started != nil {
		start = *r.Started
	}
	out := run{
		Info: runInfo{
			RunID: r.ID, RunUUID: r.ID, RunName: name, ExperimentID: expID,
			UserID: r.Tags[tagUser], Status: mlStatus(r.Status), StartTime: start.UnixMilli(),
			ArtifactURI: s.runArtifactURI(ctx, r), LifecycleStage: "active",
		},
		Data:   runData{Metrics: []metric{}, Params: []kv{}, Tags: []kv{}},
		Inputs: runInputs{DatasetInputs: []json.RawMessage{}},
	}
	if r.Ended != nil {
		out.Info.EndTime = store.Ptr(r.Ended.UnixMilli())
	}
	if r.Tags[lifecycleTag] == "deleted" {
		out.Info.LifecycleStage = "deleted"
	}
	for _, k := range sortedKeys(r.Metrics) {
		m := r.Metrics[k]
		out.Data.Metrics = append(out.Data.Metrics, metric{Key: k, Value: store.Float(m.Last), Timestamp: m.LastTime.UnixMilli(), Step: m.LastStep})
	}
	for _, k := range sortedKeys(r.Params) {
		out.Data.Params = append(out.Data.Params, kv{k, paramString(r.Params[k])})
	}
	for _, k := range sortedKeys(r.Tags) {
		if reservedTag(k) {
			continue
		}
		out.Data.Tags = append(out.Data.Tags, kv{k, r.Tags[k]})
	}
	if in := r.Tags[inputsTag]; in != "" {
		_ = json.Unmarshal([]byte(in), &out.Inputs.DatasetInputs)
	}
	if in := r.Tags[modelInputsTag]; in != "" {
		_ = json.Unmarshal([]byte(in), &out.Inputs.ModelInputs)
	}
	if o := r.Tags[outputsTag]; o != "" {
		_ = json.Unmarshal([]byte(o), &out.Outputs.ModelOutputs)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// fwName turns an MLflow run name into one fw accepts (see
// store.ValidateName): other characters become '-'. The MLflow name itself
// stays in the mlflow.runName tag.
func fwName(name string) string {
	var b strings.Builder
	n := 0
	for _, r := range name {
		if n == store.MaxNameLen {
			break
		}
		if store.NameRune(r) {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
		n++
	}
	out := strings.TrimLeft(strings.TrimSpace(b.String()), ".")
	return out
}

func newRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func msTime(ms int64) store.Timestamp {
	if ms <= 0 {
		return store.Timestamp{}
	}
	return store.Timestamp{Time: time.UnixMilli(ms).UTC()}
}

func (s *Server) createRun(r *request) (any, *apiError) {
	expID, e := r.str("experiment_id")
	if e != nil {
		return nil, e
	}
	if expID == "" {
		expID = "0"
	}
	user, e := r.str("user_id")
	if e != nil {
		return nil, e
	}
	runName, e := r.str("run_name")
	if e != nil {
		return nil, e
	}
	start, _, e := r.int64Field("start_time")
	if e != nil {
		return nil, e
	}
	var tags []kv
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	tagMap := map[string]string{}
	for _, t := range tags {
		if reservedTag(t.Key) {
			return nil, errf(400, codeInvalidParameter, "tag %q is reserved by fw", t.Key)
		}
		tagMap[t.Key] = t.Value
	}
	if runName == "" {
		runName = tagMap[tagRunName]
	}
	id := newRunID()
	if runName == "" {
		runName = store.RunName(id)
	}
	tagMap[tagRunName] = runName
	if user != "" && tagMap[tagUser] == "" {
		tagMap[tagUser] = user
	}
	x, e := s.fwExperiment(r.ctx, expID)
	if e != nil {
		return nil, e
	}
	if x.Archived {
		return nil, errf(400, codeInvalidParameter, "The experiment %s must be in the 'active' state; restore it first", expID)
	}
	name := fwName(runName)
	if name == "" {
		name = store.RunName(id)
	}
	ev := store.Event{
		Type: store.EventRunStart, ExperimentID: x.ID, Name: name, Tags: tagMap, Status: store.StatusRunning,
		Time: msTime(start),
	}
	if src, git := tagMap[tagSourceName], tagMap[tagGitCommit]; src != "" || git != "" {
		ev.Source = &store.Source{Command: src, GitCommit: git}
	}
	if e := s.apply(r.ctx, id, []store.Event{ev}); e != nil {
		if e.code == codeNotFound && expID == "0" { // Default was deleted through fw's API: make it again once
			if _, e2 := s.defaultExperimentID(r.ctx, true); e2 == nil {
				if x, e2 = s.fwExperiment(r.ctx, expID); e2 == nil {
					ev.ExperimentID = x.ID
					e = s.apply(r.ctx, id, []store.Event{ev})
				}
			}
		}
		if e != nil {
			return nil, e
		}
	}
	return s.runAnswer(r, id)
}

func (s *Server) runAnswer(r *request, id string) (any, *apiError) {
	got, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	return map[string]any{"run": s.toRun(r.ctx, got)}, nil
}

func (s *Server) runErr(err error, id string) *apiError {
	if store.ErrorCode(err) == store.CodeNotFound {
		return errf(404, codeNotFound, "Run with id=%s not found", id)
	}
	return s.fromStore(err, "reading run "+id)
}

// runID reads run_id (or the older run_uuid).
func (r *request) runID() (string, *apiError) {
	id, e := r.str("run_id")
	if e != nil {
		return "", e
	}
	if id == "" {
		if id, e = r.str("run_uuid"); e != nil {
			return "", e
		}
	}
	if id == "" {
		return "", missingValue("run_id")
	}
	if err := store.ValidateID(id); err != nil {
		return "", errf(404, codeNotFound, "Run with id=%s not found", id)
	}
	return id, nil
}

// mustBeActive refuses a write to a run MLflow's delete_run soft-deleted,
// as MLflow does (restore_run makes it writable again).
func (s *Server) mustBeActive(r *request, id string) *apiError {
	v, ok, err := s.st.RunTag(r.ctx, id, lifecycleTag)
	if err != nil {
		return s.fromStore(err, "reading run "+id)
	}
	if ok && v == "deleted" {
		return deletedRun(id)
	}
	return nil
}

// deletedRun is MLflow's refusal of a write to a soft-deleted run.
func deletedRun(id string) *apiError {
	return errf(400, codeInvalidParameter, "The run %s must be in the 'active' state. Current state is deleted. Restore it first (restore_run)", id)
}

func (s *Server) getRun(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	return s.runAnswer(r, id)
}

func (s *Server) updateRun(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	status, e := r.str("status")
	if e != nil {
		return nil, e
	}
	end, _, e := r.int64Field("end_time")
	if e != nil {
		return nil, e
	}
	runName, e := r.str("run_name")
	if e != nil {
		return nil, e
	}
	cur, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	var events []store.Event
	if runName != "" {
		events = append(events, store.Event{Type: store.EventTag, Tags: map[string]string{tagRunName: runName}})
	}
	if status != "" {
		to, ok := fwStatus(status)
		if !ok {
			return nil, errf(400, codeInvalidParameter, "status %q is not one of RUNNING, SCHEDULED, FINISHED, FAILED, KILLED", status)
		}
		events = append(events, transition(cur.Status, to, msTime(end))...)
	}
	if len(events) > 0 {
		if e := s.apply(r.ctx, id, events); e != nil {
			return nil, e
		}
	}
	if runName != "" {
		if n := fwName(runName); n != "" && n != cur.Name {
			if _, err := s.st.UpdateRun(r.ctx, id, store.RunPatch{Name: &n}); err != nil {
				return nil, s.fromStore(err, "renaming run "+id)
			}
		}
	}
	got, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	return map[string]any{"run_info": s.toRun(r.ctx, got).Info}, nil
}

// transition is the events that move a run from one status to another the
// way MLflow's update_run does: a terminal run set running again is resumed
// (fw's run_resume), one set to another end state is resumed and ended.
func transition(from, to store.Status, at store.Timestamp) []store.Event {
	if from == to {
		return nil
	}
	var out []store.Event
	if from.Terminal() {
		resumeTo := to
		if to.Terminal() {
			resumeTo = store.StatusRunning
		}
		out = append(out, store.Event{Type: store.EventRunResume, Status: resumeTo})
		if !to.Terminal() {
			return out
		}
	}
	if to.Terminal() {
		return append(out, store.Event{Type: store.EventRunEnd, Status: to, Time: at})
	}
	return append(out, store.Event{Type: store.EventStatus, Status: to, Time: at})
}

// deleteRun is MLflow's soft delete: the run gets fw's reserved tag
// fw.lifecycle=deleted (hidden from MLflow's default searches); fw's own
// DELETE /api/runs/{id} removes a run for good.
func (s *Server) deleteRun(r *request) (any, *apiError) {
	return s.tagRun(r, store.Event{Type: store.EventTag, Tags: map[string]string{lifecycleTag: "deleted"}}, false)
}

func (s *Server) restoreRun(r *request) (any, *apiError) {
	return s.tagRun(r, store.Event{Type: store.EventTag, DeleteTags: []string{lifecycleTag}}, false)
}

// tagRun applies one tag event to the run of the request; active: only to
// a run that is not soft-deleted (MLflow's set_tag and delete_tag).
func (s *Server) tagRun(r *request, ev store.Event, active bool) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if active {
		if e := s.mustBeActive(r, id); e != nil {
			return nil, e
		}
	}
	if e := s.apply(r.ctx, id, []store.Event{ev}); e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

// wireMetric is a metric as clients send it.
type wireMetric struct {
	Key       string `json:"key"`
	Value     *f64   `json:"value"`
	Timestamp i64    `json:"timestamp"`
	Step      i64    `json:"step"`
	// MLflow 3: the logged model (and dataset) the value is about; the
	// value is also kept on that model (loggedmodels.go).
	ModelID       string `json:"model_id,omitempty"`
	DatasetName   string `json:"dataset_name,omitempty"`
	DatasetDigest string `json:"dataset_digest,omitempty"`
}

// metricEvents groups metrics into fw events, one per (step, timestamp),
// in the order they came.
func metricEvents(ms []wireMetric) ([]store.Event, *apiError) {
	type group struct{ step, ts int64 }
	idx := map[group]int{}
	var out []store.Event
	for i, m := range ms {
		if m.Key == "" {
			return nil, missingValue(fmt.Sprintf("metrics[%d].key", i))
		}
		if err := store.ValidateKey(m.Key); err != nil {
			return nil, errf(400, codeInvalidParameter, "metrics[%d]: %v", i, err)
		}
		if m.Value == nil {
			return nil, missingValue(fmt.Sprintf("metrics[%d].value", i))
		}
		if !m.Timestamp.set {
			return nil, missingValue(fmt.Sprintf("metrics[%d].timestamp", i))
		}
		g := group{m.Step.v, m.Timestamp.v}
		j, ok := idx[g]
		if !ok {
			j = len(out)
			idx[g] = j
			out = append(out, store.Event{Type: store.EventMetrics, Step: store.Ptr(m.Step.v), Values: map[string]store.Float{}, Time: msTime(m.Timestamp.v)})
		}
		out[j].Values[m.Key] = store.Float(*m.Value)
	}
	return out, nil
}

func (s *Server) logMetric(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	var m wireMetric
	var e2 *apiError
	if m.Key, e2 = r.need("key"); e2 != nil {
		return nil, e2
	}
	raw, ok := r.raw("value")
	if !ok {
		return nil, missingValue("value")
	}
	var v f64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, invalidValue("value", raw, "a number")
	}
	m.Value = &v
	if m.Timestamp.v, m.Timestamp.set, e = r.int64Field("timestamp"); e != nil {
		return nil, e
	}
	if m.Step.v, m.Step.set, e = r.int64Field("step"); e != nil {
		return nil, e
	}
	if !m.Timestamp.set {
		return nil, missingValue("timestamp")
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"model_id", &m.ModelID}, {"dataset_name", &m.DatasetName}, {"dataset_digest", &m.DatasetDigest}} {
		if *f.to, e = r.str(f.name); e != nil {
			return nil, e
		}
	}
	events, e := metricEvents([]wireMetric{m})
	if e != nil {
		return nil, e
	}
	if e := s.apply(r.ctx, id, events); e != nil {
		return nil, e
	}
	if e := s.linkModelMetrics(r, id, []wireMetric{m}); e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

func (s *Server) logBatch(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	var ms []wireMetric
	var params, tags []kv
	if raw, ok := r.raw("metrics"); ok {
		var fast bool
		if ms, fast = decodeMetricsFast(&s.parsers, raw); !fast {
			ms = nil
			if e := r.decode("metrics", &ms); e != nil {
				return nil, e
			}
		}
	}
	if e := r.decode("params", &params); e != nil {
		return nil, e
	}
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	switch {
	case len(ms) > maxMetricsPerBatch:
		return nil, errf(400, codeInvalidParameter, "A batch logging request can contain at most %d metrics. Got %d metrics. Please split up metrics across multiple requests and try again.", maxMetricsPerBatch, len(ms))
	case len(params) > maxParamsPerBatch:
		return nil, errf(400, codeInvalidParameter, "A batch logging request can contain at most %d params. Got %d params. Please split up params across multiple requests and try again.", maxParamsPerBatch, len(params))
	case len(tags) > maxTagsPerBatch:
		return nil, errf(400, codeInvalidParameter, "A batch logging request can contain at most %d tags. Got %d tags. Please split up tags across multiple requests and try again.", maxTagsPerBatch, len(tags))
	case len(ms)+len(params)+len(tags) > maxEntitiesBatch:
		return nil, errf(400, codeInvalidParameter, "A batch logging request can contain at most %d metrics, params and tags in total. Got %d. Please split it up.", maxEntitiesBatch, len(ms)+len(params)+len(tags))
	}
	var events []store.Event
	if len(params) > 0 {
		pm, e := paramMap(params)
		if e != nil {
			return nil, e
		}
		events = append(events, store.Event{Type: store.EventParam, Params: pm})
	}
	if len(tags) > 0 {
		tm := map[string]string{}
		for _, t := range tags {
			if reservedTag(t.Key) {
				return nil, errf(400, codeInvalidParameter, "tag %q is reserved by fw", t.Key)
			}
			tm[t.Key] = t.Value
		}
		events = append(events, store.Event{Type: store.EventTag, Tags: tm})
	}
	me, e := metricEvents(ms)
	if e != nil {
		return nil, e
	}
	events = append(events, me...)
	if len(events) == 0 {
		return struct{}{}, nil
	}
	if e := s.apply(r.ctx, id, events); e != nil {
		return nil, e
	}
	if e := s.linkModelMetrics(r, id, ms); e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

func paramMap(params []kv) (map[string]any, *apiError) {
	pm := make(map[string]any, len(params))
	for _, p := range params {
		if p.Key == "" {
			return nil, errf(400, codeInvalidParameter, "missing value for required parameter 'key' of a param")
		}
		if len(p.Value) > maxParamValue {
			return nil, errf(400, codeInvalidParameter, "param %q: the value is %d characters long; MLflow's limit is %d", p.Key, len(p.Value), maxParamValue)
		}
		if old, ok := pm[p.Key]; ok && old != p.Value {
			return nil, errf(400, codeInvalidParameter, "Duplicate parameter keys have been submitted: %q with different values", p.Key)
		}
		pm[p.Key] = p.Value
	}
	return pm, nil
}

func (s *Server) logParam(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
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
	pm, e := paramMap([]kv{{key, value}})
	if e != nil {
		return nil, e
	}
	if e := s.apply(r.ctx, id, []store.Event{{Type: store.EventParam, Params: pm}}); e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

func (s *Server) setTag(r *request) (any, *apiError) {
	// Fields in MLflow's order, so a request with several wrong ones gets
	// MLflow's first complaint.
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	if reservedTag(key) {
		return nil, errf(400, codeInvalidParameter, "tag %q is reserved by fw", key)
	}
	value, e := r.str("value")
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	if key == tagRunName {
		if n := fwName(value); n != "" {
			if _, err := s.st.UpdateRun(r.ctx, id, store.RunPatch{Name: &n}); err != nil {
				return nil, s.runErr(err, id)
			}
		}
	}
	return s.tagRun(r, store.Event{Type: store.EventTag, Tags: map[string]string{key: value}}, false)
}

func (s *Server) deleteTag(r *request) (any, *apiError) {
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	got, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	if got.Tags[lifecycleTag] == "deleted" {
		return nil, deletedRun(id)
	}
	if _, ok := got.Tags[key]; !ok || reservedTag(key) {
		return nil, errf(404, codeNotFound, "No tag with name: %s in run with id %s", key, id)
	}
	return s.tagRun(r, store.Event{Type: store.EventTag, DeleteTags: []string{key}}, false)
}

// logInputs records MLflow's dataset inputs on the run (the reserved tag
// fw.mlflow.inputs, shown back as the run's inputs).
func (s *Server) logInputs(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	var datasets, models []json.RawMessage
	if e := r.decode("datasets", &datasets); e != nil {
		return nil, e
	}
	if e := r.decode("models", &models); e != nil {
		return nil, e
	}
	if len(datasets) > 0 {
		if _, e := s.appendJSONTag(r, id, inputsTag, datasets); e != nil {
			return nil, e
		}
	}
	if len(models) > 0 {
		if _, e := s.appendJSONTag(r, id, modelInputsTag, models); e != nil {
			return nil, e
		}
	}
	return struct{}{}, nil
}

// logOutputs records MLflow 3's log_outputs (the models a run produced, at
// which step) on the run, shown back as its outputs.
func (s *Server) logOutputs(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	var models []json.RawMessage
	if e := r.decode("models", &models); e != nil {
		return nil, e
	}
	if len(models) == 0 {
		return struct{}{}, nil
	}
	return s.appendJSONTag(r, id, outputsTag, models)
}

// logModel records MLflow 2's log-model call in the mlflow.log-model.history
// tag, as MLflow's own server does.
func (s *Server) logModel(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	if e := s.mustBeActive(r, id); e != nil {
		return nil, e
	}
	mj, e := r.need("model_json")
	if e != nil {
		return nil, e
	}
	if !json.Valid([]byte(mj)) {
		return nil, errf(400, codeInvalidParameter, "model_json must be a JSON document")
	}
	return s.appendJSONTag(r, id, tagModelHist, []json.RawMessage{json.RawMessage(mj)})
}

func (s *Server) appendJSONTag(r *request, id, key string, items []json.RawMessage) (any, *apiError) {
	got, err := s.st.GetRun(r.ctx, id)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	var all []json.RawMessage
	if old := got.Tags[key]; old != "" {
		_ = json.Unmarshal([]byte(old), &all)
	}
	all = append(all, items...)
	b, _ := json.Marshal(all)
	if len(b) > store.MaxTagValueLen {
		return nil, errf(400, codeLimitExceeded, "the run's %s would be %d bytes; fw keeps at most %d bytes in a tag", key, len(b), store.MaxTagValueLen)
	}
	if e := s.apply(r.ctx, id, []store.Event{{Type: store.EventTag, Tags: map[string]string{key: string(b)}}}); e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

// getHistory answers metrics/get-history: one key's points by step, paged.
func (s *Server) getHistory(r *request) (any, *apiError) {
	id, e := r.runID()
	if e != nil {
		return nil, e
	}
	key, e := r.need("metric_key")
	if e != nil {
		return nil, e
	}
	maxResults, set, e := r.int64Field("max_results")
	if e != nil {
		return nil, e
	}
	if !set {
		maxResults = 25000
	}
	if maxResults < 1 || maxResults > 100000 {
		return nil, errf(400, codeInvalidParameter, "max_results must be within 1..100000 (got %d)", maxResults)
	}
	token, e := r.str("page_token")
	if e != nil {
		return nil, e
	}
	// Every value logged, as MLflow keeps them: a second value at a step
	// (which fw's series replaces) is answered too. A page holds
	// max_results steps, each with all its values.
	q := store.HistoryQuery{Key: key, Limit: int(maxResults), Replaced: true}
	if token != "" {
		after, err := strconv.ParseInt(token, 10, 64)
		if err != nil {
			return nil, errf(400, codeInvalidParameter, "page_token is not one this server gave out; pass next_page_token from the previous answer unchanged")
		}
		q.AfterStep = &after
	}
	pts, err := s.st.History(r.ctx, id, q)
	if err != nil {
		return nil, s.runErr(err, id)
	}
	out := struct {
		Metrics       []metric `json:"metrics"`
		NextPageToken string   `json:"next_page_token,omitempty"`
	}{Metrics: make([]metric, 0, len(pts))}
	for _, p := range pts {
		out.Metrics = append(out.Metrics, metric{Key: key, Value: store.Float(p.Value), Timestamp: p.Time.UnixMilli(), Step: p.Step})
	}
	steps := int64(0)
	for i, p := range pts {
		if i == 0 || p.Step != pts[i-1].Step {
			steps++
		}
	}
	if steps == maxResults {
		out.NextPageToken = strconv.FormatInt(pts[len(pts)-1].Step, 10)
	}
	return out, nil
}

// getHistoryBulk answers metrics/get-history-bulk-interval: one key of up to
// 100 runs, each sampled to at most max_results points evenly over its
// steps (the first and last kept), as MLflow's UI charts read it.
func (s *Server) getHistoryBulk(r *request) (any, *apiError) {
	ids, e := r.strs("run_ids")
	if e != nil {
		return nil, e
	}
	if len(ids) == 0 {
		return nil, missingValue("run_ids")
	}
	if len(ids) > 100 {
		return nil, errf(400, codeInvalidParameter, "GetMetricHistoryBulkInterval request must specify at most 100 run_ids. Received %d run_ids.", len(ids))
	}
	key, e := r.need("metric_key")
	if e != nil {
		return nil, e
	}
	maxResults, set, e := r.int64Field("max_results")
	if e != nil {
		return nil, e
	}
	if !set {
		maxResults = 2500 // MLflow's server's default (MAX_RESULTS_PER_RUN)
	}
	if maxResults < 1 || maxResults > 2500 {
		return nil, errf(400, codeInvalidParameter, "max_results must be between 1 and 2500 (got %d).", maxResults)
	}
	var lo, hi *int64
	if v, ok, e := r.int64Field("start_step"); e != nil {
		return nil, e
	} else if ok {
		lo = &v
	}
	if v, ok, e := r.int64Field("end_step"); e != nil {
		return nil, e
	} else if ok {
		hi = &v
	}
	switch {
	case (lo == nil) != (hi == nil):
		return nil, errf(400, codeInvalidParameter, "If either start step or end step are specified, both must be specified.")
	case lo != nil && *lo > *hi:
		return nil, errf(400, codeInvalidParameter, "end_step must be greater than start_step. Found start_step=%d and end_step=%d.", *lo, *hi)
	}
	hist := make([][]store.Point, len(ids))
	for i, id := range ids {
		if err := store.ValidateID(id); err != nil {
			return nil, errf(404, codeNotFound, "Run with id=%s not found", id)
		}
		pts, err := s.st.History(r.ctx, id, store.HistoryQuery{Key: key, Limit: 100000, Replaced: true}) // a sampled step answers all its values
		if err != nil {
			return nil, s.runErr(err, id)
		}
		hist[i] = pts
	}
	steps := sampledSteps(hist, lo, hi, int(maxResults))
	out := struct {
		Metrics []metric `json:"metrics"`
	}{Metrics: []metric{}}
	for i, id := range ids {
		for _, p := range hist[i] {
			if steps[p.Step] {
				out.Metrics = append(out.Metrics, metric{Key: key, Value: store.Float(p.Value), Timestamp: p.Time.UnixMilli(), Step: p.Step, RunID: id})
			}
		}
	}
	return out, nil
}

// sampledSteps is the steps get-history-bulk-interval answers, chosen as
// MLflow's server chooses them, so its UI's charts get the same points:
// the distinct steps of every run in [lo, hi] (without bounds: from 0 to
// the last step), every step when at most n, else n evenly spaced by index
// plus the last; and always each run's first and last step in the range.
func sampledSteps(runs [][]store.Point, lo, hi *int64, n int) map[int64]bool {
	set := map[int64]bool{}
	var bounds []int64
	for _, pts := range runs {
		if len(pts) == 0 {
			continue
		}
		first, last := pts[0].Step, pts[0].Step
		for _, p := range pts {
			set[p.Step] = true
			first, last = min(first, p.Step), max(last, p.Step)
		}
		bounds = append(bounds, first, last)
	}
	all := make([]int64, 0, len(set))
	for st := range set {
		all = append(all, st)
	}
	slices.Sort(all)
	out := map[int64]bool{}
	if len(all) == 0 {
		return out
	}
	start, end := int64(0), all[len(all)-1]
	if lo != nil && hi != nil {
		start, end = *lo, *hi
	}
	for _, b := range bounds {
		if start <= b && b <= end {
			out[b] = true
		}
	}
	from, _ := slices.BinarySearch(all, start)
	to := sort.Search(len(all), func(i int) bool { return all[i] > end })
	if to-from <= n {
		for _, st := range all[from:to] {
			out[st] = true
		}
		return out
	}
	interval := float64(to-from) / float64(n)
	for i := 0; i < n; i++ {
		if idx := from + int(float64(i)*interval); idx < to {
			out[all[idx]] = true
		}
	}
	out[all[to-1]] = true
	return out
}

// getHistoryAll answers metrics/get-history-bulk (GET, MLflow's UI's
// older call): every point of metric_key of up to 100 runs (run_id
// repeated), by run ID, then time, step and value, at most max_results
// (default and cap 25,000). Unknown runs give no points, as MLflow's.
func (s *Server) getHistoryAll(r *request) (any, *apiError) {
	const maxRuns, maxPoints = 100, 25000
	ids, e := r.strs("run_id")
	if e != nil {
		return nil, e
	}
	if len(ids) == 0 {
		return nil, errf(400, codeInvalidParameter, "GetMetricHistoryBulk request must specify at least one run_id.")
	}
	if len(ids) > maxRuns {
		return nil, errf(400, codeInvalidParameter, "GetMetricHistoryBulk request cannot specify more than %d run_ids. Received %d run_ids.", maxRuns, len(ids))
	}
	key, e := r.str("metric_key")
	if e != nil {
		return nil, e
	}
	if _, set := r.raw("metric_key"); !set {
		return nil, errf(400, codeInvalidParameter, "GetMetricHistoryBulk request must specify a metric_key.")
	}
	limit, set, e := r.int64Field("max_results")
	if e != nil {
		return nil, e
	}
	if !set || limit > maxPoints {
		limit = maxPoints
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	out := struct {
		Metrics []metric `json:"metrics"`
	}{Metrics: []metric{}}
	for _, id := range slices.Compact(ids) {
		if int64(len(out.Metrics)) >= limit {
			break
		}
		if store.ValidateID(id) != nil {
			continue
		}
		pts, err := s.st.History(r.ctx, id, store.HistoryQuery{Key: key, Limit: int(limit), Replaced: true})
		if store.ErrorCode(err) == store.CodeNotFound {
			continue
		}
		if err != nil {
			return nil, s.runErr(err, id)
		}
		slices.SortStableFunc(pts, func(a, b store.Point) int {
			if c := a.Time.Compare(b.Time); c != 0 {
				return c
			}
			if c := cmp.Compare(a.Step, b.Step); c != 0 {
				return c
			}
			return cmp.Compare(a.Value, b.Value)
		})
		for _, p := range pts {
			out.Metrics = append(out.Metrics, metric{Key: key, Value: store.Float(p.Value), Timestamp: p.Time.UnixMilli(), Step: p.Step, RunID: id})
		}
	}
	if int64(len(out.Metrics)) > limit {
		out.Metrics = out.Metrics[:max(limit, 0)]
	}
	return out, nil
}
