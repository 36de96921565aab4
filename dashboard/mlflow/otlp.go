package mlflow

// MLflow's span intake: POST /v1/traces with the x-mlflow-experiment-id
// header, OTLP/HTTP in protobuf or JSON, as MLflow's client (RestStore.log_spans)
// and any OpenTelemetry exporter pointed at MLflow send spans. Each span
// joins the MLflow trace tr-<its trace ID in hex>, which is created (from
// its root span) when its info has not arrived yet. Requests without the
// header are fw's own trace store's (dashboard/api).

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/otlpbody"
	"github.com/fw-serve/fw/payloadlog"
)

// ExperimentHeader names the experiment MLflow's span intake files spans
// under.
const ExperimentHeader = "X-Mlflow-Experiment-Id"

// Limits of one span: what it keeps as search text, and its size as JSON
// (a larger span is rejected, counted in the answer).
const (
	maxSpanText    = 64 << 10
	maxSpanContent = 4 << 20
)

var spanJSON = protojson.MarshalOptions{UseProtoNames: true}

// receiveSpans answers POST /v1/traces with ExperimentHeader.
func (s *Server) receiveSpans(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", "POST")
		writeErr(ctx, errf(405, codeBadRequest, "/v1/traces takes POST (OTLP/HTTP)"))
		return
	}
	isJSON, known, ct := otlpbody.Format(string(ctx.Request.Header.ContentType()))
	if !known {
		writeErr(ctx, errf(415, codeInvalidParameter, "Content-Type %q: send OTLP/HTTP in protobuf (application/x-protobuf) or JSON (application/json)", ct))
		return
	}
	body, e := readBody(ctx, s.cfg.MaxBodyBytes)
	if e != nil {
		writeErr(ctx, e)
		return
	}
	req, bad := otlpbody.Read(body, isJSON, string(ctx.Request.Header.ContentEncoding()), s.cfg.MaxBodyBytes)
	if bad != nil {
		code := codeInvalidParameter
		if bad.Status == 413 {
			code = codeLimitExceeded
		}
		writeErr(ctx, errf(bad.Status, code, "%s", bad.Msg))
		return
	}
	r := &request{ctx: s.reqCtx(ctx)}
	expID, e := s.traceExperiment(r, string(ctx.Request.Header.Peek(ExperimentHeader)))
	if e != nil {
		writeErr(ctx, e)
		return
	}
	var spans []store.MLflowSpan
	roots := map[string]*tracepb.Span{}
	firsts := map[string]*tracepb.Span{}
	var order []string
	rejected := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if len(sp.TraceId) != 16 || len(sp.SpanId) != 8 || allZero(sp.TraceId) || allZero(sp.SpanId) {
					rejected++
					continue
				}
				id := "tr-" + hex.EncodeToString(sp.TraceId)
				ms, err := spanOf(sp, id)
				if err != nil {
					rejected++
					continue
				}
				spans = append(spans, ms)
				if _, seen := firsts[id]; !seen {
					firsts[id] = sp
					order = append(order, id)
				} else if sp.StartTimeUnixNano < firsts[id].StartTimeUnixNano {
					firsts[id] = sp
				}
				if len(sp.ParentSpanId) == 0 {
					roots[id] = sp
				}
			}
		}
	}
	if len(spans) > store.MaxSpansPerBatch {
		writeErr(ctx, errf(413, codeLimitExceeded, "%d spans in one request; send at most %d", len(spans), store.MaxSpansPerBatch))
		return
	}
	if err := s.st.PutMLflowSpans(r.ctx, spans); err != nil {
		writeErr(ctx, s.fromStore(err, "storing spans"))
		return
	}
	for _, id := range order {
		root, first := roots[id], firsts[id]
		if _, e := s.updateTrace(r, id, func(cur *mlTrace) (*mlTrace, *apiError) {
			t := cur
			if t == nil {
				t = &mlTrace{ID: id, ExperimentID: expID, State: "IN_PROGRESS", Tags: map[string]string{}, Metadata: map[string]string{metaSchemaVersion: "3"}}
				t.RequestTime = int64(first.StartTimeUnixNano / 1e6)
				t.Tags[tagArtifactLocation] = traceArtifactURI(expID, id)
			}
			if t.Tags == nil {
				t.Tags = map[string]string{}
			}
			if t.Metadata == nil {
				t.Metadata = map[string]string{metaSchemaVersion: "3"}
			}
			if t.Pending { // linked to a run before it arrived
				t.Pending, t.ExperimentID = false, expID
				t.RequestTime = int64(first.StartTimeUnixNano / 1e6)
				t.Tags[tagArtifactLocation] = traceArtifactURI(expID, id)
			}
			if root != nil && !t.Finalized {
				// The info has not arrived: the root span says what it will.
				t.RequestTime = int64(root.StartTimeUnixNano / 1e6)
				t.State = "OK"
				if root.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
					t.State = "ERROR"
				}
				if root.EndTimeUnixNano >= root.StartTimeUnixNano && root.EndTimeUnixNano > 0 {
					ms := int64((root.EndTimeUnixNano - root.StartTimeUnixNano) / 1e6)
					t.ExecutionMs = &ms
				}
				t.Tags[tagTraceName] = payloadlog.Clip(root.Name, maxTraceTagValue)
			}
			t.Tags[tagSpansLocation] = spansInTrackingStor
			return t, nil
		}); e != nil {
			writeErr(ctx, e)
			return
		}
	}
	resp := &collpb.ExportTraceServiceResponse{}
	if rejected > 0 {
		resp.PartialSuccess = &collpb.ExportTracePartialSuccess{RejectedSpans: int64(rejected),
			ErrorMessage: fmt.Sprintf("%d spans had a trace ID that is not 16 bytes or a span ID that is not 8 (or all zeros), or were over %d bytes", rejected, maxSpanContent)}
	}
	out, ctype := otlpbody.Answer(resp, isJSON)
	ctx.SetStatusCode(200)
	ctx.SetContentType(ctype)
	ctx.SetBody(out)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// spanOf is the store's form of an OTLP span of trace id.
func spanOf(sp *tracepb.Span, id string) (store.MLflowSpan, error) {
	content, err := spanJSON.Marshal(sp)
	if err != nil {
		return store.MLflowSpan{}, err
	}
	if len(content) > maxSpanContent {
		return store.MLflowSpan{}, fmt.Errorf("span %x is %d bytes as JSON; at most %d", sp.SpanId, len(content), maxSpanContent)
	}
	if sp.StartTimeUnixNano > math.MaxInt64 {
		return store.MLflowSpan{}, fmt.Errorf("start time %d is out of range", sp.StartTimeUnixNano)
	}
	return store.MLflowSpan{TraceID: id, SpanID: hex.EncodeToString(sp.SpanId), StartNs: int64(sp.StartTimeUnixNano), Content: content, Text: spanText(sp)}, nil
}

// spanFromJSON reads a span of MLflow's Trace JSON (OTLP's JSON) of trace id.
func spanFromJSON(raw json.RawMessage, id string) (store.MLflowSpan, error) {
	var sp tracepb.Span
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &sp); err != nil {
		return store.MLflowSpan{}, fmt.Errorf("%w: %v", errBadSpan, err)
	}
	if len(sp.TraceId) != 16 || len(sp.SpanId) != 8 {
		return store.MLflowSpan{}, fmt.Errorf("%w: trace_id must be 16 bytes and span_id 8", errBadSpan)
	}
	return spanOf(&sp, id)
}

// spanText is what trace.text searches in a span: its name, its
// attributes' keys and values, its events' names.
func spanText(sp *tracepb.Span) string {
	var b strings.Builder
	b.WriteString(sp.Name)
	for _, a := range sp.Attributes {
		b.WriteByte('\n')
		b.WriteString(a.Key)
		b.WriteString(": ")
		b.WriteString(anyText(a.Value))
		if b.Len() > maxSpanText {
			break
		}
	}
	for _, ev := range sp.Events {
		b.WriteByte('\n')
		b.WriteString(ev.Name)
	}
	return payloadlog.Clip(strings.ReplaceAll(b.String(), "\x00", ""), maxSpanText) // PostgreSQL's TEXT holds no NUL
}

// anyText is a value as text: a string as itself, the rest as JSON.
func anyText(v *commonpb.AnyValue) string {
	if sv, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		return sv.StringValue
	}
	return pyDumps(v)
}

// spanDict is the span as MLflow's Span.to_dict() writes it into
// traces.json: IDs in base64, attributes as the JSON text MLflow keeps
// them in (json.dumps of the value), events' attributes as values.
func spanDict(content json.RawMessage, traceID string) (string, error) {
	var sp tracepb.Span
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(content, &sp); err != nil {
		return "", err
	}
	var b strings.Builder
	field := func(k, v string) {
		if b.Len() > 1 {
			b.WriteString(", ")
		}
		b.WriteString(pyString(k))
		b.WriteString(": ")
		b.WriteString(v)
	}
	b.WriteByte('{')
	field("trace_id", pyString(b64ID(hex.EncodeToString(sp.TraceId))))
	field("span_id", pyString(b64ID(hex.EncodeToString(sp.SpanId))))
	if len(sp.ParentSpanId) > 0 {
		field("parent_span_id", pyString(b64ID(hex.EncodeToString(sp.ParentSpanId))))
	} else {
		field("parent_span_id", "null")
	}
	field("name", pyString(sp.Name))
	field("start_time_unix_nano", strconv.FormatUint(sp.StartTimeUnixNano, 10))
	if sp.EndTimeUnixNano > 0 {
		field("end_time_unix_nano", strconv.FormatUint(sp.EndTimeUnixNano, 10))
	} else {
		field("end_time_unix_nano", "null")
	}
	var ev strings.Builder
	ev.WriteByte('[')
	for i, e := range sp.Events {
		if i > 0 {
			ev.WriteString(", ")
		}
		ev.WriteString(`{"name": ` + pyString(e.Name) + `, "time_unix_nano": ` + strconv.FormatUint(e.TimeUnixNano, 10) + `, "attributes": ` + pyKVs(e.Attributes, false) + `}`)
	}
	ev.WriteByte(']')
	field("events", ev.String())
	code := map[tracepb.Status_StatusCode]string{tracepb.Status_STATUS_CODE_OK: "STATUS_CODE_OK", tracepb.Status_STATUS_CODE_ERROR: "STATUS_CODE_ERROR"}[sp.GetStatus().GetCode()]
	if code == "" {
		code = "STATUS_CODE_UNSET"
	}
	field("status", `{"code": `+pyString(code)+`, "message": `+pyString(sp.GetStatus().GetMessage())+`}`)
	attrs := sp.Attributes
	hasID := false
	for _, a := range attrs {
		if a.Key == "mlflow.traceRequestId" {
			hasID = true
		}
	}
	if !hasID {
		attrs = append(attrs, &commonpb.KeyValue{Key: "mlflow.traceRequestId", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: traceID}}})
	}
	field("attributes", pyKVs(attrs, true))
	var links strings.Builder
	links.WriteByte('[')
	for i, l := range sp.Links {
		if i > 0 {
			links.WriteString(", ")
		}
		links.WriteString(`{"trace_id": ` + pyString("tr-"+hex.EncodeToString(l.TraceId)) + `, "span_id": ` + pyString(hex.EncodeToString(l.SpanId)) + `, "attributes": ` + pyKVs(l.Attributes, false) + `}`)
	}
	links.WriteByte(']')
	field("links", links.String())
	b.WriteByte('}')
	return b.String(), nil
}

// pyKVs writes attributes as a JSON object; dumped: each value as the
// JSON text of json.dumps (a string), as MLflow keeps span attributes.
func pyKVs(kvs []*commonpb.KeyValue, dumped bool) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, a := range kvs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyString(a.Key))
		b.WriteString(": ")
		v := pyDumps(a.Value)
		if dumped {
			v = pyString(v)
		}
		b.WriteString(v)
	}
	b.WriteByte('}')
	return b.String()
}

// pyDumps is Python's json.dumps(value, ensure_ascii=False) of an OTLP
// value: ", " and ": " separators, floats as Python writes them.
func pyDumps(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case nil:
		return "null"
	case *commonpb.AnyValue_StringValue:
		return pyString(x.StringValue)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return pyFloat(x.DoubleValue)
	case *commonpb.AnyValue_BytesValue:
		return pyString(string(x.BytesValue))
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, len(x.ArrayValue.GetValues()))
		for i, e := range x.ArrayValue.GetValues() {
			parts[i] = pyDumps(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *commonpb.AnyValue_KvlistValue:
		return pyKVs(x.KvlistValue.GetValues(), false)
	}
	return "null"
}

// pyString is a JSON string as Python's json.dumps(ensure_ascii=False)
// writes it.
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pyFloat is Python's repr of a float: the shortest digits, an exponent
// below 1e-4 and from 1e16, ".0" on whole numbers.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64) // 1e+16, 1e-05 as Python writes them
	}
	out := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(out, ".") {
		out += ".0"
	}
	return out
}
