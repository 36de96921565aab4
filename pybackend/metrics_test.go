package pybackend

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics("fw_", "nv_")
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for _, bad := range []struct {
		name    string
		kind    int
		buckets []float64
	}{
		{"fw_http_requests_total", kindCounter, nil}, {"nv_inference_count", kindGauge, nil},
		{"1bad", kindCounter, nil}, {"x", 7, nil}, {"h", kindHistogram, nil}, {"h", kindHistogram, []float64{2, 1}},
	} {
		if err := m.Family(bad.name, "help", bad.kind, bad.buckets); err == nil {
			t.Errorf("family %q kind %d buckets %v accepted", bad.name, bad.kind, bad.buckets)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Family("reqs_total", "Requests", kindCounter, nil))
	must(m.Family("reqs_total", "Requests", kindCounter, nil)) // again, the same: fine
	if err := m.Family("reqs_total", "Other", kindGauge, nil); err == nil {
		t.Error("a family redeclared otherwise was accepted")
	}
	must(m.Family("temp", "Temperature", kindGauge, nil))
	must(m.Family("size", "Sizes", kindHistogram, []float64{1, 10}))
	must(m.Update("reqs_total", map[string]string{"model": "a"}, "inc", 2))
	must(m.Update("reqs_total", map[string]string{"model": "a"}, "inc", 1))
	must(m.Update("temp", map[string]string{"zone": "x"}, "set", 5))
	must(m.Update("temp", map[string]string{"zone": "x"}, "set", 3))
	for _, v := range []float64{0.5, 5, 50} {
		must(m.Update("size", nil, "observe", v))
	}
	for _, bad := range []struct {
		family, action string
		labels         map[string]string
		value          float64
	}{
		{"reqs_total", "inc", map[string]string{"model": "a"}, -1},
		{"reqs_total", "set", map[string]string{"model": "a"}, 1},
		{"reqs_total", "inc", map[string]string{"other": "a"}, 1},
		{"temp", "observe", map[string]string{"zone": "x"}, 1},
		{"nope", "inc", nil, 1},
	} {
		if err := m.Update(bad.family, bad.labels, bad.action, bad.value); err == nil {
			t.Errorf("%s %s %v %v accepted", bad.family, bad.action, bad.labels, bad.value)
		}
	}
	want := `
# HELP reqs_total Requests
# TYPE reqs_total counter
reqs_total{model="a"} 3
# HELP size Sizes
# TYPE size histogram
size_bucket{le="1"} 1
size_bucket{le="10"} 2
size_bucket{le="+Inf"} 3
size_sum 55.5
size_count 3
# HELP temp Temperature
# TYPE temp gauge
temp{zone="x"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
