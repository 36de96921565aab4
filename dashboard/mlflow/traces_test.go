package mlflow

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fw-serve/fw/internal/testreq"
)

const api3 = "/api/3.0/mlflow/"

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// otlpBody is an ExportTraceServiceRequest of spans.
func otlpBody(t *testing.T, spans ...*tracepb.Span) []byte {
	t.Helper()
	b, err := proto.Marshal(&collpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendSpans POSTs spans to /v1/traces for experiment exp and returns the
// status and the body.
func (e *env) sendSpans(exp, ctype string, body []byte) (int, []byte) {
	e.t.Helper()
	ctx := testreq.Serve(func(ctx *fasthttpCtx) { e.srv.Handler(ctx, string(ctx.Path())) }, "POST", "/v1/traces", ctype, body, false, ExperimentHeader, exp)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...)
}

func traceIDBytes(n byte) []byte {
	b := make([]byte, 16)
	b[0], b[15] = 0xab, n
	return b
}

func spanIDBytes(n byte) []byte { return []byte{1, 2, 3, 4, 5, 6, 7, n} }

// TestMLflowTraces: MLflow's tracing API as MLflow's client drives it:
// spans over OTLP with the experiment header, the trace's info
// (StartTraceV3) merged with what its spans made, GetTrace with the spans
// in OTLP's JSON, traces.json written from them as MLflow writes it,
// search (filters, trace.text, run links, order, pages), MLflow 2's
// start/end/info, tags, link-to-run before the trace arrives, delete,
// trace metrics and filter correlation; and the refusals.
func TestMLflowTraces(t *testing.T) { forEach(t, Config{}, testMLflowTraces) }

func testMLflowTraces(t *testing.T, e *env) {
	x := e.ok("POST", api+"experiments/create", map[string]any{"name": "traces"})["experiment_id"].(string)
	t1 := "tr-" + hex.EncodeToString(traceIDBytes(1))
	root := &tracepb.Span{TraceId: traceIDBytes(1), SpanId: spanIDBytes(1), Name: "predict",
		StartTimeUnixNano: 1_700_000_000_000_000_000, EndTimeUnixNano: 1_700_000_000_250_000_000,
		Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK},
		Attributes: []*commonpb.KeyValue{strAttr("fruit", "apple"), strAttr("mlflow.traceRequestId", t1),
			{Key: "n", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 5}}},
			{Key: "f", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 2}}},
			{Key: "inputs", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{strAttr("q", "é\n")}}}}}},
		Events: []*tracepb.Span_Event{{Name: "ev", TimeUnixNano: 99, Attributes: []*commonpb.KeyValue{strAttr("foo", "bar")}}}}
	child := &tracepb.Span{TraceId: traceIDBytes(1), SpanId: spanIDBytes(2), ParentSpanId: spanIDBytes(1), Name: "tokenize",
		StartTimeUnixNano: 1_700_000_000_010_000_000, EndTimeUnixNano: 1_700_000_000_020_000_000}
	if code, body := e.sendSpans(x, "application/x-protobuf", otlpBody(t, child, root)); code != 200 {
		t.Fatalf("spans: %d %s", code, body)
	}
	info := e.ok("GET", api3+"traces/"+t1, nil)["trace"].(map[string]any)["trace_info"].(map[string]any)
	tags := info["tags"].(map[string]any)
	if info["state"] != "OK" || info["execution_duration"] != "0.250s" || info["request_time"] != "2023-11-14T22:13:20.000Z" ||
		tags[tagSpansLocation] != "TRACKING_STORE" || tags[tagTraceName] != "predict" || tags[tagArtifactLocation] != traceArtifactURI(x, t1) {
		t.Fatalf("the trace its spans made: %v", info)
	}

	// The client's info arrives after its spans: merged, where the spans
	// are stays the server's to say.
	start := func(id, state string, ms int64, tags map[string]string) map[string]any {
		return e.ok("POST", api3+"traces", map[string]any{"trace": map[string]any{"trace_info": map[string]any{
			"trace_id": id, "trace_location": map[string]any{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": map[string]any{"experiment_id": x}},
			"request_time": protoTimestamp(ms), "execution_duration": "1.500s", "state": state,
			"trace_metadata": map[string]string{"mlflow.trace_schema.version": "3", "user": "ann"}, "tags": tags,
			"request_preview": `{"q": "hello"}`}, "spans": []any{}}})["trace"].(map[string]any)["trace_info"].(map[string]any)
	}
	got := start(t1, "OK", 1_700_000_000_000, map[string]string{"env": "prod", tagSpansLocation: "ARTIFACT_REPO"})
	if got["execution_duration"] != "1.500s" || got["tags"].(map[string]any)["env"] != "prod" || got["tags"].(map[string]any)[tagSpansLocation] != "TRACKING_STORE" ||
		got["trace_metadata"].(map[string]any)["user"] != "ann" || got["request_preview"] != `{"q": "hello"}` {
		t.Fatalf("StartTraceV3 over the spans' trace: %v", got)
	}

	// GetTrace: the spans as OTLP's JSON, by start.
	tr := e.ok("GET", api3+"traces/get?trace_id="+t1, nil)["trace"].(map[string]any)
	spans := tr["spans"].([]any)
	if len(spans) != 2 || spans[0].(map[string]any)["name"] != "predict" || spans[1].(map[string]any)["name"] != "tokenize" {
		t.Fatalf("GetTrace spans: %v", spans)
	}
	attrs, _ := json.Marshal(spans[0].(map[string]any)["attributes"])
	if !strings.Contains(string(attrs), `{"key":"fruit","value":{"string_value":"apple"}}`) {
		t.Fatalf("attributes in OTLP's JSON: %s", attrs)
	}
	if got := e.ok("GET", api3+"traces/batchGet?trace_ids="+t1+"&trace_ids=tr-nope", nil)["traces"].([]any); len(got) != 1 {
		t.Fatalf("batchGet: %v", got)
	}

	// traces.json as MLflow's Span.to_dict() writes it.
	code, out := e.call("GET", "/ajax-api/2.0/mlflow/get-trace-artifact?request_id="+t1, nil)
	if code != 200 {
		t.Fatalf("get-trace-artifact: %d %v", code, out)
	}
	sd := out["spans"].([]any)[0].(map[string]any)
	sa := sd["attributes"].(map[string]any)
	if sd["trace_id"] != "qwAAAAAAAAAAAAAAAAAAAQ==" || sd["parent_span_id"] != nil || sa["fruit"] != `"apple"` || sa["n"] != "5" || sa["f"] != "2.0" ||
		sa["inputs"] != "{\"q\": \"é\\n\"}" || sa["mlflow.traceRequestId"] != `"`+t1+`"` ||
		fmt.Sprint(sd["status"]) != "map[code:STATUS_CODE_OK message:]" || fmt.Sprint(sd["events"]) != "[map[attributes:map[foo:bar] name:ev time_unix_nano:99]]" {
		t.Fatalf("traces.json span: %v", sd)
	}

	// Two more traces, info only (spans in the artifact store).
	t2, t3 := "tr-"+strings.Repeat("2", 32), "tr-"+strings.Repeat("3", 32)
	start(t2, "ERROR", 1_700_000_001_000, map[string]string{"env": "prod"})
	i3 := start(t3, "OK", 1_700_000_002_000, map[string]string{"env": "dev", tagTraceName: "chat"})
	if _, has := i3["tags"].(map[string]any)[tagSpansLocation]; has {
		t.Fatalf("a trace without spans here claims them: %v", i3)
	}
	search := func(body map[string]any) ([]string, string) {
		body["locations"] = []any{map[string]any{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": map[string]any{"experiment_id": x}}}
		res := e.ok("POST", api3+"traces/search", body)
		var ids []string
		for _, tr := range res["traces"].([]any) {
			ids = append(ids, tr.(map[string]any)["trace_id"].(string))
		}
		tok, _ := res["next_page_token"].(string)
		return ids, tok
	}
	for _, c := range []struct {
		body map[string]any
		want []string
	}{
		{map[string]any{}, []string{t3, t2, t1}},
		{map[string]any{"order_by": []string{"timestamp ASC"}}, []string{t1, t2, t3}},
		{map[string]any{"filter": "status = 'OK'"}, []string{t3, t1}},
		{map[string]any{"filter": "tags.env = 'prod' AND trace.status != 'ERROR'"}, []string{t1}},
		{map[string]any{"filter": "metadata.user = 'ann'", "order_by": []string{"tags.env DESC", "timestamp_ms"}}, []string{t1, t2, t3}},
		{map[string]any{"filter": "trace.text LIKE '%apple%'"}, []string{t1}},
		{map[string]any{"filter": "trace.text LIKE '%tokenize%'"}, []string{t1}},
		{map[string]any{"filter": "name = 'chat'"}, []string{t3}},
		{map[string]any{"filter": "timestamp_ms > 1700000000500"}, []string{t3, t2}},
	} {
		if got, _ := search(c.body); !slices.Equal(got, c.want) {
			t.Fatalf("search %v: %v, want %v", c.body, got, c.want)
		}
	}
	page, tok := search(map[string]any{"max_results": 2})
	if !slices.Equal(page, []string{t3, t2}) || tok == "" {
		t.Fatalf("first page: %v %q", page, tok)
	}
	if page, tok = search(map[string]any{"max_results": 2, "page_token": tok}); !slices.Equal(page, []string{t1}) || tok != "" {
		t.Fatalf("second page: %v %q", page, tok)
	}
	v2 := e.ok("GET", api+"traces?experiment_ids="+x+"&filter="+strings.ReplaceAll("status = 'ERROR'", " ", "%20"), nil)["traces"].([]any)
	if len(v2) != 1 || v2[0].(map[string]any)["request_id"] != t2 || v2[0].(map[string]any)["status"] != "ERROR" {
		t.Fatalf("MLflow 2's search: %v", v2)
	}

	// MLflow 2's start, end and info.
	st := e.ok("POST", api+"traces", map[string]any{"experiment_id": x, "timestamp_ms": 1000,
		"request_metadata": []kv{{"m1", "a"}}, "tags": []kv{{"t1", "x"}}})["trace_info"].(map[string]any)
	id2 := st["request_id"].(string)
	if st["status"] != "IN_PROGRESS" || st["execution_time_ms"] != float64(0) {
		t.Fatalf("StartTrace: %v", st)
	}
	end := e.ok("PATCH", api+"traces/"+id2, map[string]any{"timestamp_ms": 3000, "status": "OK",
		"request_metadata": []kv{{"m2", "b"}}, "tags": []kv{{"t1", "y"}}})["trace_info"].(map[string]any)
	if end["execution_time_ms"] != float64(2000) || end["status"] != "OK" || fmt.Sprint(end["request_metadata"]) != "[map[key:m1 value:a] map[key:m2 value:b]]" {
		t.Fatalf("EndTrace: %v", end)
	}
	if got := e.ok("GET", api+"traces/"+id2+"/info", nil)["trace_info"].(map[string]any); got["timestamp_ms"] != float64(1000) {
		t.Fatalf("GetTraceInfo: %v", got)
	}

	// Tags.
	e.ok("PATCH", api+"traces/"+t2+"/tags", map[string]any{"key": "k", "value": "v"})
	if e.ok("GET", api3+"traces/"+t2, nil)["trace"].(map[string]any)["trace_info"].(map[string]any)["tags"].(map[string]any)["k"] != "v" {
		t.Fatal("set trace tag: not kept")
	}
	e.ok("DELETE", api+"traces/"+t2+"/tags", map[string]any{"key": "k"})
	e.fails(404, codeNotFound, "DELETE", api+"traces/"+t2+"/tags", map[string]any{"key": "k"})

	// Linked to a run before it arrives: not found until its spans come,
	// then found by attribute.run_id.
	run := e.newRun(x)
	t4 := "tr-" + hex.EncodeToString(traceIDBytes(4))
	e.ok("POST", api+"traces/link-to-run", map[string]any{"trace_ids": []string{t4, t3}, "run_id": run})
	e.fails(404, codeNotFound, "GET", api3+"traces/"+t4, nil)
	if got, _ := search(map[string]any{"filter": "attribute.run_id = '" + run + "'"}); !slices.Equal(got, []string{t3}) {
		t.Fatalf("linked before its trace arrived: %v", got)
	}
	r4 := &tracepb.Span{TraceId: traceIDBytes(4), SpanId: spanIDBytes(1), Name: "late", StartTimeUnixNano: 1_700_000_003_000_000_000, EndTimeUnixNano: 1_700_000_003_100_000_000}
	if code, body := e.sendSpans(x, "application/x-protobuf", otlpBody(t, r4)); code != 200 {
		t.Fatalf("late spans: %d %s", code, body)
	}
	if got, _ := search(map[string]any{"filter": "run_id = '" + run + "'"}); !slices.Equal(got, []string{t4, t3}) {
		t.Fatalf("linked traces: %v", got)
	}

	// Metrics and correlation over the 5 traces of the experiment: t1 and
	// t2 (ERROR) prod, t3 dev, MLflow 2's and t4 untagged.
	pts := e.ok("POST", api3+"traces/metrics", map[string]any{"experiment_ids": []string{x}, "view_type": "TRACES", "metric_name": "trace_count",
		"aggregations": []any{map[string]any{"aggregation_type": "COUNT"}}, "dimensions": []string{"trace_status"}})["data_points"].([]any)
	if fmt.Sprint(pts) != "[map[dimensions:map[trace_status:ERROR] metric_name:trace_count values:map[COUNT:1]] map[dimensions:map[trace_status:OK] metric_name:trace_count values:map[COUNT:4]]]" {
		t.Fatalf("trace metrics: %v", pts)
	}
	corr := e.ok("POST", api3+"traces/calculate-filter-correlation", map[string]any{"experiment_ids": []string{x},
		"filter_string1": "tags.env = 'prod'", "filter_string2": "status = 'OK'"})
	if corr["total_count"] != float64(5) || corr["filter1_count"] != float64(2) || corr["filter2_count"] != float64(4) || corr["joint_count"] != float64(1) {
		t.Fatalf("correlation: %v", corr)
	}
	if want := npmi(1, 2, 4, 5); math.Abs(corr["npmi"].(float64)-want) > 1e-9 || want >= 0 {
		t.Fatalf("npmi %v, want %v (< 0: prod traces are less often OK)", corr["npmi"], want)
	}
	if c := e.ok("POST", api3+"traces/calculate-filter-correlation", map[string]any{"experiment_ids": []string{x},
		"filter_string1": "tags.env = 'staging'", "filter_string2": "status = 'OK'"}); c["npmi"] != "NaN" {
		t.Fatalf("a filter matching nothing: %v", c)
	}

	// Delete: by ID (only the experiment's), then the oldest by time.
	if n := e.ok("POST", api+"traces/delete-traces", map[string]any{"experiment_id": x, "request_ids": []string{t2, "tr-elsewhere"}})["traces_deleted"]; n != float64(1) {
		t.Fatalf("delete by id: %v", n)
	}
	e.fails(404, codeNotFound, "GET", api3+"traces/"+t2, nil)
	if n := e.ok("POST", api+"traces/delete-traces", map[string]any{"experiment_id": x, "max_timestamp_millis": 1_700_000_002_500, "max_traces": 1})["traces_deleted"]; n != float64(1) {
		t.Fatalf("delete by time: %v", n)
	}
	if got, _ := search(map[string]any{}); !slices.Equal(got, []string{t4, t3, t1}) { // the oldest was MLflow 2's, at 1000 ms
		t.Fatalf("after the deletes: %v", got)
	}
	if spans, err := e.st.GetMLflowSpans(t.Context(), t1); err != nil || len(spans) != 2 {
		t.Fatalf("t1 kept its spans: %v %v", len(spans), err)
	}
}

// TestMLflowTracesRefused: what the trace API refuses, and how.
func TestMLflowTracesRefused(t *testing.T) {
	e := newEnv(t, Config{})
	x := e.ok("POST", api+"experiments/create", map[string]any{"name": "traces"})["experiment_id"].(string)
	good := &tracepb.Span{TraceId: traceIDBytes(1), SpanId: spanIDBytes(1), Name: "ok", StartTimeUnixNano: 1}
	for _, c := range []struct {
		exp, ctype string
		body       []byte
		status     int
	}{
		{x, "text/plain", []byte(`{}`), 415},
		{x, "application/json", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`), 400},
		{x, "application/json", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","spanId":"0b0b0b0b0b0b0b0b","name":"json"}]}]}]}`), 200},
		{x, "application/x-protobuf", []byte{0xff, 0xff, 0xff}, 400},
		{"nope", "application/x-protobuf", otlpBody(t, good), 404},
	} {
		if code, body := e.sendSpans(c.exp, c.ctype, c.body); code != c.status || !json.Valid(body) {
			t.Fatalf("spans to %q as %s: %d %s, want %d", c.exp, c.ctype, code, body, c.status)
		}
	}
	if got := e.ok("GET", api3+"traces/get?trace_id=tr-"+strings.Repeat("0a", 16), nil)["trace"].(map[string]any)["spans"].([]any); len(got) != 1 {
		t.Fatalf("the OTLP/JSON span: %v", got)
	}
	bad := &tracepb.Span{TraceId: []byte{1, 2, 3}, SpanId: spanIDBytes(1)}
	code, body := e.sendSpans(x, "application/x-protobuf", otlpBody(t, good, bad))
	var resp collpb.ExportTraceServiceResponse
	if code != 200 || proto.Unmarshal(body, &resp) != nil || resp.GetPartialSuccess().GetRejectedSpans() != 1 {
		t.Fatalf("a span with a 3-byte trace ID: %d %v", code, &resp)
	}
	e.fails(404, codeNotFound, "GET", api3+"traces/a%20b", nil)
	e.fails(404, codeNotFound, "GET", api3+"traces/get?trace_id=..%2F..%2Fetc", nil)
	e.fails(400, codeInvalidParameter, "POST", api3+"traces/search", map[string]any{"locations": []any{map[string]any{"mlflow_experiment": map[string]any{"experiment_id": x}}}, "filter": "span.type = 'LLM'"})
	e.fails(400, codeInvalidParameter, "POST", api3+"traces/search", map[string]any{"locations": []any{map[string]any{"mlflow_experiment": map[string]any{"experiment_id": x}}}, "max_results": 100000})
	e.fails(400, codeInvalidParameter, "POST", api3+"traces/search", map[string]any{"locations": []any{map[string]any{"mlflow_experiment": map[string]any{"experiment_id": x}}}, "page_token": "garbage!"})
	e.fails(400, codeInvalidParameter, "POST", api3+"traces", map[string]any{"trace": map[string]any{"trace_info": map[string]any{"trace_id": "tr-1",
		"trace_location": map[string]any{"mlflow_experiment": map[string]any{"experiment_id": x}}, "execution_duration": "soon"}}})
	e.fails(400, codeInvalidParameter, "POST", api3+"traces", map[string]any{"trace": map[string]any{"trace_info": map[string]any{"trace_id": "../x",
		"trace_location": map[string]any{"mlflow_experiment": map[string]any{"experiment_id": x}}}}})
	deep := encodeToken("traces:" + fmt.Sprint(maxTraceOffset+1))
	e.fails(400, codeInvalidParameter, "POST", api3+"traces/search", map[string]any{"locations": []any{map[string]any{"mlflow_experiment": map[string]any{"experiment_id": x}}}, "page_token": deep, "order_by": []string{"name"}})
	e.fails(400, codeInvalidParameter, "POST", api+"traces", map[string]any{"experiment_id": x, "timestamp_ms": 9e18})
	e.fails(400, codeInvalidParameter, "POST", api3+"traces/metrics", map[string]any{"experiment_ids": []string{x}, "metric_name": "trace_count",
		"aggregations": []any{map[string]any{"aggregation_type": "COUNT"}}, "time_interval_seconds": 60})
	// A NUL in a span's name or attributes is kept in its JSON and left out of its search text.
	nul := &tracepb.Span{TraceId: traceIDBytes(9), SpanId: spanIDBytes(9), Name: "a\x00b", StartTimeUnixNano: 5, Attributes: []*commonpb.KeyValue{strAttr("k", "v\x00w")}}
	if code, body := e.sendSpans(x, "application/x-protobuf", otlpBody(t, nul)); code != 200 {
		t.Fatalf("a span with NULs: %d %s", code, body)
	}
	if got := e.ok("GET", api3+"traces/get?trace_id=tr-"+hex.EncodeToString(traceIDBytes(9)), nil)["trace"].(map[string]any)["spans"].([]any); got[0].(map[string]any)["name"] != "a\x00b" {
		t.Fatalf("the span with NULs: %v", got)
	}
	ids := make([]string, maxTracesPerBatch+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("tr-%d", i)
	}
	e.fails(400, codeInvalidParameter, "POST", api3+"traces/batchGetInfos", map[string]any{"trace_ids": ids})
	e.fails(400, codeInvalidParameter, "POST", api+"traces/delete-traces", map[string]any{"experiment_id": x})
	e.fails(405, codeBadRequest, "PUT", api+"traces/tr-1/tags", map[string]any{})
}

// TestPythonJSON: traces.json's values as Python's json.dumps writes them.
func TestPythonJSON(t *testing.T) {
	for f, want := range map[float64]string{5: "5.0", 0.1: "0.1", 1e16: "1e+16", 1.5e16: "1.5e+16", 1e15: "1000000000000000.0", 1e-5: "1e-05", 0.0001: "0.0001",
		math.Copysign(0, -1): "-0.0", math.NaN(): "NaN", math.Inf(-1): "-Infinity"} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %s, want %s", f, got, want)
		}
	}
	if got := pyString("a\"b\\c\n\x01é"); got != `"a\"b\\c\n\u0001é"` {
		t.Errorf("pyString: %s", got)
	}
	arr := &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{
		{Value: &commonpb.AnyValue_IntValue{IntValue: 1}}, {Value: &commonpb.AnyValue_BoolValue{BoolValue: true}}, {}}}}}
	if got := pyDumps(arr); got != "[1, true, null]" {
		t.Errorf("pyDumps(array): %s", got)
	}
}
