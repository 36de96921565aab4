package drift

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/fw-serve/fw/payloadlog"
)

// FuzzSummarize: a line of a training run's data summary (fw-reference.jsonl,
// anyone's artifact) summarized and compared with itself: no panic, and
// every PSI a number (features of NaN or infinite values are left out).
func FuzzSummarize(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","time":"2026-11-01T00:00:00Z","model":"","version":"","latency_ms":0,"inputs":[{"name":"input","datatype":"FP32","shape":[1,3],"data":[1,2,3]}],"outputs":[]}`,
		`{"inputs":[{"name":"x","shape":[1,5000],"summary":{"n":5000,"mean":1e308,"std":0,"min":0,"max":0}}],"outputs":[{"name":"y","shape":[1,2],"data":[0.1,0.9]}]}`,
		`{"inputs":[{"name":"s","datatype":"BYTES","shape":[2],"strings":["a","bc"]}]}`,
		`{"inputs":[{"name":"","shape":[],"data":[]}],"outputs":[{"name":"k","shape":[3],"data":[-1e308,1e308,0]}]}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var r payloadlog.Record
		if json.Unmarshal(line, &r) != nil {
			return
		}
		rep := CompareSummarized([]Sample{Summarize(&r)}, []*payloadlog.Record{&r}, 3)
		for _, ft := range rep.Features {
			if math.IsNaN(ft.PSI) {
				t.Fatalf("feature %q: PSI NaN for %s", ft.Name, line)
			}
		}
	})
}
