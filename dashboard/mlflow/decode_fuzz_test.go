package mlflow

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/valyala/fastjson"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeMetricsFast: whatever valid JSON the fast reader of
// log-batch's metrics accepts, encoding/json (the general path) reads to
// the same values.
func FuzzDecodeMetricsFast(f *testing.F) {
	for _, s := range []string{
		`[{"key": "k0", "value": 0.5, "timestamp": "1700000000000", "step": "3"}]`,
		`[{"key":"a","value":1e308,"timestamp":1700000000000,"step":-2},{"step":"9","key":"b\u00e9","value":-0,"timestamp":"0"}]`,
		`[{"key":"a","value":"NaN","timestamp":1,"step":1}]`,
		`[{"key":"a","value":1,"timestamp":1.0,"step":1}]`,
		`[{"key":"a","value":1,"timestamp":1,"step":1,"model_id":"m"}]`,
		`[{"key":"a","key":"b","value":1,"value":2,"timestamp":1,"step":"00012"}]`,
		`[{"key":"a","value":1e999,"timestamp":1,"step":1}]`,
		`[]`, `null`, `{}`, `[1]`, `[{"key":1}]`,
	} {
		f.Add([]byte(s))
	}
	var pool fastjson.ParserPool
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) { // raw is a field of a body encoding/json has parsed
			return
		}
		fast, ok := decodeMetricsFast(&pool, raw)
		if !ok {
			return
		}
		var slow []wireMetric
		if err := json.Unmarshal(raw, &slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", raw, err)
		}
		if len(fast) != len(slow) {
			t.Fatalf("%q: %d metrics fast, %d slow", raw, len(fast), len(slow))
		}
		for i := range fast {
			a, b := fast[i], slow[i]
			if a.Key != b.Key || a.Step != b.Step || a.Timestamp != b.Timestamp || (a.Value == nil) != (b.Value == nil) {
				t.Fatalf("%q metric %d: fast %+v, slow %+v", raw, i, a, b)
			}
			if a.Value != nil && math.Float64bits(float64(*a.Value)) != math.Float64bits(float64(*b.Value)) {
				t.Fatalf("%q metric %d: value fast %v, slow %v", raw, i, *a.Value, *b.Value)
			}
		}
	})
}

// FuzzTraceSpans: whatever OTLP body the span intake accepts, each span's
// stored JSON reads back, and traces.json's dictionary written from it is
// valid JSON; and the trace filter parser answers any text with
// conditions or MLflow's error, never a panic.
func FuzzTraceSpans(f *testing.F) {
	seed := &tracepb.Span{TraceId: traceIDBytes(1), SpanId: spanIDBytes(1), ParentSpanId: spanIDBytes(2), Name: "a\x00\"é",
		StartTimeUnixNano: 1, EndTimeUnixNano: math.MaxUint64,
		Attributes: []*commonpb.KeyValue{strAttr("k", "v\n"), {Key: "f", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: math.NaN()}}},
			{Key: "b", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0xff, 0}}}}},
		Links: []*tracepb.Span_Link{{TraceId: []byte{1}, SpanId: nil}}}
	b, _ := proto.Marshal(&collpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{seed}}}}}})
	f.Add(b, "status = 'OK' AND tags.`a b` LIKE '%x%'")
	f.Add([]byte{}, "trace.text ILIKE 'é' and metadata.k != 1e999")
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00}, "span.type = 'LLM'")
	f.Fuzz(func(t *testing.T, body []byte, filter string) {
		if conds, e := parseTraceFilter(filter); e == nil {
			(&mlTrace{}).traceValue("status")
			_ = matchAll(conds, (&mlTrace{Tags: map[string]string{"a b": "x"}}).traceValue, false)
		} else if e.status != 400 || e.msg == "" {
			t.Fatalf("filter %q: %+v", filter, e)
		}
		var req collpb.ExportTraceServiceRequest
		if proto.Unmarshal(body, &req) != nil {
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					ms, err := spanOf(sp, "tr-x")
					if err != nil {
						continue
					}
					d, err := spanDict(ms.Content, "tr-x")
					if err != nil {
						t.Fatalf("span %v: stored JSON does not read back: %v", sp, err)
					}
					if !json.Valid([]byte(d)) {
						t.Fatalf("span %v: traces.json dictionary is not JSON: %s", sp, d)
					}
				}
			}
		}
	})
}
