package mlflow

// MLflow's tracing API (MLflow 3): what mlflow.start_span, @mlflow.trace,
// autologged GenAI calls and MlflowClient's trace methods write and read.
// A trace's info (TraceInfoV3) is kept in the store's mlflow_traces table
// as this file's JSON (mlTrace); its spans arrive over OTLP/HTTP (POST
// /v1/traces with the x-mlflow-experiment-id header, MLflow's client's
// log_spans, otlp.go) and are kept as OTLP's JSON, which GetTrace answers
// as MLflow's server does. A client that finds no spans in the server
// (the tag mlflow.trace.spansLocation unset) uploads them as traces.json
// through the artifact proxy, to the trace's artifact location; both are
// read back.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
)

// MLflow's trace tag and metadata keys fw sets or reads.
const (
	tagSpansLocation    = "mlflow.trace.spansLocation"
	spansInTrackingStor = "TRACKING_STORE"
	tagArtifactLocation = "mlflow.artifactLocation"
	tagTraceName        = "mlflow.traceName"
	metaSourceRun       = "mlflow.sourceRun"
	metaSchemaVersion   = "mlflow.trace_schema.version"
)

// Limits of a trace (MLflow's own are in mlflow/tracing/constant.py).
const (
	maxTraceTags        = 1000
	maxTraceTagKey      = 250
	maxTraceTagValue    = 8000
	maxTracesSearch     = 1000            // max_results of one search page (MLflow's SEARCH_TRACES_DEFAULT_MAX_RESULTS is 100)
	maxTracesLinked     = 100             // trace IDs of one link-to-run (MLflow's limit)
	maxTracesPerBatch   = 100             // trace IDs of one batch read
	maxTraceOffset      = 100_000         // how deep search pages go (a page token's offset)
	maxBatchSpanBytes   = 64 << 20        // spans' JSON one batchGet answers
	maxTraceTimeMs      = 253402300799999 // 9999-12-31T23:59:59.999Z, protobuf's last Timestamp
	defaultTracesSearch = 100
)

// traceIDPattern is what fw accepts as a trace ID: MLflow 3's tr-<32 hex>,
// older IDs (32 hex), and the short IDs MLflow's tests and users make up.
var traceIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// mlTrace is a trace's info as fw keeps it (the store row's body).
type mlTrace struct {
	ID              string            `json:"trace_id"`
	ExperimentID    string            `json:"experiment_id"` // MLflow's ID ("0" for Default)
	ClientRequestID string            `json:"client_request_id,omitempty"`
	RequestPreview  string            `json:"request_preview,omitempty"`
	ResponsePreview string            `json:"response_preview,omitempty"`
	RequestTime     int64             `json:"request_time_ms"`
	ExecutionMs     *int64            `json:"execution_ms,omitempty"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Tags            map[string]string `json:"tags,omitempty"`
	Assessments     []json.RawMessage `json:"assessments,omitempty"` // kept as the client sent them
	// Runs are the runs link-to-run linked the trace to.
	Runs []string `json:"runs,omitempty"`
	// Finalized: the client's StartTrace(V3) has set the info; spans
	// arriving later only add to it.
	Finalized bool `json:"finalized,omitempty"`
	// Pending: only link-to-run has named the trace so far (MLflow's
	// client links a trace it has not exported yet); it is not found
	// until its info or spans arrive.
	Pending bool `json:"pending,omitempty"`
}

// MLflow's TraceInfoV3 states, and TraceInfo's (V2) statuses.
var traceStates = []string{"STATE_UNSPECIFIED", "OK", "ERROR", "IN_PROGRESS"}

func v2Status(state string) string {
	if state == "STATE_UNSPECIFIED" || state == "" {
		return "TRACE_STATUS_UNSPECIFIED"
	}
	return state
}

func stateOfV2(status string) (string, bool) {
	switch status {
	case "TRACE_STATUS_UNSPECIFIED", "":
		return "STATE_UNSPECIFIED", true
	case "OK", "ERROR", "IN_PROGRESS":
		return status, true
	}
	return "", false
}

func newTraceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "tr-" + hex.EncodeToString(b[:])
}

// traceArtifactURI is where the trace's files go (traces.json,
// attachments): MLflow's <experiment artifact location>/traces/<id>/artifacts.
func traceArtifactURI(expID, traceID string) string {
	return "mlflow-artifacts:/" + expID + "/traces/" + traceID + "/artifacts"
}

// v3 is the trace as MLflow's TraceInfoV3 JSON.
func (t *mlTrace) v3() map[string]any {
	out := map[string]any{
		"trace_id": t.ID,
		"trace_location": map[string]any{
			"type":              "MLFLOW_EXPERIMENT",
			"mlflow_experiment": map[string]string{"experiment_id": t.ExperimentID},
		},
		"request_time":   protoTimestamp(t.RequestTime),
		"state":          t.State,
		"trace_metadata": nonNil(t.Metadata),
		"tags":           nonNil(t.Tags),
	}
	if t.ExecutionMs != nil {
		out["execution_duration"] = protoDuration(*t.ExecutionMs)
	}
	if t.ClientRequestID != "" {
		out["client_request_id"] = t.ClientRequestID
	}
	if t.RequestPreview != "" {
		out["request_preview"] = t.RequestPreview
	}
	if t.ResponsePreview != "" {
		out["response_preview"] = t.ResponsePreview
	}
	if len(t.Assessments) > 0 {
		out["assessments"] = t.Assessments
	}
	return out
}

// v2 is the trace as MLflow's (V2) TraceInfo JSON.
func (t *mlTrace) v2() map[string]any {
	var exec int64
	if t.ExecutionMs != nil {
		exec = *t.ExecutionMs
	}
	meta, tags := []kv{}, []kv{}
	for _, k := range sortedKeys(t.Metadata) {
		meta = append(meta, kv{k, t.Metadata[k]})
	}
	for _, k := range sortedKeys(t.Tags) {
		tags = append(tags, kv{k, t.Tags[k]})
	}
	return map[string]any{
		"request_id":        t.ID,
		"experiment_id":     t.ExperimentID,
		"timestamp_ms":      t.RequestTime,
		"execution_time_ms": exec,
		"status":            v2Status(t.State),
		"request_metadata":  meta,
		"tags":              tags,
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// protoTimestamp is protobuf's JSON of a Timestamp of Unix milliseconds.
func protoTimestamp(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// protoDuration is protobuf's JSON of a Duration of milliseconds.
func protoDuration(ms int64) string {
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	return fmt.Sprintf("%s%d.%03ds", sign, ms/1000, ms%1000)
}

// parseProtoTimestamp reads protobuf's JSON Timestamp (RFC 3339) as Unix
// milliseconds.
func parseProtoTimestamp(s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, err
	}
	return t.UnixMilli(), nil
}

// parseProtoDuration reads protobuf's JSON Duration ("1.5s") as
// milliseconds.
func parseProtoDuration(s string) (int64, error) {
	num, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, fmt.Errorf("%q is not a duration such as \"1.500s\"", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 315576000000 {
		return 0, fmt.Errorf("%q is not a duration such as \"1.500s\"", s)
	}
	return int64(math.Round(f * 1000)), nil
}

func traceNotFound(id string) *apiError {
	return errf(404, codeNotFound, "Trace with ID %s not found.", id)
}

func (s *Server) loadTrace(r *request, id string) (*mlTrace, *apiError) {
	if !traceIDPattern.MatchString(id) {
		return nil, traceNotFound(id)
	}
	got, err := s.st.GetMLflowTraces(r.ctx, []string{id})
	if err != nil {
		return nil, s.fromStore(err, "reading trace "+id)
	}
	if len(got) == 0 {
		return nil, traceNotFound(id)
	}
	t, e := decodeTrace(got[0])
	if e == nil && t.Pending {
		return nil, traceNotFound(id)
	}
	return t, e
}

func decodeTrace(row store.MLflowTrace) (*mlTrace, *apiError) {
	var t mlTrace
	if err := json.Unmarshal(row.Body, &t); err != nil {
		return nil, errf(500, codeInternal, "trace %s is stored unreadably: %v", row.ID, err)
	}
	t.ID = row.ID
	return &t, nil
}

func encodeTrace(t *mlTrace) (*store.MLflowTrace, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return &store.MLflowTrace{ID: t.ID, ExperimentID: t.ExperimentID, RequestTime: t.RequestTime, Body: b}, nil
}

// updateTrace runs fn over the trace (nil: none) in the store's writer and
// stores what it leaves (nil deletes). fn must not call the store.
func (s *Server) updateTrace(r *request, id string, fn func(cur *mlTrace) (*mlTrace, *apiError)) (*mlTrace, *apiError) {
	var fnErr *apiError
	var out *mlTrace
	_, err := s.st.UpdateMLflowTrace(r.ctx, id, func(cur *store.MLflowTrace) (*store.MLflowTrace, error) {
		var t *mlTrace
		if cur != nil {
			var e *apiError
			if t, e = decodeTrace(*cur); e != nil {
				fnErr = e
				return nil, store.ErrKeep
			}
		}
		next, e := fn(t)
		if e != nil {
			fnErr = e
			return nil, store.ErrKeep
		}
		out = next
		if next == nil {
			return nil, nil
		}
		return encodeTrace(next)
	})
	if fnErr != nil {
		return nil, fnErr
	}
	if err != nil {
		return nil, s.fromStore(err, "writing trace "+id)
	}
	return out, nil
}

// checkTraceTags bounds tags or metadata a client sends.
func checkTraceTags(what string, m map[string]string) *apiError {
	if len(m) > maxTraceTags {
		return errf(400, codeInvalidParameter, "%d trace %s; at most %d", len(m), what, maxTraceTags)
	}
	for k, v := range m {
		if k == "" || len(k) > maxTraceTagKey {
			return errf(400, codeInvalidParameter, "trace %s key %q: it must be 1 to %d bytes", what, k, maxTraceTagKey)
		}
		if len(v) > maxTraceTagValue && what == "tags" {
			return errf(400, codeInvalidParameter, "trace tag %q is %d bytes; at most %d", k, len(v), maxTraceTagValue)
		}
	}
	return nil
}

// traceExperiment resolves and checks the experiment a trace goes to,
// returning its MLflow ID.
func (s *Server) traceExperiment(r *request, id string) (string, *apiError) {
	if id == "" {
		return "", missingValue("experiment_id")
	}
	e, ae := s.fwExperiment(r.ctx, id)
	if ae != nil {
		return "", ae
	}
	if e.Archived {
		return "", errf(400, codeInvalidState, "The experiment %s must be in the 'active' state. Current state is deleted.", id)
	}
	return mlExperimentID(e.ID, e.Name), nil
}

// wireTraceInfoV3 is TraceInfoV3 as MLflow's client sends it.
type wireTraceInfoV3 struct {
	TraceID         string `json:"trace_id"`
	ClientRequestID string `json:"client_request_id"`
	TraceLocation   struct {
		Type             string `json:"type"`
		MlflowExperiment *struct {
			ExperimentID string `json:"experiment_id"`
		} `json:"mlflow_experiment"`
	} `json:"trace_location"`
	Request           string            `json:"request"`
	Response          string            `json:"response"`
	RequestPreview    string            `json:"request_preview"`
	ResponsePreview   string            `json:"response_preview"`
	RequestTime       string            `json:"request_time"`
	ExecutionDuration string            `json:"execution_duration"`
	State             string            `json:"state"`
	TraceMetadata     map[string]string `json:"trace_metadata"`
	Tags              map[string]string `json:"tags"`
	Assessments       []json.RawMessage `json:"assessments"`
}

// startTraceV3 is POST /api/3.0/mlflow/traces (StartTraceV3, which MLflow's
// client calls when a trace ends): it records the trace's info, merged with
// what its spans already made of it.
func (s *Server) startTraceV3(r *request) (any, *apiError) {
	var body struct {
		Trace *struct {
			TraceInfo *wireTraceInfoV3  `json:"trace_info"`
			Spans     []json.RawMessage `json:"spans"`
		} `json:"trace"`
	}
	if e := r.decode("trace", &body.Trace); e != nil {
		return nil, e
	}
	if body.Trace == nil || body.Trace.TraceInfo == nil {
		return nil, missingValue("trace")
	}
	in := body.Trace.TraceInfo
	if in.TraceLocation.MlflowExperiment == nil {
		return nil, errf(400, codeInvalidParameter, "trace_location must be an MLflow experiment ({\"type\": \"MLFLOW_EXPERIMENT\", \"mlflow_experiment\": {\"experiment_id\": ...}}); fw keeps no inference-table or Unity Catalog traces")
	}
	expID, e := s.traceExperiment(r, in.TraceLocation.MlflowExperiment.ExperimentID)
	if e != nil {
		return nil, e
	}
	id := in.TraceID
	if id == "" {
		id = newTraceID()
	}
	if !traceIDPattern.MatchString(id) {
		return nil, errf(400, codeInvalidParameter, "trace_id %q: use MLflow's tr-<32 hex digits> (letters, digits, '.', '_', ':', '-', at most 128)", id)
	}
	reqTime := time.Now().UnixMilli()
	if in.RequestTime != "" {
		ms, err := parseProtoTimestamp(in.RequestTime)
		if err == nil && (ms < 0 || ms > maxTraceTimeMs) {
			err = errors.New("out of range")
		}
		if err != nil {
			return nil, invalidValue("trace_info.request_time", json.RawMessage(strconv.Quote(in.RequestTime)), "an RFC 3339 time")
		}
		reqTime = ms
	}
	var exec *int64
	if in.ExecutionDuration != "" {
		ms, err := parseProtoDuration(in.ExecutionDuration)
		if err != nil {
			return nil, invalidValue("trace_info.execution_duration", json.RawMessage(strconv.Quote(in.ExecutionDuration)), "a duration such as \"1.500s\"")
		}
		exec = &ms
	}
	state := in.State
	if state == "" {
		state = "STATE_UNSPECIFIED"
	}
	if !slices.Contains(traceStates, state) {
		return nil, errf(400, codeInvalidParameter, "trace_info.state %q: one of %s", state, strings.Join(traceStates, ", "))
	}
	if e := checkTraceTags("tags", in.Tags); e != nil {
		return nil, e
	}
	if e := checkTraceTags("metadata", in.TraceMetadata); e != nil {
		return nil, e
	}
	reqPreview, respPreview := in.RequestPreview, in.ResponsePreview
	if reqPreview == "" {
		reqPreview = in.Request
	}
	if respPreview == "" {
		respPreview = in.Response
	}
	var spans []store.MLflowSpan
	for i, raw := range body.Trace.Spans {
		sp, err := spanFromJSON(raw, id)
		if err != nil {
			return nil, errf(400, codeInvalidParameter, "trace.spans[%d]: %v", i, err)
		}
		spans = append(spans, sp)
	}
	if len(spans) > 0 {
		if err := s.st.PutMLflowSpans(r.ctx, spans); err != nil {
			return nil, s.fromStore(err, "storing trace "+id+"'s spans")
		}
	}
	t, e := s.updateTrace(r, id, func(cur *mlTrace) (*mlTrace, *apiError) {
		t := &mlTrace{ID: id, Tags: map[string]string{}, Metadata: map[string]string{}}
		if cur != nil {
			t = cur
			if t.Tags == nil {
				t.Tags = map[string]string{}
			}
			if t.Metadata == nil {
				t.Metadata = map[string]string{}
			}
		}
		t.ExperimentID, t.RequestTime, t.ExecutionMs, t.State = expID, reqTime, exec, state
		t.ClientRequestID, t.RequestPreview, t.ResponsePreview = in.ClientRequestID, reqPreview, respPreview
		for k, v := range in.Tags {
			if k == tagSpansLocation && t.Tags[k] != "" {
				continue // where the spans are is the server's to say
			}
			t.Tags[k] = v
		}
		for k, v := range in.TraceMetadata {
			t.Metadata[k] = v
		}
		if len(spans) > 0 {
			t.Tags[tagSpansLocation] = spansInTrackingStor
		}
		t.Tags[tagArtifactLocation] = traceArtifactURI(expID, id)
		t.Assessments = in.Assessments
		t.Finalized, t.Pending = true, false
		return t, nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"trace": map[string]any{"trace_info": t.v3()}}, nil
}

// startTraceV2 is POST /api/2.0/mlflow/traces (StartTrace, MLflow 2's
// API): a trace in progress, ended by endTraceV2.
func (s *Server) startTraceV2(r *request) (any, *apiError) {
	expRaw, e := r.str("experiment_id")
	if e != nil {
		return nil, e
	}
	expID, e := s.traceExperiment(r, expRaw)
	if e != nil {
		return nil, e
	}
	ts, e := r.traceTime("timestamp_ms")
	if e != nil {
		return nil, e
	}
	var meta, tags []kv
	if e := r.decode("request_metadata", &meta); e != nil {
		return nil, e
	}
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	id := newTraceID()
	t := &mlTrace{ID: id, ExperimentID: expID, RequestTime: ts, State: "IN_PROGRESS", Metadata: kvToMap(meta), Tags: kvToMap(tags)}
	zero := int64(0)
	t.ExecutionMs = &zero
	if e := checkTraceTags("tags", t.Tags); e != nil {
		return nil, e
	}
	if e := checkTraceTags("metadata", t.Metadata); e != nil {
		return nil, e
	}
	t.Tags[tagArtifactLocation] = traceArtifactURI(expID, id)
	t.Finalized = true
	if _, e := s.updateTrace(r, id, func(*mlTrace) (*mlTrace, *apiError) { return t, nil }); e != nil {
		return nil, e
	}
	return map[string]any{"trace_info": t.v2()}, nil
}

// traceTime reads a time in Unix milliseconds (now when absent), within
// what protobuf's Timestamp holds (years 1970 to 9999 here).
func (r *request) traceTime(name string) (int64, *apiError) {
	ts, ok, e := r.int64Field(name)
	if e != nil {
		return 0, e
	}
	if !ok {
		return time.Now().UnixMilli(), nil
	}
	if ts < 0 || ts > maxTraceTimeMs {
		return 0, errf(400, codeInvalidParameter, "%s %d: Unix milliseconds from 0 to %d (year 9999)", name, ts, int64(maxTraceTimeMs))
	}
	return ts, nil
}

func kvToMap(kvs []kv) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, p := range kvs {
		m[p.Key] = p.Value
	}
	return m
}

// endTraceV2 is PATCH /api/2.0/mlflow/traces/{request_id} (EndTrace).
func (s *Server) endTraceV2(r *request, id string) (any, *apiError) {
	ts, e := r.traceTime("timestamp_ms")
	if e != nil {
		return nil, e
	}
	statusRaw, e := r.str("status")
	if e != nil {
		return nil, e
	}
	state, valid := stateOfV2(statusRaw)
	if !valid {
		return nil, errf(400, codeInvalidParameter, "status %q: one of TRACE_STATUS_UNSPECIFIED, OK, ERROR, IN_PROGRESS", statusRaw)
	}
	var meta, tags []kv
	if e := r.decode("request_metadata", &meta); e != nil {
		return nil, e
	}
	if e := r.decode("tags", &tags); e != nil {
		return nil, e
	}
	if !traceIDPattern.MatchString(id) {
		return nil, traceNotFound(id)
	}
	t, e := s.updateTrace(r, id, func(cur *mlTrace) (*mlTrace, *apiError) {
		if cur == nil || cur.Pending {
			return nil, traceNotFound(id)
		}
		exec := ts - cur.RequestTime // both within 0..year 9999: no overflow
		cur.ExecutionMs, cur.State = &exec, state
		if cur.Metadata == nil {
			cur.Metadata = map[string]string{}
		}
		if cur.Tags == nil {
			cur.Tags = map[string]string{}
		}
		for _, p := range meta {
			cur.Metadata[p.Key] = p.Value
		}
		for _, p := range tags {
			cur.Tags[p.Key] = p.Value
		}
		if e := checkTraceTags("tags", cur.Tags); e != nil {
			return nil, e
		}
		return cur, checkTraceTags("metadata", cur.Metadata)
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"trace_info": t.v2()}, nil
}

// startTrace answers POST .../mlflow/traces: StartTraceV3 when the body
// holds a trace, else MLflow 2's StartTrace.
func (s *Server) startTrace(r *request) (any, *apiError) {
	if _, ok := r.raw("trace"); ok {
		return s.startTraceV3(r)
	}
	return s.startTraceV2(r)
}

// serveTraceRoute answers the trace routes with an ID in the path:
// traces/{id} (GET: GetTraceInfoV3, PATCH: MLflow 2's EndTrace),
// traces/{id}/info (GET: MLflow 2's GetTraceInfo) and traces/{id}/tags
// (PATCH sets, DELETE removes); false when rest is none of them.
func (s *Server) serveTraceRoute(rctx context.Context, ctx *fasthttp.RequestCtx, rest string) bool {
	id, sub, _ := strings.Cut(rest, "/")
	var ops []pathOp
	switch sub {
	case "":
		ops = []pathOp{
			{"GET", func(r *request) (any, *apiError) {
				t, e := s.loadTrace(r, id)
				if e != nil {
					return nil, e
				}
				return map[string]any{"trace": map[string]any{"trace_info": t.v3()}}, nil
			}},
			{"PATCH", func(r *request) (any, *apiError) { return s.endTraceV2(r, id) }},
		}
	case "info":
		ops = []pathOp{{"GET", func(r *request) (any, *apiError) {
			t, e := s.loadTrace(r, id)
			if e != nil {
				return nil, e
			}
			return map[string]any{"trace_info": t.v2()}, nil
		}}}
	case "tags":
		ops = []pathOp{
			{"PATCH", func(r *request) (any, *apiError) { return s.setTraceTag(r, id) }},
			{"DELETE", func(r *request) (any, *apiError) { return s.deleteTraceTag(r, id) }},
		}
	case "assessments":
		ops = []pathOp{{"POST", func(r *request) (any, *apiError) { return s.createAssessment(r, id) }}}
	default:
		aid, ok := strings.CutPrefix(sub, "assessments/")
		if !ok || aid == "" || strings.Contains(aid, "/") {
			return false
		}
		ops = []pathOp{
			{"GET", func(r *request) (any, *apiError) { return s.getAssessment(r, id, aid) }},
			{"PATCH", func(r *request) (any, *apiError) { return s.updateAssessment(r, id, aid) }},
			{"DELETE", func(r *request) (any, *apiError) { return s.deleteAssessment(r, id, aid) }},
		}
	}
	s.serveOps(rctx, ctx, ops)
	return true
}

func (s *Server) setTraceTag(r *request, id string) (any, *apiError) {
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	value, e := r.str("value")
	if e != nil {
		return nil, e
	}
	if e := checkTraceTags("tags", map[string]string{key: value}); e != nil {
		return nil, e
	}
	if !traceIDPattern.MatchString(id) {
		return nil, traceNotFound(id)
	}
	_, e = s.updateTrace(r, id, func(cur *mlTrace) (*mlTrace, *apiError) {
		if cur == nil || cur.Pending {
			return nil, traceNotFound(id)
		}
		if cur.Tags == nil {
			cur.Tags = map[string]string{}
		}
		if _, had := cur.Tags[key]; !had && len(cur.Tags) >= maxTraceTags {
			return nil, errf(400, codeInvalidParameter, "trace %s has %d tags; at most %d", id, len(cur.Tags), maxTraceTags)
		}
		cur.Tags[key] = value
		return cur, nil
	})
	if e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

func (s *Server) deleteTraceTag(r *request, id string) (any, *apiError) {
	key, e := r.need("key")
	if e != nil {
		return nil, e
	}
	if !traceIDPattern.MatchString(id) {
		return nil, traceNotFound(id)
	}
	_, e = s.updateTrace(r, id, func(cur *mlTrace) (*mlTrace, *apiError) {
		if cur == nil || cur.Pending {
			return nil, traceNotFound(id)
		}
		if _, ok := cur.Tags[key]; !ok {
			return nil, errf(404, codeNotFound, "No trace tag with key '%s' for trace with ID '%s'", key, id)
		}
		delete(cur.Tags, key)
		return cur, nil
	})
	if e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

// fullTrace is MLflow's Trace JSON: the info and the spans fw holds.
func (s *Server) fullTrace(r *request, t *mlTrace) (map[string]any, *apiError) {
	spans, err := s.st.GetMLflowSpans(r.ctx, t.ID)
	if err != nil {
		return nil, s.fromStore(err, "reading trace "+t.ID+"'s spans")
	}
	out := make([]json.RawMessage, len(spans))
	for i, sp := range spans {
		out[i] = sp.Content
	}
	return map[string]any{"trace_info": t.v3(), "spans": out}, nil
}

// getTrace is GET /api/3.0/mlflow/traces/get?trace_id= (GetTrace).
func (s *Server) getTrace(r *request) (any, *apiError) {
	id, e := r.need("trace_id")
	if e != nil {
		return nil, e
	}
	t, e := s.loadTrace(r, id)
	if e != nil {
		return nil, e
	}
	full, e := s.fullTrace(r, t)
	if e != nil {
		return nil, e
	}
	return map[string]any{"trace": full}, nil
}

// traceIDs reads trace_ids (at most maxTracesPerBatch).
func (r *request) traceIDs() ([]string, *apiError) {
	ids, e := r.strs("trace_ids")
	if e != nil {
		return nil, e
	}
	if len(ids) > maxTracesPerBatch {
		return nil, errf(400, codeInvalidParameter, "%d trace_ids; at most %d in one call", len(ids), maxTracesPerBatch)
	}
	valid := ids[:0:0]
	for _, id := range ids {
		if traceIDPattern.MatchString(id) {
			valid = append(valid, id)
		}
	}
	return valid, nil
}

// batchTraces reads the traces of ids that exist, in ids' order.
func (s *Server) batchTraces(r *request, ids []string) ([]*mlTrace, *apiError) {
	rows, err := s.st.GetMLflowTraces(r.ctx, ids)
	if err != nil {
		return nil, s.fromStore(err, "reading traces")
	}
	byID := map[string]*mlTrace{}
	for _, row := range rows {
		t, e := decodeTrace(row)
		if e != nil {
			return nil, e
		}
		if !t.Pending {
			byID[t.ID] = t
		}
	}
	var out []*mlTrace
	for _, id := range ids {
		if t, ok := byID[id]; ok {
			out = append(out, t)
			delete(byID, id)
		}
	}
	return out, nil
}

// batchGetTraces is GET /api/3.0/mlflow/traces/batchGet?trace_ids=...
func (s *Server) batchGetTraces(r *request) (any, *apiError) {
	ids, e := r.traceIDs()
	if e != nil {
		return nil, e
	}
	ts, e := s.batchTraces(r, ids)
	if e != nil {
		return nil, e
	}
	out := []map[string]any{}
	size := 0
	for _, t := range ts {
		full, e := s.fullTrace(r, t)
		if e != nil {
			return nil, e
		}
		for _, sp := range full["spans"].([]json.RawMessage) {
			size += len(sp)
		}
		if size > maxBatchSpanBytes && len(out) > 0 {
			break // the client asks again for the ones it did not get
		}
		out = append(out, full)
	}
	return map[string]any{"traces": out}, nil
}

// batchGetTraceInfos is POST /api/3.0/mlflow/traces/batchGetInfos.
func (s *Server) batchGetTraceInfos(r *request) (any, *apiError) {
	ids, e := r.traceIDs()
	if e != nil {
		return nil, e
	}
	ts, e := s.batchTraces(r, ids)
	if e != nil {
		return nil, e
	}
	out := []map[string]any{}
	for _, t := range ts {
		out = append(out, t.v3())
	}
	return map[string]any{"trace_infos": out}, nil
}

// linkTracesToRun is POST /api/2.0/mlflow/traces/link-to-run: the traces
// are then found by attribute.run_id = the run.
func (s *Server) linkTracesToRun(r *request) (any, *apiError) {
	ids, e := r.strs("trace_ids")
	if e != nil {
		return nil, e
	}
	if len(ids) > maxTracesLinked {
		return nil, errf(400, codeInvalidParameter, "Cannot link more than %d traces to a run in a single request. Provided %d traces.", maxTracesLinked, len(ids))
	}
	runID, e := r.need("run_id")
	if e != nil {
		return nil, e
	}
	run, err := s.st.GetRun(r.ctx, runID)
	if err != nil {
		return nil, s.runErr(err, runID)
	}
	runExp := mlExperimentID(run.ExperimentID, run.Experiment)
	for _, id := range ids {
		if !traceIDPattern.MatchString(id) {
			return nil, traceNotFound(id)
		}
		if _, e := s.updateTrace(r, id, func(cur *mlTrace) (*mlTrace, *apiError) {
			if cur == nil {
				// Not exported yet: held until its info or spans arrive.
				cur = &mlTrace{ID: id, ExperimentID: runExp, RequestTime: time.Now().UnixMilli(), State: "IN_PROGRESS", Pending: true}
			}
			if !slices.Contains(cur.Runs, runID) {
				cur.Runs = append(cur.Runs, runID)
			}
			return cur, nil
		}); e != nil {
			return nil, e
		}
	}
	return struct{}{}, nil
}

// deleteTraces is POST /api/2.0/mlflow/traces/delete-traces: the traces
// named, or the oldest up to max_traces older than max_timestamp_millis,
// of one experiment.
func (s *Server) deleteTraces(r *request) (any, *apiError) {
	expRaw, e := r.need("experiment_id")
	if e != nil {
		return nil, e
	}
	exp, e := s.fwExperiment(r.ctx, expRaw)
	if e != nil {
		return nil, e
	}
	expID := mlExperimentID(exp.ID, exp.Name)
	maxTS, hasTS, e := r.int64Field("max_timestamp_millis")
	if e != nil {
		return nil, e
	}
	maxN, hasN, e := r.int64Field("max_traces")
	if e != nil {
		return nil, e
	}
	ids, e := r.strs("request_ids")
	if e != nil {
		return nil, e
	}
	switch {
	case hasTS == (len(ids) > 0):
		return nil, errf(400, codeInvalidParameter, "Either `max_timestamp_millis` or `request_ids` must be specified, not both")
	case len(ids) > 0 && hasN:
		return nil, errf(400, codeInvalidParameter, "`max_traces` can't be specified if `request_ids` is specified.")
	case hasN && maxN <= 0:
		return nil, errf(400, codeInvalidParameter, "`max_traces` must be a positive integer, received %d.", maxN)
	case len(ids) > store.MaxMLflowTracesPerRead:
		return nil, errf(400, codeInvalidParameter, "%d request_ids; at most %d in one call", len(ids), store.MaxMLflowTracesPerRead)
	}
	var doomed []string
	if len(ids) > 0 {
		valid := ids[:0:0]
		for _, id := range ids {
			if traceIDPattern.MatchString(id) {
				valid = append(valid, id)
			}
		}
		ts, e := s.batchTraces(r, valid)
		if e != nil {
			return nil, e
		}
		for _, t := range ts {
			if t.ExperimentID == expID {
				doomed = append(doomed, t.ID)
			}
		}
	} else {
		limit := int64(store.MaxMLflowTracesPerRead)
		if hasN && maxN < limit {
			limit = maxN
		}
		err := s.st.ScanMLflowTraces(r.ctx, []string{expID}, true, func(t store.MLflowTrace) bool {
			if t.RequestTime > maxTS {
				return false
			}
			if dt, e := decodeTrace(t); e == nil && dt.Pending {
				return true
			}
			doomed = append(doomed, t.ID)
			return int64(len(doomed)) < limit
		})
		if err != nil {
			return nil, s.fromStore(err, "finding traces to delete")
		}
	}
	n, err := s.st.DeleteMLflowTraces(r.ctx, doomed)
	if err != nil {
		return nil, s.fromStore(err, "deleting traces")
	}
	return map[string]any{"traces_deleted": n}, nil
}

// A trace search: the experiments, a filter of comparisons joined by AND,
// an order and a page.
type traceSearch struct {
	experiments []string
	conds       []modelCond
	order       []traceOrder
	offset      int
	max         int
}

type traceOrder struct {
	field string
	asc   bool
}

// traceAttr maps a filter or order attribute to the field traceValue reads.
func traceAttr(name string) (string, bool) {
	switch strings.ToLower(name) {
	case "request_id", "trace_id":
		return "trace_id", true
	case "timestamp", "timestamp_ms", "request_time":
		return "timestamp_ms", true
	case "execution_time", "execution_time_ms", "execution_duration":
		return "execution_time_ms", true
	case "status", "state":
		return "status", true
	case "name":
		return "name", true
	case "run_id":
		return "run_id", true
	case "client_request_id":
		return "client_request_id", true
	case "text":
		return "text", true
	case "end_time_ms":
		return "end_time_ms", true
	}
	return "", false
}

// parseTraceFilter reads MLflow's trace filter: comparisons joined by AND
// over attributes (bare, attribute(s).X or trace.X: trace_id/request_id,
// timestamp_ms, execution_time_ms, status/state, name, run_id,
// client_request_id, text), tags.X, and metadata.X (request_metadata.X).
func parseTraceFilter(filter string) ([]modelCond, *apiError) {
	conds, e := parseConds(filter, func(entity, key string) (string, *apiError) {
		switch strings.ToLower(entity) {
		case "tag", "tags":
			return "tags." + key, nil
		case "metadata", "request_metadata":
			return "metadata." + key, nil
		case "", "attribute", "attributes", "attr", "trace":
			f, ok := traceAttr(key)
			if !ok {
				return "", errf(400, codeInvalidParameter, "Invalid filter %q: unknown attribute %q; the attributes are trace_id, timestamp_ms, execution_time_ms, status, name, run_id, client_request_id, text", filter, key)
			}
			return f, nil
		}
		return "", errf(400, codeInvalidParameter, "Invalid filter %q: unknown entity %q; fw searches traces by attributes, tags.X and metadata.X (span, feedback and expectation filters are not served)", filter, entity)
	})
	if e != nil {
		return nil, e
	}
	for _, c := range conds {
		if c.field == "text" && c.op != "LIKE" && c.op != "ILIKE" {
			return nil, errf(400, codeInvalidParameter, "Invalid filter %q: trace.text takes LIKE or ILIKE", filter)
		}
	}
	return conds, nil
}

// parseTraceOrder reads order_by: "<field> [ASC|DESC]" each; the default
// is timestamp DESC, as MLflow's.
func parseTraceOrder(clauses []string) ([]traceOrder, *apiError) {
	var out []traceOrder
	for _, c := range clauses {
		fields := strings.Fields(c)
		if len(fields) == 0 || len(fields) > 2 {
			return nil, errf(400, codeInvalidParameter, "Invalid order_by clause %q: use \"<field> [ASC|DESC]\"", c)
		}
		o := traceOrder{asc: true}
		if len(fields) == 2 {
			switch strings.ToUpper(fields[1]) {
			case "ASC":
			case "DESC":
				o.asc = false
			default:
				return nil, errf(400, codeInvalidParameter, "Invalid order_by clause %q: the direction is ASC or DESC", c)
			}
		}
		name := fields[0]
		switch {
		case strings.HasPrefix(name, "tags.") || strings.HasPrefix(name, "tag."):
			_, k, _ := strings.Cut(name, ".")
			o.field = "tags." + strings.Trim(k, "`\"")
		case strings.HasPrefix(name, "metadata.") || strings.HasPrefix(name, "request_metadata."):
			_, k, _ := strings.Cut(name, ".")
			o.field = "metadata." + strings.Trim(k, "`\"")
		default:
			if _, k, ok := strings.Cut(name, "."); ok {
				name = k
			}
			f, ok := traceAttr(name)
			if !ok || f == "text" || f == "run_id" {
				return nil, errf(400, codeInvalidParameter, "Invalid order_by clause %q: order by timestamp_ms, execution_time_ms, status, name, trace_id, tags.X or metadata.X", c)
			}
			o.field = f
		}
		out = append(out, o)
	}
	return out, nil
}

// traceValue is a field's value for filters and orders (float64, string
// or nil); text and run_id are matched apart.
func (t *mlTrace) traceValue(field string) any {
	switch field {
	case "trace_id":
		return t.ID
	case "timestamp_ms":
		return float64(t.RequestTime)
	case "execution_time_ms":
		if t.ExecutionMs == nil {
			return nil
		}
		return float64(*t.ExecutionMs)
	case "end_time_ms":
		if t.ExecutionMs == nil {
			return nil
		}
		return float64(t.RequestTime + *t.ExecutionMs)
	case "status":
		return t.State
	case "name":
		if n, ok := t.Tags[tagTraceName]; ok {
			return n
		}
		return nil
	case "client_request_id":
		return t.ClientRequestID
	}
	if k, ok := strings.CutPrefix(field, "tags."); ok {
		if v, ok := t.Tags[k]; ok {
			return v
		}
		return nil
	}
	if k, ok := strings.CutPrefix(field, "metadata."); ok {
		if v, ok := t.Metadata[k]; ok {
			return v
		}
	}
	return nil
}

// textCandidates is, for the trace.text conditions of a search, the
// traces the database finds with a span whose text matches each (ASCII
// case folded, intersected): only these are read for the exact match. nil
// when there is no such condition or the database cannot narrow it (a
// case-blind pattern with non-ASCII letters, or too many matches).
func (s *Server) textCandidates(r *request, exps []string, conds []modelCond) (map[string]bool, *apiError) {
	var set map[string]bool
	for _, c := range conds {
		if c.field != "text" {
			continue
		}
		if c.op == "ILIKE" && strings.ContainsFunc(c.str, func(r rune) bool { return r > 0x7f }) {
			continue
		}
		got, err := s.st.MLflowTraceIDsWithText(r.ctx, exps, c.str)
		if err != nil {
			return nil, s.fromStore(err, "searching the traces' text")
		}
		if got == nil {
			continue
		}
		if set == nil {
			set = got
			continue
		}
		for id := range set {
			if !got[id] {
				delete(set, id)
			}
		}
	}
	return set, nil
}

// traceMatches reports whether the trace meets every condition: trace.text
// by its spans' texts (read once, and only for a trace in candidates when
// that is not nil).
func (s *Server) traceMatches(r *request, t *mlTrace, conds []modelCond, candidates map[string]bool) (bool, *apiError) {
	var plain []modelCond
	var text []modelCond
	for _, c := range conds {
		switch c.field {
		case "run_id":
			in := t.Metadata[metaSourceRun] == c.str || slices.Contains(t.Runs, c.str)
			switch c.op {
			case "=":
				if !in {
					return false, nil
				}
			case "!=":
				if in {
					return false, nil
				}
			default:
				return false, errf(400, codeInvalidParameter, "Invalid filter: run_id takes = or !=")
			}
		case "text":
			text = append(text, c)
		default:
			plain = append(plain, c)
		}
	}
	if !matchAll(plain, t.traceValue, false) {
		return false, nil
	}
	if len(text) == 0 {
		return true, nil
	}
	if candidates != nil && !candidates[t.ID] {
		return false, nil
	}
	spans, err := s.st.GetMLflowSpans(r.ctx, t.ID)
	if err != nil {
		return false, s.fromStore(err, "reading trace "+t.ID+"'s spans")
	}
	for _, c := range text {
		found := false
		for _, sp := range spans {
			if cmpStr(sp.Text, c.op, c.str) {
				found = true
				break
			}
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

// runTraceSearch answers a search: the page of traces and the next page's
// token.
func (s *Server) runTraceSearch(r *request, q traceSearch) ([]*mlTrace, string, *apiError) {
	byTime := len(q.order) == 0 || (len(q.order) == 1 && q.order[0].field == "timestamp_ms")
	asc := len(q.order) == 1 && byTime && q.order[0].asc
	want := q.offset + q.max + 1
	candidates, fail := s.textCandidates(r, q.experiments, q.conds)
	if fail != nil {
		return nil, "", fail
	}
	var hits []*mlTrace
	err := s.st.ScanMLflowTraces(r.ctx, q.experiments, asc, func(row store.MLflowTrace) bool {
		if candidates != nil && !candidates[row.ID] {
			return true // its spans do not hold the text
		}
		t, e := decodeTrace(row)
		if e != nil {
			fail = e
			return false
		}
		if t.Pending {
			return true
		}
		ok, e := s.traceMatches(r, t, q.conds, candidates)
		if e != nil {
			fail = e
			return false
		}
		if ok {
			hits = append(hits, t)
		}
		if byTime {
			return len(hits) < want
		}
		if len(hits) >= 2*want+1024 {
			// Keep the best want so far: the scan's memory stays bounded
			// whatever the experiment holds.
			sortTraces(hits, q.order)
			hits = hits[:want]
		}
		return true
	})
	if fail != nil {
		return nil, "", fail
	}
	if err != nil {
		return nil, "", s.fromStore(err, "searching traces")
	}
	if !byTime {
		sortTraces(hits, q.order)
		if len(hits) > want {
			hits = hits[:want]
		}
	}
	if q.offset >= len(hits) {
		return nil, "", nil
	}
	hits = hits[q.offset:]
	next := ""
	if len(hits) > q.max {
		hits = hits[:q.max]
		next = encodeToken("traces:" + strconv.Itoa(q.offset+q.max))
	}
	return hits, next, nil
}

// sortTraces orders traces by the search's order; ties keep the scan's
// order (newest first, then by ID), so pages are stable.
func sortTraces(ts []*mlTrace, order []traceOrder) {
	sort.SliceStable(ts, func(i, j int) bool {
		for _, o := range order {
			c := compareValues(ts[i].traceValue(o.field), ts[j].traceValue(o.field))
			if c != 0 {
				return (c < 0) == o.asc
			}
		}
		return false
	})
}

// readTraceSearch reads a search's filter, order, page size and token.
func (r *request) readTraceSearch(q *traceSearch) *apiError {
	filter, e := r.str("filter")
	if e != nil {
		return e
	}
	if q.conds, e = parseTraceFilter(filter); e != nil {
		return e
	}
	orders, e := r.strs("order_by")
	if e != nil {
		return e
	}
	if q.order, e = parseTraceOrder(orders); e != nil {
		return e
	}
	n, ok, e := r.int64Field("max_results")
	if e != nil {
		return e
	}
	q.max = defaultTracesSearch
	if ok {
		if n <= 0 || n > maxTracesSearch {
			return errf(400, codeInvalidParameter, "Invalid value %d for parameter 'max_results' supplied: it must be 1 to %d", n, maxTracesSearch)
		}
		q.max = int(n)
	}
	tok, e := r.str("page_token")
	if e != nil {
		return e
	}
	cursor, e := decodeToken(tok)
	if e != nil {
		return e
	}
	if cursor != "" {
		off, found := strings.CutPrefix(cursor, "traces:")
		v, err := strconv.Atoi(off)
		if !found || err != nil || v < 0 || v > maxTraceOffset {
			return errf(400, codeInvalidParameter, "page_token is not one this server gave out; pass next_page_token from the previous answer unchanged (pages end %d traces deep: narrow the filter to reach further)", maxTraceOffset)
		}
		q.offset = v
	}
	return nil
}

// resolveTraceExperiments maps MLflow experiment IDs to the IDs traces are
// kept under.
func (s *Server) resolveTraceExperiments(r *request, ids []string) ([]string, *apiError) {
	if len(ids) == 0 {
		return nil, errf(400, codeInvalidParameter, "name at least one experiment to search (locations / experiment_ids)")
	}
	if len(ids) > 100 {
		return nil, errf(400, codeInvalidParameter, "%d experiments; search at most 100 at once", len(ids))
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		e, ae := s.fwExperiment(r.ctx, id)
		if ae != nil {
			return nil, ae
		}
		out = append(out, mlExperimentID(e.ID, e.Name))
	}
	return out, nil
}

// searchTracesV3 is POST /api/3.0/mlflow/traces/search (SearchTracesV3).
func (s *Server) searchTracesV3(r *request) (any, *apiError) {
	var locs []struct {
		Type             string `json:"type"`
		MlflowExperiment *struct {
			ExperimentID string `json:"experiment_id"`
		} `json:"mlflow_experiment"`
	}
	if e := r.decode("locations", &locs); e != nil {
		return nil, e
	}
	var exps []string
	for _, l := range locs {
		if l.MlflowExperiment == nil {
			return nil, errf(400, codeInvalidParameter, "Locations must be a list of experiment IDs: fw keeps traces in MLflow experiments only")
		}
		exps = append(exps, l.MlflowExperiment.ExperimentID)
	}
	return s.searchTraces(r, exps, (*mlTrace).v3)
}

// searchTraces answers a search of the experiments (MLflow IDs) with
// each trace in wire's form (TraceInfoV3's or V2's).
func (s *Server) searchTraces(r *request, exps []string, wire func(*mlTrace) map[string]any) (any, *apiError) {
	var q traceSearch
	var e *apiError
	if q.experiments, e = s.resolveTraceExperiments(r, exps); e != nil {
		return nil, e
	}
	if e := r.readTraceSearch(&q); e != nil {
		return nil, e
	}
	ts, next, e := s.runTraceSearch(r, q)
	if e != nil {
		return nil, e
	}
	out := make([]map[string]any, 0, len(ts))
	for _, t := range ts {
		out = append(out, wire(t))
	}
	resp := map[string]any{"traces": out}
	if next != "" {
		resp["next_page_token"] = next
	}
	return resp, nil
}

// searchTracesV2 is GET /api/2.0/mlflow/traces (SearchTraces, MLflow 2's).
func (s *Server) searchTracesV2(r *request) (any, *apiError) {
	exps, e := r.strs("experiment_ids")
	if e != nil {
		return nil, e
	}
	return s.searchTraces(r, exps, (*mlTrace).v2)
}

// countTraces counts the traces of the experiments that meet conds.
func (s *Server) countTraces(r *request, exps []string, sets ...[]modelCond) ([]int, *apiError) {
	counts := make([]int, len(sets))
	var fail *apiError
	err := s.st.ScanMLflowTraces(r.ctx, exps, false, func(row store.MLflowTrace) bool {
		t, e := decodeTrace(row)
		if e != nil {
			fail = e
			return false
		}
		if t.Pending {
			return true
		}
		for i, conds := range sets {
			ok, e := s.traceMatches(r, t, conds, nil)
			if e != nil {
				fail = e
				return false
			}
			if ok {
				counts[i]++
			}
		}
		return true
	})
	if fail != nil {
		return nil, fail
	}
	if err != nil {
		return nil, s.fromStore(err, "counting traces")
	}
	return counts, nil
}

// calculateTraceFilterCorrelation is POST
// /api/3.0/mlflow/traces/calculate-filter-correlation: how the traces
// meeting two filters co-occur, as normalized pointwise mutual
// information (NPMI, -1 never together to 1 always), raw and with
// Jeffreys' prior (half a trace added to each cell of the 2x2 table).
func (s *Server) calculateTraceFilterCorrelation(r *request) (any, *apiError) {
	exps, e := r.strs("experiment_ids")
	if e != nil {
		return nil, e
	}
	if exps, e = s.resolveTraceExperiments(r, exps); e != nil {
		return nil, e
	}
	var conds [4][]modelCond
	for i, name := range []string{"base_filter", "filter_string1", "filter_string2"} {
		f, e := r.str(name)
		if e != nil {
			return nil, e
		}
		if i > 0 && f == "" {
			return nil, missingValue(name)
		}
		if conds[i], e = parseTraceFilter(f); e != nil {
			return nil, e
		}
	}
	base := conds[0]
	f1 := append(append([]modelCond{}, base...), conds[1]...)
	f2 := append(append([]modelCond{}, base...), conds[2]...)
	both := append(append([]modelCond{}, f1...), conds[2]...)
	c, e := s.countTraces(r, exps, base, f1, f2, both)
	if e != nil {
		return nil, e
	}
	total, n1, n2, joint := c[0], c[1], c[2], c[3]
	return map[string]any{
		"npmi":          jsonFloat(npmi(float64(joint), float64(n1), float64(n2), float64(total))),
		"npmi_smoothed": jsonFloat(npmiSmoothed(float64(joint), float64(n1), float64(n2), float64(total))),
		"filter1_count": n1,
		"filter2_count": n2,
		"joint_count":   joint,
		"total_count":   total,
	}, nil
}

// npmi is log(p(x,y) / (p(x) p(y))) / -log p(x,y): NaN when a filter
// matches nothing or everything, -1 when both match but never together.
func npmi(joint, n1, n2, total float64) float64 {
	if total == 0 || n1 == 0 || n2 == 0 || n1 == total || n2 == total {
		return math.NaN()
	}
	if joint == 0 {
		return -1
	}
	pxy, px, py := joint/total, n1/total, n2/total
	if pxy == 1 {
		return 1
	}
	return math.Log(pxy/(px*py)) / -math.Log(pxy)
}

// npmiSmoothed is npmi over the 2x2 table with 0.5 added to each cell.
func npmiSmoothed(joint, n1, n2, total float64) float64 {
	if total == 0 {
		return math.NaN()
	}
	a := joint + 0.5
	b := n1 - joint + 0.5
	c := n2 - joint + 0.5
	d := total - n1 - n2 + joint + 0.5
	n := a + b + c + d
	pxy, px, py := a/n, (a+b)/n, (a+c)/n
	return math.Log(pxy/(px*py)) / -math.Log(pxy)
}

// jsonFloat writes NaN and infinities as protobuf's JSON does ("NaN",
// "Infinity": the words Python writes too).
func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return pyFloat(f)
	}
	return f
}

// queryTraceMetrics is POST /api/3.0/mlflow/traces/metrics: the number of
// traces (trace_count, COUNT) and their latency (latency: AVG, MIN, MAX,
// SUM, PERCENTILE) by status and name, over the whole time range.
func (s *Server) queryTraceMetrics(r *request) (any, *apiError) {
	exps, e := r.strs("experiment_ids")
	if e != nil {
		return nil, e
	}
	if exps, e = s.resolveTraceExperiments(r, exps); e != nil {
		return nil, e
	}
	view, e := r.str("view_type")
	if e != nil {
		return nil, e
	}
	if view != "" && view != "TRACES" {
		return nil, errf(400, codeInvalidParameter, "view_type %q: fw answers trace metrics of the TRACES view only", view)
	}
	metric, e := r.need("metric_name")
	if e != nil {
		return nil, e
	}
	if metric != "trace_count" && metric != "latency" {
		return nil, errf(400, codeInvalidParameter, "metric_name %q: fw answers trace_count and latency", metric)
	}
	var aggs []struct {
		Type       string   `json:"aggregation_type"`
		Percentile *float64 `json:"percentile_value"`
	}
	if e := r.decode("aggregations", &aggs); e != nil {
		return nil, e
	}
	if len(aggs) == 0 {
		return nil, missingValue("aggregations")
	}
	dims, e := r.strs("dimensions")
	if e != nil {
		return nil, e
	}
	for _, d := range dims {
		if d != "trace_status" && d != "trace_name" {
			return nil, errf(400, codeInvalidParameter, "dimension %q: fw groups trace metrics by trace_status and trace_name", d)
		}
	}
	filters, e := r.strs("filters")
	if e != nil {
		return nil, e
	}
	var conds []modelCond
	for _, f := range filters {
		c, e := parseTraceFilter(f)
		if e != nil {
			return nil, e
		}
		conds = append(conds, c...)
	}
	if n, ok, e := r.int64Field("time_interval_seconds"); e != nil || (ok && n != 0) {
		if e != nil {
			return nil, e
		}
		return nil, errf(400, codeInvalidParameter, "time_interval_seconds: fw answers trace metrics per group over the whole range, not per time bucket; leave it out")
	}
	if tok, e := r.str("page_token"); e != nil || tok != "" {
		if e != nil {
			return nil, e
		}
		return nil, errf(400, codeInvalidParameter, "page_token: fw answers every group in one page, so there is no next page")
	}
	startMs, hasStart, e := r.int64Field("start_time_ms")
	if e != nil {
		return nil, e
	}
	endMs, hasEnd, e := r.int64Field("end_time_ms")
	if e != nil {
		return nil, e
	}
	type group struct {
		dims map[string]string
		vals []float64
	}
	groups := map[string]*group{}
	var fail *apiError
	err := s.st.ScanMLflowTraces(r.ctx, exps, false, func(row store.MLflowTrace) bool {
		if (hasStart && row.RequestTime < startMs) || (hasEnd && row.RequestTime >= endMs) {
			return true
		}
		t, ae := decodeTrace(row)
		if ae != nil {
			fail = ae
			return false
		}
		if t.Pending {
			return true
		}
		ok, ae := s.traceMatches(r, t, conds, nil)
		if ae != nil {
			fail = ae
			return false
		}
		if !ok {
			return true
		}
		d := map[string]string{}
		key := ""
		for _, name := range dims {
			v := t.State
			if name == "trace_name" {
				v = t.Tags[tagTraceName]
			}
			d[name] = v
			key += name + "\x00" + v + "\x00"
		}
		g := groups[key]
		if g == nil {
			g = &group{dims: d}
			groups[key] = g
		}
		if metric == "latency" {
			if t.ExecutionMs == nil {
				return true
			}
			g.vals = append(g.vals, float64(*t.ExecutionMs))
		} else {
			g.vals = append(g.vals, 1)
		}
		return true
	})
	if fail != nil {
		return nil, fail
	}
	if err != nil {
		return nil, s.fromStore(err, "reading trace metrics")
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	points := []map[string]any{}
	for _, k := range keys {
		g := groups[k]
		values := map[string]any{}
		for _, a := range aggs {
			name, v, ae := aggregate(a.Type, a.Percentile, g.vals)
			if ae != nil {
				return nil, ae
			}
			values[name] = jsonFloat(v)
		}
		points = append(points, map[string]any{"metric_name": metric, "dimensions": g.dims, "values": values})
	}
	return map[string]any{"data_points": points}, nil
}

// aggregate is one aggregation of a group's values, named as MLflow names
// it in a data point ("COUNT", "AVG", "P95").
func aggregate(kind string, pct *float64, vals []float64) (string, float64, *apiError) {
	switch kind {
	case "COUNT":
		return kind, float64(len(vals)), nil
	case "SUM", "AVG", "MIN", "MAX":
		if len(vals) == 0 {
			return kind, math.NaN(), nil
		}
		sum, lo, hi := 0.0, math.Inf(1), math.Inf(-1)
		for _, v := range vals {
			sum += v
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		return kind, map[string]float64{"SUM": sum, "AVG": sum / float64(len(vals)), "MIN": lo, "MAX": hi}[kind], nil
	case "PERCENTILE":
		if pct == nil || *pct < 0 || *pct > 100 {
			return "", 0, errf(400, codeInvalidParameter, "a PERCENTILE aggregation needs percentile_value from 0 to 100")
		}
		name := "P" + strconv.FormatFloat(*pct, 'f', -1, 64)
		if len(vals) == 0 {
			return name, math.NaN(), nil
		}
		sorted := append([]float64(nil), vals...)
		sort.Float64s(sorted)
		pos := *pct / 100 * float64(len(sorted)-1)
		lo := int(math.Floor(pos))
		hi := min(lo+1, len(sorted)-1)
		return name, sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo)), nil
	}
	return "", 0, errf(400, codeInvalidParameter, "aggregation_type %q: one of COUNT, SUM, AVG, MIN, MAX, PERCENTILE", kind)
}

// traceArtifact answers GET /ajax-api/2.0/mlflow/get-trace-artifact
// ?request_id=: the trace's spans as MLflow's traces.json, the file the
// client uploaded or, for spans fw holds, written from them.
func (s *Server) traceArtifact(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET")
		writeErr(ctx, errf(405, codeBadRequest, "get-trace-artifact takes GET"))
		return
	}
	id := string(ctx.QueryArgs().Peek("request_id"))
	if id == "" {
		writeErr(ctx, missingValue("request_id"))
		return
	}
	r := &request{ctx: s.reqCtx(ctx), get: true}
	t, e := s.loadTrace(r, id)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	spans, err := s.st.GetMLflowSpans(r.ctx, id)
	if err != nil {
		writeErr(ctx, s.fromStore(err, "reading trace "+id+"'s spans"))
		return
	}
	if len(spans) == 0 {
		if s.cfg.Artifacts == nil {
			writeErr(ctx, noArtifactStore())
			return
		}
		rel := t.ExperimentID + "/traces/" + id + "/artifacts/traces.json"
		s.downloadFree(ctx, rel)
		return
	}
	var b strings.Builder
	b.WriteString(`{"spans": [`)
	for i, sp := range spans {
		if i > 0 {
			b.WriteString(", ")
		}
		d, err := spanDict(sp.Content, id)
		if err != nil {
			writeErr(ctx, errf(500, codeInternal, "trace %s's span %s is stored unreadably: %v", id, sp.SpanID, err))
			return
		}
		b.WriteString(d)
	}
	b.WriteString(`]}`)
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Content-Disposition", "attachment; filename=traces.json")
	ctx.SetBodyString(b.String())
}

// b64ID is an ID of hex digits as base64 of its bytes, as MLflow's span
// dictionaries write IDs.
func b64ID(hexID string) string {
	b, err := hex.DecodeString(hexID)
	if err != nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(b)
}

var errBadSpan = errors.New("not an OTLP span")

// maxRunTraceScan bounds the traces RunTraces reads to find a run's.
const maxRunTraceScan = 200_000

// RunTraces lists the traces made in (mlflow.sourceRun) or linked to a
// run, newest first, at most limit: what fw's run page shows (GET
// /api/runs/{id}/traces). It reads the run's experiment's traces, newest
// first, up to maxRunTraceScan.
func (s *Server) RunTraces(ctx context.Context, runID string, limit int) ([]store.TraceSummary, error) {
	run, err := s.st.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	exp := mlExperimentID(run.ExperimentID, run.Experiment)
	out := []store.TraceSummary{}
	scanned := 0
	var bad error
	err = s.st.ScanMLflowTraces(ctx, []string{exp}, false, func(row store.MLflowTrace) bool {
		scanned++
		t, e := decodeTrace(row)
		if e != nil {
			bad = errors.New(e.msg)
			return false
		}
		if !t.Pending && (t.Metadata[metaSourceRun] == runID || slices.Contains(t.Runs, runID)) {
			out = append(out, store.TraceSummary{TraceID: t.ID, Name: t.Tags[tagTraceName], State: t.State, RequestTime: t.RequestTime,
				DurationMs: t.ExecutionMs, RequestPreview: t.RequestPreview, ResponsePreview: t.ResponsePreview})
		}
		return len(out) < limit && scanned < maxRunTraceScan
	})
	if bad != nil {
		return nil, bad
	}
	return out, err
}
