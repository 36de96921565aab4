package mlflow

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testreq"
)

// TestCompatEverydayMLflow covers what MLflow's own server accepts and
// answers in everyday client code, which fw refused or answered otherwise
// (issue #23): multi-line notes, free experiment names, MLflow's limits,
// the Default experiment from the start, MLflow's tie order, writes to a
// deleted run, case-sensitive LIKE, artifact_location, MLflow's wording.
func TestCompatEverydayMLflow(t *testing.T) { forEach(t, Config{}, testCompatEverydayMLflow) }

func testCompatEverydayMLflow(t *testing.T, e *env) {
	// Default ("0") is listed before anything is logged into it.
	exps := e.ok("POST", api+"experiments/search", map[string]any{})["experiments"].([]any)
	if len(exps) != 1 || exps[0].(map[string]any)["experiment_id"] != "0" || exps[0].(map[string]any)["name"] != DefaultExperiment {
		t.Fatalf("a fresh server lists %v, want the Default experiment", exps)
	}

	// Experiment names as MLflow users write them; control characters are
	// still refused.
	ids := map[string]string{}
	for _, name := range []string{"resnet (baseline)", "a, b", "run #1", "über/ü?*", strings.Repeat("n", 500)} {
		ids[name] = e.ok("POST", api+"experiments/create", map[string]any{"name": name})["experiment_id"].(string)
		got := e.ok("GET", api+"experiments/get-by-name?experiment_name="+url.QueryEscape(name), nil)["experiment"].(map[string]any)
		if got["experiment_id"] != ids[name] {
			t.Fatalf("get-by-name %q: %v", name, got)
		}
	}
	e.ok("POST", api+"experiments/update", map[string]any{"experiment_id": ids["a, b"], "new_name": "a, b (renamed)"})
	for _, bad := range []string{"tab\there", "nul\x00", strings.Repeat("n", 501), "  "} {
		e.fails(400, codeInvalidParameter, "POST", api+"experiments/create", map[string]any{"name": bad})
	}

	// artifact_location is refused with the reason, never ignored.
	msg := e.fails(400, codeInvalidParameter, "POST", api+"experiments/create", map[string]any{"name": "elsewhere", "artifact_location": "s3://bucket/x"})
	if !strings.Contains(msg, "s3://bucket/x") || !strings.Contains(msg, "FW_ARTIFACT_URI") {
		t.Fatalf("artifact_location refusal: %s", msg)
	}
	if code, _ := e.call("GET", api+"experiments/get-by-name?experiment_name=elsewhere", nil); code != 404 {
		t.Fatalf("a refused experiment was created: %d", code)
	}

	// A multi-line Markdown note on a run and an experiment; MLflow's
	// limits: run tags 8,000 characters, experiment tags 20,000.
	note := "# Notes\n\n- line one\r\n- line two\tend"
	id := e.newRun("0", "mlflow.note.content", note)
	e.ok("POST", api+"runs/set-tag", map[string]any{"run_id": id, "key": "long", "value": strings.Repeat("é", 8000)})
	e.fails(400, codeInvalidParameter, "POST", api+"runs/set-tag", map[string]any{"run_id": id, "key": "long", "value": strings.Repeat("x", 8001)})
	e.fails(400, codeInvalidParameter, "POST", api+"runs/set-tag", map[string]any{"run_id": id, "key": "nul", "value": "a\x00b"})
	tags := map[string]string{}
	for _, kv := range e.ok("GET", api+"runs/get?run_id="+id, nil)["run"].(map[string]any)["data"].(map[string]any)["tags"].([]any) {
		tags[kv.(map[string]any)["key"].(string)] = kv.(map[string]any)["value"].(string)
	}
	if tags["mlflow.note.content"] != note || len([]rune(tags["long"])) != 8000 {
		t.Fatalf("tags came back as %q / %d characters", tags["mlflow.note.content"], len([]rune(tags["long"])))
	}
	x := ids["resnet (baseline)"]
	e.ok("POST", api+"experiments/set-experiment-tag", map[string]any{"experiment_id": x, "key": "mlflow.note.content", "value": note})
	e.ok("POST", api+"experiments/set-experiment-tag", map[string]any{"experiment_id": x, "key": "big", "value": strings.Repeat("x", 20000)})
	e.fails(400, codeInvalidParameter, "POST", api+"experiments/set-experiment-tag", map[string]any{"experiment_id": x, "key": "big", "value": strings.Repeat("x", 20001)})

	// search_runs: ties on start_time are broken by run ID ascending, as
	// MLflow does, on every page.
	var same []string
	for range 5 {
		same = append(same, e.newRun(x)) // newRun gives every run the same start_time
	}
	want := append([]string(nil), same...)
	slices.Sort(want)
	var got []string
	token := ""
	for {
		out := e.ok("POST", api+"runs/search", map[string]any{"experiment_ids": []string{x}, "max_results": 2, "page_token": token})
		for _, r := range out["runs"].([]any) {
			got = append(got, r.(map[string]any)["info"].(map[string]any)["run_id"].(string))
		}
		token, _ = out["next_page_token"].(string)
		if token == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tie order %v, want %v (run ID ascending)", got, want)
	}

	// LIKE keeps case, ILIKE ignores it (MLflow's grammar).
	e.ok("POST", api+"runs/set-tag", map[string]any{"run_id": same[0], "key": "team", "value": "Vision"})
	e.ok("POST", api+"runs/set-tag", map[string]any{"run_id": same[1], "key": "team", "value": "vision"})
	count := func(filter string) int {
		return len(e.ok("POST", api+"runs/search", map[string]any{"experiment_ids": []string{x}, "filter": filter})["runs"].([]any))
	}
	if n := count("tags.team LIKE 'V%'"); n != 1 {
		t.Fatalf("LIKE 'V%%' found %d runs, want 1", n)
	}
	if n := count("tags.team ILIKE 'V%'"); n != 2 {
		t.Fatalf("ILIKE 'V%%' found %d runs, want 2", n)
	}
	if n := count("tags.team LIKE '%isio%'"); n != 2 {
		t.Fatalf("LIKE '%%isio%%' found %d runs, want 2", n)
	}

	// A deleted run takes no writes until restored.
	e.ok("POST", api+"runs/delete", map[string]any{"run_id": same[2]})
	for _, w := range []struct {
		path string
		body map[string]any
	}{
		{"runs/log-metric", map[string]any{"key": "m", "value": 1, "timestamp": 1}},
		{"runs/log-batch", map[string]any{"params": []map[string]string{{"key": "p", "value": "1"}}}},
		{"runs/log-parameter", map[string]any{"key": "p", "value": "1"}},
		{"runs/set-tag", map[string]any{"key": "t", "value": "1"}},
		{"runs/update", map[string]any{"status": "FINISHED"}},
	} {
		w.body["run_id"] = same[2]
		if msg := e.fails(400, codeInvalidParameter, "POST", api+w.path, w.body); !strings.Contains(msg, "must be in the 'active' state") {
			t.Fatalf("%s on a deleted run: %s", w.path, msg)
		}
	}
	e.ok("POST", api+"runs/set-tag", map[string]any{"run_id": same[3], "key": "gone", "value": "1"})
	e.ok("POST", api+"runs/delete-tag", map[string]any{"run_id": same[3], "key": "gone"})
	e.ok("POST", api+"runs/delete", map[string]any{"run_id": same[3]})
	if msg := e.fails(400, codeInvalidParameter, "POST", api+"runs/delete-tag", map[string]any{"run_id": same[3], "key": "gone"}); !strings.Contains(msg, "must be in the 'active' state") {
		t.Fatalf("delete-tag on a deleted run: %s", msg) // before "no such tag", as in MLflow
	}
	e.ok("POST", api+"runs/restore", map[string]any{"run_id": same[2]})
	e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": same[2], "key": "m", "value": 1, "timestamp": 1})

	// MLflow's wording first.
	for _, c := range []struct {
		path string
		body any
		want string
	}{
		{"experiments/create", map[string]any{"name": 123}, "Invalid value 123 for parameter 'name' supplied"},
		{"experiments/create", map[string]any{}, "Missing value for required parameter 'name'."},
		{"runs/log-metric", map[string]any{"run_id": 31, "key": "m", "value": 1, "timestamp": 1}, "Invalid value 31 for parameter 'run_id' supplied"},
		{"runs/log-metric", map[string]any{"run_id": id, "key": "m", "value": 1, "timestamp": 1, "step": "foo"}, `Invalid value "foo" for parameter 'step' supplied`},
		{"runs/log-batch", map[string]any{"run_id": id, "metrics": "foo"}, `Invalid value "foo" for parameter 'metrics' supplied`},
		{"runs/log-batch", map[string]any{"run_id": id, "metrics": []map[string]any{{"key": "k", "value": 1}}}, "Missing value for required parameter 'metrics[0].timestamp'"},
		{"runs/set-tag", map[string]any{"run_id": id, "key": "k", "value": 41}, "Invalid value 41 for parameter 'value' supplied"},
		{"runs/set-tag", map[string]any{"run_id": 31, "key": "k", "value": 41}, "Invalid value 31 for parameter 'run_id' supplied"},
	} {
		if msg := e.fails(400, codeInvalidParameter, "POST", api+c.path, c.body); !strings.HasPrefix(msg, c.want) {
			t.Errorf("%s %v: %q, want it to start with %q", c.path, c.body, msg, c.want)
		}
	}
	bulk := api + "metrics/get-history-bulk-interval?metric_key=k"
	for q, want := range map[string]string{
		"":                                  "Missing value for required parameter 'run_ids'.",
		"&run_ids=" + id + "&max_results=0": "max_results must be between 1 and 2500",
		"&run_ids=" + id + "&start_step=1":  "If either start step or end step are specified, both must be specified.",
		"&run_ids=" + id + "&start_step=2&end_step=1":   "end_step must be greater than start_step.",
		"&run_ids=" + strings.Repeat("&run_ids=x", 101): "GetMetricHistoryBulkInterval request must specify at most 100 run_ids.",
	} {
		if msg := e.fails(400, codeInvalidParameter, "GET", bulk+q, nil); !strings.HasPrefix(msg, want) {
			t.Errorf("bulk %s: %q, want it to start with %q", q, msg, want)
		}
	}
}

// TestCompatRoutes: GET /version answers MLflow's version as text; unknown
// /api/3.0/mlflow/*, /ajax-api/* and /graphql paths answer MLflow's 404
// ENDPOINT_NOT_FOUND shape (not fw's web UI or fw's error shape).
func TestCompatRoutes(t *testing.T) {
	e := newEnv(t, Config{})
	for _, p := range []string{"/version", "/api/3.0/mlflow/traces/search", "/ajax-api/2.0/mlflow/gateway/x", "/ajax-api/3.0/mlflow/datasets/create", "/graphql", "/api/2.0/mlflow/webhooks/create"} {
		if !Owns(p) {
			t.Errorf("Owns(%q) = false", p)
		}
	}
	for _, p := range []string{"/api/2.0/mlflowx", "/apix", "/", "/experiments"} {
		if Owns(p) {
			t.Errorf("Owns(%q) = true", p)
		}
	}
	code, out := e.call("GET", "/version", nil)
	if code != 200 || out["raw"] != Version {
		t.Fatalf("/version: %d %v", code, out)
	}
	for _, p := range []string{"/api/3.0/mlflow/scorers/register", "/ajax-api/2.0/mlflow/gateway/secrets/create", "/ajax-api/3.0/mlflow/datasets/create", "/graphql", "/v1/traces", "/api/2.0/mlflow-artifactsx/y"} {
		e.fails(404, codeEndpointNotFound, "POST", p, "{}")
	}
	// A route MLflow serves under 3.0 as under 2.0.
	e.ok("POST", "/api/3.0/mlflow/experiments/search", map[string]any{})
}

// TestCompatArtifactPaths: "." (and "./x", "x/") name the run's root and
// directories as MLflow's client sends them; GET /get-artifact downloads a
// run's file with MLflow's headers (type by name, nosniff, attachment).
func TestCompatArtifactPaths(t *testing.T) {
	e := newEnv(t, Config{})
	id := e.newRun("0")
	base := "/api/2.0/mlflow-artifacts/artifacts/0/" + id + "/artifacts/"
	e.ok("PUT", base+"a.txt", "0")
	e.ok("PUT", base+"dir/b.png", "1")
	e.ok("PUT", base+"MLmodel", "flavors: {}")
	for _, p := range []string{".", "./", ""} {
		files := e.ok("GET", api+"artifacts/list?run_id="+id+"&path="+p, nil)["files"].([]any)
		if len(files) != 3 || files[0].(map[string]any)["path"] != "MLmodel" {
			t.Fatalf("list %q: %v", p, files)
		}
		files = e.ok("GET", "/api/2.0/mlflow-artifacts/artifacts?path=0/"+id+"/artifacts/"+p, nil)["files"].([]any)
		if len(files) != 3 {
			t.Fatalf("proxy list %q: %v", p, files)
		}
	}
	files := e.ok("GET", api+"artifacts/list?run_id="+id+"&path=./dir/", nil)["files"].([]any)
	if len(files) != 1 || files[0].(map[string]any)["path"] != "dir/b.png" {
		t.Fatalf("list ./dir/: %v", files)
	}
	e.fails(400, codeInvalidParameter, "GET", api+"artifacts/list?run_id="+id+"&path=../x", nil)
	for name, typ := range map[string]string{"a.txt": "text/plain", "dir/b.png": "image/png", "MLmodel": "text/plain"} {
		ctx := serveRaw(e, "GET", "/get-artifact?run_id="+id+"&path="+name)
		if ctx.status != 200 || ctx.ctype != typ || ctx.nosniff != "nosniff" || !strings.HasPrefix(ctx.disposition, "attachment; filename=") {
			t.Fatalf("get-artifact %s: %+v", name, ctx)
		}
	}
	e.fails(404, codeNotFound, "GET", "/get-artifact?run_id="+id+"&path=nope.txt", nil)
	e.fails(400, codeInvalidParameter, "GET", "/get-artifact?run_id="+id+"&path=../../etc/passwd", nil)
	// A '..' in the URL path itself: fasthttp folds it before the handler
	// (a/../../x under the run would become the free file 0/<run>/x); it
	// is refused as MLflow refuses it, escaped or not.
	for _, p := range []string{"a/../../x", "a/%2e%2e/%2E%2E/x", "..%2F..%2Fx"} {
		e.fails(400, codeInvalidParameter, "PUT", base+p, "x")
	}
	if _, err := os.Stat(filepath.Join(e.art, "_mlflow-artifacts", "0", id, "x")); !os.IsNotExist(err) {
		t.Fatalf("a climbing path was stored: %v", err)
	}
}

func TestMimeAndDisposition(t *testing.T) {
	for name, want := range map[string]string{"a.txt": "text/plain", "b.pkl": "application/octet-stream", "c.png": "image/png", "d.pdf": "application/pdf", "MLmodel": "text/plain", "mlproject": "text/plain", "x/y.JPG": "image/jpeg", "noext": "application/octet-stream"} {
		if got := mimeType(name); got != want {
			t.Errorf("mimeType(%q) = %q, want %q", name, got, want)
		}
	}
	if got := contentDisposition("dog+step+20.webp"); got != `attachment; filename=dog+step+20.webp` {
		t.Errorf("token: %s", got)
	}
	if got := contentDisposition(`a"b c.txt`); got != `attachment; filename="ab c.txt"` {
		t.Errorf("quote: %s", got)
	}
	if got := contentDisposition("é.txt"); got != `attachment; filename="_.txt"; filename*=UTF-8''%C3%A9.txt` {
		t.Errorf("non-ASCII: %s", got)
	}
}

type rawAnswer struct {
	status                            int
	ctype, nosniff, disposition, body string
}

func serveRaw(e *env, method, uri string) rawAnswer {
	e.t.Helper()
	ctx := testreq.Serve(func(ctx *fasthttpCtx) { e.srv.Handler(ctx, string(ctx.Path())) }, method, uri, "", nil, false)
	return rawAnswer{ctx.Response.StatusCode(), string(ctx.Response.Header.ContentType()), string(ctx.Response.Header.Peek("X-Content-Type-Options")),
		string(ctx.Response.Header.Peek("Content-Disposition")), string(ctx.Response.Body())}
}

// TestCompatFreeArtifacts: MLflow's artifact proxy takes any path, not only
// a run's <exp>/<run>/artifacts/...: files are stored apart from every run
// (under _mlflow-artifacts/ of the artifact store, which no run ID can
// name), listed by directory and downloaded with MLflow's headers.
func TestCompatFreeArtifacts(t *testing.T) {
	e := newEnv(t, Config{MaxArtifactBytes: 1024})
	const root = "/api/2.0/mlflow-artifacts/artifacts"
	e.ok("PUT", root+"/a.txt", "0")
	e.ok("PUT", root+"/dir/b.pdf", "1")
	e.ok("PUT", root+"/0/models/m-1/artifacts/MLmodel", "flavors: {}")
	list := e.ok("GET", root, nil)["files"].([]any)
	if fmt.Sprint(list) != "[map[is_dir:true path:0] map[file_size:1 is_dir:false path:a.txt] map[is_dir:true path:dir]]" {
		t.Fatalf("root: %v", list)
	}
	for _, p := range []string{"dir", "./dir/", "dir/."} {
		list = e.ok("GET", root+"?path="+url.QueryEscape(p), nil)["files"].([]any)
		if fmt.Sprint(list) != "[map[file_size:1 is_dir:false path:b.pdf]]" {
			t.Fatalf("dir %q: %v", p, list)
		}
	}
	a := serveRaw(e, "GET", root+"/dir/b.pdf")
	if a.status != 200 || a.body != "1" || a.ctype != "application/pdf" || a.nosniff != "nosniff" || a.disposition != "attachment; filename=b.pdf" {
		t.Fatalf("download: %+v", a)
	}
	if _, err := os.Stat(filepath.Join(e.art, "_mlflow-artifacts", "dir", "b.pdf")); err != nil {
		t.Fatalf("stored apart from the runs: %v", err)
	}
	e.fails(404, codeNotFound, "GET", root+"/dir/none.txt", nil)
	e.fails(400, codeInvalidParameter, "GET", root+"?path=../x", nil)
	e.fails(413, codeLimitExceeded, "PUT", root+"/big.bin", strings.Repeat("x", 1025))
	// A run's files are not reachable as free files, nor the other way.
	id := e.newRun("0")
	e.ok("PUT", root+"/0/"+id+"/artifacts/r.txt", "run")
	e.fails(404, codeNotFound, "GET", root+"/_mlflow-artifacts/a.txt", nil)
	if arts, _ := e.st.Artifacts(context.Background(), id); len(arts) != 1 {
		t.Fatalf("the run lists %v", arts)
	}
}
