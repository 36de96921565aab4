package tracking

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fw-serve/fw/dashboard/store"
)

// A metrics event's stream data is written without reflection; it must be
// exactly what json.Marshal writes for the same map.
func TestAppendStepValuesIsJSONMarshal(t *testing.T) {
	keys := []string{"loss", "val/acc", "a", "B", "<x>", `"q"`, "é", "bad\xff", "\u2028", ""}
	vals := []float64{0, math.Copysign(0, -1), 1, 1e-7, 1e21, 123456.789, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		var step *int64
		if r.IntN(4) > 0 {
			s := r.Int64() - r.Int64()
			step = &s
		}
		var values map[string]store.Float
		if r.IntN(10) > 0 {
			values = map[string]store.Float{}
			for n := r.IntN(len(keys) + 1); n > 0; n-- {
				values[keys[r.IntN(len(keys))]] = store.Float(vals[r.IntN(len(vals))])
			}
		}
		want, err := json.Marshal(map[string]any{"step": step, "values": values})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendStepValues(nil, step, values); string(got) != string(want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
	}
}
