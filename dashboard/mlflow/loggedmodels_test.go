package mlflow

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLoggedModels: MLflow 3's logged models through their REST routes:
// create, get, finalize, tags, params, metrics linked from a run's
// log-metric/log-batch, search (filter, datasets, order, pages), run
// outputs and inputs, the model's files through the proxy, delete.
func TestLoggedModels(t *testing.T) { forEach(t, Config{}, testLoggedModels) }

func testLoggedModels(t *testing.T, e *env) {
	const lm = api + "logged-models"
	x := e.ok("POST", api+"experiments/create", map[string]any{"name": "lm"})["experiment_id"].(string)
	create := func(body map[string]any) map[string]any {
		body["experiment_id"] = x
		return e.ok("POST", lm, body)["model"].(map[string]any)
	}
	info := func(m map[string]any) map[string]any { return m["info"].(map[string]any) }
	a := create(map[string]any{"name": "first", "model_type": "LLM", "source_run_id": "123",
		"params": []kv{{"p", "1"}}, "tags": []kv{{"t", "x"}}})
	id := info(a)["model_id"].(string)
	if !strings.HasPrefix(id, "m-") || info(a)["status"] != "LOGGED_MODEL_PENDING" || info(a)["model_type"] != "LLM" ||
		info(a)["artifact_uri"] != "mlflow-artifacts:/"+x+"/models/"+id+"/artifacts" {
		t.Fatalf("created: %v", a)
	}
	got := e.ok("GET", lm+"/"+id, nil)["model"].(map[string]any)
	if fmt.Sprint(got["data"]) != "map[metrics:[] params:[map[key:p value:1]]]" || fmt.Sprint(info(got)["tags"]) != "[map[key:t value:x]]" {
		t.Fatalf("get: %v", got)
	}
	if m := e.ok("PATCH", lm+"/"+id, map[string]any{"model_id": id, "status": "LOGGED_MODEL_READY"})["model"].(map[string]any); info(m)["status"] != "LOGGED_MODEL_READY" {
		t.Fatalf("finalize: %v", m)
	}
	e.fails(400, codeInvalidParameter, "PATCH", lm+"/"+id, map[string]any{"status": "DONE"})
	e.ok("PATCH", lm+"/"+id+"/tags", map[string]any{"tags": []kv{{"t", "y"}, {"u", "z"}}})
	e.ok("DELETE", lm+"/"+id+"/tags/u", nil)
	if msg := e.fails(404, codeNotFound, "DELETE", lm+"/"+id+"/tags/u", nil); !strings.Contains(msg, "No tag with key") {
		t.Fatalf("second tag delete: %s", msg)
	}
	e.ok("POST", lm+"/"+id+"/params", map[string]any{"params": []kv{{"q", "2"}}})
	e.fails(400, codeInvalidParameter, "POST", lm+"/"+id+"/params", map[string]any{"params": []kv{{"q", "3"}}})

	// Metrics a run logs about the model are kept on it too.
	run := e.newRun(x)
	e.ok("POST", api+"runs/log-metric", map[string]any{"run_id": run, "key": "acc", "value": 0.5, "timestamp": 10, "step": 1,
		"model_id": id, "dataset_name": "val", "dataset_digest": "d1"})
	e.ok("POST", api+"runs/log-batch", map[string]any{"run_id": run, "metrics": []map[string]any{
		{"key": "acc", "value": 0.75, "timestamp": 20, "step": 2, "model_id": id, "dataset_name": "val", "dataset_digest": "d1"}}})
	got = e.ok("GET", lm+"/"+id, nil)["model"].(map[string]any)
	ms := got["data"].(map[string]any)["metrics"].([]any)
	if len(ms) != 1 || ms[0].(map[string]any)["value"] != 0.75 || ms[0].(map[string]any)["run_id"] != run || ms[0].(map[string]any)["model_id"] != id {
		t.Fatalf("model metrics: %v", ms)
	}
	if fmt.Sprint(info(got)["tags"]) != "[map[key:t value:y]]" {
		t.Fatalf("tags: %v", info(got)["tags"])
	}

	// Search: filter, datasets, order, pages.
	b := create(map[string]any{"name": "second"})
	bid := info(b)["model_id"].(string)
	names := func(body map[string]any) []string {
		body["experiment_ids"] = []string{x}
		var out []string
		for _, m := range e.ok("POST", lm+"/search", body)["models"].([]any) {
			out = append(out, info(m.(map[string]any))["name"].(string))
		}
		return out
	}
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{}, "[second first]"},
		{map[string]any{"order_by": []map[string]any{{"field_name": "creation_timestamp", "ascending": true}}}, "[first second]"},
		{map[string]any{"filter": "name = 'first'"}, "[first]"},
		{map[string]any{"filter": "name LIKE 'F%'"}, "[]"},
		{map[string]any{"filter": "name ILIKE 'F%'"}, "[first]"},
		{map[string]any{"filter": "metrics.acc > 0.6 AND params.p = '1'"}, "[first]"},
		{map[string]any{"filter": "tags.t = 'y'"}, "[first]"},
		{map[string]any{"datasets": []map[string]any{{"dataset_name": "val", "dataset_digest": "d1"}}}, "[first]"},
		{map[string]any{"datasets": []map[string]any{{"dataset_name": "test"}}}, "[]"},
	} {
		if got := fmt.Sprint(names(c.body)); got != c.want {
			t.Errorf("search %v: %s, want %s", c.body, got, c.want)
		}
	}
	e.fails(400, codeInvalidParameter, "POST", lm+"/search", map[string]any{"experiment_ids": []string{x}, "filter": "bogus.x = 1"})
	p1 := e.ok("POST", lm+"/search", map[string]any{"experiment_ids": []string{x}, "max_results": 1})
	p2 := e.ok("POST", lm+"/search", map[string]any{"experiment_ids": []string{x}, "max_results": 1, "page_token": p1["next_page_token"]})
	if len(p1["models"].([]any)) != 1 || len(p2["models"].([]any)) != 1 || p2["next_page_token"] != nil {
		t.Fatalf("pages: %v / %v", p1, p2)
	}

	// A run's outputs and model inputs.
	e.ok("POST", api+"runs/outputs", map[string]any{"run_id": run, "models": []map[string]any{{"model_id": id, "step": 1}}})
	e.ok("POST", api+"runs/log-inputs", map[string]any{"run_id": run, "models": []map[string]any{{"model_id": bid}}})
	r := e.ok("GET", api+"runs/get?run_id="+run, nil)["run"].(map[string]any)
	if fmt.Sprint(r["outputs"]) != "map[model_outputs:[map[model_id:"+id+" step:1]]]" || fmt.Sprint(r["inputs"].(map[string]any)["model_inputs"]) != "[map[model_id:"+bid+"]]" {
		t.Fatalf("outputs/inputs: %v %v", r["outputs"], r["inputs"])
	}
	for _, tag := range r["data"].(map[string]any)["tags"].([]any) {
		if k := tag.(map[string]any)["key"].(string); reservedTag(k) {
			t.Fatalf("reserved tag %s shown", k)
		}
	}

	// The model's files: uploaded through the proxy to its artifact_uri.
	root := "/api/2.0/mlflow-artifacts/artifacts/" + x + "/models/" + id + "/artifacts/"
	e.ok("PUT", root+"MLmodel", "model_id: "+id)
	e.ok("PUT", root+"data/model.pth", "w")
	files := e.ok("GET", "/ajax-api/2.0/mlflow/logged-models/"+id+"/artifacts/directories", nil)["files"].([]any)
	if fmt.Sprint(files) != "[map[file_size:"+fmt.Sprint(len("model_id: "+id))+" is_dir:false path:MLmodel] map[is_dir:true path:data]]" {
		t.Fatalf("model files: %v", files)
	}
	files = e.ok("GET", lm+"/"+id+"/artifacts/directories?artifact_directory_path=data", nil)["files"].([]any)
	if fmt.Sprint(files) != "[map[file_size:1 is_dir:false path:data/model.pth]]" {
		t.Fatalf("model files in data: %v", files)
	}
	if a := serveRaw(e, "GET", "/ajax-api/2.0/mlflow/logged-models/"+id+"/artifacts/files?artifact_file_path=MLmodel"); a.status != 200 || !strings.Contains(a.body, id) || a.ctype != "text/plain" {
		t.Fatalf("model file: %+v", a)
	}

	// Delete; unknown IDs and methods.
	e.ok("DELETE", lm+"/"+id, nil)
	if msg := e.fails(404, codeNotFound, "GET", lm+"/"+id, nil); !strings.Contains(msg, "not found") {
		t.Fatalf("deleted model: %s", msg)
	}
	if got := fmt.Sprint(names(map[string]any{})); got != "[second]" {
		t.Fatalf("after delete: %s", got)
	}
	e.fails(404, codeNotFound, "GET", lm+"/M_bad%3B", nil)
	e.fails(404, codeNotFound, "DELETE", lm+"/"+id, nil)
	e.fails(405, codeBadRequest, "POST", lm+"/"+bid, nil)
	e.fails(404, codeEndpointNotFound, "GET", lm+"/"+bid+"/nope", nil)
}

// TestModelFilter: MLflow's logged-model filter grammar, and malformed
// filters refused (never a panic).
func TestModelFilter(t *testing.T) {
	m := &loggedModel{ID: "m-1", Name: "Res(1)", Status: "LOGGED_MODEL_READY", Created: 5, Tags: map[string]string{"t": "v"},
		Params: map[string]string{"p": "0.1"}, Metrics: []modelMetric{{Key: "acc", Value: 0.9, Timestamp: 1}}}
	for f, want := range map[string]bool{
		"":                                    true,
		"name = 'Res(1)'":                     true,
		"name LIKE 'res%'":                    false,
		"name ILIKE 'res%'":                   true,
		"name LIKE 'R_s%'":                    true,
		"metrics.acc >= 0.9 AND tags.t = 'v'": true,
		"metrics.acc > 0.9":                   false,
		"params.p = '0.1'":                    true,
		"creation_timestamp < 6":              true,
		"attributes.status != 'LOGGED_MODEL_READY'": false,
		"tags.missing = 'x'":                        false,
	} {
		conds, e := parseModelFilter(f, loggedModelAttrs)
		if e != nil {
			t.Fatalf("%q: %v", f, e.msg)
		}
		if got := m.matches(conds); got != want {
			t.Errorf("%q matches %v, want %v", f, got, want)
		}
	}
	for _, f := range []string{"name = 'a' AND", "name =", "name", "AND", "bogus.k = 1", "name = 'a' OR name = 'b'", "size = 1", "name ~ 'a'", "(name = 'a')", "name = 'a' name"} {
		if _, e := parseModelFilter(f, loggedModelAttrs); e == nil || e.code != codeInvalidParameter {
			t.Errorf("%q: want INVALID_PARAMETER_VALUE, got %v", f, e)
		}
	}
	if !likeMatch("abc", "a%") || !likeMatch("", "%") || likeMatch("abc", "a_") || !likeMatch("aXbXc", "%b%c") || likeMatch("ab", "%c%") {
		t.Fatal("likeMatch")
	}
}

// LoggedModels (fw's Models page, GET /api/logged-models): the newest
// first, bounded, with the total, each with its fw experiment.
func TestLoggedModelsForTheModelsPage(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	x := e.ok("POST", api+"experiments/create", map[string]any{"name": "autolog"})["experiment_id"].(string)
	var ids []string
	for i, exp := range []string{x, "0", x} {
		m := e.ok("POST", api+"logged-models", map[string]any{"experiment_id": exp, "name": fmt.Sprintf("m%d", i), "model_type": "pytorch", "source_run_id": "r1"})["model"].(map[string]any)
		ids = append(ids, m["info"].(map[string]any)["model_id"].(string))
		time.Sleep(2 * time.Millisecond) // distinct creation times
	}
	got, total, err := e.srv.LoggedModels(ctx, 2)
	if err != nil || total != 3 || len(got) != 2 {
		t.Fatalf("%v %d %v", got, total, err)
	}
	if got[0].ModelID != ids[2] || got[1].ModelID != ids[1] {
		t.Fatalf("order %s %s, want the newest first (%v)", got[0].ModelID, got[1].ModelID, ids)
	}
	if got[0].Experiment != "autolog" || got[0].ExperimentID != x || got[0].MLflowExperimentID != x || got[0].Status != "LOGGED_MODEL_PENDING" ||
		got[0].SourceRunID != "r1" || got[0].ArtifactURI != "mlflow-artifacts:/"+x+"/models/"+ids[2]+"/artifacts" {
		t.Fatalf("summary %+v", got[0])
	}
	if got[1].MLflowExperimentID != "0" || got[1].Experiment != DefaultExperiment || got[1].ExperimentID == "" {
		t.Fatalf("the Default experiment's model: %+v", got[1])
	}
}
