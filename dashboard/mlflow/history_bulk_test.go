package mlflow

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestHistoryBulkInterval: the points get-history-bulk-interval answers are
// those MLflow's server answers (the cases of MLflow's own test): evenly
// spaced steps plus the last, and each run's first and last step.
func TestHistoryBulkInterval(t *testing.T) { forEach(t, Config{}, testHistoryBulkInterval) }

func testHistoryBulkInterval(t *testing.T, e *env) {
	exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "bulk"})["experiment_id"].(string)
	r1, r2 := e.newRun(exp), e.newRun(exp)
	for i := 0; i < 20; i++ {
		if i < 10 {
			e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": r1, "key": "metricA", "value": 10, "timestamp": 1, "step": i})
		}
		e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": r2, "key": "metricA", "value": 10, "timestamp": 1, "step": i})
	}
	steps := func(q url.Values) map[string][]float64 {
		t.Helper()
		q.Set("metric_key", "metricA")
		out := e.ok("GET", api+"metrics/get-history-bulk-interval?"+q.Encode(), nil)
		got := map[string][]float64{}
		for _, m := range out["metrics"].([]any) {
			m := m.(map[string]any)
			got[m["run_id"].(string)] = append(got[m["run_id"].(string)], m["step"].(float64))
		}
		return got
	}
	eq := func(what string, got, want []float64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: steps %v, want %v", what, got, want)
		}
	}
	got := steps(url.Values{"run_ids": {r1}, "max_results": {"5"}})
	eq("one run", got[r1], []float64{0, 2, 4, 6, 8, 9})
	got = steps(url.Values{"run_ids": {r1}, "max_results": {"5"}, "start_step": {"0"}, "end_step": {"4"}})
	eq("a range", got[r1], []float64{0, 1, 2, 3, 4})
	got = steps(url.Values{"run_ids": {r1, r2}, "max_results": {"5"}})
	eq("two runs, the first", got[r1], []float64{0, 4, 8, 9})
	eq("two runs, the second", got[r2], []float64{0, 4, 8, 9, 12, 16, 19})
	got = steps(url.Values{"run_ids": {r2}})
	if len(got[r2]) != 20 {
		t.Errorf("without max_results (MLflow's default 2,500): %d points, want 20", len(got[r2]))
	}
}

// TestHistoryBulk: metrics/get-history-bulk, MLflow's UI's older call, with
// MLflow's order, limit and refusals.
func TestHistoryBulk(t *testing.T) { forEach(t, Config{}, testHistoryBulk) }

func testHistoryBulk(t *testing.T, e *env) {
	exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "bulk"})["experiment_id"].(string)
	r1, r2 := e.newRun(exp), e.newRun(exp)
	for _, id := range []string{r1, r2} {
		for i, ts := range []int{5, 3, 4} { // steps 0, 1, 2 logged at times 5, 3, 4
			e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": id, "key": "m", "value": i, "timestamp": ts, "step": i})
		}
	}
	q := url.Values{"run_id": {r2, r1, "nope"}, "metric_key": {"m"}}
	out := e.ok("GET", api+"metrics/get-history-bulk?"+q.Encode(), nil)["metrics"].([]any)
	lo, hi := min(r1, r2), max(r1, r2)
	var got []string
	for _, m := range out {
		m := m.(map[string]any)
		got = append(got, fmt.Sprintf("%s:%v@%v", m["run_id"], m["step"], m["timestamp"]))
	}
	want := []string{lo + ":1@3", lo + ":2@4", lo + ":0@5", hi + ":1@3", hi + ":2@4", hi + ":0@5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("points %v, want %v (by run, then time)", got, want)
	}
	q.Set("max_results", "2")
	if n := len(e.ok("GET", api+"metrics/get-history-bulk?"+q.Encode(), nil)["metrics"].([]any)); n != 2 {
		t.Errorf("max_results 2: %d points", n)
	}
	e.fails(400, codeInvalidParameter, "GET", api+"metrics/get-history-bulk?metric_key=m", nil)
	e.fails(400, codeInvalidParameter, "GET", api+"metrics/get-history-bulk?run_id="+r1, nil)
	many := url.Values{"metric_key": {"m"}}
	for i := 0; i < 101; i++ {
		many.Add("run_id", fmt.Sprintf("id_%d", i))
	}
	if msg := e.fails(400, codeInvalidParameter, "GET", api+"metrics/get-history-bulk?"+many.Encode(), nil); msg == "" {
		t.Error("101 runs: no message")
	}
}

// TestUploadArtifact: MLflow's web UI's upload-artifact, then
// /get-artifact reads the file back; MLflow's refusals.
func TestUploadArtifact(t *testing.T) {
	e := newEnv(t, Config{})
	exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "up"})["experiment_id"].(string)
	run := e.newRun(exp)
	const up = "/ajax-api/2.0/mlflow/upload-artifact"
	for _, c := range []struct{ query, body, want string }{
		{"", "x", "Request must specify run_uuid."},
		{"?run_uuid=" + run, "x", "Request must specify path."},
		{"?run_uuid=" + run + "&path=", "x", "Request must specify path."},
		{"?run_uuid=" + run + "&path=../test.txt", "x", "Invalid path"},
		{"?run_uuid=" + run + "&path=test.txt", "", "Request must specify data."},
	} {
		if msg := e.fails(400, codeInvalidParameter, "POST", up+c.query, c.body); !strings.HasPrefix(msg, c.want) {
			t.Errorf("%s: %q, want it to begin %q", c.query, msg, c.want)
		}
	}
	e.ok("POST", up+"?run_uuid="+run+"&path=dir/test.txt", "hello world")
	if got := e.ok("GET", "/get-artifact?run_uuid="+run+"&path=dir/test.txt", nil)["raw"]; got != "hello world" {
		t.Fatalf("get-artifact: %q", got)
	}
	files := e.ok("GET", api+"artifacts/list?run_id="+run+"&path=dir", nil)["files"].([]any)
	if len(files) != 1 || files[0].(map[string]any)["path"] != "dir/test.txt" {
		t.Fatalf("artifacts/list: %v", files)
	}
}

// TestModelVersionArtifact: MLflow's /model-versions/get-artifact serves a
// file of a registered version whose source is a run's artifacts, and
// refuses a path leaving it with MLflow's exact message.
func TestModelVersionArtifact(t *testing.T) {
	e := newEnv(t, Config{})
	e.withRegistry()
	exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "mv"})["experiment_id"].(string)
	run := e.newRun(exp)
	e.ok("POST", "/ajax-api/2.0/mlflow/upload-artifact?run_uuid="+run+"&path=model/MLmodel", "flavors: {}")
	e.ok("POST", api+"registered-models/create", map[string]any{"name": "m"})
	e.ok("POST", api+"model-versions/create", map[string]any{"name": "m", "source": "runs:/" + run + "/model", "run_id": run})
	if got := e.ok("GET", "/model-versions/get-artifact?name=m&version=1&path=MLmodel", nil)["raw"]; got != "flavors: {}" {
		t.Fatalf("get-artifact: %q", got)
	}
	if msg := e.fails(400, codeInvalidParameter, "GET", "/model-versions/get-artifact?name=m&version=1&path=../path", nil); msg != "Invalid path" {
		t.Errorf("a path leaving the version: %q, want MLflow's exact message", msg)
	}
	e.fails(404, codeNotFound, "GET", "/model-versions/get-artifact?name=m&version=1&path=absent.txt", nil)
	e.fails(404, codeNotFound, "GET", "/model-versions/get-artifact?name=m&version=9&path=MLmodel", nil)
}
