package mlflow

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Assessments: MLflow 3's feedback and expectations on a trace
// (mlflow.log_feedback, mlflow.log_expectation, MlflowClient's
// get/update/delete_assessment), under
// /api/3.0/mlflow/traces/{trace id}/assessments[/{assessment id}]. They
// are kept in the trace's info (mlTrace.Assessments), so get_trace and
// search_traces return them with it, as MLflow's server does.

// Bounds of the assessments of one trace.
const (
	maxAssessments     = 1000
	maxAssessmentBytes = 64 << 10
)

// assessment is MLflow's Assessment message, with the fields the server
// fills in; the rest is kept as the client sent it.
type assessment map[string]any

func (a assessment) id() string { s, _ := a["assessment_id"].(string); return s }

func (a assessment) str(k string) string { s, _ := a[k].(string); return s }

// decodeAssessments reads a trace's assessments.
func decodeAssessments(raw []json.RawMessage) ([]assessment, *apiError) {
	out := make([]assessment, 0, len(raw))
	for _, r := range raw {
		var a assessment
		if err := json.Unmarshal(r, &a); err != nil {
			return nil, errf(500, codeInternal, "an assessment is stored unreadably: %v", err)
		}
		out = append(out, a)
	}
	return out, nil
}

func encodeAssessments(as []assessment) ([]json.RawMessage, *apiError) {
	out := make([]json.RawMessage, len(as))
	for i, a := range as {
		b, err := json.Marshal(a)
		if err != nil {
			return nil, errf(500, codeInternal, "encoding an assessment: %v", err)
		}
		if len(b) > maxAssessmentBytes {
			return nil, errf(400, codeInvalidParameter, "the assessment is %d bytes as JSON; at most %d", len(b), maxAssessmentBytes)
		}
		out[i] = b
	}
	return out, nil
}

func assessmentNotFound(traceID, id string) *apiError {
	return errf(404, codeNotFound, "Assessment with ID '%s' not found for trace '%s'", id, traceID)
}

// readAssessment decodes the request's "assessment" and checks the fields
// a client sets.
func readAssessment(r *request) (assessment, *apiError) {
	var a assessment
	if e := r.decode("assessment", &a); e != nil {
		return nil, e
	}
	if a == nil {
		return nil, missingValue("assessment")
	}
	if v, ok := a["assessment_name"]; ok {
		if s, isStr := v.(string); !isStr || s == "" || len(s) > 1000 {
			return nil, errf(400, codeInvalidParameter, "Invalid value for parameter 'assessment.assessment_name': a name of 1 to 1,000 characters")
		}
	}
	if m, ok := a["metadata"]; ok {
		mm, isMap := m.(map[string]any)
		if !isMap {
			return nil, errf(400, codeInvalidParameter, "Invalid value for parameter 'assessment.metadata': an object of string values")
		}
		for k, v := range mm {
			if _, isStr := v.(string); !isStr {
				return nil, errf(400, codeInvalidParameter, "Invalid value for parameter 'assessment.metadata': key %q is not a string", k)
			}
		}
	}
	for _, k := range []string{"rationale", "overrides", "span_id", "run_id"} {
		if v, ok := a[k]; ok {
			if _, isStr := v.(string); !isStr {
				return nil, errf(400, codeInvalidParameter, "Invalid value for parameter 'assessment.%s': a string", k)
			}
		}
	}
	normalizeExpectation(a)
	return a, nil
}

// normalizeExpectation stores an expectation whose value is an object or a
// list as MLflow's client and server do: JSON text in serialized_value.
func normalizeExpectation(a assessment) {
	ex, ok := a["expectation"].(map[string]any)
	if !ok {
		return
	}
	v, has := ex["value"]
	if !has {
		return
	}
	switch v.(type) {
	case map[string]any, []any:
		b, _ := json.Marshal(v)
		a["expectation"] = map[string]any{"serialized_value": map[string]any{"serialization_format": "JSON_FORMAT", "value": string(b)}}
	}
}

func newAssessmentID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "a-" + hex.EncodeToString(b[:])
}

// createAssessment answers POST .../traces/{id}/assessments.
func (s *Server) createAssessment(r *request, traceID string) (any, *apiError) {
	a, e := readAssessment(r)
	if e != nil {
		return nil, e
	}
	if a.str("assessment_name") == "" {
		return nil, missingValue("assessment.assessment_name")
	}
	_, hasF := a["feedback"].(map[string]any)
	_, hasE := a["expectation"].(map[string]any)
	if hasF == hasE {
		return nil, errf(400, codeInvalidParameter, "An assessment must have exactly one of 'feedback' or 'expectation'")
	}
	now := protoTimestamp(time.Now().UnixMilli())
	a["assessment_id"] = newAssessmentID()
	a["trace_id"] = traceID
	a["create_time"], a["last_update_time"] = now, now
	a["valid"] = true
	var out assessment
	_, e = s.updateAssessments(r, traceID, func(as []assessment) ([]assessment, *apiError) {
		if len(as) >= maxAssessments {
			return nil, errf(400, codeInvalidParameter, "trace %s has %d assessments; at most %d", traceID, len(as), maxAssessments)
		}
		if over := a.str("overrides"); over != "" {
			i := indexAssessment(as, over)
			if i < 0 {
				return nil, errf(400, codeInvalidParameter, "The assessment to override, '%s', does not exist on trace '%s'", over, traceID)
			}
			as[i]["valid"] = false
		}
		out = a
		return append(as, a), nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"assessment": out}, nil
}

func indexAssessment(as []assessment, id string) int {
	for i, a := range as {
		if a.id() == id {
			return i
		}
	}
	return -1
}

// getAssessment answers GET .../traces/{id}/assessments/{assessment id}.
func (s *Server) getAssessment(r *request, traceID, id string) (any, *apiError) {
	t, e := s.loadTrace(r, traceID)
	if e != nil {
		return nil, e
	}
	as, e := decodeAssessments(t.Assessments)
	if e != nil {
		return nil, e
	}
	i := indexAssessment(as, id)
	if i < 0 {
		return nil, assessmentNotFound(traceID, id)
	}
	return map[string]any{"assessment": as[i]}, nil
}

// updateAssessment answers PATCH .../assessments/{assessment id}: the
// fields update_mask names (MLflow's FieldMask, camelCase or snake_case).
func (s *Server) updateAssessment(r *request, traceID, id string) (any, *apiError) {
	a, e := readAssessment(r)
	if e != nil {
		return nil, e
	}
	mask, e := r.str("update_mask")
	if e != nil {
		return nil, e
	}
	fields := map[string]string{"assessmentname": "assessment_name", "assessment_name": "assessment_name", "expectation": "expectation",
		"feedback": "feedback", "rationale": "rationale", "metadata": "metadata"}
	var set []string
	for _, p := range strings.Split(mask, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		f, ok := fields[strings.ToLower(p)]
		if !ok {
			return nil, errf(400, codeInvalidParameter, "Invalid value for parameter 'update_mask': %q; MLflow updates assessmentName, expectation, feedback, rationale and metadata", p)
		}
		set = append(set, f)
	}
	if len(set) == 0 {
		return nil, missingValue("update_mask")
	}
	var out assessment
	_, e = s.updateAssessments(r, traceID, func(as []assessment) ([]assessment, *apiError) {
		i := indexAssessment(as, id)
		if i < 0 {
			return nil, assessmentNotFound(traceID, id)
		}
		cur := as[i]
		for _, f := range set {
			switch v, ok := a[f]; {
			case !ok && f == "assessment_name":
				return nil, missingValue("assessment.assessment_name")
			case !ok:
				delete(cur, f)
			default:
				cur[f] = v
			}
		}
		if _, isF := a["feedback"]; isF && slices.Contains(set, "feedback") {
			delete(cur, "expectation")
		}
		if _, isE := a["expectation"]; isE && slices.Contains(set, "expectation") {
			delete(cur, "feedback")
		}
		cur["last_update_time"] = protoTimestamp(time.Now().UnixMilli())
		out = cur
		return as, nil
	})
	if e != nil {
		return nil, e
	}
	return map[string]any{"assessment": out}, nil
}

// deleteAssessment answers DELETE .../assessments/{assessment id}; the
// assessment it overrode, if any, is valid again (MLflow's rule).
func (s *Server) deleteAssessment(r *request, traceID, id string) (any, *apiError) {
	_, e := s.updateAssessments(r, traceID, func(as []assessment) ([]assessment, *apiError) {
		i := indexAssessment(as, id)
		if i < 0 {
			return nil, assessmentNotFound(traceID, id)
		}
		if over := as[i].str("overrides"); over != "" {
			if j := indexAssessment(as, over); j >= 0 {
				as[j]["valid"] = true
			}
		}
		return append(as[:i], as[i+1:]...), nil
	})
	if e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

// updateAssessments runs fn over the trace's assessments in the store's
// writer and stores what it returns.
func (s *Server) updateAssessments(r *request, traceID string, fn func([]assessment) ([]assessment, *apiError)) (*mlTrace, *apiError) {
	if !traceIDPattern.MatchString(traceID) {
		return nil, traceNotFound(traceID)
	}
	return s.updateTrace(r, traceID, func(cur *mlTrace) (*mlTrace, *apiError) {
		if cur == nil || cur.Pending {
			return nil, traceNotFound(traceID)
		}
		as, e := decodeAssessments(cur.Assessments)
		if e != nil {
			return nil, e
		}
		next, e := fn(as)
		if e != nil {
			return nil, e
		}
		if cur.Assessments, e = encodeAssessments(next); e != nil {
			return nil, e
		}
		return cur, nil
	})
}
