package mlflow

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/valyala/fastjson"
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
