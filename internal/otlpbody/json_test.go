package otlpbody

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestDecodeJSON: the specification's example shape, hex IDs, camelCase and
// snake_case names, integer enums, attributes of every kind.
func TestDecodeJSON(t *testing.T) {
	body := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
	"scopeSpans":[{"scope":{"name":"s"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
	"parentSpanId":"","name":"op","kind":2,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":1700000000123456789,
	"attributes":[{"key":"n","value":{"intValue":12345678901234567}},{"key":"l","value":{"arrayValue":{"values":[{"boolValue":true}]}}}],
	"status":{"code":2,"message":"bad"},"links":[{"trace_id":"5b8efff798038103d269b633813fc60d","span_id":"eee19b7ec3c1b175"}],
	"unknownField":1}]}]}]}`
	req, err := DecodeJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sp := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if hex.EncodeToString(sp.TraceId) != "5b8efff798038103d269b633813fc60c" || hex.EncodeToString(sp.SpanId) != "eee19b7ec3c1b174" ||
		len(sp.ParentSpanId) != 0 || sp.Name != "op" || sp.Kind != 2 || sp.StartTimeUnixNano != 1544712660000000000 ||
		sp.EndTimeUnixNano != 1700000000123456789 || sp.Attributes[0].Value.GetIntValue() != 12345678901234567 || !sp.Attributes[1].Value.GetArrayValue().Values[0].GetBoolValue() ||
		sp.Status.Code != 2 || hex.EncodeToString(sp.Links[0].TraceId) != "5b8efff798038103d269b633813fc60d" {
		t.Fatalf("decoded: %v", sp)
	}
	for _, bad := range []string{`[`, `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}`,
		`{"resourceSpans":"no"}`, strings.Repeat("[", 200) + strings.Repeat("]", 200)} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("%.40s: decoded", bad)
		}
	}
}

// FuzzDecodeJSON: any body is read or refused, never a panic.
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00","spanId":"01","name":"x"}]}]}]}`))
	f.Add([]byte(`{"resource_spans":[{"scope_spans":[{"spans":[{"links":[{"trace_id":"ab"}]}]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = DecodeJSON(body)
	})
}
